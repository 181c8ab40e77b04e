"""Authentication: credentials become an API session, and a session's outstanding factors.

One module per primary method, sharing :mod:`._core`: :mod:`.password` (``updb``
authenticators, with the auth policy's lockout), :mod:`.cert` (client certificates) and
:mod:`.ext_jwt` (external identity providers' JWTs). :mod:`.secondary` works out what a session
still owes (TOTP, a secondary external JWT). :class:`AuthenticationManager` is what the API calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.entities.identities import ApiSession, Identity
from engine.errors import InvalidAuthError
from engine.managers._base import Env
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication._core import (
    Login,
    LoginAttempt,
    LoginInfo,
    open_session,
    resolve_config_types,
)
from engine.managers.authentication.cert import CertCheck
from engine.managers.authentication.ext_jwt import ExtJwtCheck
from engine.managers.authentication.password import PasswordCheck
from engine.managers.authentication.secondary import AuthQuery, Pending, pending

__all__ = ["AuthQuery", "AuthenticationManager", "Login", "LoginInfo", "Pending"]


class AuthenticationManager:
    def __init__(self, env: Env, api_sessions: ApiSessionManager) -> None:
        self.env = env
        self.api_sessions = api_sessions
        self._password = PasswordCheck(env)
        self._cert = CertCheck(env)
        self._ext_jwt = ExtJwtCheck(env)

    # Each login logs ``login.succeeded`` (INFO) or ``login.failed`` (WARNING) with its method,
    # the identity when known and, for a failure, why (never a credential).
    #
    # ``bound_to``: the session is an OIDC login's (:mod:`engine.managers.oidc`), kept under that
    # value instead of its token's hash (``ApiSessionManager.start``).
    def password(
        self, username: str, password: str, info: LoginInfo, *, bound_to: str | None = None
    ) -> Login:
        attempt = LoginAttempt("password", info)
        try:
            authenticator = self._password.authenticator(username, password, attempt)
            login = open_session(
                self.env, self.api_sessions, authenticator, "updb", info, attempt=attempt, bound_to=bound_to
            )
        except InvalidAuthError as ex:
            attempt.failed(ex)
            raise
        attempt.succeeded(login)
        return login

    def cert(self, chain: Sequence[str], info: LoginInfo, *, bound_to: str | None = None) -> Login:
        attempt = LoginAttempt("cert", info)
        try:
            proof = self._cert.prove(chain, attempt)
            ca_id = proof.ca.id if proof.ca is not None else None
            login = open_session(
                self.env,
                self.api_sessions,
                proof.authenticator,
                "cert",
                info,
                ca_id=ca_id,
                attempt=attempt,
                bound_to=bound_to,
            )
        except InvalidAuthError as ex:
            attempt.failed(ex)
            raise
        attempt.succeeded(login)
        return login

    def ext_jwt(self, tokens: Sequence[str], info: LoginInfo, *, bound_to: str | None = None) -> Login:
        """Log in with the first acceptable external JWT of ``tokens`` (bearer tokens)."""
        attempt = LoginAttempt("ext-jwt", info)
        try:
            proof = self._ext_jwt.prove(tokens, attempt)
            login = open_session(
                self.env,
                self.api_sessions,
                proof.authenticator,
                "extJwt",
                info,
                attempt=attempt,
                bound_to=bound_to,
            )
        except InvalidAuthError as ex:
            attempt.failed(ex)
            raise
        attempt.succeeded(login)
        return login

    def pending(self, session: ApiSession, identity: Identity, tokens: Sequence[str] = ()) -> Pending:
        """The factors ``session`` still owes on a request carrying bearer ``tokens``."""
        return pending(self.env, self._ext_jwt, session, identity, tokens)

    def failed_password_attempts(self, authenticator_id: str) -> int:
        return self._password.failures(authenticator_id)

    def resolve_config_types(self, requested: Sequence[str]) -> list[str]:
        """Config type ids for a session's ``configTypes`` as asked (names, ids or ``all``)."""
        return resolve_config_types(self.env, tuple(requested))
