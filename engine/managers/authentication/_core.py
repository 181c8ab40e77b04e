"""What every primary authentication method shares: policy checks, the enabled check, the session.

A method module proves who the caller is (an :class:`Authenticator`); :func:`open_session`
then applies the rules every method shares, in OpenZiti's order: the identity exists, its auth
policy allows the method, it is not disabled (every refusal 401 ``INVALID_AUTH``: a disabled
identity answers as a wrong credential does; the password method decides both before it looks at
the password); the SDK and environment info it reports is recorded
and an API session is started. The session needs a second factor (``isMfaRequired``) when the
identity has a verified TOTP enrollment or its auth policy requires TOTP (never for the default
admin: :func:`~engine.managers.auth_policies.secondary_for`).

The ``configTypes`` asked for at login are kept as OpenZiti's ``mapConfigTypeNamesToIds`` keeps
them (:func:`session_config_types`): ``["all"]`` when ``all`` is among them, else the ids of the
named or given config types, unknown ones dropped (its ``api_session_test.go`` expects names
resolved to ids). :func:`resolve_config_types` turns such a list into config type ids when
services are rendered.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Identity, Mfa
from engine.entities.services import ConfigType
from engine.errors import InvalidAuthError
from engine.logs import event
from engine.managers._base import Env
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.auth_policies import PolicyRules, rules_for, secondary_for
from engine.ports import Store, UnitOfWork


@dataclass(frozen=True)
class LoginInfo:
    """What the client reports at login, besides its credentials."""

    ip_address: str = ""
    config_types: tuple[str, ...] = ()
    env_info: dict[str, Any] | None = None
    sdk_info: dict[str, Any] | None = None


@dataclass(frozen=True)
class Login:
    """A successful authentication: the session, its token (shown once) and who logged in."""

    session: ApiSession
    token: str
    identity: Identity
    authenticator: Authenticator


#: The logger of login events (``login.succeeded``, ``login.failed``, ``identity.locked_out``).
log = logging.getLogger("engine.managers.authentication")
#: How much of a username that names nobody is logged (escaped by the log formatter).
MAX_LOGGED_USERNAME = 64


class LoginAttempt:
    """What one login attempt found out, for its log line: who it was for (when known) and why it
    was refused. The methods fill it in as they go; never a credential."""

    __slots__ = ("identity", "info", "method", "reason", "username")

    def __init__(self, method: str, info: LoginInfo | None = None) -> None:
        self.method = method
        self.info = info
        self.identity: Identity | None = None
        self.reason = ""
        self.username: str | None = None

    def refuse(self, reason: str, identity: Identity | None = None) -> None:
        """Note why the attempt is refused (the first reason noted stands)."""
        if not self.reason:
            self.reason = reason
        if identity is not None:
            self.identity = identity

    def failed(self, error: InvalidAuthError) -> None:
        """``login.failed`` (WARNING)."""
        identity = self.identity
        event(
            log,
            logging.WARNING,
            "login.failed",
            method=self.method,
            reason=self.reason or error.reason or "refused",
            identity_id=identity.id if identity is not None else None,
            identity_name=identity.name if identity is not None else None,
            username=self.username[:MAX_LOGGED_USERNAME] if self.username is not None else None,
            ip=self.info.ip_address if self.info is not None and self.info.ip_address else None,
        )

    def succeeded(self, login: Login) -> None:
        """``login.succeeded`` (INFO)."""
        event(
            log,
            logging.INFO,
            "login.succeeded",
            method=self.method,
            identity_id=login.identity.id,
            identity_name=login.identity.name,
            authenticator_id=login.authenticator.id,
            session_id=login.session.id,
            mfa_required=login.session.is_mfa_required,
            ip=self.info.ip_address if self.info is not None and self.info.ip_address else None,
        )


def check_allowed(rules: PolicyRules, method: str) -> None:
    """``INVALID_AUTH`` unless the auth policy allows primary method ``method``."""
    if not rules.allows(method):
        raise InvalidAuthError(reason=f"the auth policy does not allow {method} authentication")


def is_disabled(env: Env, identity: Identity) -> bool:
    """Disabled now: locked, and the lock has no end or has not ended yet."""
    return identity.is_disabled_at(env.clock.now())


def check_enabled(env: Env, identity: Identity) -> None:
    """``INVALID_AUTH`` for a disabled (or locked-out) identity, as every other refusal."""
    if is_disabled(env, identity):
        raise InvalidAuthError()


def has_verified_mfa(store: Store | UnitOfWork, identity_id: str) -> bool:
    mfa = store.find_unique(Mfa, "identity_id", identity_id)
    return mfa is not None and mfa.is_verified


def resolve_config_types(env: Env, requested: list[str] | tuple[str, ...]) -> list[str]:
    """Config type ids for names or ids (or ``all``); unknown entries are ignored."""
    types = env.store.all(ConfigType)
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


def session_config_types(env: Env, requested: list[str] | tuple[str, ...]) -> list[str]:
    """A login's ``configTypes`` as its API session keeps them: ``["all"]``, or known type ids."""
    if any(r == "all" for r in requested):
        return ["all"]
    return resolve_config_types(env, requested)


def record_info(env: Env, identity: Identity, info: LoginInfo) -> Identity:
    changes: dict[str, Any] = {}
    if info.env_info and info.env_info != identity.env_info:
        changes["env_info"] = info.env_info
    if info.sdk_info and info.sdk_info != identity.sdk_info:
        changes["sdk_info"] = info.sdk_info
    if not changes:
        return identity
    with env.store.write_lock():
        current = env.store.get(Identity, identity.id) or identity
        updated = dataclasses.replace(current, **changes)
        uow = UnitOfWork(env.store)
        uow.put(updated)
        env.commit(uow)
        return updated


def open_session(
    env: Env,
    sessions: ApiSessionManager,
    authenticator: Authenticator,
    method: str,
    info: LoginInfo,
    *,
    ca_id: str | None = None,
    attempt: LoginAttempt | None = None,
    bound_to: str | None = None,
) -> Login:
    """The checks every method shares, then a new API session for ``authenticator``'s identity."""
    identity = env.store.get(Identity, authenticator.identity_id)
    if identity is None:
        if attempt is not None:
            attempt.refuse("the authenticator's identity does not exist")
        raise InvalidAuthError()
    if attempt is not None:
        attempt.identity = identity
    rules = rules_for(env.store, identity)
    check_allowed(rules, method)  # its reason is the log's
    if attempt is not None and is_disabled(env, identity):
        attempt.refuse("the identity is disabled")
    check_enabled(env, identity)
    identity = record_info(env, identity, info)
    mfa_required = secondary_for(env.store, identity).require_totp or has_verified_mfa(env.store, identity.id)
    session, token = sessions.start(
        identity,
        authenticator,
        ip_address=info.ip_address,
        config_types=session_config_types(env, info.config_types),
        mfa_required=mfa_required,
        ca_id=ca_id,
        bound_to=bound_to,
    )
    return Login(session=session, token=token, identity=identity, authenticator=authenticator)
