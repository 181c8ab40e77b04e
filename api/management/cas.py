"""``/cas``: the standard family pattern; ``certPem`` is parsed and fingerprinted on create.

``POST /cas/{id}/verify`` and ``GET /cas/{id}/jwt`` are not served here yet.
"""

from __future__ import annotations

from typing import Any

from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.trust import CaCreate, CaPatch, CaUpdate, external_id_claim, render_ca
from api.wire import WireModel
from engine.entities.trust import Ca
from engine.managers.cas import CaManager
from engine.query import Symbol, SymbolTable, SymbolType
from pki import fingerprint, parse_ca_certificate
from pki.certs import issued_by

SYMBOLS = SymbolTable(
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


def ca_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if isinstance(model, CaPatch):
        fields = {k: v for k, v in model.fields_set().items() if v is not None}
        if "external_id_claim" in fields:
            fields["external_id_claim"] = external_id_claim(model.external_id_claim, only_set=True)
        return fields
    assert isinstance(model, (CaCreate, CaUpdate))
    fields = model_fields(model, mode, Ca)
    fields["external_id_claim"] = external_id_claim(model.external_id_claim)
    if isinstance(model, CaCreate):
        cert = parse_ca_certificate(model.cert_pem, "certPem")
        fields["fingerprint"] = fingerprint(cert)
    return fields


def register(routes: Routes) -> None:
    mount(
        routes,
        Family(
            entity="cas",
            manager=CaManager(routes.ctrl.env, issued_by),
            render=render_ca,
            symbols=SYMBOLS,
            create_model=CaCreate,
            update_model=CaUpdate,
            patch_model=CaPatch,
            to_fields=ca_fields,
        ),
    )
