"""External JWT signers: third-party token issuers identities may authenticate with.

A signer verifies tokens with exactly one of ``cert_pem`` (a single certificate) or
``jwks_endpoint`` (OpenZiti's ``db/external_jwt_signer_store.go``: neither → field ``certPem``
"jwksEndpoint or certPem is required"; both → field ``jwksEndpoint`` "only one of jwksEndpoint or
certPem may be defined"). The certificate's details (``common_name``, ``fingerprint``,
``not_before``, ``not_after``) are derived by the caller (the API layer parses PEM) and passed in
with ``cert_pem``. ``name``, ``issuer``, ``kid`` and ``fingerprint`` are unique. Blank
``externalAuthUrl``/``audience`` are stored as null, a blank ``claimsProperty`` as ``sub``, a
blank enrolment auth policy as ``default``. A signer used by an auth policy can not be deleted.

The controller fetches a ``jwksEndpoint`` itself, so one it must never fetch is refused when the
signer is saved (OpenZiti's ``external_jwt_signer_jwks_endpoint_test.go``): only ``http`` and
``https`` URLs with a host, and never a link-local address (the cloud instance metadata service
lives there). Hostnames are accepted: their addresses are checked when the JWKS is fetched.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from engine.entities.identities import DEFAULT_AUTH_POLICY_ID
from engine.entities.trust import AuthPolicy, ExternalJwtSigner
from engine.errors import FieldError, ReferencedEntityError
from engine.managers._base import EntityManager
from engine.ports import UnitOfWork

DEFAULT_CLAIMS_PROPERTY = "sub"
TARGET_TOKENS = ("ACCESS", "ID")

#: Fields derived from ``cert_pem``; reset together whenever ``cert_pem`` is set.
CERT_FIELDS = ("common_name", "fingerprint", "not_before", "not_after")


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _normalize(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for name in ("cert_pem", "jwks_endpoint", "external_auth_url", "audience", "kid", "client_id"):
        if name in out and _blank(out[name]):
            out[name] = None
    if "claims_property" in out and _blank(out["claims_property"]):
        out["claims_property"] = DEFAULT_CLAIMS_PROPERTY
    if "target_token" in out and _blank(out["target_token"]):
        out["target_token"] = "ACCESS"
    if "scopes" in out and out["scopes"] is None:
        out["scopes"] = []
    if "enroll_auth_policy_id" in out and _blank(out["enroll_auth_policy_id"]):
        out["enroll_auth_policy_id"] = DEFAULT_AUTH_POLICY_ID
    if "cert_pem" in out:
        for name in CERT_FIELDS:
            out.setdefault(name, None)
    return out


def is_forbidden_address(host: str) -> bool:
    """Whether ``host`` (an IP literal) is an address the controller must never fetch from:
    link-local (IPv4 169.254.0.0/16, IPv6 fe80::/10, and AWS's IPv6 metadata fd00:ec2::254)."""
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_link_local or address == ipaddress.ip_address("fd00:ec2::254")


def jwks_endpoint_problem(endpoint: str) -> str | None:
    """Why the controller may not fetch ``endpoint``, or None."""
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
    except ValueError:
        return "jwksEndpoint must be a valid URL"
    if parts.scheme.lower() not in ("http", "https"):
        return "jwksEndpoint must be an http or https URL"
    if not host:
        return "jwksEndpoint must name a host"
    if is_forbidden_address(host):
        return "jwksEndpoint may not point at a link-local address"
    return None


def policies_using(uow: UnitOfWork, signer_id: str) -> list[str]:
    """Ids of the auth policies that name the signer (allowed primary or required secondary)."""
    out: list[str] = []
    for policy in uow.all(AuthPolicy):
        allowed = policy.primary.get("extJwt", {}).get("allowedSigners") or []
        if signer_id in allowed or policy.secondary.get("requireExtJwtSigner") == signer_id:
            out.append(policy.id)
    return sorted(out)


class ExternalJwtSignerManager(EntityManager[ExternalJwtSigner]):
    kind = ExternalJwtSigner

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> ExternalJwtSigner:
        values = _normalize(fields)
        values.setdefault("enroll_auth_policy_id", DEFAULT_AUTH_POLICY_ID)
        return super().build(uow, values)

    def apply(self, uow: UnitOfWork, old: ExternalJwtSigner, fields: dict[str, Any]) -> ExternalJwtSigner:
        return super().apply(uow, old, _normalize(fields))

    def validate(self, uow: UnitOfWork, new: ExternalJwtSigner, old: ExternalJwtSigner | None) -> None:
        if not new.name:
            raise FieldError("name", "name in body is required")
        if _blank(new.issuer):
            raise FieldError("issuer", "issuer in body is required")
        if new.cert_pem is None and new.jwks_endpoint is None:
            raise FieldError("certPem", "jwksEndpoint or certPem is required")
        if new.cert_pem is not None and new.jwks_endpoint is not None:
            raise FieldError(
                "jwksEndpoint", "only one of jwksEndpoint or certPem may be defined", new.jwks_endpoint
            )
        if new.jwks_endpoint is not None and (problem := jwks_endpoint_problem(new.jwks_endpoint)):
            raise FieldError("jwksEndpoint", problem, new.jwks_endpoint)
        if new.target_token not in TARGET_TOKENS:
            raise FieldError(
                "targetToken", f"targetToken must be one of {list(TARGET_TOKENS)}", new.target_token
            )
        policy_id = new.enroll_auth_policy_id
        if policy_id and uow.get(AuthPolicy, policy_id) is None:
            raise FieldError("enrollAuthPolicyId", "the auth policy could not be found", policy_id)
        policy = uow.get(AuthPolicy, policy_id) if policy_id else None
        if (
            new.enroll_to_token_enabled
            and policy is not None
            and not policy.primary.get("extJwt", {}).get("allowed")
        ):
            raise FieldError(
                "enrollAuthPolicyId",
                "primary external jwt authentication on auth policy is disabled",
                policy_id,
            )
        if (
            new.enroll_to_cert_enabled
            and policy is not None
            and not policy.primary.get("cert", {}).get("allowed")
        ):
            raise FieldError(
                "enrollAuthPolicyId",
                "primary certificate authentication on auth policy is disabled",
                policy_id,
            )

    def before_delete(self, uow: UnitOfWork, entity: ExternalJwtSigner) -> None:
        users = policies_using(uow, entity.id)
        if users:
            raise ReferencedEntityError(
                reason=f"externalJwtSigner {entity.id} is referenced by authPolicies {users}", value=users
            )

    def enabled(self) -> list[ExternalJwtSigner]:
        """The signers clients may authenticate with: the client API lists only these (OpenZiti's
        ``PublicQuery`` adds ``enabled = true`` to every query)."""
        return [signer for signer in self.list() if signer.enabled]
