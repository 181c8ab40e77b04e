"""Primary authentication: turning credentials into an API session."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Identity
from engine.entities.services import ConfigType
from engine.entities.trust import AuthPolicy
from engine.errors import InvalidAuthError, UnauthorizedError
from engine.managers._base import Env
from engine.managers.api_sessions import ApiSessionManager
from engine.ports import UnitOfWork

# A well-formed hash of a random password: verified against when the username is unknown so
# that a miss costs the same time as a wrong password.
_DUMMY_PASSWORD = "trellis-timing-equaliser"


class AuthenticationManager:
    def __init__(self, env: Env, sessions: ApiSessionManager) -> None:
        self.env = env
        self.sessions = sessions
        self._dummy_hash = env.hasher.hash(_DUMMY_PASSWORD)

    def authenticate_password(
        self,
        username: str,
        password: str,
        *,
        ip_address: str,
        config_types: list[str] | None = None,
        env_info: dict[str, Any] | None = None,
        sdk_info: dict[str, Any] | None = None,
    ) -> tuple[ApiSession, Identity]:
        store = self.env.store
        authenticator = store.find_unique(Authenticator, "username", username)
        if authenticator is None or authenticator.method != "updb" or not authenticator.password_hash:
            self.env.hasher.verify(password, self._dummy_hash)
            raise InvalidAuthError()
        if not self.env.hasher.verify(password, authenticator.password_hash):
            raise InvalidAuthError()
        identity = store.get(Identity, authenticator.identity_id)
        if identity is None:
            raise InvalidAuthError()
        self._check_policy(identity)
        self._check_enabled(identity)
        identity = self._record_info(identity, env_info, sdk_info)
        session = self.sessions.start(
            identity,
            authenticator,
            ip_address=ip_address,
            config_types=self.resolve_config_types(config_types or []),
        )
        return session, identity

    def resolve_config_types(self, requested: list[str]) -> list[str]:
        """Config type ids for names or ids (or ``all``); unknown entries are ignored."""
        types = self.env.store.all(ConfigType)
        if any(r == "all" for r in requested):
            return sorted(t.id for t in types)
        by_name = {t.name: t.id for t in types}
        ids = {t.id for t in types}
        out: list[str] = []
        for value in requested:
            resolved = value if value in ids else by_name.get(value)
            if resolved and resolved not in out:
                out.append(resolved)
        return out

    def _check_policy(self, identity: Identity) -> None:
        policy = self.env.store.get(AuthPolicy, identity.auth_policy_id)
        if policy is None:
            return
        updb = policy.primary.get("updb") or {}
        if updb.get("allowed") is False:
            raise InvalidAuthError()

    def _check_enabled(self, identity: Identity) -> None:
        if not identity.disabled:
            return
        until = identity.disabled_until
        if until is None or until > self.env.clock.now():
            raise UnauthorizedError()

    def _record_info(
        self, identity: Identity, env_info: dict[str, Any] | None, sdk_info: dict[str, Any] | None
    ) -> Identity:
        changes: dict[str, Any] = {}
        if env_info and env_info != identity.env_info:
            changes["env_info"] = env_info
        if sdk_info and sdk_info != identity.sdk_info:
            changes["sdk_info"] = sdk_info
        if not changes:
            return identity
        with self.env.store.write_lock():
            current = self.env.store.get(Identity, identity.id) or identity
            updated = dataclasses.replace(current, **changes)
            uow = UnitOfWork(self.env.store)
            uow.put(updated)
            self.env.commit(uow)
            return updated
