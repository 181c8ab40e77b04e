"""``GET /external-jwt-signers`` (client API, no session): the signers a client may log in with.

What a client needs to fetch a token before it has a session, as OpenZiti's client view
(``MapExternalJwtSignerToRestModelForClient``): name, ``externalAuthUrl``, ``audience``,
``clientId``, ``scopes``, ``targetToken`` and the enroll-to flags. Only enabled signers are
listed (OpenZiti's ``PublicQuery``); the list takes ``filter``, ``limit`` and ``offset``.
"""

from __future__ import annotations

from typing import Any

import falcon

from api.controller import Controller
from api.http import list_response
from api.middleware import NONE
from api.routing import Routes
from api.wire import base
from engine.entities.trust import ExternalJwtSigner
from engine.query import Symbol, SymbolTable, SymbolType


def client_signer_symbols() -> SymbolTable:
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


def render_client_signer(signer: ExternalJwtSigner) -> dict[str, Any]:
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


class ClientExternalJwtSigners:
    """List the external JWT signers clients may authenticate with."""

    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.manager = ctrl.managers.external_jwt_signers
        self.symbols = client_signer_symbols()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """List external JWT signers for client authentication."""
        list_response(req, resp, self.manager.enabled(), self.symbols, render_client_signer)


def register(routes: Routes) -> None:
    routes.client("/external-jwt-signers", ClientExternalJwtSigners(routes.ctrl))
