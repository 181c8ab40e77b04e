"""``GET /external-jwt-signers`` (client API, no session): the signers a client may log in with.

What a client needs to fetch a token before it has a session, as OpenZiti's client view
(``MapExternalJwtSignerToRestModelForClient``): name, ``externalAuthUrl``, ``audience``,
``clientId``, ``scopes``, ``targetToken`` and the enroll-to flags. Only enabled signers are
listed (OpenZiti's ``PublicQuery``); the list takes ``filter``, ``limit`` and ``offset``.
"""

from __future__ import annotations

import falcon

from api.controller import Controller
from api.http import list_response
from api.middleware import NONE
from api.routing import Routes
from api.schemas.external_jwt_signers import (
    client_external_jwt_signer_symbols,
    render_client_external_jwt_signer,
)


class ClientExternalJwtSigners:
    """List the external JWT signers clients may authenticate with."""

    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.manager = ctrl.managers.external_jwt_signers
        self.symbols = client_external_jwt_signer_symbols()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """List external JWT signers for client authentication."""
        list_response(req, resp, self.manager.enabled(), self.symbols, render_client_external_jwt_signer)


def register(routes: Routes) -> None:
    routes.client("/external-jwt-signers", ClientExternalJwtSigners(routes.ctrl))
