"""Edge routers a client may use: ``/current-identity/edge-routers`` (both APIs, §5.3) and the
client ``/services/{id}/edge-routers`` (the routers a session to the service would name, §5.2).

The client ``/services/{id}/edge-routers`` answers ``data.edgeRouters`` (the spec's
``serviceEdgeRouters``, seed 000) and takes ``limit``, ``offset`` and ``filter`` like every list
(seed 000): its routers are filtered and paged as any list's rows, in id order, and ``meta``
carries ``pagination`` and ``filterableFields``. Without a ``limit`` its page is the
:data:`~engine.managers.sessions.MAX_SESSION_ROUTERS` routers a session would name. Its
parameters are checked before the ``session-token`` and the service (go-swagger binds them before
OpenZiti's handler runs).
"""

from __future__ import annotations

import falcon

from api.http import list_params, list_response, ok, page
from api.middleware import SESSION
from api.routing import Routes
from api.schemas.client_edge_routers import (
    current_identity_edge_router_symbols,
    render_common_edge_router,
    render_current_identity_edge_router,
    service_edge_router_symbols,
)
from engine.entities.routers import EdgeRouter
from engine.managers.access import AccessManager
from engine.managers.fleet import Fleet
from engine.managers.sessions import MAX_SESSION_ROUTERS, SessionManager


class CurrentIdentityEdgeRouters:
    auth = SESSION

    def __init__(self, access: AccessManager, fleet: Fleet) -> None:
        self.access = access
        self.fleet = fleet
        self.symbols = current_identity_edge_router_symbols(fleet)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        routers: list[EdgeRouter] = self.access.usable_edge_routers(req.context.identity)
        list_response(
            req, resp, routers, self.symbols, lambda r: render_current_identity_edge_router(self.fleet, r)
        )


class ServiceEdgeRouters:
    auth = SESSION

    def __init__(self, manager: SessionManager, fleet: Fleet) -> None:
        self.manager = manager
        self.fleet = fleet
        self.symbols = service_edge_router_symbols(fleet)

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        symbols = self.symbols
        params = list_params(req, symbols, default_limit=MAX_SESSION_ROUTERS)
        token = req.get_header("session-token")
        routers = self.manager.service_edge_routers(req.context.session, id, token)
        rows, meta = page(req, routers, symbols, params)
        ok(resp, {"edgeRouters": [render_common_edge_router(self.fleet, r) for r in rows]}, meta)


def register(routes: Routes) -> None:
    fleet = routes.managers.fleet
    routes.both("/current-identity/edge-routers", CurrentIdentityEdgeRouters(routes.managers.access, fleet))
    routes.client("/services/{id}/edge-routers", ServiceEdgeRouters(routes.managers.sessions, fleet))
