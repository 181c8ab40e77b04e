"""Enrollment use cases: a device trades a one-time token (or a trusted certificate) for a credential.

One module per method, sharing :mod:`._core`:

- :mod:`.ott`: token + CSR -> a certificate from our CA (the OpenZiti SDKs' default);
- :mod:`.ottca`: token + a certificate from the enrollment's third-party CA;
- :mod:`.updb`: token -> username and password;
- :mod:`.ca`: CA auto-enrollment, a trusted third-party certificate creates its identity;
- :mod:`.token`: an external identity provider's JWT creates its identity (with a certificate
  when a CSR comes along);
- :mod:`.router`: edge (``erott``) and transit (``trott``) routers, and their certificate extension.

:class:`EnrollManager` is the one entry point the API calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.routers import EdgeRouter, Router
from engine.errors import InvalidEnrollMethodError
from engine.managers._base import Env
from engine.managers.enrollment import ca, ott, ottca, router, token, updb
from engine.managers.enrollment._core import (
    CA,
    EDGE_ROUTER_OTT,
    IDENTITY_METHODS,
    OTT,
    OTTCA,
    ROUTER_METHODS,
    TRANSIT_ROUTER_OTT,
    UPDB,
    EnrollmentSettings,
    UnknownEnrollmentTokenError,
    check_method,
    check_token_format,
    unknown_token,
)
from engine.managers.enrollment.router import RouterCertificates
from engine.managers.enrollment.token import TokenEnrollment
from engine.ports import IssuedCertificate

__all__ = [
    "CA",
    "EDGE_ROUTER_OTT",
    "IDENTITY_METHODS",
    "OTT",
    "OTTCA",
    "ROUTER_METHODS",
    "TRANSIT_ROUTER_OTT",
    "UPDB",
    "EnrollManager",
    "EnrollmentSettings",
    "RouterCertificates",
    "TokenEnrollment",
    "UnknownEnrollmentTokenError",
]


class EnrollManager:
    """The enrollment methods, bound to the controller's ports and settings."""

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        self.env = env
        self.settings = settings

    def ott(self, token: str | None, csr: str | None) -> IssuedCertificate:
        return ott.enroll(self.env, self.settings, token, csr)

    def ottca(self, token: str | None, chain: Sequence[str]) -> Authenticator:
        return ottca.enroll(self.env, token, chain)

    def updb(self, token: str | None, username: str | None, password: str | None) -> Authenticator:
        return updb.enroll(self.env, token, username, password)

    def ca(self, chain: Sequence[str], requested_name: str | None = None) -> Identity:
        return ca.enroll(self.env, chain, requested_name)

    def token(self, tokens: Sequence[str], issuer_id: str | None, csr: str | None) -> TokenEnrollment:
        """Enroll with the first valid external JWT of ``tokens`` (bearer tokens); ``issuer_id``
        names the signer to check them with, else each token's ``iss`` does."""
        return token.enroll(self.env, self.settings, tokens, issuer_id, csr)

    def router(
        self, method: str, token: str | None, server_csr: str | None, client_csr: str | None
    ) -> RouterCertificates:
        check_method(method, ROUTER_METHODS)
        return router.enroll(self.env, self.settings, method, token, server_csr, client_csr)

    def extend_router(self, chain: Sequence[str], server_csr: str, client_csr: str) -> RouterCertificates:
        return router.extend(self.env, self.settings, chain, server_csr, client_csr)

    def method_of(self, token: str | None, asked: str | None = None) -> str:
        """The method of the enrollment behind ``token`` (``asked``, when given, must match it).

        A token nothing has is ``INVALID_ENROLLMENT_TOKEN``: 404 when ``asked`` is ``ott``,
        ``updb`` or not given (OpenZiti takes ``ott`` then), 400 for the other methods.
        """
        value = check_token_format(token)
        store = self.env.store
        method: str | None = None
        enrollment = store.find_unique(Enrollment, "token", value)
        if enrollment is not None:
            method = enrollment.method
        elif store.find_unique(EdgeRouter, "enrollment_token", value) is not None:
            method = EDGE_ROUTER_OTT
        elif store.find_unique(Router, "enrollment_token", value) is not None:
            method = TRANSIT_ROUTER_OTT
        if method is None:
            raise unknown_token(asked or None)
        if asked and asked != method:
            raise InvalidEnrollMethodError(
                field="method", value=asked, reason=f"the token is for method {method}"
            )
        return method
