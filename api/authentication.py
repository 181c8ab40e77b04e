"""Authentication and the caller's own session and identity (both APIs)."""

from __future__ import annotations

import falcon

from api.controller import Controller
from api.http import LOOP_READS, empty, ok, read_model
from api.middleware import ADMIN, NONE, PARTIAL, SESSION, bearer_tokens
from api.peer import presented_chain
from api.resources import Family, FamilyCollection, FamilyItem
from api.routing import Routes
from api.schemas.api_sessions import Authenticate, info_dict, render_api_session
from api.schemas.identities import render_identity
from engine.errors import FieldError, InvalidAuthMethodError
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication import LoginInfo
from engine.query import Symbol, SymbolTable, SymbolType

METHODS = ("password", "cert", "ext-jwt")


def _client_ip(req: falcon.Request) -> str:
    return str(req.remote_addr or "")


class AuthenticateResource:
    """Authenticate by password, client certificate or external JWT (``Authorization: Bearer``).

    The new session's ``authQueries`` list the secondary factors it still owes (TOTP, a secondary
    external JWT); until they are met only ``PARTIAL`` resources answer it.
    """

    auth = NONE
    body_models = {"post": Authenticate}

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        method = req.get_param("method")
        if method is None:
            raise FieldError("method", "method in query is required")
        if method not in METHODS:
            raise InvalidAuthMethodError(
                field="method", value=method, reason="unsupported authentication method"
            )
        model = read_model(req, Authenticate, allow_empty=True)
        info = LoginInfo(
            ip_address=_client_ip(req),
            config_types=tuple(model.config_types or ()),
            env_info=info_dict(model.env_info),
            sdk_info=info_dict(model.sdk_info),
        )
        auth = self.ctrl.managers.authentication
        if method == "password":
            if not model.username or not model.password:  # OpenZiti: 400, not a failed login
                missing = "username" if not model.username else "password"
                raise FieldError(missing, "username and password fields are required")
            login = auth.password(model.username, model.password, info)
        elif method == "cert":
            login = auth.cert(presented_chain(req), info)
        else:
            login = auth.ext_jwt(bearer_tokens(req), info)
        req.context.session = login.session
        resp.set_header("zt-session", login.token)
        if login.authenticator.is_extend_requested:
            resp.set_header("ziti-authenticator-extend-requested", "true")
        pending = auth.pending(login.session, login.identity, bearer_tokens(req))
        if pending.challenge:  # a secondary external JWT is missing or failed (OpenZiti: 200 + header)
            resp.set_header("WWW-Authenticate", pending.challenge)
        ok(
            resp,
            render_api_session(self.ctrl, login.session, token=login.token, auth_queries=pending.queries),
        )


class CurrentApiSessionResource:
    auth = PARTIAL
    loop_methods = LOOP_READS

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        pending = req.context.pending
        queries = pending.queries if pending is not None else ()
        ok(
            resp,
            render_api_session(self.ctrl, req.context.session, token=req.context.token, auth_queries=queries),
        )

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.ctrl.api_sessions.delete(req.context.session.id)
        req.context.session = None
        empty(resp)


class CurrentIdentityResource:
    auth = SESSION
    loop_methods = LOOP_READS

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, render_identity(self.ctrl, req.context.identity))


def api_session_symbols(sessions: ApiSessionManager) -> SymbolTable:
    """The filterable fields of API sessions: OpenZiti's (``authenticator``, ``lastActivityAt``:
    the activity the list shows, cached or stored) and the wire names ``identityId`` and
    ``authenticatorId``. Not OpenZiti's ``token``: only its hash is kept."""
    authenticator = Symbol(SymbolType.STRING, lambda s: s.authenticator_id)
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda s: s.id),
            "createdAt": Symbol(SymbolType.DATETIME, lambda s: s.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda s: s.updated_at),
            "identity": Symbol(SymbolType.STRING, lambda s: s.identity_id),
            "identityId": Symbol(SymbolType.STRING, lambda s: s.identity_id),
            "ipAddress": Symbol(SymbolType.STRING, lambda s: s.ip_address),
            "authenticator": authenticator,
            "authenticatorId": authenticator,
            "lastActivityAt": Symbol(SymbolType.DATETIME, sessions.last_activity),
        },
        tags_getter=lambda s: s.tags,
    )


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    authenticate = AuthenticateResource(ctrl)
    routes.both("/authenticate", authenticate)
    routes.both("/current-api-session", CurrentApiSessionResource(ctrl))
    routes.both("/current-identity", CurrentIdentityResource(ctrl))

    sessions: ApiSessionManager = ctrl.api_sessions
    family = Family(
        entity="api-sessions",
        manager=sessions,
        render=lambda s: render_api_session(ctrl, s),
        symbols=api_session_symbols(sessions),
        list_items=lambda req: sessions.active(),
        auth=ADMIN,
    )
    routes.management("/api-sessions", FamilyCollection(family))
    routes.management("/api-sessions/{id}", FamilyItem(family))
