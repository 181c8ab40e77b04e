"""Edge routers a client may use: ``/current-identity/edge-routers`` (both APIs, §5.3) and the
client ``/services/{id}/edge-routers`` (the routers a session to the service would name, §5.2)."""

from __future__ import annotations

import falcon

from api.http import list_response, ok
from api.middleware import SESSION
from api.routing import Routes
from api.schemas.client_edge_routers import (
    CURRENT_IDENTITY_EDGE_ROUTER_SYMBOLS,
    render_common_edge_router,
    render_current_identity_edge_router,
)
from engine.entities.routers import EdgeRouter
from engine.managers.access import AccessManager
from engine.managers.sessions import SessionManager


class CurrentIdentityEdgeRouters:
    auth = SESSION

    def __init__(self, access: AccessManager) -> None:
        self.access = access

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        routers: list[EdgeRouter] = self.access.usable_edge_routers(req.context.identity)
        list_response(
            req, resp, routers, CURRENT_IDENTITY_EDGE_ROUTER_SYMBOLS, render_current_identity_edge_router
        )


class ServiceEdgeRouters:
    auth = SESSION

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        token = req.get_header("session-token")
        routers = self.manager.service_edge_routers(req.context.session, id, token)
        ok(resp, {"edgeRouters": [render_common_edge_router(r) for r in routers]})


def register(routes: Routes) -> None:
    routes.both("/current-identity/edge-routers", CurrentIdentityEdgeRouters(routes.managers.access))
    routes.client("/services/{id}/edge-routers", ServiceEdgeRouters(routes.managers.sessions))
