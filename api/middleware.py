"""Per-request plumbing: request ids, path aliases, the API session, request limits, auth levels,
headers (CORS only for the configured origins; the security headers of :data:`SECURITY_HEADERS`).

A resource's ``auth`` attribute says who may call it (``auth_by_method`` may override it for one
HTTP method): ``NONE`` anyone, ``SESSION`` a fully authenticated API session, ``PARTIAL`` also a
session that still owes a secondary factor (MFA, a secondary external JWT), ``ADMIN`` an admin's
full session. What a session owes is worked out on every request (``req.context.pending``).
"""

from __future__ import annotations

import base64
import logging
from typing import Any

import falcon
import orjson

from api import REQUEST_ID_KEY
from api.controller import CLIENT_BASE, FABRIC_BASE, MANAGEMENT_BASE, Controller
from api.limits import RequestLimits
from api.peer import parse_networks
from api.wire import ts_fresh
from engine.errors import UnauthorizedError
from engine.logs import bind_request_id, event, unbind_request_id

log = logging.getLogger("trellis.audit")

#: Paths served as they are; any other unprefixed path is the client API's (older SDKs).
UNALIASED = ("/edge", "/fabric", "/analysis", "/.well-known", "/oidc/")

#: Resource attribute ``auth``: who may call it.
NONE, SESSION, PARTIAL, ADMIN = "none", "session", "partial", "admin"

MISSING_CHALLENGE = (
    'zt-session realm="zt-session" error="missing" error_description="no matching token was provided",'
    'Bearer realm="openziti-oidc" error="missing" error_description="no matching token was provided"'
)
INVALID_CHALLENGE = 'zt-session realm="zt-session" error="invalid" error_description="token is invalid"'

#: Answered to a CORS preflight from an allowed origin.
CORS_PREFLIGHT = {
    "Access-Control-Allow-Headers": "content-type, accept, authorization, zt-session",
    "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
    "Access-Control-Max-Age": "600",
}
#: On every answer the app makes (successes and errors alike, authenticated or not):
#:
#: - ``X-Content-Type-Options: nosniff``: a browser takes the declared type (JSON, PEM text) and
#:   never sniffs an answer into something it would run;
#: - ``Cache-Control: no-store`` (with ``Pragma: no-cache`` for HTTP/1.0 caches): no cache keeps a
#:   copy. Answers that carry secrets are spread over the whole API (sessions and their tokens from
#:   ``/authenticate*`` and ``/current-api-session``, certificates and keys from enrollment and
#:   ``/current-api-session/certificates``, MFA secrets and recovery codes, TOTP tokens, enrollment
#:   JWTs and tokens in identity, router and enrollment reads), and the rest is live state a
#:   cached copy would misreport, so every answer is marked rather than a list that a new
#:   endpoint could miss. What is public (``/version``, the CA bundle) is fetched rarely enough.
#:   A resource that sets its own ``Cache-Control`` keeps it.
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff"}
NO_STORE_HEADERS = {"Cache-Control": "no-store", "Pragma": "no-cache"}
#: Response headers a browser script from an allowed origin may read (the login's token, ...).
CORS_EXPOSE = "zt-session, expiration-seconds, expires-at, ziti-instance-id, retry-after, www-authenticate"


class Cors:
    """CORS for an allow-list of origins; an empty list turns CORS off (no header at all).

    An allowed ``Origin`` is echoed (with ``Vary: Origin``) and may send credentials; ``*`` in the
    list allows any origin, answered ``*`` and never with credentials.
    """

    def __init__(self, origins: tuple[str, ...]) -> None:
        self.any = "*" in origins
        self.origins = frozenset(o for o in origins if o != "*")

    @property
    def enabled(self) -> bool:
        return self.any or bool(self.origins)

    def apply(self, req: falcon.Request, resp: falcon.Response) -> None:
        if not self.enabled:
            return
        origin = req.get_header("Origin")
        if self.origins:  # the answer depends on the Origin (echoed or not)
            resp.append_header("Vary", "Origin")
        if not origin:
            return
        if origin.rstrip("/").lower() in self.origins:
            resp.set_header("Access-Control-Allow-Origin", origin)
            resp.set_header("Access-Control-Allow-Credentials", "true")
        elif self.any:
            resp.set_header("Access-Control-Allow-Origin", "*")
        else:
            return
        resp.set_header("Access-Control-Expose-Headers", CORS_EXPOSE)
        if req.method == "OPTIONS" and req.get_header("Access-Control-Request-Method"):
            resp.set_headers(CORS_PREFLIGHT)


def wsgi_header_value(value: str) -> str:
    """``value`` as a WSGI server can send it (PEP 3333: latin-1 text, one line).

    A header may quote what an administrator typed (an external JWT signer's issuer in a
    ``WWW-Authenticate`` challenge). As Go's ``net/http`` writes OpenZiti's headers, line breaks
    become blanks and the text goes as its UTF-8 bytes; ``value`` itself when it is plain ASCII.
    """
    if value.isascii() and "\r" not in value and "\n" not in value:
        return value
    value = value.replace("\r", " ").replace("\n", " ")
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8").decode("latin-1")
    return value


#: Bearer tokens read from one request's ``Authorization`` headers.
MAX_BEARER_TOKENS = 4


def _is_jwt(token: str) -> bool:
    """Whether ``token`` parses as a JWS compact JWT: three segments, the first two base64url
    JSON objects. Anything else is no candidate at all (OpenZiti counts it as a parse error, so
    a malformed token alone is a ``missing`` one, not an ``invalid`` one)."""
    parts = token.split(".")
    if len(parts) != 3:
        return False
    try:
        # orjson: a deeply nested segment is a decode error, not a RecursionError
        decoded = [orjson.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4))) for p in parts[:2]]
    except (ValueError, UnicodeDecodeError):
        return False
    return all(isinstance(d, dict) for d in decoded)


def bearer_tokens(req: falcon.Request) -> tuple[str, ...]:
    """The ``Authorization: Bearer`` JWTs of a request (several headers arrive comma-joined)."""
    header = req.get_header("Authorization") or ""
    out: list[str] = []
    for part in header.split(","):
        part = part.strip()
        token = part[7:].strip() if part[:7].lower() == "bearer " else ""
        if token and _is_jwt(token):
            out.append(token)
    return tuple(out[:MAX_BEARER_TOKENS])


#: Administrative writes: these methods under the management (or fabric) API, answered below 400.
WRITE_METHODS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}


def admin_write(req: falcon.Request, resp: falcon.Response) -> None:
    """Log a successful write of the management or fabric API (``admin.write``, INFO) with its
    actor (the session's identity), the entity kind and id, and what was done. Logins are logged as
    such (``engine.managers.authentication``), not here."""
    action = WRITE_METHODS.get(req.method)
    path = req.path
    base = next((b for b in (MANAGEMENT_BASE, FABRIC_BASE) if path.startswith(b + "/")), None)
    if action is None or base is None:
        return
    identity = getattr(req.context, "identity", None)
    if identity is None:
        return
    status = resp.status_code
    if status >= 400:
        return
    parts = path[len(base) + 1 :].split("/")
    if parts[0] == "authenticate":
        return
    entity_id = parts[1] if len(parts) > 1 else None
    if req.method == "POST":
        media = resp.media
        data = media.get("data") if isinstance(media, dict) else None
        created = data.get("id") if isinstance(data, dict) else None
        if status == 201 and isinstance(created, str):
            entity_id = created
        elif len(parts) == 2:  # an action on a kind: /database/snapshot
            action, entity_id = parts[1], None
        else:  # an action on an entity (/identities/{id}/disable), or a create answered otherwise
            action = parts[-1] if len(parts) > 2 else "post"
    event(
        log,
        logging.INFO,
        "admin.write",
        action=action,
        kind=parts[0],
        id=entity_id,
        actor_id=identity.id,
        actor_name=identity.name,
        method=req.method,
        path=path,
        status=status,
    )


def auth_level(resource: Any, method: str) -> str:
    by_method = getattr(resource, "auth_by_method", None) or {}
    return str(by_method.get(method, getattr(resource, "auth", ADMIN)))


class RequestMiddleware:
    def __init__(self, ctrl: Controller, limits: RequestLimits) -> None:
        self.ctrl = ctrl
        self.limits = limits
        self.cors = Cors(ctrl.settings.cors_origins)
        self.cert_proxies = parse_networks(ctrl.settings.cert_proxies)

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.deadline = self.limits.deadline()
        request_id = self.ctrl.env.ids.new_id()
        req.context.request_id = request_id
        # what is logged while the request is served carries its id; so does its access line
        req.context.log_binding = bind_request_id(request_id)
        req.env[REQUEST_ID_KEY] = request_id
        req.context.max_body_bytes = self.ctrl.settings.max_body_bytes
        req.context.cert_proxies = self.cert_proxies
        req.context.session = None
        req.context.identity = None
        req.context.token_state = "missing"
        req.context.token = None
        req.context.pending = None
        path = req.path
        if path.startswith("/edge/v1/"):
            req.path = CLIENT_BASE + path[len("/edge/v1") :]
        elif not path.startswith(UNALIASED) and path not in ("/", "/version"):
            req.path = CLIENT_BASE + path
        token = req.get_header("zt-session")
        if not token:
            self._bearer(req)
        else:
            session = self.ctrl.api_sessions.resolve(token)
            if session is None:
                req.context.token_state = "invalid"
                return
            identity = self.ctrl.managers.identities.get(session.identity_id)
            if identity is None:
                req.context.token_state = "invalid"
                return
            req.context.session = session
            req.context.identity = identity
            req.context.token = token
            req.context.token_state = "valid"

    def _bearer(self, req: falcon.Request) -> None:
        """An OIDC access token (``Authorization: Bearer``) acts as its API session where
        ``zt-session`` is absent (OpenZiti's ``getJwtTokenFromRequest``). A bearer token this
        controller did not sign is left alone (an external JWT for ``/authenticate`` or a secondary
        factor); one it signed that no longer stands for a live session is an invalid token."""
        oidc = self.ctrl.managers.oidc
        for candidate in bearer_tokens(req):
            bearer = oidc.resolve_access(candidate)
            if bearer is not None:
                req.context.session = bearer.session
                req.context.identity = bearer.identity
                req.context.token = candidate
                req.context.token_state = "valid"
                return
            if oidc.is_own(candidate):
                req.context.token_state = "invalid"

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: dict[str, Any]
    ) -> None:
        if resource is None or req.method == "OPTIONS":
            return
        self.limits.admit(req)
        level = auth_level(resource, req.method)
        if level == NONE:
            return
        if req.context.token_state != "valid":
            challenge = MISSING_CHALLENGE if req.context.token_state == "missing" else INVALID_CHALLENGE
            raise UnauthorizedError(headers={"WWW-Authenticate": challenge})
        pending = self.ctrl.auth.pending(req.context.session, req.context.identity, bearer_tokens(req))
        req.context.pending = pending
        if level != PARTIAL and pending.partial:
            headers = {"WWW-Authenticate": pending.challenge} if pending.challenge else None
            raise UnauthorizedError(
                reason="the API session must complete its secondary authentication", headers=headers
            )
        if level == ADMIN and not req.context.identity.is_admin:
            raise UnauthorizedError()

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        try:
            self._finish(req, resp)
            if req_succeeded:
                admin_write(req, resp)
        finally:
            unbind_request_id(getattr(req.context, "log_binding", None))

    def _finish(self, req: falcon.Request, resp: falcon.Response) -> None:
        if "gunicorn.socket" not in req.env:  # gunicorn writes its own Server header (see serve.py)
            resp.set_header("server", f"ziti-controller/{self.ctrl.version}")
        resp.set_header("ziti-instance-id", self.ctrl.instance_id)
        resp.set_headers(SECURITY_HEADERS)
        if resp.get_header("Cache-Control") is None:
            resp.set_headers(NO_STORE_HEADERS)
        self.cors.apply(req, resp)
        session = getattr(req.context, "session", None)
        if session is not None and self.ctrl.api_sessions.get(session.id) is not None:
            expires = self.ctrl.api_sessions.expires_at(session)
            seconds = int((expires - self.ctrl.env.clock.now()).total_seconds())
            resp.set_header("expiration-seconds", str(max(seconds, 0)))
            resp.set_header("expires-at", ts_fresh(expires))
        for name, value in resp.headers.items():
            sendable = wsgi_header_value(value)
            if sendable is not value:
                resp.set_header(name, sendable)
