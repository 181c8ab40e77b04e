"""``updb``: a one-time token lets its holder set the password of a username/password authenticator.

The username is the enrollment's (an administrator chose it); a ``username`` in the body is
ignored, as OpenZiti does. The password must satisfy the identity's auth policy (``primary.updb``: minimum length,
mixed case, a digit, a special character) and is never echoed in an error.
"""

from __future__ import annotations

from engine.entities.identities import Authenticator
from engine.errors import AlreadyEnrolledError, FieldError
from engine.managers._base import Env
from engine.managers.auth_policies import password_problem, rules_for
from engine.managers.enrollment._core import UPDB, claim, claim_identity
from engine.managers.usernames import check_username
from engine.ports import UnitOfWork


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
        problem = password_problem(rules_for(uow, identity).updb, password)
        if problem is not None:
            raise FieldError("password", problem)
        check_username(uow, name, None)
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
