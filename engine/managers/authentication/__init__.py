"""Primary authentication: credentials become an API session.

One module per method, sharing :mod:`._core`: :mod:`.password` (``updb`` authenticators) and
:mod:`.cert` (client certificates). :class:`AuthenticationManager` is what the API calls.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.managers._base import Env
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication._core import Login, LoginInfo, open_session, resolve_config_types
from engine.managers.authentication.cert import CertCheck
from engine.managers.authentication.password import PasswordCheck

__all__ = ["AuthenticationManager", "Login", "LoginInfo"]


class AuthenticationManager:
    def __init__(self, env: Env, sessions: ApiSessionManager) -> None:
        self.env = env
        self.sessions = sessions
        self._password = PasswordCheck(env)
        self._cert = CertCheck(env)

    def password(self, username: str, password: str, info: LoginInfo) -> Login:
        authenticator = self._password.authenticator(username, password)
        return open_session(self.env, self.sessions, authenticator, "updb", info)

    def cert(self, chain: Sequence[str], info: LoginInfo) -> Login:
        proof = self._cert.prove(chain)
        ca_id = proof.ca.id if proof.ca is not None else None
        return open_session(self.env, self.sessions, proof.authenticator, "cert", info, ca_id=ca_id)

    def resolve_config_types(self, requested: list[str]) -> list[str]:
        return resolve_config_types(self.env, requested)
