"""``updb``: a one-time token lets its holder set the password of a username/password authenticator.

The username is the enrollment's (an administrator chose it); a ``username`` in the body is
ignored, as OpenZiti does. The password must satisfy the identity's auth policy (``primary.updb``: minimum length,
mixed case, a digit, a special character) and is never echoed in an error.
"""

from __future__ import annotations

from typing import Any

from engine.entities.identities import Authenticator
from engine.entities.trust import AuthPolicy
from engine.errors import AlreadyEnrolledError, FieldError
from engine.managers._base import Env
from engine.managers.enrollment._core import UPDB, claim, claim_identity
from engine.ports import UnitOfWork

PASSWORD_MAX = 100
_SPECIAL = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ")


def password_problem(rules: dict[str, Any], password: str) -> str | None:
    """Why ``password`` breaks an auth policy's ``primary.updb`` rules, or None."""
    minimum = max(int(rules.get("minPasswordLength") or 5), 5)
    if len(password) < minimum:
        return f"password must be at least {minimum} characters"
    if len(password) > PASSWORD_MAX:
        return f"password must be at most {PASSWORD_MAX} characters"
    if rules.get("requireMixedCase") and not (
        any(c.islower() for c in password) and any(c.isupper() for c in password)
    ):
        return "password must contain upper and lower case letters"
    if rules.get("requireNumberChar") and not any(c.isdigit() for c in password):
        return "password must contain a number"
    if rules.get("requireSpecialChar") and not any(c in _SPECIAL or not c.isalnum() for c in password):
        return "password must contain a special character"
    return None


def enroll(env: Env, token: str | None, username: str | None, password: str | None) -> Authenticator:
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        enrollment = claim(uow, env, token, UPDB)
        identity = claim_identity(uow, enrollment)
        if any(a.method == "updb" for a in uow.find_by(Authenticator, "identity_id", identity.id)):
            raise AlreadyEnrolledError()
        name = enrollment.username or username
        if not name:
            raise FieldError("username", "username is required")
        if not password:
            raise FieldError("password", "password is required")
        policy = uow.get(AuthPolicy, identity.auth_policy_id)
        problem = password_problem(dict((policy.primary if policy else {}).get("updb") or {}), password)
        if problem is not None:
            raise FieldError("password", problem)
        other = uow.store.find_unique(Authenticator, "username", name)
        if other is not None and uow.get(Authenticator, other.id) is not None:
            raise FieldError(
                "username", f"duplicate value '{name}' in unique index on authenticators store", name
            )
        now = env.clock.now()
        authenticator = Authenticator(
            id=env.ids.new_id(),
            created_at=now,
            updated_at=now,
            identity_id=identity.id,
            method="updb",
            username=name,
            password_hash=env.hasher.hash(password),
        )
        uow.put(authenticator)
        uow.delete(type(enrollment), enrollment.id)
        env.commit(uow)
        return authenticator
