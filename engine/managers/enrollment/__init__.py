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

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.routers import EdgeRouter, Router
from engine.errors import (
    CommitFailedError,
    ControllerError,
    InvalidEnrollMethodError,
    RequestTimeoutError,
    UnknownEnrollmentTokenError,
)
from engine.logs import event
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


log = logging.getLogger(__name__)
T = TypeVar("T")
#: Refusals that are no enrollment's fault (a full disk, a request out of time): logged elsewhere.
_NOT_ENROLLMENT_FAILURES = (CommitFailedError, RequestTimeoutError)


class EnrollManager:
    """The enrollment methods, bound to the controller's ports and settings.

    Each enrollment logs ``enrollment.succeeded`` (INFO: the method and what was enrolled) or
    ``enrollment.failed`` (WARNING: the method and the error's code, field and reason); never a
    token, a key or a password.
    """

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        self.env = env
        self.settings = settings

    def _logged(self, method: str, run: Callable[[], T], enrolled: Callable[[T], dict[str, Any]]) -> T:
        try:
            result = run()
        except ControllerError as ex:
            if not isinstance(ex, _NOT_ENROLLMENT_FAILURES):
                event(
                    log,
                    logging.WARNING,
                    "enrollment.failed",
                    method=method,
                    code=ex.code,
                    field=ex.field,
                    reason=ex.reason,
                )
            raise
        if log.isEnabledFor(logging.INFO):
            event(log, logging.INFO, "enrollment.succeeded", method=method, **enrolled(result))
        return result

    def _identity(self, identity_id: str) -> dict[str, Any]:
        identity = self.env.store.get(Identity, identity_id)
        return {"identity_id": identity_id, "identity_name": identity.name if identity is not None else None}

    def ott(self, token: str | None, csr: str | None) -> IssuedCertificate:
        return self._logged(
            OTT,
            lambda: ott.enroll(self.env, self.settings, token, csr),
            lambda issued: self._identity(issued.info.common_name or ""),  # CN = the identity's id
        )

    def ottca(self, token: str | None, chain: Sequence[str]) -> Authenticator:
        return self._logged(
            OTTCA,
            lambda: ottca.enroll(self.env, token, chain),
            lambda authenticator: {
                **self._identity(authenticator.identity_id),
                "authenticator_id": authenticator.id,
            },
        )

    def updb(self, token: str | None, username: str | None, password: str | None) -> Authenticator:
        return self._logged(
            UPDB,
            lambda: updb.enroll(self.env, token, username, password),
            lambda authenticator: {
                **self._identity(authenticator.identity_id),
                "authenticator_id": authenticator.id,
            },
        )

    def ca(self, chain: Sequence[str], requested_name: str | None = None) -> Identity:
        return self._logged(
            CA,
            lambda: ca.enroll(self.env, chain, requested_name),
            lambda identity: {"identity_id": identity.id, "identity_name": identity.name},
        )

    def token(self, tokens: Sequence[str], issuer_id: str | None, csr: str | None) -> TokenEnrollment:
        """Enroll with the first valid external JWT of ``tokens`` (bearer tokens); ``issuer_id``
        names the signer to check them with, else each token's ``iss`` does."""
        return self._logged(
            "token",
            lambda: token.enroll(self.env, self.settings, tokens, issuer_id, csr),
            lambda done: {"identity_id": done.identity.id, "identity_name": done.identity.name},
        )

    def router(
        self, method: str, token: str | None, server_csr: str | None, client_csr: str | None
    ) -> RouterCertificates:
        def run() -> RouterCertificates:
            check_method(method, ROUTER_METHODS)
            return router.enroll(self.env, self.settings, method, token, server_csr, client_csr)

        return self._logged(
            method if method in ROUTER_METHODS else "router",
            run,
            lambda done: {"router_id": done.router.id, "router_name": done.router.name},
        )

    def extend_router(self, chain: Sequence[str], server_csr: str, client_csr: str) -> RouterCertificates:
        return self._logged(
            "router-extend",
            lambda: router.extend(self.env, self.settings, chain, server_csr, client_csr),
            lambda done: {"router_id": done.router.id, "router_name": done.router.name},
        )

    def method_of(self, token: str | None, asked: str | None = None) -> str:
        """The method of the enrollment behind ``token`` (``asked``, when given, must match it).

        A token nothing has is ``INVALID_ENROLLMENT_TOKEN``: 404 when ``asked`` is ``ott``,
        ``updb`` or not given (OpenZiti takes ``ott`` then), 400 for the other methods.
        """
        try:
            return self._method_of(token, asked)
        except ControllerError as ex:
            named = asked if asked in (*IDENTITY_METHODS, *ROUTER_METHODS, CA) else None
            event(
                log,
                logging.WARNING,
                "enrollment.failed",
                method=named or "unknown",
                code=ex.code,
                field=ex.field,
                reason=ex.reason,
            )
            raise

    def _method_of(self, token: str | None, asked: str | None) -> str:
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
