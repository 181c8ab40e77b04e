"""Wire shapes of certificate authorities: request models (with ``externalIdClaim``),
filterable fields and the detail renderer."""

from __future__ import annotations

from typing import Any, Literal

from api.wire import Tags, WireModel, base
from engine.entities.trust import Ca
from engine.query import Symbol, SymbolTable, SymbolType

ClaimLocation = Literal["COMMON_NAME", "SAN_URI", "SAN_EMAIL"]
ClaimMatcher = Literal["ALL", "PREFIX", "SUFFIX", "SCHEME"]
ClaimParser = Literal["NONE", "SPLIT"]


class ExternalIdClaim(WireModel):
    """``externalIdClaim``: every field required, each may be null."""

    index: int | None
    location: ClaimLocation | None
    matcher: ClaimMatcher | None
    matcher_criteria: str | None
    parser: ClaimParser | None
    parser_criteria: str | None


#: ``externalIdClaim``'s wire keys.
CLAIM_KEYS = ("index", "location", "matcher", "matcherCriteria", "parser", "parserCriteria")


class ExternalIdClaimPatch(WireModel):
    index: int | None = None
    location: ClaimLocation | None = None
    matcher: ClaimMatcher | None = None
    matcher_criteria: str | None = None
    parser: ClaimParser | None = None
    parser_criteria: str | None = None


class CaCreate(WireModel):
    name: str
    cert_pem: str
    identity_roles: list[str]
    is_auth_enabled: bool
    is_auto_ca_enrollment_enabled: bool
    is_ott_ca_enrollment_enabled: bool
    identity_name_format: str | None = None
    external_id_claim: ExternalIdClaim | None = None
    tags: Tags = None


class CaUpdate(WireModel):
    name: str
    identity_roles: list[str]
    is_auth_enabled: bool
    is_auto_ca_enrollment_enabled: bool
    is_ott_ca_enrollment_enabled: bool
    identity_name_format: str
    external_id_claim: ExternalIdClaim | None = None
    tags: Tags = None


class CaPatch(WireModel):
    name: str | None = None
    identity_roles: list[str] | None = None
    is_auth_enabled: bool | None = None
    is_auto_ca_enrollment_enabled: bool | None = None
    is_ott_ca_enrollment_enabled: bool | None = None
    identity_name_format: str | None = None
    external_id_claim: ExternalIdClaimPatch | None = None
    tags: Tags = None


def external_id_claim(value: WireModel | None, *, only_set: bool = False) -> dict[str, Any] | None:
    """The claim in wire (camelCase) form, as stored."""
    if value is None:
        return None
    return value.model_dump(by_alias=True, exclude_unset=only_set)


def render_ca(ca: Ca) -> dict[str, Any]:
    """``caDetail``; ``verify`` and ``jwt`` links as OpenZiti's CA link factory adds them."""
    subs = []
    if not ca.is_verified:
        subs.append("verify")
    if ca.is_auto_ca_enrollment_enabled:
        subs.append("jwt")
    out = base(ca, *subs)
    if ca.external_id_claim:
        # OpenZiti renders the stored claim whole: each of its six fields, null when unset
        # (a claim patched onto a CA that had none holds only the patched keys)
        out["externalIdClaim"] = {key: ca.external_id_claim.get(key) for key in CLAIM_KEYS}
    # without a claim the (optional, omitempty) field is left out, as go-swagger leaves it
    out.update(
        {
            "certPem": ca.cert_pem,
            "fingerprint": ca.fingerprint,
            "identityNameFormat": ca.identity_name_format,
            "identityRoles": list(ca.identity_roles),
            "isAuthEnabled": ca.is_auth_enabled,
            "isAutoCaEnrollmentEnabled": ca.is_auto_ca_enrollment_enabled,
            "isOttCaEnrollmentEnabled": ca.is_ott_ca_enrollment_enabled,
            "isVerified": ca.is_verified,
            "name": ca.name,
            "verificationToken": ca.verification_token,
        }
    )
    return out


CA_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
        "fingerprint": Symbol(SymbolType.STRING, lambda e: e.fingerprint),
        "certPem": Symbol(SymbolType.STRING, lambda e: e.cert_pem),
        "isVerified": Symbol(SymbolType.BOOL, lambda e: e.is_verified),
        "isAuthEnabled": Symbol(SymbolType.BOOL, lambda e: e.is_auth_enabled),
        "isAutoCaEnrollmentEnabled": Symbol(SymbolType.BOOL, lambda e: e.is_auto_ca_enrollment_enabled),
        "isOttCaEnrollmentEnabled": Symbol(SymbolType.BOOL, lambda e: e.is_ott_ca_enrollment_enabled),
        "identityNameFormat": Symbol(SymbolType.STRING, lambda e: e.identity_name_format),
        "identityRoles": Symbol(SymbolType.STRING, lambda e: e.identity_roles, is_set=True),
        "verificationToken": Symbol(SymbolType.STRING, lambda e: e.verification_token),
    },
    tags_getter=lambda e: e.tags,
)
