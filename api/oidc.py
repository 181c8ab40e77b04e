"""The OIDC provider at OpenZiti's ``/oidc`` paths (docs/api.md §16); the steps are
:class:`engine.managers.oidc.OidcManager`'s.

- ``GET /oidc/.well-known/openid-configuration``, ``GET /oidc/keys``;
- ``GET /oidc/authorize`` (PKCE S256, OpenZiti's public clients ``openziti`` and ``native``) →
  302 to a login page with the auth request id, also in the ``auth-request-id`` header;
- ``POST /oidc/login/{password|username|cert|ext-jwt}`` (a form or JSON: ``id``, credentials,
  ``configTypes``, SDK and environment info): 302 to ``/oidc/authorize/callback``, or 200
  ``{"authQueries"}`` with ``totp-required: true`` when TOTP is owed; ``POST /oidc/login/totp``
  ``{id, code}``; ``GET /oidc/login/auth-queries?id=``;
- ``GET /oidc/authorize/callback?id=`` → 302 to the client's redirect URI with ``code`` and
  ``state``;
- ``POST /oidc/oauth/token`` (``authorization_code``, ``refresh_token``, token exchange);
- ``GET|POST /oidc/userinfo``, ``POST /oidc/revoke``, ``GET|POST /oidc/end_session``,
  ``GET /oidc/logged-out``; ``/oidc/oauth/introspect`` and ``/oidc/device_authorization`` answer
  as OpenZiti's do for its public clients (refused).

OAuth errors are ``{"error", "error_description"}`` (RFC 6749 §5.2); a failed login is OpenZiti's
401 ``INVALID_AUTH`` envelope.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import parse_qs, unquote

import falcon
import orjson

from api.controller import Controller
from api.http import read_body
from api.middleware import NONE, bearer_tokens
from api.peer import presented_chain
from api.routing import Routes
from api.schemas.api_sessions import render_auth_query
from engine.errors import CouldNotParseBodyError, FieldError
from engine.managers.authentication import LoginInfo
from engine.managers.oidc import LoginStep, OidcError

FORM = "application/x-www-form-urlencoded"
#: Form fields of the SDK and environment info (OpenZiti's ``updbCreds`` translation), by wire key.
ENV_FIELDS = {"arch": "envArch", "os": "envOs", "osRelease": "envOsRelease", "osVersion": "envOsVersion"}
SDK_FIELDS = {
    "appId": ("sdkAppId", "sdkAppID"),
    "appVersion": ("sdkAppVersion",),
    "branch": ("sdkBranch",),
    "revision": ("sdkRevision",),
    "type": ("sdkType",),
    "version": ("sdkVersion",),
}
LOGIN_PAGE = """<!DOCTYPE html>
<html><head><meta charset="UTF-8"><title>Login</title></head>
<body><form method="post" action="/oidc/login/password">
<input type="hidden" name="id" value="{id}">
<label>Username <input name="username" autocomplete="username"></label>
<label>Password <input name="password" type="password" autocomplete="current-password"></label>
<button type="submit">Log in</button></form></body></html>
"""


def _oauth_error(resp: falcon.Response, ex: OidcError) -> None:
    if ex.redirect is not None:
        resp.status = falcon.HTTP_302
        resp.set_header("Location", ex.redirect)
        return
    resp.status = falcon.code_to_http_status(ex.status)
    if ex.plain:
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = ex.description or ex.error
        return
    resp.media = ex.body()
    if ex.status == 401 and ex.error == "invalid_token":
        resp.set_header(
            "WWW-Authenticate", f'Bearer error="invalid_token", error_description="{ex.description}"'
        )


def _form(req: falcon.Request) -> dict[str, list[str]]:
    """The request's form (``application/x-www-form-urlencoded`` body, else none) and query."""
    out: dict[str, list[str]] = {k: list(v) for k, v in req.params.items() for v in [_listed(v)]}
    content_type = (req.content_type or "").split(";")[0].strip().lower()
    if req.method == "POST" and content_type == FORM:
        body = read_body(req, req.context.max_body_bytes)
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
        except (UnicodeDecodeError, ValueError):
            raise CouldNotParseBodyError(reason="the form is not valid") from None
        for key, values in parsed.items():
            out[key] = values + [v for v in out.get(key, []) if v not in values]
    return out


def _listed(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _first(form: dict[str, list[str]]) -> dict[str, str]:
    return {k: v[0] for k, v in form.items() if v}


def _body(req: falcon.Request) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """A login step's body: JSON, or a form (``configTypes`` repeated); 415 for anything else."""
    content_type = (req.content_type or "").split(";")[0].strip().lower()
    if content_type == FORM:
        form = _form(req)
        return _first(form), form
    if content_type == falcon.MEDIA_JSON:
        body = read_body(req, req.context.max_body_bytes)
        try:
            data = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError:
            raise CouldNotParseBodyError() from None
        if not isinstance(data, dict):
            raise CouldNotParseBodyError(reason="the body is not a JSON object")
        return data, {}
    raise _UnsupportedMedia(content_type)


class _UnsupportedMedia(Exception):
    def __init__(self, content_type: str) -> None:
        super().__init__(content_type)
        self.content_type = content_type


def _unsupported(resp: falcon.Response, ex: _UnsupportedMedia) -> None:
    """OpenZiti's answer to a login body that is neither a form nor JSON."""
    resp.status = falcon.HTTP_415
    resp.media = {
        "code": "UNSUPPORTED_MEDIA_TYPE",
        "message": (
            f"the content type: {ex.content_type}, is not supported (supported: {FORM}, {falcon.MEDIA_JSON})"
        ),
    }


def _request_id(req: falcon.Request, body: dict[str, Any]) -> str:
    value = body.get("id") or req.get_param("authRequestID") or req.get_param("id") or ""
    return str(value)


def _string(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    return value if isinstance(value, str) else ""


def _login_info(req: falcon.Request, body: dict[str, Any], form: dict[str, list[str]]) -> LoginInfo:
    if form:
        env = {k: form[f][0] for k, f in ENV_FIELDS.items() if form.get(f) and form[f][0]}
        sdk = {k: form[f][0] for k, fs in SDK_FIELDS.items() for f in fs if form.get(f) and form[f][0]}
        config_types = [c for c in form.get("configTypes", []) if c]
    else:
        env_info, sdk_info = body.get("envInfo"), body.get("sdkInfo")
        env = (
            {k: v for k, v in env_info.items() if isinstance(v, str) and v}
            if isinstance(env_info, dict)
            else {}
        )
        sdk = (
            {k: v for k, v in sdk_info.items() if isinstance(v, str) and v}
            if isinstance(sdk_info, dict)
            else {}
        )
        raw = body.get("configTypes")
        config_types = [c for c in raw if isinstance(c, str)] if isinstance(raw, list) else []
    return LoginInfo(
        ip_address=str(req.remote_addr or ""),
        config_types=tuple(config_types[:100]),
        env_info=env or None,
        sdk_info=sdk or None,
    )


def _step(resp: falcon.Response, step: LoginStep) -> None:
    if step.totp_required:
        resp.set_header("totp-required", "true")
    if step.queries:
        resp.media = {"authQueries": [render_auth_query(q) for q in step.queries]}
        return
    resp.status = falcon.HTTP_302
    resp.set_header("Location", step.callback)


class DiscoveryResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.ctrl.managers.oidc.discovery()


class KeysResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self.ctrl.managers.oidc.jwks()


class AuthorizeResource:
    """``/authorize``: an authorization request becomes a login page's address."""

    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        params = _first(_form(req))
        try:
            location = self.ctrl.managers.oidc.authorize(params, has_client_cert=bool(presented_chain(req)))
        except OidcError as ex:
            _oauth_error(resp, ex)
            return
        resp.status = falcon.HTTP_302
        resp.set_header("Location", location)

    on_post = on_get


class LoginResource:
    """``/login/<method>``: the primary login of an auth request."""

    auth = NONE

    def __init__(self, ctrl: Controller, method: str) -> None:
        self.ctrl = ctrl
        self.method = method

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        request_id = req.get_param("authRequestID") or req.get_param("id") or ""
        resp.set_header("auth-request-id", request_id)
        if self.method == "password":
            resp.content_type = "text/html; charset=utf-8"
            escaped = request_id.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            resp.text = LOGIN_PAGE.format(id=escaped)
        else:
            resp.content_type = falcon.MEDIA_TEXT
            resp.text = "please POST to this URL"

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            body, form = _body(req)
        except _UnsupportedMedia as ex:
            _unsupported(resp, ex)
            return
        info = _login_info(req, body, form)
        chain = presented_chain(req) if self.method == "cert" else ()
        step = self.ctrl.managers.oidc.login(
            _request_id(req, body),
            self.method,
            info,
            username=_string(body, "username"),
            password=_string(body, "password"),
            chain=chain,
            bearer=bearer_tokens(req),
        )
        _step(resp, step)


class TotpResource:
    """``/login/totp``: the login's TOTP code."""

    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            body, _ = _body(req)
        except _UnsupportedMedia as ex:
            _unsupported(resp, ex)
            return
        code = _string(body, "code")
        if not code:
            raise FieldError("code", "code is required")
        _step(resp, self.ctrl.managers.oidc.totp(_request_id(req, body), code, bearer_tokens(req)))


class AuthQueriesResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        step = self.ctrl.managers.oidc.auth_queries(req.get_param("id") or "", bearer_tokens(req))
        if step.totp_required:
            resp.set_header("totp-required", "true")
        resp.media = {"authQueries": [render_auth_query(q) for q in step.queries]}


class CallbackResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        location = self.ctrl.managers.oidc.callback(req.get_param("id") or "", bearer_tokens(req))
        resp.status = falcon.HTTP_302
        resp.set_header("Location", location)


def _client_id(req: falcon.Request, form: dict[str, str]) -> str:
    """The client: HTTP Basic (``client_id:`` with an empty secret, URL-encoded as RFC 6749
    §2.3.1 says) or ``client_id`` in the form; a public client has no secret to check."""
    header = req.get_header("Authorization") or ""
    if header[:6].lower() == "basic ":
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return ""
        user, _, secret = decoded.partition(":")
        return unquote(user) if not secret else ""
    return form.get("client_id", "")


class TokenResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = _first(_form(req))
        try:
            if not form.get("grant_type"):
                raise OidcError("invalid_request", "grant_type missing")
            answer = self.ctrl.managers.oidc.token(
                form, _client_id(req, form), remote=str(req.remote_addr or "")
            )
        except OidcError as ex:
            _oauth_error(resp, ex)
            return
        resp.media = answer

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _oauth_error(resp, OidcError("invalid_request", "grant_type missing"))


def _access_token(req: falcon.Request) -> str:
    """The ``Authorization: Bearer`` token (OpenZiti reads no other place: a token in a URL ends
    up in logs)."""
    header = req.get_header("Authorization") or ""
    return header[7:].strip() if header[:7].lower() == "bearer " else ""


class UserinfoResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            resp.media = self.ctrl.managers.oidc.userinfo(_access_token(req))
        except OidcError as ex:
            _oauth_error(resp, ex)

    on_post = on_get


class RevokeResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = _first(_form(req))
        try:
            self.ctrl.managers.oidc.revoke(form.get("token", ""), _client_id(req, form))
        except OidcError as ex:
            _oauth_error(resp, ex)
            return
        resp.content_type = falcon.MEDIA_JSON
        resp.text = ""


class EndSessionResource:
    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_302
        resp.set_header("Location", self.ctrl.managers.oidc.end_session(_first(_form(req))))

    on_post = on_get


class LoggedOutResource:
    auth = NONE

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_TEXT
        resp.text = "signed out successfully"


class RefusedResource:
    """What OpenZiti's provider answers its public clients here (they hold no client secret)."""

    auth = NONE

    def __init__(self, error: OidcError) -> None:
        self.error = error

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        _oauth_error(resp, self.error)

    on_post = on_get


#: The provider's paths, each once (``routes.raw``: outside both API bases).
PATHS = (
    "/oidc/.well-known/openid-configuration",
    "/oidc/keys",
    "/oidc/authorize",
    "/oidc/authorize/callback",
    "/oidc/login/password",
    "/oidc/login/username",
    "/oidc/login/cert",
    "/oidc/login/ext-jwt",
    "/oidc/login/totp",
    "/oidc/login/auth-queries",
    "/oidc/oauth/token",
    "/oidc/oauth/introspect",
    "/oidc/userinfo",
    "/oidc/revoke",
    "/oidc/end_session",
    "/oidc/logged-out",
    "/oidc/device_authorization",
)


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    routes.raw("/oidc/.well-known/openid-configuration", DiscoveryResource(ctrl))
    routes.raw("/oidc/keys", KeysResource(ctrl))
    routes.raw("/oidc/authorize", AuthorizeResource(ctrl))
    routes.raw("/oidc/authorize/callback", CallbackResource(ctrl))
    routes.raw("/oidc/login/password", LoginResource(ctrl, "password"))
    routes.raw("/oidc/login/username", LoginResource(ctrl, "password"))
    routes.raw("/oidc/login/cert", LoginResource(ctrl, "cert"))
    routes.raw("/oidc/login/ext-jwt", LoginResource(ctrl, "ext-jwt"))
    routes.raw("/oidc/login/totp", TotpResource(ctrl))
    routes.raw("/oidc/login/auth-queries", AuthQueriesResource(ctrl))
    routes.raw("/oidc/oauth/token", TokenResource(ctrl))
    routes.raw(
        "/oidc/oauth/introspect",
        RefusedResource(OidcError("invalid_client", "no client credentials provided", status=401)),
    )
    routes.raw("/oidc/userinfo", UserinfoResource(ctrl))
    routes.raw("/oidc/revoke", RevokeResource(ctrl))
    routes.raw("/oidc/end_session", EndSessionResource(ctrl))
    routes.raw("/oidc/logged-out", LoggedOutResource())
    routes.raw(
        "/oidc/device_authorization",
        RefusedResource(OidcError("unauthorized_client", "the device authorization grant is not served")),
    )
