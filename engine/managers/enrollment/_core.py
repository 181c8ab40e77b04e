"""What every enrollment method shares: settings, issuing tokens and their JWTs, claiming a token.

An enrollment is a one-time token with an expiry, handed to a device as a JWT (docs/api.md §6.1)
signed with the API listener's TLS key (the :class:`~engine.ports.TokenSigner`). The JWT is signed
once, when the token is issued (creation, refresh, re-enrollment), and stored with it.

Claiming a token happens under the store's write lock, and the enrollment is consumed in the
same commit that creates the credential, so a token can be used once: a second use, even a
concurrent one, finds no enrollment and gets ``INVALID_ENROLLMENT_TOKEN``: answered 404 for
``ott`` and ``updb`` (:class:`UnknownEnrollmentTokenError`, the seed's status for them), 400
for the other methods and for a token that is not a UUID at all.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.trust import Ca
from engine.errors import (
    CertFailedValidationError,
    CertInUseError,
    ControllerError,
    CouldNotProcessCsrError,
    EnrollmentExpiredError,
    FieldError,
    InvalidEnrollmentTokenError,
    InvalidEnrollMethodError,
    MissingOrInvalidCsrError,
    UnknownEnrollmentTokenError,
)
from engine.managers._base import Env
from engine.ports import CertInfo, CertProfile, IssuedCertificate, Store, UnitOfWork

#: Identity enrollment methods (``em`` claims) and router ones.
OTT, OTTCA, UPDB, CA = "ott", "ottca", "updb", "ca"
EDGE_ROUTER_OTT, TRANSIT_ROUTER_OTT = "erott", "trott"
IDENTITY_METHODS = (OTT, OTTCA, UPDB)
ROUTER_METHODS = (EDGE_ROUTER_OTT, TRANSIT_ROUTER_OTT)

#: Methods whose unknown (never issued, used, refreshed, orphaned) token is "not found".
NOT_FOUND_METHODS = (OTT, UPDB)

_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def unknown_token(method: str | None) -> InvalidEnrollmentTokenError:
    """The error for a token no enrollment has, for a request of ``method`` (None: not given)."""
    if method is None or method in NOT_FOUND_METHODS:
        return UnknownEnrollmentTokenError()
    return InvalidEnrollmentTokenError()


@dataclass(frozen=True)
class EnrollmentSettings:
    """How enrollments are issued and what they yield (OpenZiti's ``edge.enrollment`` settings)."""

    #: ``https://host:port`` of the client API: the JWT ``iss``, where devices enroll.
    issuer: str
    #: Control-plane addresses for routers (the JWT ``ctrls``).
    ctrls: tuple[str, ...] = ()
    identity_duration: timedelta = timedelta(minutes=180)
    router_duration: timedelta = timedelta(minutes=180)
    #: Lifetime of certificates issued to identities and routers.
    client_cert_validity: timedelta = timedelta(days=365)
    server_cert_validity: timedelta = timedelta(days=365)
    #: Lifetime of ephemeral API-session certificates.
    session_cert_validity: timedelta = timedelta(hours=12)


def enrollment_claims(
    settings: EnrollmentSettings,
    *,
    method: str,
    subject: str,
    token: str,
    expires_at: datetime,
    ctrls: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The claims of an enrollment JWT (no ``iat``, as OpenZiti); ``ctrls`` the control-channel
    addresses a router is to connect to (empty for identities)."""
    return {
        "em": method,
        "iss": settings.issuer,
        "sub": subject,
        "jti": token,
        "exp": int(expires_at.timestamp()),
        "aud": [""],
        "ctrls": list(ctrls),
    }


def new_identity_enrollment(
    env: Env,
    settings: EnrollmentSettings,
    *,
    identity_id: str,
    method: str,
    expires_at: datetime,
    ca_id: str | None = None,
    username: str | None = None,
    tags: dict[str, Any] | None = None,
) -> Enrollment:
    """A fresh identity enrollment with a new token and its signed JWT (not yet stored)."""
    now = env.clock.now()
    enrollment = Enrollment(
        id=env.ids.new_id(),
        created_at=now,
        updated_at=now,
        tags=dict(tags or {}),
        identity_id=identity_id,
        method=method,
        token=env.ids.new_token(),
        expires_at=expires_at,
        ca_id=ca_id if method == OTTCA else None,
        username=username if method == UPDB else None,
    )
    return sign(env, settings, enrollment, expires_at, token=enrollment.token)


def sign(
    env: Env, settings: EnrollmentSettings, enrollment: Enrollment, expires_at: datetime, *, token: str
) -> Enrollment:
    """``enrollment`` with ``token``, ``expires_at`` and the JWT for them, signed now."""
    claims = enrollment_claims(
        settings, method=enrollment.method, subject=enrollment.identity_id, token=token, expires_at=expires_at
    )
    return replace(
        enrollment,
        token=token,
        expires_at=expires_at,
        jwt=env.tokens.sign(claims),
        updated_at=env.clock.now(),
    )


def router_enrollment_fields(
    env: Env, settings: EnrollmentSettings, router_id: str, method: str, ctrls: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Fresh one-time enrollment fields of a router: token, times and the signed JWT, whose
    ``ctrls`` are this controller's and then ``ctrls`` (the network's other controllers)."""
    now = env.clock.now()
    token = env.ids.new_token()
    expires_at = now + settings.router_duration
    every = tuple(dict.fromkeys((*settings.ctrls, *ctrls)))
    claims = enrollment_claims(
        settings, method=method, subject=router_id, token=token, expires_at=expires_at, ctrls=every
    )
    return {
        "enrollment_token": token,
        "enrollment_created_at": now,
        "enrollment_expires_at": expires_at,
        "enrollment_jwt": env.tokens.sign(claims),
    }


#: The enrollment fields of a router that has none outstanding.
NO_ROUTER_ENROLLMENT: dict[str, Any] = {
    "enrollment_token": None,
    "enrollment_created_at": None,
    "enrollment_expires_at": None,
    "enrollment_jwt": None,
}


def check_token_format(token: str | None) -> str:
    """The token of a request: present and a UUID (``format: uuid`` in the spec)."""
    if not token or not _UUID.match(token):
        raise InvalidEnrollmentTokenError(field="token", value=token, reason="token must be a UUID")
    return token.lower()


def claim(uow: UnitOfWork, env: Env, token: str | None, method: str) -> Enrollment:
    """The outstanding identity enrollment of ``method`` behind ``token``; raises when there is none.

    Unknown and used tokens give ``INVALID_ENROLLMENT_TOKEN`` (:func:`unknown_token`: 404 for
    ``ott`` and ``updb``), a token of another method
    ``INVALID_ENROLL_METHOD`` (OpenZiti's answer to, say, an ott token at ``/enroll/ottca``), an
    expired one ``ENROLLMENT_EXPIRED``. The caller deletes the enrollment in its commit.
    """
    enrollment = uow.find_unique(Enrollment, "token", check_token_format(token))
    if enrollment is None:
        raise unknown_token(method)
    if enrollment.method != method:
        raise InvalidEnrollMethodError(
            field="method", value=method, reason=f"the token is for method {enrollment.method}"
        )
    if enrollment.expires_at <= env.clock.now():
        raise EnrollmentExpiredError()
    return enrollment


def claim_identity(uow: UnitOfWork, enrollment: Enrollment) -> Identity:
    identity = uow.get(Identity, enrollment.identity_id)
    if identity is None:  # an orphan (the identity went away): the token is worthless
        raise unknown_token(enrollment.method)
    return identity


def check_method(method: str | None, allowed: tuple[str, ...]) -> str:
    if method not in allowed:
        raise InvalidEnrollMethodError(
            field="method", value=method, reason=f"method must be one of {list(allowed)}"
        )
    return method


def cert_authenticator(
    env: Env,
    identity_id: str,
    cert: CertInfo,
    *,
    issued_by_network: bool,
    ca_id: str | None = None,
) -> Authenticator:
    now = env.clock.now()
    return Authenticator(
        id=env.ids.new_id(),
        created_at=now,
        updated_at=now,
        identity_id=identity_id,
        method="cert",
        cert_pem=cert.pem,
        fingerprint=cert.fingerprint,
        is_issued_by_network=issued_by_network,
        ca_id=ca_id,
    )


def check_cert_unused(uow: UnitOfWork, fingerprint: str) -> None:
    """A certificate authenticates one identity only."""
    if uow.find_unique(Authenticator, "fingerprint", fingerprint) is not None:
        raise CertInUseError()


def has_cert_authenticator(uow: UnitOfWork, identity_id: str) -> bool:
    return any(a.method == "cert" for a in uow.find_by(Authenticator, "identity_id", identity_id))


def leaf_of(
    env: Env,
    chain: list[str],
    *,
    field: str = "clientCert",
    error: type[ControllerError] = CertFailedValidationError,
) -> CertInfo:
    """The presented leaf certificate, which must be valid now (enrollment never takes an expired one).

    A missing, unparsable or expired certificate raises ``error`` (OpenZiti's codes differ by
    method: ``CERT_FAILED_VALIDATION`` for CA auto-enrollment, ``CERTIFICATE_FAILED_VALIDATION``
    for ottca).
    """
    if not chain:
        raise error(reason="a client certificate is required")
    try:
        leaf = env.ca.parse_certificate(chain[0], field=field)
    except ControllerError:
        raise error(reason="the client certificate could not be parsed") from None
    if not leaf.is_valid_at(env.clock.now()):
        raise error(reason="the client certificate is expired or not yet valid")
    return leaf


def usable_cas(source: Store | UnitOfWork, flag: str) -> list[Ca]:
    """Verified third-party CAs with the boolean ``flag`` set (e.g. ``is_auth_enabled``)."""
    return [ca for ca in source.all(Ca) if ca.is_verified and getattr(ca, flag)]


def issuing_ca(env: Env, chain: Sequence[str], cas: Sequence[Ca], *, client_auth: bool = True) -> Ca | None:
    """Which of ``cas`` issued the leaf of ``chain`` (directly, or through intermediates the chain
    carries); None when none did. ``client_auth``: the chain must allow TLS client authentication
    (enrolment and extension, as OpenZiti's ``ExtKeyUsageClientAuth``)."""
    cas_pems = [ca.cert_pem for ca in cas]
    index = env.ca.issuer_index(list(chain), cas_pems, client_auth=client_auth) if cas else None
    return None if index is None else cas[index]


def sign_csr(
    env: Env,
    csr: str | None,
    *,
    profile: CertProfile,
    common_name: str,
    validity: timedelta,
    field: str,
    missing: type[ControllerError] = MissingOrInvalidCsrError,
) -> IssuedCertificate:
    """Our CA's certificate for ``csr``: ``missing`` (``MISSING_OR_INVALID_CSR``) when there is
    none, ``COULD_NOT_PROCESS_CSR`` (with the reason) when it cannot be signed."""
    if not isinstance(csr, str) or not csr.strip():
        raise missing(field=field, reason=f"{field} is required")
    try:
        return env.ca.sign_csr(
            csr, profile=profile, common_name=common_name, validity=validity, now=env.clock.now(), field=field
        )
    except FieldError as ex:
        raise CouldNotProcessCsrError(field=ex.field, reason=ex.reason) from None


def issue_client_certificate(
    uow: UnitOfWork,
    env: Env,
    settings: EnrollmentSettings,
    identity_id: str,
    csr: str | None,
    *,
    field: str,
    missing: type[ControllerError] = MissingOrInvalidCsrError,
) -> IssuedCertificate:
    """Our CA's client certificate for ``csr`` (CN = the identity's id), put in ``uow`` as the
    identity's network-issued cert authenticator; ``CERT_IN_USE`` if another holds it."""
    issued = sign_csr(
        env,
        csr,
        profile="client",
        common_name=identity_id,
        validity=settings.client_cert_validity,
        field=field,
        missing=missing,
    )
    check_cert_unused(uow, issued.fingerprint)
    uow.put(cert_authenticator(env, identity_id, issued.info, issued_by_network=True))
    return issued
