"""The OpenID Connect provider OpenZiti serves at ``/oidc`` (docs/api.md §16): the authorization
code flow with PKCE for OpenZiti's public clients, the token endpoint, and access tokens that
stand for an API session.

**Every OIDC login is an API session.** The primary login goes through the legacy methods of
:class:`~engine.managers.authentication.AuthenticationManager` (so auth policies, lockout, MFA
throttles and posture apply exactly as to ``/authenticate``), which start an ordinary
:class:`~engine.entities.identities.ApiSession`. An access token names it (``z_asid``); a request
carrying the token acts as that session, and ending the session (logout, an administrator's
delete, a disabled or deleted identity, a removed authenticator) stops its tokens at once.

**Where a login stands is kept in the session's ``token_hash``** (no ``zt-session`` token hashes to
these values: they are not bare hex digests, so the session can never be opened by a
``zt-session`` header):

- ``oidc-ar:<sha256 of the auth request's jti>``: logged in, perhaps owing TOTP;
- ``oidc-code:<sha256 of the code's jti>``: a code was issued and not yet redeemed;
- ``oidc-rt:<sha256 of the refresh token's jti>``: tokens were issued; the refresh token with that
  ``jti`` is the only one accepted, and redeeming it moves the session to a new ``jti`` (rotation).

Each step moves the value under the store's write lock only if it still holds what the request
presented, so a code or refresh token is redeemed once, on any process of a shared store, and
nothing of a flow lives in one process's memory. Auth requests and codes are JWTs this controller
signs (``z_t`` ``ar`` and ``c``), which carry what the next step checks (client, redirect URI,
PKCE challenge, state, nonce).

A code presented again (after it was redeemed) ends its session and everything issued from it (RFC
6749 §4.1.2); a refresh token presented after it was rotated is refused.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlencode, urlsplit

from engine.entities.controllers import ControllerMember
from engine.entities.identities import ApiSession, Authenticator, Identity
from engine.entities.trust import ExternalJwtSigner
from engine.errors import FieldError, InvalidAuthError
from engine.logs import event
from engine.managers._base import Env
from engine.managers.api_sessions import ApiSessionManager, delete_session
from engine.managers.authentication import AuthenticationManager, AuthQuery, Login, LoginInfo
from engine.managers.mfa import MfaManager
from engine.ports import JwtKeySource, UnitOfWork

log = logging.getLogger("engine.managers.oidc")

#: OpenZiti's public clients (``common.ClaimClientIdOpenZiti`` and the legacy ``native``); each is
#: also the audience of the tokens it gets.
CLIENT_IDS = ("openziti", "native")
#: OpenZiti's default redirect URIs (``controller/webapis/oidc-api.go``): ``*`` is a port.
REDIRECT_URIS = (
    "openziti://auth/callback",
    "https://127.0.0.1:*/auth/callback",
    "http://127.0.0.1:*/auth/callback",
    "https://localhost:*/auth/callback",
    "http://localhost:*/auth/callback",
)
POST_LOGOUT_URIS = tuple(u.replace("/auth/callback", "/auth/logout") for u in REDIRECT_URIS)

ACCESS_TOKEN_LIFETIME = timedelta(minutes=30)
ID_TOKEN_LIFETIME = timedelta(minutes=30)
REFRESH_TOKEN_LIFETIME = timedelta(hours=24)
AUTH_REQUEST_LIFETIME = timedelta(minutes=10)
CODE_LIFETIME = timedelta(minutes=5)
#: How far ahead of the controller's clock a token's ``nbf`` may be.
LEEWAY = timedelta(seconds=30)

#: ``z_t``: OpenZiti's access and refresh token types, and this controller's own steps.
ACCESS, REFRESH, AUTH_REQUEST, CODE = "a", "r", "ar", "c"

GRANT_CODE = "authorization_code"
GRANT_REFRESH = "refresh_token"
GRANT_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
TOKEN_TYPE_ACCESS = "urn:ietf:params:oauth:token-type:access_token"
TOKEN_TYPE_REFRESH = "urn:ietf:params:oauth:token-type:refresh_token"
TOKEN_TYPE_ID = "urn:ietf:params:oauth:token-type:id_token"

#: The login methods and where ``/authorize`` sends each (OpenZiti's ``newLoginResolver``).
LOGIN_PATHS = {"password": "username", "cert": "cert", "ext-jwt": "ext-jwt"}

#: The TOTP step as OpenZiti's OIDC login lists it (``requests.go: GetAuthQueries``).
OIDC_TOTP_QUERY = AuthQuery(
    type_id="TOTP",
    provider="ziti",
    http_method="POST",
    http_url="./oidc/login/totp",
    format="numeric",
    min_length=6,
    max_length=8,
)

#: An external JWT login's authenticator id: this and its signer's id (``authentication.ext_jwt``).
EXT_JWT_AUTHENTICATOR_PREFIX = "extJwtId:"

#: How long a token whose signature verified is taken as verified without checking it again
#: (seconds): a controller removed from the network stops vouching for its tokens within this.
VERIFIED_CACHE_SECONDS = 60.0
#: Tokens remembered as verified at most (then the memory is cleared).
VERIFIED_CACHE_SIZE = 4096

_PKCE_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
_PKCE_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")


@runtime_checkable
class OidcKeys(Protocol):
    """The key that signs the provider's tokens (``pki.JwtSigner``: the API listener's TLS key,
    as OpenZiti signs them with its server certificate's key)."""

    @property
    def algorithm(self) -> str: ...

    def sign(self, claims: Mapping[str, Any]) -> str: ...

    def verify(self, token: str, *, now: datetime | None = None, field: str = "jwt") -> dict[str, Any]:
        """The claims of a token this key signed (signature, ``alg`` and ``kid`` checked), or
        :class:`~engine.errors.FieldError`."""
        ...

    def public_jwks(self) -> list[dict[str, Any]]: ...

    def certificate_jwk(self, cert_pem: str) -> dict[str, Any] | None:
        """The public JWK of another controller's certificate (``kid``: its fingerprint)."""
        ...


class OidcError(Exception):
    """An OAuth 2.0 error (RFC 6749 §5.2): ``{"error", "error_description"}`` with ``status``.

    ``redirect``: sent back to the client's redirect URI as query parameters (RFC 6749 §4.1.2.1)
    instead, once the redirect URI is known to be allowed. ``plain``: answered as text (an
    ``/authorize`` whose client or redirect URI is not allowed, as OpenZiti does).
    """

    def __init__(
        self,
        error: str,
        description: str = "",
        *,
        status: int = 400,
        redirect: str | None = None,
        plain: bool = False,
    ) -> None:
        super().__init__(description or error)
        self.error = error
        self.description = description
        self.status = status
        self.redirect = redirect
        self.plain = plain

    def body(self) -> dict[str, str]:
        out = {"error": self.error}
        if self.description:
            out["error_description"] = self.description
        return out


@dataclass(frozen=True)
class LoginStep:
    """Where an OIDC login stands after a primary login or a TOTP code."""

    #: The secondary factors still owed (none: ``callback`` is where to go next).
    queries: tuple[AuthQuery, ...]
    #: TOTP is owed (OpenZiti's ``totp-required`` header).
    totp_required: bool
    callback: str


@dataclass(frozen=True)
class Bearer:
    """An access token's session, for a request carrying it."""

    session: ApiSession
    identity: Identity
    claims: dict[str, Any]


def _sha256(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def _stage(prefix: str, jti: str) -> str:
    return f"oidc-{prefix}:{_sha256(jti)}"


def s256(verifier: str) -> str:
    """The PKCE S256 challenge of ``verifier`` (RFC 7636 §4.2)."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _half_hash(value: str, algorithm: str) -> str:
    """OIDC Core's ``at_hash``/``c_hash``: the left half of the hash ``alg`` names, base64url."""
    bits = algorithm[2:] if algorithm[2:] in ("256", "384", "512") else "256"
    digest = hashlib.new(f"sha{bits}", value.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode("ascii")


def redirect_allowed(uri: str, patterns: Sequence[str] = REDIRECT_URIS) -> bool:
    """Whether ``uri`` is one of ``patterns`` exactly, ``*`` standing for a port (1-65535); no
    query, fragment or user info."""
    if uri in patterns:
        return "*" not in uri
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        return False
    if port is None or parts.query or parts.fragment or "@" in parts.netloc:
        return False
    if not 0 < port < 65536 or parts.netloc != f"{parts.hostname}:{port}":
        return False
    return f"{parts.scheme}://{parts.hostname}:*{parts.path}" in patterns


def _numeric(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class OidcManager:
    """The provider's steps; the API (``api/oidc.py``) parses the HTTP side of each."""

    def __init__(
        self,
        env: Env,
        sessions: ApiSessionManager,
        authentication: AuthenticationManager,
        mfa: MfaManager,
        *,
        issuer: str,
        keys: OidcKeys | None,
    ) -> None:
        self.env = env
        self.sessions = sessions
        self.auth = authentication
        self.mfa = mfa
        self.issuer = issuer
        self._keys = keys
        self._verified: dict[str, tuple[dict[str, Any], bool, float]] = {}
        self._verified_lock = threading.Lock()
        # an access token lives at most half the API session's idle timeout, so a client that
        # refreshes when its token expires always finds its session alive
        self.access_lifetime = min(ACCESS_TOKEN_LIFETIME, sessions.timeout / 2)

    # -- keys and discovery ------------------------------------------------------------------
    @property
    def keys(self) -> OidcKeys:
        if self._keys is None:
            raise OidcError("server_error", "no signing key", status=500)
        return self._keys

    def jwks(self) -> dict[str, Any]:
        """This controller's key, then those of the network's other controllers (from their
        records' certificates): as OpenZiti's, the keys of every controller whose tokens this one
        accepts."""
        keys = self.keys.public_jwks()
        own = {key.get("kid") for key in keys}
        for member in sorted(self.env.store.all(ControllerMember), key=lambda m: m.id):
            if member.cert_pem and member.fingerprint not in own:
                jwk = self.keys.certificate_jwk(member.cert_pem)
                if jwk is not None and jwk.get("kid") not in own:
                    keys.append(jwk)
                    own.add(jwk.get("kid"))
        return {"keys": keys}

    def discovery(self) -> dict[str, Any]:
        """The discovery document (OpenZiti's 26 keys, with what this provider does)."""
        base = self.issuer
        alg = [self.keys.algorithm]
        return {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/oauth/token",
            "introspection_endpoint": f"{base}/oauth/introspect",
            "userinfo_endpoint": f"{base}/userinfo",
            "revocation_endpoint": f"{base}/revoke",
            "end_session_endpoint": f"{base}/end_session",
            "device_authorization_endpoint": f"{base}/device_authorization",
            "jwks_uri": f"{base}/keys",
            "scopes_supported": ["openid", "offline_access"],
            "response_types_supported": ["code"],
            "grant_types_supported": [GRANT_CODE, GRANT_REFRESH, GRANT_EXCHANGE],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": alg,
            "request_object_signing_alg_values_supported": alg,
            "token_endpoint_auth_methods_supported": ["none"],
            "token_endpoint_auth_signing_alg_values_supported": alg,
            "revocation_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_signing_alg_values_supported": alg,
            "introspection_endpoint_auth_methods_supported": ["client_secret_basic"],
            "introspection_endpoint_auth_signing_alg_values_supported": alg,
            "claims_supported": [
                "sub",
                "aud",
                "exp",
                "iat",
                "iss",
                "auth_time",
                "nonce",
                "amr",
                "c_hash",
                "at_hash",
                "scopes",
                "client_id",
                "azp",
                "name",
            ],
            "code_challenge_methods_supported": ["S256"],
            "ui_locales_supported": ["en"],
            "request_parameter_supported": False,
            "request_uri_parameter_supported": False,
        }

    # -- tokens of our own -------------------------------------------------------------------
    def _now(self) -> datetime:
        return self.env.clock.now()

    def _sign(self, claims: dict[str, Any]) -> str:
        return self.keys.sign(claims)

    def _signed(self, token: str) -> tuple[dict[str, Any], bool] | None:
        """The claims of a token signed by this controller's key, or by another controller's of
        the network (found by the token's ``kid``, its certificate's fingerprint, among the
        controllers' records), and whether it was this one's; None when neither key verifies it
        (``alg: none``, tampered, an unknown ``kid``). As OpenZiti's controllers, each accepts the
        tokens of every other: a client that fails over keeps its tokens.

        A token verified lately is not verified again (:data:`VERIFIED_CACHE_SECONDS`): its
        signature cannot change, and a bearer request would otherwise spend most of its time
        there (PyJWT decodes a token in some 0.4 ms). Claims (expiry, the session's life) are
        checked by the callers on every use."""
        if not token or self._keys is None:
            return None
        now = time.monotonic()
        with self._verified_lock:
            cached = self._verified.get(token)
        if cached is not None and now - cached[2] < VERIFIED_CACHE_SECONDS:
            return dict(cached[0]), cached[1]
        signed = self._verify_signature(token)
        if signed is not None:
            with self._verified_lock:
                if len(self._verified) >= VERIFIED_CACHE_SIZE:
                    self._verified.clear()  # bounded; the next requests verify again
                self._verified[token] = (signed[0], signed[1], now)
            return dict(signed[0]), signed[1]
        return None

    def _verify_signature(self, token: str) -> tuple[dict[str, Any], bool] | None:
        assert self._keys is not None
        try:
            return self._keys.verify(token), True
        except FieldError:
            pass
        peeked = self.env.jwt_verifier.peek(token)
        if peeked is None or peeked.kid is None:
            return None
        for member in self.env.store.all(ControllerMember):
            if member.fingerprint == peeked.kid and member.cert_pem:
                source = JwtKeySource(cert_pem=member.cert_pem, kid=member.fingerprint)
                claims = self.env.jwt_verifier.verify(token, source)
                return None if claims is None else (claims, False)
        return None

    def _verify(self, token: str, kind: str, *, check_exp: bool = True) -> dict[str, Any] | None:
        """The claims of a token of the network's controllers with ``z_t`` ``kind``, unexpired
        and, when this one signed it, for this issuer (another controller's carries its own, and
        OpenZiti checks none); None for anything else (another key, ``alg: none``, tampered,
        expired)."""
        signed = self._signed(token)
        if signed is None:
            return None
        claims, own = signed
        if claims.get("z_t") != kind or (own and claims.get("iss") != self.issuer):
            return None
        now = self._now().timestamp()
        exp = _numeric(claims.get("exp"))
        if exp is None or (check_exp and exp <= now):
            return None
        nbf = claims.get("nbf")
        if nbf is not None:
            start = _numeric(nbf)
            if start is None or start > now + LEEWAY.total_seconds():
                return None
        return claims

    def _times(self, lifetime: timedelta) -> dict[str, int]:
        now = self._now()
        return {
            "iat": int(now.timestamp()),
            "nbf": int(now.timestamp()),
            "exp": int((now + lifetime).timestamp()),
        }

    # -- /authorize ----------------------------------------------------------------------------
    def authorize(self, params: Mapping[str, str], *, has_client_cert: bool) -> str:
        """The login page an authorization request goes to (a path with the auth request id), or
        :class:`OidcError` (redirected to the client once its redirect URI is known good)."""
        client_id = params.get("client_id", "")
        if client_id not in CLIENT_IDS:
            raise OidcError("invalid_client", "unable to retrieve client by id", plain=True)
        redirect_uri = params.get("redirect_uri", "")
        if not redirect_allowed(redirect_uri):
            raise OidcError(
                "invalid_request",
                "The requested redirect_uri is missing in the client configuration.",
                plain=True,
            )
        state = params.get("state", "")

        def back(error: str, description: str) -> OidcError:
            query = {"error": error, "error_description": description}
            if state:
                query["state"] = state
            return OidcError(error, description, redirect=f"{redirect_uri}?{urlencode(query)}")

        if params.get("response_type") != "code":
            raise back(
                "unauthorized_client",
                "The requested response type is missing in the client configuration.",
            )
        scopes = [s for s in params.get("scope", "").split(" ") if s]
        if not scopes:
            raise back("invalid_request", "The scope of your request is missing.")
        if params.get("prompt") == "none":
            raise back("login_required", "a login is required")
        challenge = params.get("code_challenge", "")
        if params.get("code_challenge_method") != "S256" or not _PKCE_CHALLENGE.fullmatch(challenge):
            raise back("invalid_request", "a PKCE code_challenge with code_challenge_method S256 is required")
        method = params.get("method", "")
        if method not in LOGIN_PATHS:
            method = "cert" if has_client_cert else "password"
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": [self.issuer],
            "jti": self.env.ids.new_token(),
            "z_t": AUTH_REQUEST,
            "cid": client_id,
            "ruri": redirect_uri,
            "state": state,
            "cc": challenge,
            "scopes": scopes,
            "method": method,
            **self._times(AUTH_REQUEST_LIFETIME),
        }
        if params.get("nonce"):
            claims["nonce"] = params["nonce"]
        request_id = self._sign(claims)
        return f"/oidc/login/{LOGIN_PATHS[method]}?authRequestID={request_id}"

    def _auth_request(self, request_id: str) -> dict[str, Any]:
        claims = self._verify(request_id, AUTH_REQUEST)
        if claims is None:
            raise InvalidAuthError(reason="the auth request is unknown or has expired")
        return claims

    def _session_at(self, marker: str) -> ApiSession | None:
        store = self.env.store
        found = store.find_unique(ApiSession, "token_hash", marker)
        if found is None and store.catch_up():
            found = store.find_unique(ApiSession, "token_hash", marker)
        return found

    # -- the login steps -----------------------------------------------------------------------
    def login(
        self,
        request_id: str,
        method: str,
        info: LoginInfo,
        *,
        username: str = "",
        password: str = "",
        chain: Sequence[str] = (),
        bearer: Sequence[str] = (),
    ) -> LoginStep:
        """The primary login of an auth request, by the legacy method ``method``."""
        claims = self._auth_request(request_id)
        marker = _stage("ar", claims["jti"])
        if self._session_at(marker) is not None:
            raise InvalidAuthError(reason="the auth request has already logged in")
        login: Login
        if method == "password":
            login = self.auth.password(username, password, info, bound_to=marker)
        elif method == "cert":
            login = self.auth.cert(chain, info, bound_to=marker)
        elif method == "ext-jwt":
            login = self.auth.ext_jwt(bearer, info, bound_to=marker)
        else:
            raise InvalidAuthError(reason=f"unknown login method {method}")
        return self._step(request_id, login.session, login.identity, bearer)

    def _step(
        self, request_id: str, session: ApiSession, identity: Identity, bearer: Sequence[str]
    ) -> LoginStep:
        pending = self.auth.pending(session, identity, bearer)
        queries = tuple(OIDC_TOTP_QUERY if q.type_id == "MFA" else q for q in pending.queries)
        totp = any(q.type_id == "MFA" for q in pending.queries)
        return LoginStep(
            queries=queries,
            totp_required=totp,
            callback=f"{self.issuer}/authorize/callback?{urlencode({'id': request_id})}",
        )

    def _login_session(self, request_id: str) -> tuple[ApiSession, Identity]:
        claims = self._auth_request(request_id)
        session = self._session_at(_stage("ar", claims["jti"]))
        identity = self.env.store.get(Identity, session.identity_id) if session is not None else None
        if session is None or identity is None:
            raise InvalidAuthError(reason="the auth request has not logged in")
        return session, identity

    def auth_queries(self, request_id: str, bearer: Sequence[str] = ()) -> LoginStep:
        session, identity = self._login_session(request_id)
        return self._step(request_id, session, identity, bearer)

    def totp(self, request_id: str, code: str, bearer: Sequence[str] = ()) -> LoginStep:
        """The TOTP step: the login's session passes MFA (the legacy throttles and single use)."""
        session, identity = self._login_session(request_id)
        session = self.mfa.complete_login(session, code.strip())
        return self._step(request_id, session, identity, bearer)

    def callback(self, request_id: str, bearer: Sequence[str] = ()) -> str:
        """The redirect that hands the client its code, once the login owes nothing."""
        claims = self._auth_request(request_id)
        marker = _stage("ar", claims["jti"])
        session, identity = self._login_session(request_id)
        if self.auth.pending(session, identity, bearer).partial:
            raise InvalidAuthError(reason="the login still owes a secondary factor")
        code_claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": [claims["cid"]],
            "jti": self.env.ids.new_token(),
            "z_t": CODE,
            "sid": session.id,
            "cid": claims["cid"],
            "ruri": claims["ruri"],
            "cc": claims["cc"],
            "scopes": claims.get("scopes", []),
            "state": claims.get("state", ""),
            "auth_time": int(session.created_at.timestamp()),
            **self._times(CODE_LIFETIME),
        }
        if claims.get("nonce"):
            code_claims["nonce"] = claims["nonce"]
        if self._move(session.id, marker, _stage("code", code_claims["jti"])) is None:
            raise InvalidAuthError(reason="the auth request has already been used")
        code = self._sign(code_claims)
        query = {"code": code}
        if claims.get("state"):
            query["state"] = claims["state"]
        return f"{claims['ruri']}?{urlencode(query)}"

    def _move(self, session_id: str, expect: str, new: str, *, activity: bool = True) -> ApiSession | None:
        """Move the session from stage ``expect`` to ``new``; None when it is not at ``expect``
        (gone, or another request moved it first)."""
        now = self._now()
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            current = uow.get(ApiSession, session_id)
            if current is None or current.token_hash != expect:
                return None
            changes: dict[str, Any] = {"token_hash": new, "updated_at": now}
            if activity:
                changes["last_activity_at"] = now
            updated = dataclasses.replace(current, **changes)
            uow.put(updated)
            self.env.commit(uow)
            return updated

    def _end(self, session_id: str, why: str) -> None:
        with self.env.store.write_lock():
            if self.env.store.get(ApiSession, session_id) is None:
                return
            uow = UnitOfWork(self.env.store)
            delete_session(uow, session_id)
            self.env.commit(uow)
        event(log, logging.WARNING, "oidc.session_ended", session_id=session_id, reason=why)

    # -- the token endpoint --------------------------------------------------------------------
    def token(self, form: Mapping[str, str], client_id: str, *, remote: str = "") -> dict[str, Any]:
        """The token endpoint (RFC 6749 §3.2) for an authenticated public client."""
        if client_id not in CLIENT_IDS:
            raise OidcError("invalid_client", status=401)
        grant = form.get("grant_type", "")
        if not grant:
            raise OidcError("invalid_request", "grant_type missing")
        if grant == GRANT_CODE:
            return self._redeem_code(form, client_id)
        if grant == GRANT_REFRESH:
            return self._refresh(form, client_id)
        if grant == GRANT_EXCHANGE:
            return self._exchange(form, client_id)
        raise OidcError("unsupported_grant_type", f"{grant} not supported")

    def _redeem_code(self, form: Mapping[str, str], client_id: str) -> dict[str, Any]:
        claims = self._verify(form.get("code", ""), CODE)
        if claims is None or claims.get("cid") != client_id:
            raise OidcError("invalid_grant", "invalid code")
        verifier = form.get("code_verifier", "")
        if not verifier:
            raise OidcError("invalid_request", "code_challenge required")
        if form.get("redirect_uri", "") != claims.get("ruri"):
            raise OidcError("invalid_grant", "redirect_uri does not match the authorization request")
        if not _PKCE_VERIFIER.fullmatch(verifier) or s256(verifier) != claims.get("cc"):
            raise OidcError("invalid_grant", "invalid code challenge")
        session_id = str(claims.get("sid", ""))
        marker = _stage("code", claims["jti"])
        refresh_jti = self.env.ids.new_token()
        session = self._alive(session_id)
        moved = self._move(session_id, marker, _stage("rt", refresh_jti)) if session is not None else None
        if moved is None:
            if session is not None:  # the code was redeemed before: what it gave is revoked
                self._end(session_id, "an authorization code was presented again")
            raise OidcError("invalid_grant", "invalid code")
        identity = self._usable_identity(moved)
        return self._issue(moved, identity, claims, client_id, refresh_jti, code=form.get("code", ""))

    def _alive(self, session_id: str) -> ApiSession | None:
        store = self.env.store
        session = store.get(ApiSession, session_id)
        if session is None and store.catch_up():
            session = store.get(ApiSession, session_id)
        if session is None or self.sessions.is_expired(session):
            return None
        return session

    def _usable_identity(self, session: ApiSession) -> Identity:
        """The session's identity, still able to log in (enabled, its authenticator there)."""
        identity = self.env.store.get(Identity, session.identity_id)
        if identity is None or identity.is_disabled_at(self._now()) or not self._authenticator_there(session):
            self._end(session.id, "the identity is disabled or its authenticator is gone")
            raise OidcError("invalid_grant", "the identity can no longer log in")
        return identity

    def _refresh_claims(self, token: str, client_id: str) -> tuple[dict[str, Any], ApiSession]:
        claims = self._verify(token, REFRESH)
        if claims is None or claims.get("client_id") != client_id:
            raise OidcError("invalid_grant")
        session = self._alive(str(claims.get("z_asid", "")))
        if session is None or session.token_hash != _stage("rt", claims["jti"]):
            raise OidcError("invalid_grant")
        if session.identity_id != claims.get("sub"):
            raise OidcError("invalid_grant")
        return claims, session

    def _refresh(self, form: Mapping[str, str], client_id: str) -> dict[str, Any]:
        claims, session = self._refresh_claims(form.get("refresh_token", ""), client_id)
        refresh_jti = self.env.ids.new_token()
        moved = self._move(session.id, session.token_hash, _stage("rt", refresh_jti))
        if moved is None:
            raise OidcError("invalid_grant")
        identity = self._usable_identity(moved)
        return self._issue(moved, identity, claims, client_id, refresh_jti, refreshed=claims)

    def _exchange(self, form: Mapping[str, str], client_id: str) -> dict[str, Any]:
        """Token exchange (RFC 8693) as OpenZiti's Go SDK uses it to refresh: a refresh token for
        a refresh token (and an access token), an access token, or an id token; an access token for
        an access token. Exchanging does not rotate the refresh token (OpenZiti's neither)."""
        subject = form.get("subject_token", "")
        subject_type = form.get("subject_token_type", "")
        requested = form.get("requested_token_type", "") or TOKEN_TYPE_REFRESH
        for audience in (a for a in form.get("audience", "").split(" ") if a):
            if audience not in CLIENT_IDS:
                raise OidcError("invalid_request", f"invalid audience requested [{audience}]")
        if subject_type == TOKEN_TYPE_REFRESH:
            if requested not in (TOKEN_TYPE_REFRESH, TOKEN_TYPE_ACCESS, TOKEN_TYPE_ID):
                raise OidcError("invalid_request", "exchanging refresh_token for that type is not supported")
            claims, session = self._refresh_claims(subject, client_id)
            refresh_jti: str | None = claims["jti"] if requested == TOKEN_TYPE_REFRESH else None
        elif subject_type == TOKEN_TYPE_ACCESS:
            if requested != TOKEN_TYPE_ACCESS:
                raise OidcError("invalid_request", "exchanging access_token for that type is not supported")
            bearer = self.resolve_access(subject)
            if bearer is None or bearer.claims.get("z_aid") != client_id:
                raise OidcError("invalid_grant")
            claims, session, refresh_jti = bearer.claims, bearer.session, None
        else:
            raise OidcError("invalid_request", f"exchange subject type ({subject_type}) is not supported")
        identity = self._usable_identity(session)
        issued = self._issue(session, identity, claims, client_id, refresh_jti, refreshed=claims)
        if requested == TOKEN_TYPE_ID:
            return {
                "access_token": issued["id_token"],
                "issued_token_type": TOKEN_TYPE_ID,
                "token_type": "N_A",
            }
        out = {
            "access_token": issued["access_token"],
            "issued_token_type": requested,
            "token_type": "Bearer",
            "expires_in": issued["expires_in"],
        }
        if refresh_jti is not None:
            out["refresh_token"] = issued["refresh_token"]
        return out

    def _issue(
        self,
        session: ApiSession,
        identity: Identity,
        grant: Mapping[str, Any],
        client_id: str,
        refresh_jti: str | None,
        *,
        code: str = "",
        refreshed: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Access, refresh and id tokens for ``session`` (``grant``: the code's or the refresh
        token's claims)."""
        scopes = list(grant.get("scopes") or [])
        amr = ["password" if a == "updb" else a for a in self._amr(session)]
        auth_time = int(grant.get("auth_time") or session.created_at.timestamp())
        custom: dict[str, Any] = {
            "z_aid": client_id,
            "z_asid": session.id,
            "z_authid": session.authenticator_id,
            "z_cfs": refreshed.get("z_cfs") if refreshed is not None else self._login_certificates(session),
            "z_env": identity.env_info or None,
            "z_sdk": identity.sdk_info or None,
            "z_ia": identity.is_admin,
            "z_ice": False,
            "z_ra": session.ip_address,
        }
        if session.config_types:
            custom["z_ct"] = list(session.config_types)
        if identity.external_id:
            custom["z_eid"] = identity.external_id
        common = {"iss": self.issuer, "sub": identity.id, "aud": [client_id]}
        access_claims = {
            **common,
            **self._times(self.access_lifetime),
            "jti": self.env.ids.new_token(),
            "scopes": scopes,
            "amr": amr,
            "auth_time": auth_time,
            **custom,
            "z_t": ACCESS,
        }
        access = self._sign(access_claims)
        out: dict[str, Any] = {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": int(self.access_lifetime.total_seconds()),
        }
        if refresh_jti is not None and (refreshed is not None or "offline_access" in scopes):
            out["refresh_token"] = self._sign(
                {
                    **common,
                    **self._times(REFRESH_TOKEN_LIFETIME),
                    "jti": refresh_jti,
                    "scopes": scopes,
                    "amr": amr,
                    "auth_time": auth_time,
                    "client_id": client_id,
                    **custom,
                    "z_t": REFRESH,
                }
            )
        id_claims: dict[str, Any] = {
            **common,
            **self._times(ID_TOKEN_LIFETIME),
            "amr": amr,
            "auth_time": auth_time,
            "azp": client_id,
            "client_id": client_id,
            "name": identity.name,
            "z_ia": identity.is_admin,
            "z_asid": session.id,
            "at_hash": _half_hash(access, self.keys.algorithm),
        }
        del id_claims["nbf"]
        if code:
            id_claims["c_hash"] = _half_hash(code, self.keys.algorithm)
        if grant.get("nonce"):
            id_claims["nonce"] = grant["nonce"]
        out["id_token"] = self._sign(id_claims)
        if refreshed is None and grant.get("state"):
            out["state"] = grant["state"]
        event(
            log,
            logging.INFO,
            "oidc.tokens_issued",
            session_id=session.id,
            identity_id=identity.id,
            client_id=client_id,
            refreshed=refreshed is not None,
        )
        return out

    def _login_certificates(self, session: ApiSession) -> list[str] | None:
        """``z_cfs``: the SHA-1 fingerprint of the client certificate a certificate login
        presented, as OpenZiti's (routers open channels with the token alone by it, while no
        controller's state is at hand); None for other logins."""
        authenticator = self.env.store.get(Authenticator, session.authenticator_id)
        if authenticator is None or authenticator.method != "cert" or not authenticator.fingerprint:
            return None
        return [authenticator.fingerprint.lower()]

    def _authenticator_there(self, session: ApiSession) -> bool:
        """The session's authenticator still exists (an external JWT login's stands for its
        signer, which must still exist and be enabled)."""
        if self.env.store.get(Authenticator, session.authenticator_id) is not None:
            return True
        signer_id = session.authenticator_id.removeprefix(EXT_JWT_AUTHENTICATOR_PREFIX)
        signer = (
            self.env.store.get(ExternalJwtSigner, signer_id)
            if signer_id != session.authenticator_id
            else None
        )
        return signer is not None and signer.enabled

    def _amr(self, session: ApiSession) -> list[str]:
        authenticator = self.env.store.get(Authenticator, session.authenticator_id)
        method = authenticator.method if authenticator is not None else "ext-jwt"
        amr = [method]
        if session.is_mfa_complete:
            amr.append("totp")
        return amr

    # -- bearer tokens -------------------------------------------------------------------------
    def resolve_access(self, token: str) -> Bearer | None:
        """The live session an access token stands for, its activity refreshed; None for any
        token that is not one (another key, ``alg: none``, another audience, expired, not yet
        valid, or its session ended)."""
        claims = self._verify(token, ACCESS)
        if claims is None:
            return None
        audience = claims.get("aud")
        audiences = (
            [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
        )
        if not any(a in CLIENT_IDS for a in audiences):
            return None
        session_id = claims.get("z_asid")
        if not isinstance(session_id, str):
            return None
        session = self._alive(session_id)
        if (
            session is None
            or session.identity_id != claims.get("sub")
            or not session.token_hash.startswith("oidc-rt:")
        ):
            return None
        live = self.sessions.touch([session.id]).get(session.id)
        identity = self.env.store.get(Identity, session.identity_id)
        if live is None or identity is None:
            return None
        return Bearer(session=live, identity=identity, claims=claims)

    def is_own(self, token: str) -> bool:
        """Whether ``token`` is signed by this provider's key or another controller's of the
        network (whatever its claims)."""
        return self._signed(token) is not None

    def userinfo(self, token: str) -> dict[str, Any]:
        bearer = self.resolve_access(token)
        if bearer is None:
            raise OidcError("invalid_token", "access token invalid", status=401)
        identity = bearer.identity
        out: dict[str, Any] = {"sub": identity.id, "name": identity.name, "z_ia": identity.is_admin}
        if identity.external_id:
            out["z_eid"] = identity.external_id
        return out

    # -- ending ----------------------------------------------------------------------------------
    def revoke(self, token: str, client_id: str) -> None:
        """RFC 7009: a refresh or access token of ``client_id`` ends its API session (and so every
        token issued for it); anything else is ignored."""
        if client_id not in CLIENT_IDS:
            raise OidcError("invalid_client", "invalid authorization", status=401)
        for kind in (REFRESH, ACCESS):
            claims = self._verify(token, kind)
            if claims is not None and claims.get("z_aid") == client_id:
                session = self.env.store.get(ApiSession, str(claims.get("z_asid", "")))
                if session is not None and session.identity_id == claims.get("sub"):
                    self._end(session.id, "revoked by its client")
                return

    def end_session(self, params: Mapping[str, str]) -> str:
        """RP-initiated logout: the id token's session ends; where to send the browser."""
        hint = params.get("id_token_hint", "")
        claims = self._id_token(hint) if hint else None
        if claims is not None:
            session = self.env.store.get(ApiSession, str(claims.get("z_asid", "")))
            if session is not None and session.identity_id == claims.get("sub"):
                self._end(session.id, "logged out")
        target = params.get("post_logout_redirect_uri", "")
        if target and claims is not None and redirect_allowed(target, POST_LOGOUT_URIS):
            state = params.get("state")
            return f"{target}?{urlencode({'state': state})}" if state else target
        return "/oidc/logged-out"

    def _id_token(self, token: str) -> dict[str, Any] | None:
        signed = self._signed(token)
        if signed is None:
            return None
        claims, own = signed
        if (own and claims.get("iss") != self.issuer) or "z_t" in claims or "at_hash" not in claims:
            return None
        return claims
