"""Wire shapes of external JWT signers: the management request models, filterable fields and
renderer, and the client API's view of a signer (``clientExternalJwtSignerDetail``)."""

from __future__ import annotations

from typing import Any, Literal

from api.wire import Tags, WireModel, base, ts
from engine.entities.trust import ExternalJwtSigner
from engine.query import Symbol, SymbolTable, SymbolType

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
        "scopes": Symbol(SymbolType.STRING, lambda e: e.scopes, is_set=True),
        "notAfter": Symbol(SymbolType.DATETIME, lambda e: e.not_after),
        "notBefore": Symbol(SymbolType.DATETIME, lambda e: e.not_before),
    },
    tags_getter=lambda e: e.tags,
)


def client_external_jwt_signer_symbols() -> SymbolTable:
    """What the client list of signers filters on: the fields its entries show (OpenZiti's
    ``scopes`` and ``targetToken`` among them), none of the hidden ones."""
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
            "scopes": Symbol(string, lambda s: s.scopes, is_set=True),
            "targetToken": Symbol(string, lambda s: s.target_token),
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
