"""Wire shapes of the trust anchors: auth policies, external JWT signers and CAs (request models,
filterable fields and the detail renderers)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from api.wire import Tags, WireModel, base, ts
from engine.entities.trust import AuthPolicy, Ca, ExternalJwtSigner
from engine.managers.auth_policies import DEFAULT_PRIMARY, DEFAULT_SECONDARY, merge
from engine.managers.identities import MAX_DISABLE_MINUTES
from engine.query import Symbol, SymbolTable, SymbolType

# -- auth policies ----------------------------------------------------------------------------
#: Nested keys a patch may set to null (the spec marks them x-nullable and OpenZiti stores nil).
_NULLABLE_POLICY_KEYS = frozenset({"allowedSigners", "requireExtJwtSigner"})


class AuthPolicyPrimaryCert(WireModel):
    allowed: bool | None = None
    allow_expired_certs: bool | None = None


class AuthPolicyPrimaryExtJwt(WireModel):
    allowed: bool | None = None
    allowed_signers: list[str] | None = None


class AuthPolicyPrimaryUpdb(WireModel):
    allowed: bool | None = None
    min_password_length: int | None = None
    require_special_char: bool | None = None
    require_number_char: bool | None = None
    require_mixed_case: bool | None = None
    max_attempts: int | None = None
    #: A lockout is a disable: no longer than the longest Go Duration.
    lockout_duration_minutes: Annotated[int, Field(le=MAX_DISABLE_MINUTES)] | None = None


class AuthPolicyPrimary(WireModel):
    cert: AuthPolicyPrimaryCert | None = None
    ext_jwt: AuthPolicyPrimaryExtJwt | None = None
    updb: AuthPolicyPrimaryUpdb | None = None


class AuthPolicySecondary(WireModel):
    require_ext_jwt_signer: str | None = None
    require_totp: bool | None = None


class AuthPolicyCreate(WireModel):
    name: str
    primary: AuthPolicyPrimary
    secondary: AuthPolicySecondary
    tags: Tags = None


class AuthPolicyUpdate(AuthPolicyCreate):
    pass


class AuthPolicyPatch(WireModel):
    name: str | None = None
    primary: AuthPolicyPrimary | None = None
    secondary: AuthPolicySecondary | None = None
    tags: Tags = None


def _strip_nulls(value: dict[str, Any], keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out[key] = _strip_nulls(item, keep)
        elif item is not None or key in keep:
            out[key] = item
    return out


def auth_policy_fields(model: WireModel, mode: str) -> dict[str, Any]:
    """Manager fields: full ``primary``/``secondary`` (defaults filled) or a patch's sent keys."""
    if mode == "patch":
        out: dict[str, Any] = {}
        for name in ("name", "tags"):
            if name in model.model_fields_set and getattr(model, name) is not None:
                out[name] = getattr(model, name)
        for name in ("primary", "secondary"):
            value = getattr(model, name)
            if name in model.model_fields_set and value is not None:
                out[name] = _strip_nulls(
                    value.model_dump(by_alias=True, exclude_unset=True), _NULLABLE_POLICY_KEYS
                )
        return out
    assert isinstance(model, AuthPolicyCreate)
    primary = _strip_nulls(model.primary.model_dump(by_alias=True))
    secondary = _strip_nulls(model.secondary.model_dump(by_alias=True))
    return {
        "name": model.name,
        "tags": dict(model.tags or {}),
        "primary": merge(DEFAULT_PRIMARY, primary),
        "secondary": merge(DEFAULT_SECONDARY, secondary),
    }


def render_auth_policy(policy: AuthPolicy) -> dict[str, Any]:
    """``authPolicyDetail``."""
    out = base(policy)
    primary = dict(policy.primary)
    ext_jwt = primary.get("extJwt")
    if isinstance(ext_jwt, dict) and ext_jwt.get("allowedSigners") is None:
        # Stored as nil (the default policy, a patch to null); OpenZiti renders it as [].
        primary["extJwt"] = {**ext_jwt, "allowedSigners": []}
    out.update({"name": policy.name, "primary": primary, "secondary": policy.secondary})
    return out


# -- external JWT signers ---------------------------------------------------------------------
TargetToken = Literal["ACCESS", "ID"]


class _SignerFields(WireModel):
    cert_pem: str | None = None
    jwks_endpoint: str | None = None
    kid: str | None = None
    external_auth_url: str | None = None
    claims_property: str | None = None
    use_external_id: bool | None = None
    client_id: str | None = None
    scopes: list[str] | None = None
    target_token: TargetToken | None = None
    enroll_to_cert_enabled: bool | None = None
    enroll_to_token_enabled: bool | None = None
    enroll_attribute_claims_selector: str | None = None
    enroll_name_claims_selector: str | None = None
    enroll_auth_policy_id: str | None = None
    tags: Tags = None


class ExternalJwtSignerCreate(_SignerFields):
    name: str
    issuer: str
    audience: str | None
    enabled: bool


class ExternalJwtSignerUpdate(ExternalJwtSignerCreate):
    pass


class ExternalJwtSignerPatch(_SignerFields):
    name: str | None = None
    issuer: str | None = None
    audience: str | None = None
    enabled: bool | None = None


#: Signer fields a patch may clear with an explicit null.
SIGNER_NULLABLE = frozenset(
    {
        "cert_pem",
        "jwks_endpoint",
        "kid",
        "external_auth_url",
        "claims_property",
        "client_id",
        "audience",
        "scopes",
    }
)

#: OpenZiti renders a missing certificate validity as Go's zero time.
_ZERO_TIME = "0001-01-01T00:00:00.000Z"


def render_external_jwt_signer(signer: ExternalJwtSigner) -> dict[str, Any]:
    """``externalJwtSignerDetail``."""
    out = base(signer)
    out.update(
        {
            "audience": signer.audience,
            "certPem": signer.cert_pem,
            "claimsProperty": signer.claims_property,
            "clientId": signer.client_id,
            "commonName": signer.common_name or "",
            "enabled": signer.enabled,
            "enrollAttributeClaimsSelector": signer.enroll_attribute_claims_selector,
            "enrollAuthPolicyId": signer.enroll_auth_policy_id,
            "enrollNameClaimsSelector": signer.enroll_name_claims_selector,
            "enrollToCertEnabled": signer.enroll_to_cert_enabled,
            "enrollToTokenEnabled": signer.enroll_to_token_enabled,
            "externalAuthUrl": signer.external_auth_url,
            "fingerprint": signer.fingerprint,
            "issuer": signer.issuer,
            "jwksEndpoint": signer.jwks_endpoint,
            "kid": signer.kid,
            "name": signer.name,
            "notAfter": ts(signer.not_after) or _ZERO_TIME,
            "notBefore": ts(signer.not_before) or _ZERO_TIME,
            "scopes": list(signer.scopes),
            "targetToken": signer.target_token,
            "useExternalId": signer.use_external_id,
        }
    )
    return out


# -- certificate authorities ------------------------------------------------------------------
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


AUTH_POLICY_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
    },
    tags_getter=lambda e: e.tags,
)


EXTERNAL_JWT_SIGNER_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
        "issuer": Symbol(SymbolType.STRING, lambda e: e.issuer),
        "audience": Symbol(SymbolType.STRING, lambda e: e.audience),
        "kid": Symbol(SymbolType.STRING, lambda e: e.kid),
        "fingerprint": Symbol(SymbolType.STRING, lambda e: e.fingerprint),
        "commonName": Symbol(SymbolType.STRING, lambda e: e.common_name),
        "certPem": Symbol(SymbolType.STRING, lambda e: e.cert_pem),
        "enabled": Symbol(SymbolType.BOOL, lambda e: e.enabled),
        "claimsProperty": Symbol(SymbolType.STRING, lambda e: e.claims_property),
        "useExternalId": Symbol(SymbolType.BOOL, lambda e: e.use_external_id),
        "clientId": Symbol(SymbolType.STRING, lambda e: e.client_id),
        "targetToken": Symbol(SymbolType.STRING, lambda e: e.target_token),
        "notAfter": Symbol(SymbolType.DATETIME, lambda e: e.not_after),
        "notBefore": Symbol(SymbolType.DATETIME, lambda e: e.not_before),
    },
    tags_getter=lambda e: e.tags,
)


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


def client_external_jwt_signer_symbols() -> SymbolTable:
    string, when = SymbolType.STRING, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda s: s.id),
            "name": Symbol(string, lambda s: s.name),
            "createdAt": Symbol(when, lambda s: s.created_at),
            "updatedAt": Symbol(when, lambda s: s.updated_at),
            "externalAuthUrl": Symbol(string, lambda s: s.external_auth_url),
            "clientId": Symbol(string, lambda s: s.client_id),
            "audience": Symbol(string, lambda s: s.audience),
        },
        tags_getter=lambda s: s.tags,
    )


def render_client_external_jwt_signer(signer: ExternalJwtSigner) -> dict[str, Any]:
    """``clientExternalJwtSignerDetail``."""
    out = base(signer)
    out.update(
        {
            "name": signer.name,
            "externalAuthUrl": signer.external_auth_url,
            "audience": signer.audience,
            "clientId": signer.client_id,
            "scopes": list(signer.scopes),
            "targetToken": signer.target_token,
            "enrollToCertEnabled": signer.enroll_to_cert_enabled,
            "enrollToTokenEnabled": signer.enroll_to_token_enabled,
        }
    )
    return out
