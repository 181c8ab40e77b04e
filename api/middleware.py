"""Per-request plumbing: request ids, path aliases, the API session, auth levels, headers."""

from __future__ import annotations

from typing import Any

import falcon

from api.controller import CLIENT_BASE, Controller
from api.peer import parse_networks
from api.wire import ts
from engine.entities.identities import Identity
from engine.errors import UnauthorizedError

#: Resource attribute ``auth``: who may call it.
NONE, SESSION, PARTIAL, ADMIN = "none", "session", "partial", "admin"

MISSING_CHALLENGE = (
    'zt-session realm="zt-session" error="missing" error_description="no matching token was provided",'
    'Bearer realm="openziti-oidc" error="missing" error_description="no matching token was provided"'
)
INVALID_CHALLENGE = 'zt-session realm="zt-session" error="invalid" error_description="token is invalid"'

_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Headers": "content-type, accept, authorization, zt-session",
    "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, PATCH, DELETE",
    "Access-Control-Allow-Credentials": "true",
}


class RequestMiddleware:
    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl
        self.cert_proxies = parse_networks(ctrl.settings.cert_proxies)

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.request_id = self.ctrl.env.ids.new_id()
        req.context.max_body_bytes = self.ctrl.settings.max_body_bytes
        req.context.cert_proxies = self.cert_proxies
        req.context.session = None
        req.context.identity = None
        req.context.token_state = "missing"
        req.context.token = None
        path = req.path
        if path.startswith("/edge/v1/"):
            req.path = CLIENT_BASE + path[len("/edge/v1") :]
        elif not path.startswith(("/edge", "/fabric", "/.well-known")) and path not in ("/", "/version"):
            req.path = CLIENT_BASE + path
        token = req.get_header("zt-session")
        if token:
            session = self.ctrl.sessions.resolve(token)
            if session is None:
                req.context.token_state = "invalid"
                return
            identity = self.ctrl.env.store.get(Identity, session.identity_id)
            if identity is None:
                req.context.token_state = "invalid"
                return
            req.context.session = session
            req.context.identity = identity
            req.context.token = token
            req.context.token_state = "valid"

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or req.method == "OPTIONS":
            return
        level = getattr(resource, "auth", ADMIN)
        if level == NONE:
            return
        if req.context.token_state != "valid":
            challenge = MISSING_CHALLENGE if req.context.token_state == "missing" else INVALID_CHALLENGE
            raise UnauthorizedError(headers={"WWW-Authenticate": challenge})
        session = req.context.session
        if level != PARTIAL and session.is_mfa_required and not session.is_mfa_complete:
            raise UnauthorizedError()
        if level == ADMIN and not req.context.identity.is_admin:
            raise UnauthorizedError()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        if "gunicorn.socket" not in req.env:  # gunicorn writes its own Server header (see serve.py)
            resp.set_header("server", f"ziti-controller/{self.ctrl.version}")
        resp.set_header("ziti-instance-id", self.ctrl.instance_id)
        for name, value in _CORS.items():
            resp.set_header(name, value)
        session = getattr(req.context, "session", None)
        if session is not None and self.ctrl.env.store.get(type(session), session.id) is not None:
            expires = self.ctrl.sessions.expires_at(session)
            seconds = int((expires - self.ctrl.env.clock.now()).total_seconds())
            resp.set_header("expiration-seconds", str(max(seconds, 0)))
            resp.set_header("expires-at", ts(expires) or "")
