"""Built-in entities every controller has: the default auth policy and the default admin."""

from __future__ import annotations

from typing import Any

from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.entities.trust import AuthPolicy
from engine.managers._base import Env
from engine.managers.identities import IdentityManager
from engine.ports import UnitOfWork

DEFAULT_ADMIN_NAME = "Default Admin"


def default_auth_policy_fields() -> dict[str, Any]:
    """OpenZiti's built-in ``default`` auth policy: every primary method allowed, no MFA."""
    return {
        "name": "Default",
        "primary": {
            "cert": {"allowExpiredCerts": True, "allowed": True},
            "extJwt": {"allowed": True, "allowedSigners": None},
            "updb": {
                "allowed": True,
                "lockoutDurationMinutes": 0,
                "maxAttempts": 0,
                "minPasswordLength": 5,
                "requireMixedCase": False,
                "requireNumberChar": False,
                "requireSpecialChar": False,
            },
        },
        "secondary": {"requireExtJwtSigner": None, "requireTotp": False},
    }


def ensure_builtins(env: Env) -> None:
    with env.store.write_lock():
        if env.store.get(AuthPolicy, DEFAULT_AUTH_POLICY_ID) is None:
            now = env.clock.now()
            uow = UnitOfWork(env.store)
            uow.put(
                AuthPolicy(
                    id=DEFAULT_AUTH_POLICY_ID, created_at=now, updated_at=now, **default_auth_policy_fields()
                )
            )
            env.commit(uow)


def has_default_admin(env: Env) -> bool:
    return any(i.is_default_admin for i in env.store.all(Identity))


def create_default_admin(env: Env, username: str, password: str) -> Identity:
    """The first admin: identity ``Default Admin`` with a username/password authenticator."""
    fields = {"name": DEFAULT_ADMIN_NAME, "is_admin": True, "is_default_admin": True, "type_id": "Default"}
    return IdentityManager(env).create_with_password(fields, username, password)
