"""Management ``/sessions``: every Dial and Bind session, read and ended by administrators."""

from __future__ import annotations

import falcon

from api.http import empty, list_response, ok
from api.middleware import ADMIN
from api.routing import Routes
from api.schemas.sessions import SYMBOLS, render_session
from engine.managers.sessions import SessionManager


class SessionCollection:
    auth = ADMIN

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        list_response(req, resp, self.manager.list(), SYMBOLS, lambda s: render_session(self.manager.view(s)))


class SessionItem:
    auth = ADMIN

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, render_session(self.manager.view(self.manager.require(id))))

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.delete(id)
        empty(resp)


class SessionRoutePath:
    """``GET /sessions/{id}/route-path``: the routers a session's circuit crosses. Trellis runs no
    circuits, so the path is always empty (OpenZiti answers the same for a session without one)."""

    auth = ADMIN

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, {"routePath": []})


def register(routes: Routes) -> None:
    manager = routes.managers.sessions
    routes.management("/sessions", SessionCollection(manager))
    routes.management("/sessions/{id}", SessionItem(manager))
    routes.management("/sessions/{id}/route-path", SessionRoutePath())
