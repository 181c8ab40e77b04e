"""``/authenticators`` (admin): list, create, read, replace, patch, delete."""

from __future__ import annotations

from typing import Any

from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.authenticators import (
    AuthenticatorCreate,
    AuthenticatorPatch,
    AuthenticatorUpdate,
    authenticator_symbols,
    render_authenticator,
)
from api.wire import WireModel
from engine.entities.identities import Authenticator
from engine.errors import FieldError
from engine.managers.authenticators import AuthenticatorManager
from pki.certs import fingerprint, parse_certificates


def authenticator_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    """Manager fields; a certificate's fingerprint is computed here (the engine sees no x509)."""
    if mode != "create":
        fields = model_fields(model, mode, Authenticator)
        if mode == "update" and fields.get("tags") is None:
            fields["tags"] = {}
        return fields
    assert isinstance(model, AuthenticatorCreate)
    fields = {k: v for k, v in model.all_fields().items() if v is not None}
    if model.method == "cert" and model.cert_pem:
        certs = parse_certificates(model.cert_pem, "certPem")
        if len(certs) != 1:
            raise FieldError("certPem", "client pem must be exactly one certificate")
        fields["fingerprint"] = fingerprint(certs[0])
    return fields


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    mount(
        routes,
        Family(
            entity="authenticators",
            manager=AuthenticatorManager(ctrl.env),
            render=lambda a: render_authenticator(ctrl, a),
            symbols=authenticator_symbols(),
            create_model=AuthenticatorCreate,
            update_model=AuthenticatorUpdate,
            patch_model=AuthenticatorPatch,
            to_fields=authenticator_fields,
        ),
    )
