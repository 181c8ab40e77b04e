"""``method=password``: a username and password checked against a ``updb`` authenticator.

The lockout of the identity's auth policy (``primary.updb.maxAttempts``,
``lockoutDurationMinutes``) is enforced here, as OpenZiti's ``authenticator_mod_updb.go`` does:
failed attempts are counted per authenticator in memory, and when they reach ``maxAttempts`` the
identity is disabled for ``lockoutDurationMinutes`` (0: until an administrator enables it), which
also ends its API sessions. A successful login resets the count (OpenZiti never does; the count
would otherwise lock out an identity that only ever mistyped once a day). ``maxAttempts: 0``
counts nothing. The default admin is never locked out: a lockout without end would leave nobody
able to enable anyone.
"""

from __future__ import annotations

import threading

from engine.entities.identities import Authenticator, Identity
from engine.errors import InvalidAuthError
from engine.managers._base import Env
from engine.managers.auth_policies import rules_for
from engine.managers.authentication._core import is_disabled
from engine.managers.identities import disable_identity
from engine.ports import PasswordHasher, UnitOfWork

# Verified against when the username is unknown, so that a miss costs what a wrong password costs.
_DUMMY_PASSWORD = "trellis-timing-equaliser"


class PasswordCheck:
    def __init__(self, env: Env) -> None:
        self.env = env
        self._hasher: PasswordHasher = env.hasher
        self._dummy_hash = env.hasher.hash(_DUMMY_PASSWORD)
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()

    def authenticator(self, username: str, password: str) -> Authenticator:
        """The ``updb`` authenticator ``username``/``password`` prove, or ``INVALID_AUTH``."""
        found = self.env.store.find_unique(Authenticator, "username", username)
        if found is None or found.method != "updb" or not found.password_hash:
            self._hasher.verify(password, self._dummy_hash)
            raise InvalidAuthError()
        if not self._hasher.verify(password, found.password_hash):
            self._failed(found)
            raise InvalidAuthError()
        with self._lock:
            self._failures.pop(found.id, None)
        return found

    def failures(self, authenticator_id: str) -> int:
        """Failed attempts counted against an authenticator since its last success or lockout."""
        with self._lock:
            return self._failures.get(authenticator_id, 0)

    def _failed(self, authenticator: Authenticator) -> None:
        identity = self.env.store.get(Identity, authenticator.identity_id)
        if identity is None or identity.is_default_admin or is_disabled(self.env, identity):
            return
        updb = rules_for(self.env.store, identity).updb
        if updb.max_attempts <= 0:
            return
        with self._lock:
            count = self._failures.get(authenticator.id, 0) + 1
            locked = count >= updb.max_attempts
            self._failures[authenticator.id] = 0 if locked else count
        if locked:
            self._lock_out(identity.id, updb.lockout_duration_minutes)

    def _lock_out(self, identity_id: str, minutes: int) -> None:
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            identity = uow.get(Identity, identity_id)
            if identity is None:
                return
            disable_identity(uow, identity, minutes, self.env.clock.now())
            self.env.commit(uow)
