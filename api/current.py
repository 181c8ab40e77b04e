"""The caller's own credentials (both APIs): its authenticators, certificate extension, and the
ephemeral certificates of its API session.

- ``GET /current-identity/authenticators[/{id}]``;
- ``PUT``/``PATCH /current-identity/authenticators/{id}``: the identity's own ``updb`` username and
  password, proven with ``currentPassword`` (200 ``{}``; 401 wrong current password, 404 not its
  own, 409 not a ``updb`` authenticator); a new password ends its other API sessions;
- ``POST /current-identity/authenticators/{id}/extend``: over mutual TLS with the current
  certificate, a CSR in, ``{clientCert, ca}`` out; the old certificate keeps working until
- ``POST /current-identity/authenticators/{id}/extend-verify`` confirms the new one;
- ``/current-api-session/certificates``: create from a CSR (201), list, read, delete.

Only the caller's own authenticators and its own session's certificates are reachable.
"""

from __future__ import annotations

from typing import Any

import falcon

from api.controller import Controller
from api.http import empty, list_response, ok, read_model
from api.middleware import SESSION
from api.peer import presented_chain
from api.routing import Routes
from api.schemas.authenticators import (
    CurrentAuthenticatorPatch,
    CurrentAuthenticatorUpdate,
    ExtendCert,
    ExtendVerify,
    authenticator_symbols,
    render_authenticator,
)
from api.wire import WireModel, base, ts
from engine.entities.identities import ApiSessionCertificate
from engine.query import Symbol, SymbolTable, SymbolType


class CreateSessionCertificate(WireModel):
    csr: str


class CurrentAuthenticators:
    auth = SESSION
    body_models: dict[str, type[WireModel]] = {
        "put_item": CurrentAuthenticatorUpdate,
        "patch_item": CurrentAuthenticatorPatch,
        "post_extend": ExtendCert,
        "post_extend_verify": ExtendVerify,
    }

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl
        self.manager = ctrl.managers.authenticators
        self.symbols = authenticator_symbols()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The authenticators of the current identity."""
        items = self.manager.for_identity(req.context.identity.id)
        list_response(req, resp, items, self.symbols, lambda a: render_authenticator(self.ctrl, a))

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """One authenticator of the current identity."""
        ok(resp, render_authenticator(self.ctrl, self.manager.require_own(req.context.identity.id, id)))

    def on_put_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Replace the username and password of the current identity's own updb authenticator."""
        model = read_model(req, CurrentAuthenticatorUpdate)
        fields: dict[str, Any] = {
            "username": model.username,
            "password": model.password,
            "tags": model.tags or {},
        }
        self._update_own(req, id, model.current_password, fields)
        empty(resp)

    def on_patch_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Change the username and/or password of the current identity's own updb authenticator."""
        model = read_model(req, CurrentAuthenticatorPatch)
        fields = {k: v for k, v in model.fields_set().items() if k != "current_password" and v is not None}
        self._update_own(req, id, model.current_password, fields)
        empty(resp)

    def _update_own(self, req: falcon.Request, id: str, current: str, fields: dict[str, Any]) -> None:
        self.manager.update_own(
            req.context.identity.id, id, current, fields, keep_session=req.context.session.id
        )

    def on_post_extend(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Extend a certificate authenticator: a new certificate from a CSR, unverified until extend-verify."""
        model = read_model(req, ExtendCert)
        issued = self.manager.extend(
            req.context.identity.id,
            id,
            model.client_cert_csr,
            presented_chain(req),
            self.ctrl.managers.enrollment_settings,
        )
        ok(resp, {"ca": self.ctrl.env.ca.ca_bundle_pem(), "clientCert": issued.chain_pem})

    def on_post_extend_verify(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Confirm the extended certificate; the previous one stops authenticating."""
        model = read_model(req, ExtendVerify)
        self.manager.extend_verify(req.context.identity.id, id, model.client_cert)
        empty(resp)


def session_certificate_symbols() -> SymbolTable:
    """The filterable fields of the current API session's certificates; ``apiSession`` (OpenZiti's)
    is the caller's own session, whose id ``/current-api-session`` shows."""
    string, when = SymbolType.STRING, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda c: c.id),
            "apiSession": Symbol(string, lambda c: c.api_session_id),
            "createdAt": Symbol(when, lambda c: c.created_at),
            "updatedAt": Symbol(when, lambda c: c.updated_at),
            "subject": Symbol(string, lambda c: c.subject),
            "fingerprint": Symbol(string, lambda c: c.fingerprint),
            "validFrom": Symbol(when, lambda c: c.valid_from),
            "validTo": Symbol(when, lambda c: c.valid_to),
        },
        tags_getter=lambda c: c.tags,
    )


def render_session_certificate(cert: ApiSessionCertificate) -> dict[str, object]:
    out = base(cert)
    out["_links"] = {"self": {"href": f"./current-api-session/certificates/{cert.id}"}}
    out.update(
        {
            "certificate": cert.cert_pem,
            "fingerprint": cert.fingerprint,
            "subject": cert.subject,
            "validFrom": ts(cert.valid_from),
            "validTo": ts(cert.valid_to),
        }
    )
    return out


class SessionCertificates:
    auth = SESSION
    body_models = {"post": CreateSessionCertificate}

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl
        self.manager = ctrl.managers.api_session_certificates
        self.symbols = session_certificate_symbols()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The ephemeral certificates of the current API session."""
        items = self.manager.of_session(req.context.session.id)
        list_response(req, resp, items, self.symbols, render_session_certificate)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """An ephemeral client certificate for the current API session, from a CSR."""
        model = read_model(req, CreateSessionCertificate)
        cert, issued = self.manager.issue(req.context.session, model.csr)
        resp.status = falcon.HTTP_201
        ok(
            resp,
            {
                "_links": {"self": {"href": f"./current-api-session/certificates/{cert.id}"}},
                "id": cert.id,
                "certificate": issued.chain_pem,
                "cas": self.ctrl.env.ca.ca_bundle_pem(),
            },
        )

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """One ephemeral certificate of the current API session."""
        ok(resp, render_session_certificate(self.manager.require_of_session(req.context.session.id, id)))

    def on_delete_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Delete an ephemeral certificate of the current API session."""
        self.manager.delete_of_session(req.context.session.id, id)
        empty(resp)


def register(routes: Routes) -> None:
    authenticators = CurrentAuthenticators(routes.ctrl)
    routes.both("/current-identity/authenticators", authenticators)
    routes.both("/current-identity/authenticators/{id}", authenticators, suffix="item")
    routes.both("/current-identity/authenticators/{id}/extend", authenticators, suffix="extend")
    routes.both("/current-identity/authenticators/{id}/extend-verify", authenticators, suffix="extend_verify")
    certificates = SessionCertificates(routes.ctrl)
    routes.both("/current-api-session/certificates", certificates)
    routes.both("/current-api-session/certificates/{id}", certificates, suffix="item")
