"""``/external-jwt-signers``: the standard family pattern; certificate details come from ``certPem``."""

from __future__ import annotations

from typing import Any

from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.trust import (
    SIGNER_NULLABLE,
    ExternalJwtSignerCreate,
    ExternalJwtSignerPatch,
    ExternalJwtSignerUpdate,
    render_external_jwt_signer,
)
from api.wire import WireModel
from engine.entities.trust import ExternalJwtSigner
from engine.errors import FieldError, InvalidCertPemError
from engine.query import Symbol, SymbolTable, SymbolType
from pki import common_name, fingerprint, parse_certificates

SYMBOLS = SymbolTable(
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


def certificate_fields(cert_pem: str | None) -> dict[str, Any]:
    """``cert_pem`` with the details derived from it (OpenZiti requires exactly one certificate)."""
    if cert_pem is None or not cert_pem.strip():
        return {
            "cert_pem": None,
            "common_name": None,
            "fingerprint": None,
            "not_before": None,
            "not_after": None,
        }
    try:
        certs = parse_certificates(cert_pem, "certPem")
    except FieldError:
        raise InvalidCertPemError(field="certPem", reason="could not parse PEM certificate") from None
    if len(certs) != 1:
        raise InvalidCertPemError(field="certPem", reason="exactly one certificate is required")
    cert = certs[0]
    return {
        "cert_pem": cert_pem,
        "common_name": common_name(cert) or "",
        "fingerprint": fingerprint(cert),
        "not_before": cert.not_valid_before_utc,
        "not_after": cert.not_valid_after_utc,
    }


def signer_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode == "patch":
        fields = {k: v for k, v in model.fields_set().items() if v is not None or k in SIGNER_NULLABLE}
    else:
        fields = model_fields(model, mode, ExternalJwtSigner)
        fields.setdefault("cert_pem", None)
        fields.setdefault("jwks_endpoint", None)
    if "cert_pem" in fields:
        fields.update(certificate_fields(fields["cert_pem"]))
    return fields


def register(routes: Routes) -> None:
    mount(
        routes,
        Family(
            entity="external-jwt-signers",
            manager=routes.managers.external_jwt_signers,
            render=render_external_jwt_signer,
            symbols=SYMBOLS,
            create_model=ExternalJwtSignerCreate,
            update_model=ExternalJwtSignerUpdate,
            patch_model=ExternalJwtSignerPatch,
            to_fields=signer_fields,
        ),
    )
