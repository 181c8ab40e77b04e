"""``token``: an external identity provider's JWT creates its own identity (``POST /enroll/token``).

OpenZiti's rules (``model/enrollment_mod_token.go``, ``model/token_issuer_cache.go``), in order:

- the candidates are the request's bearer tokens. With a ``ziti-token-issuer-id`` header, that
  signer must exist and be enabled and each candidate is checked against it; without it, each
  candidate is checked against the signer its ``iss`` names. The checks are those of an ext-jwt
  login (:func:`~engine.managers.external_jwts.verify_token`). The first candidate that
  passes is used; none: ``INVALID_ENROLLMENT_TOKEN``;
- the signer's selectors read the claims, each a JSON pointer or a bare name: the identity's
  ``externalId`` from ``claimsProperty`` (default ``/sub``), its name from
  ``enrollNameClaimsSelector`` (default ``/sub``), its role attributes from
  ``enrollAttributeClaimsSelector`` (none when blank; a string or an array of strings, blanks
  dropped). A selector that names nothing or a value of the wrong type, and an empty name or
  external id, make the token invalid;
- an identity that already has this ``externalId``: ``ENROLLMENT_IDENTITY_ALREADY_ENROLLED``;
- a request with a ``clientCsr`` asks for a certificate and needs the signer's
  ``enrollToCertEnabled`` and, in the enrolment auth policy (``enrollAuthPolicyId``, else
  ``default``), ``primary.cert.allowed``; one without asks for token (ext-jwt) logins and needs
  ``enrollToTokenEnabled``, ``primary.extJwt.allowed`` and the signer among the policy's allowed
  signers (an empty list allows all). Otherwise ``INVALID_ENROLLMENT_NOT_ALLOWED``;
- the identity (type ``Default``, the enrolment auth policy) is created; a certificate request
  also gets the CSR signed by our CA (CN = the new identity's id; ``COULD_NOT_PROCESS_CSR`` when it
  can not be) and a cert authenticator, in the same commit.

Where OpenZiti answers 500 (a name already taken, role attributes the store refuses, a missing
enrolment policy), Trellis answers what the management API would: ``COULD_NOT_VALIDATE`` on
``name`` or ``roleAttributes``, and ``INVALID_ENROLLMENT_NOT_ALLOWED`` for a missing policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.entities.trust import AuthPolicy, ExternalJwtSigner
from engine.errors import (
    AlreadyEnrolledError,
    CouldNotProcessCsrError,
    EnrollmentNotAllowedError,
    InvalidEnrollmentTokenError,
    NameConflictError,
)
from engine.managers._base import Env, check_attributes
from engine.managers.auth_policies import PolicyRules
from engine.managers.enrollment._core import EnrollmentSettings, issue_client_certificate
from engine.managers.external_jwts import MAX_CANDIDATES, MISSING_CLAIM, resolve_claim, verify_token
from engine.ports import IssuedCertificate, UnitOfWork

DEFAULT_ID_SELECTOR = "/sub"
DEFAULT_NAME_SELECTOR = "/sub"
IDENTITY_TYPE = "Default"


@dataclass(frozen=True)
class TokenEnrollment:
    """A new identity, and for a certificate request its certificate and the CAs to trust."""

    identity: Identity
    issued: IssuedCertificate | None = None
    ca_pem: str = ""


@dataclass(frozen=True)
class _Candidate:
    """A verified token's signer and what its selectors read from the claims."""

    signer: ExternalJwtSigner
    external_id: str
    name: str
    attributes: list[str]


def _string(claims: dict[str, Any], selector: str) -> str | None:
    value = resolve_claim(claims, selector)
    return value if isinstance(value, str) else None


def _attributes(claims: dict[str, Any], selector: str) -> list[str] | None:
    """The role attributes a selector reads: none for a blank selector; None when invalid."""
    if not selector.strip():
        return []
    value = resolve_claim(claims, selector)
    if isinstance(value, str):
        return [value] if value else []
    if value is MISSING_CLAIM or not isinstance(value, list):
        return None
    if not all(isinstance(item, str) for item in value):
        return None
    return [item for item in value if item]


def _candidate(env: Env, token: str, signer: ExternalJwtSigner | None) -> _Candidate | None:
    verified = verify_token(env, token, signer)
    if verified.signer is None or verified.claims is None:
        return None
    signer, claims = verified.signer, verified.claims
    external_id = _string(claims, signer.claims_property or DEFAULT_ID_SELECTOR)
    name = _string(claims, signer.enroll_name_claims_selector or DEFAULT_NAME_SELECTOR)
    attributes = _attributes(claims, signer.enroll_attribute_claims_selector)
    if external_id is None or name is None or attributes is None:
        return None
    return _Candidate(signer=signer, external_id=external_id, name=name, attributes=attributes)


def _verified_candidate(env: Env, tokens: Sequence[str], issuer_id: str | None) -> _Candidate:
    """The first bearer token that verifies (against signer ``issuer_id`` when given)."""
    signer: ExternalJwtSigner | None = None
    if issuer_id is not None:
        signer = env.store.get(ExternalJwtSigner, issuer_id)
        if signer is None or not signer.enabled:
            raise InvalidEnrollmentTokenError(reason="the token issuer is unknown or disabled")
    for token in list(tokens)[:MAX_CANDIDATES]:
        candidate = _candidate(env, token, signer)
        if candidate is not None:
            if not candidate.name or not candidate.external_id:
                raise InvalidEnrollmentTokenError(reason="the token's name or id claim is empty")
            return candidate
    raise InvalidEnrollmentTokenError(reason="no valid token was provided")


def _check_allowed(uow: UnitOfWork, signer: ExternalJwtSigner, *, certificate: bool) -> str:
    """The enrolment auth policy's id once the signer and the policy allow this enrollment."""
    if certificate and not signer.enroll_to_cert_enabled:
        raise EnrollmentNotAllowedError(reason="the token issuer does not allow enrollment to a certificate")
    if not certificate and not signer.enroll_to_token_enabled:
        raise EnrollmentNotAllowedError(reason="the token issuer does not allow enrollment to tokens")
    policy_id = signer.enroll_auth_policy_id or DEFAULT_AUTH_POLICY_ID
    policy = uow.get(AuthPolicy, policy_id)
    if policy is None:
        raise EnrollmentNotAllowedError(reason=f"the enrollment auth policy {policy_id} does not exist")
    rules = PolicyRules.from_policy(policy)
    if certificate and not rules.cert.allowed:
        raise EnrollmentNotAllowedError(reason="the auth policy does not allow certificate authentication")
    if not certificate and not rules.ext_jwt.allows(signer.id):
        raise EnrollmentNotAllowedError(
            reason="the auth policy does not allow external JWT authentication with this token issuer"
        )
    return policy_id


def enroll(
    env: Env,
    settings: EnrollmentSettings,
    tokens: Sequence[str],
    issuer_id: str | None,
    csr: str | None,
) -> TokenEnrollment:
    """Create the identity a bearer token stands for; with ``csr``, also its certificate."""
    candidate = _verified_candidate(env, tokens, issuer_id)  # may fetch a JWKS: outside the lock
    certificate = csr is not None and csr != ""
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        if uow.find_unique(Identity, "external_id", candidate.external_id) is not None:
            raise AlreadyEnrolledError(reason="an identity with this external id exists")
        policy_id = _check_allowed(uow, candidate.signer, certificate=certificate)
        if uow.find_unique(Identity, "name", candidate.name) is not None:
            raise NameConflictError("name", candidate.name, Identity.ENTITY)
        attributes = sorted(set(candidate.attributes))
        check_attributes(attributes)
        now = env.clock.now()
        identity = Identity(
            id=env.ids.new_id(),
            created_at=now,
            updated_at=now,
            name=candidate.name,
            type_id=IDENTITY_TYPE,
            role_attributes=attributes,
            auth_policy_id=policy_id,
            external_id=candidate.external_id,
        )
        uow.put(identity)
        if not certificate:
            env.commit(uow)
            return TokenEnrollment(identity=identity)
        issued = issue_client_certificate(
            uow, env, settings, identity.id, csr, field="clientCsr", missing=CouldNotProcessCsrError
        )
        env.commit(uow)
        return TokenEnrollment(identity=identity, issued=issued, ca_pem=env.ca.ca_bundle_pem())
