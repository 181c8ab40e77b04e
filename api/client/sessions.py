"""Client ``/sessions``: open Dial or Bind sessions, list the API session's, read and delete.

Reads and deletes reach the caller's own sessions (an admin's reach any, as in OpenZiti); the
list holds the sessions of the caller's API session.
"""

from __future__ import annotations

import falcon

from api.http import LOOP_READS, empty, list_response, ok, read_model
from api.middleware import SESSION
from api.routing import Routes
from api.schemas.sessions import SYMBOLS, SessionCreate, render_created_session, render_session
from engine.managers.sessions import SessionManager


class SessionCollection:
    auth = SESSION
    #: Opening a session answers from the session itself (never read back): on the loop, too.
    loop_methods = LOOP_READS | {"POST"}

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        sessions = self.manager.of_api_session(req.context.session.id)
        list_response(req, resp, sessions, SYMBOLS, lambda s: render_session(self.manager.view(s)))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_model(req, SessionCreate)
        opened = self.manager.open(req.context.session, body.service_id, body.type, body.tags)
        ok(resp, render_created_session(opened))
        resp.status = falcon.HTTP_201


class SessionItem:
    auth = SESSION
    loop_methods = LOOP_READS

    def __init__(self, manager: SessionManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        session = self.manager.read_for(req.context.identity, id)
        ok(resp, render_session(self.manager.view(session)))

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.delete_for(req.context.identity, id)
        empty(resp)


def register(routes: Routes) -> None:
    manager = routes.managers.sessions
    routes.client("/sessions", SessionCollection(manager))
    routes.client("/sessions/{id}", SessionItem(manager))
