"""External JWT signers: third-party token issuers identities may authenticate with.

A signer verifies tokens with exactly one of ``cert_pem`` (a single certificate) or
``jwks_endpoint`` (OpenZiti's ``db/external_jwt_signer_store.go``: neither → field ``certPem``
"jwksEndpoint or certPem is required"; both → field ``jwksEndpoint`` "only one of jwksEndpoint or
certPem may be defined"). The certificate's details (``common_name``, ``fingerprint``,
``not_before``, ``not_after``) are derived by the caller (the API layer parses PEM) and passed in
with ``cert_pem``. ``name``, ``issuer``, ``kid`` and ``fingerprint`` are unique. Blank
``externalAuthUrl``/``audience`` are stored as null, a blank ``claimsProperty`` as ``sub``, a
blank enrolment auth policy as ``default``. A signer used by an auth policy can not be deleted.

The controller fetches a ``jwksEndpoint`` itself (whenever a token names a key it does not know,
so on behalf of anyone who can send a login), so one it must never fetch is refused when the
signer is saved (OpenZiti's ``external_jwt_signer_jwks_endpoint_test.go``): only ``http`` and
``https`` URLs with a host, never an address of :func:`address_problem` (link-local and cloud
metadata, unspecified, multicast, reserved; loopback unless the operator allows it). Private
networks (RFC 1918, unique-local IPv6) are allowed: an identity provider inside the company
network is a legitimate one. A host name is checked by name only here (``localhost`` is
loopback); the addresses it resolves to are checked when the JWKS is fetched (``pki.jwks``).
"""

from __future__ import annotations

import ipaddress
import re
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


#: Cloud instance metadata services outside the link-local ranges: AWS over IPv6, Alibaba Cloud.
_METADATA = frozenset({ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200")})
#: IPv6 addresses that carry an IPv4 address the connection ends up at: the NAT64 well-known prefix.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
#: "This network" (RFC 1122; Linux connects 0.0.0.0 to the local host) and the reserved class E
#: block with the broadcast address; IPv6's ``::/8`` (IPv4-compatible and unassigned).
_NOWHERE = (
    ipaddress.ip_network("0.0.0.0/8"),
    ipaddress.ip_network("240.0.0.0/4"),
    ipaddress.ip_network("::/8"),
)
#: A part of an IPv4 address as ``inet_aton`` (and so a resolver) reads it: hex, octal or decimal.
_INET_ATON_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")

LOOPBACK = "a loopback address"


def address_problem(address: str, *, allow_loopback: bool = False) -> str | None:
    """What an IP address is when the controller may not fetch from it, else None (also when
    ``address`` is no IP address): link-local (cloud instance metadata lives at 169.254.169.254)
    and the other cloud metadata addresses, unspecified, multicast, reserved, and loopback unless
    ``allow_loopback``. An IPv4-mapped or NAT64 IPv6 address is judged by its IPv4 address."""
    try:
        ip = ipaddress.ip_address(address.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip in _NAT64:
            ip = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _METADATA:
        return "a cloud metadata address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_loopback:
        return None if allow_loopback else LOOPBACK
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_multicast:
        return "a multicast address"
    if any(ip in block for block in _NOWHERE):
        return "a reserved address"
    return None


def _aton_number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    return int(part, 8) if part[0] == "0" else int(part)


def _legacy_ipv4(host: str) -> str | None:
    """``host`` as the address a resolver reads it as when it is a shorthand IPv4 literal
    (``127.1``, ``0x7f000001``, ``2130706433``), else None."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_INET_ATON_PART.fullmatch(part) for part in parts):
        return None
    *head, last = [_aton_number(part) for part in parts]
    if any(value > 255 for value in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return str(ipaddress.IPv4Address(number))


def jwks_endpoint_problem(endpoint: str, *, allow_loopback: bool = False) -> str | None:
    """Why the controller may not fetch ``endpoint``, or None. A host name is judged by name only
    (``localhost`` and ``*.localhost`` are loopback, RFC 6761); its addresses are checked when
    fetched."""
    try:
        parts = urlsplit(endpoint)
        host = parts.hostname
        parts.port  # noqa: B018  (a port out of range or not a number raises)
    except ValueError:
        return "jwksEndpoint must be a valid URL"
    if parts.scheme.lower() not in ("http", "https"):
        return "jwksEndpoint must be an http or https URL"
    if not host:
        return "jwksEndpoint must name a host"
    name = host.rstrip(".").lower()
    if not allow_loopback and (name == "localhost" or name.endswith(".localhost")):
        return f"jwksEndpoint may not point at {LOOPBACK}"
    problem = address_problem(_legacy_ipv4(name) or host, allow_loopback=allow_loopback)
    if problem is not None:
        return f"jwksEndpoint may not point at {problem}"
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
        # Loopback is the operator's call (a setting the API layer applies before this); every
        # other address the controller must never fetch is refused here whatever the caller.
        if new.jwks_endpoint is not None and (
            problem := jwks_endpoint_problem(new.jwks_endpoint, allow_loopback=True)
        ):
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
