"""``method=password``: a username and password checked against a ``updb`` authenticator.

The order is OpenZiti's (``authenticator_mod_updb.go``): the authenticator is looked up, then its
identity's auth policy; a disabled (or locked-out) identity and a policy that does not allow
``updb`` are refused *before* the password is looked at, and the attempt is counted *before* it
is checked. Every refusal is the same 401 ``INVALID_AUTH`` and costs one password hash, so the
answer never tells whether the password was right, whether the account is locked, or whether the
username exists.

The lockout of the auth policy (``primary.updb.maxAttempts``, ``lockoutDurationMinutes``) is kept
in the environment's :class:`~engine.ports.Attempts` ledger under the authenticator
(:func:`check_password`): a password being checked counts as a failure until it proves right, so
concurrent guesses get no more than ``maxAttempts`` checks between them; when failures reach
``maxAttempts`` the identity is disabled for ``lockoutDurationMinutes`` (0: until an
administrator enables it), which also ends its API sessions. The same count covers the current
password an identity gives to change its own (``AuthenticatorManager.update_own``). A successful
check clears the count (OpenZiti never does; the count would otherwise lock out an identity that
only ever mistyped once a day). ``maxAttempts: 0`` counts nothing. The default admin is never
locked out: a lockout without end would leave nobody able to enable anyone.

A stored hash the hasher would no longer make (``PasswordHasher.needs_rehash``: a scrypt hash from
before argon2id, or other parameters) is replaced at the identity's next successful password
login, through the store's write path like any other authenticator change, and only if it is
still the hash the password was checked against (a password changed meanwhile stays). It is not
a password change: the API sessions stay, ``updatedAt`` is kept, and ``password.rehashed`` is
logged (INFO). The unknown-username path wastes its time on a hash the hasher makes now, so an
unknown username costs what a known one does.
"""

from __future__ import annotations

import dataclasses
import logging

from engine.attempts import password_key
from engine.entities.identities import Authenticator, Identity
from engine.errors import InvalidAuthError
from engine.logs import event
from engine.managers._base import Env
from engine.managers.auth_policies import rules_for
from engine.managers.authentication._core import LoginAttempt, check_allowed, is_disabled, log
from engine.managers.identities import disable_identity
from engine.ports import Lockout, UnitOfWork

# Verified against when the username is unknown, so that a miss costs what a wrong password costs.
_DUMMY_PASSWORD = "trellis-timing-equaliser"


class PasswordCheck:
    def __init__(self, env: Env) -> None:
        self.env = env
        self._dummy_hash = env.hasher.hash(_DUMMY_PASSWORD)

    def authenticator(
        self, username: str, password: str, attempt: LoginAttempt | None = None
    ) -> Authenticator:
        """The ``updb`` authenticator ``username``/``password`` prove, or ``INVALID_AUTH``
        (``attempt`` learns who it was for and why it was refused)."""
        note = attempt if attempt is not None else LoginAttempt("password")
        note.username = username
        found = self.env.store.find_unique(Authenticator, "username", username)
        if found is None and self.env.store.catch_up():
            # another process of a shared store may have made it a moment ago: look again
            found = self.env.store.find_unique(Authenticator, "username", username)
        identity = self.env.store.get(Identity, found.identity_id) if found is not None else None
        if found is None or identity is None or found.method != "updb" or not found.password_hash:
            note.refuse("unknown username" if found is None else "not a password authenticator", identity)
            self.waste(password)
            raise InvalidAuthError()
        note.identity = identity
        if is_disabled(self.env, identity):
            note.refuse("the identity is disabled")
            self.waste(password)
            raise InvalidAuthError()
        try:
            check_allowed(rules_for(self.env.store, identity), "updb")
        except InvalidAuthError:
            self.waste(password)
            raise
        if not check_password(self.env, found, identity, password, dummy_hash=self._dummy_hash, login=note):
            raise InvalidAuthError()
        return self.upgrade(found, password)

    def upgrade(self, checked: Authenticator, password: str) -> Authenticator:
        """``checked`` with its password hashed anew when its stored hash is not one the hasher
        makes now (``password`` was just proved right against it); else ``checked`` itself."""
        old_hash = checked.password_hash
        if not old_hash or not self.env.hasher.needs_rehash(old_hash):
            return checked
        new_hash = self.env.hasher.hash(password)  # before the write lock: writers never wait for it
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            current = uow.get(Authenticator, checked.id)
            if current is None or current.password_hash != old_hash:
                return checked  # deleted or changed since it was checked: nothing to upgrade
            upgraded = dataclasses.replace(current, password_hash=new_hash)
            uow.put(upgraded)
            self.env.commit(uow)
        event(
            log,
            logging.INFO,
            "password.rehashed",
            identity_id=upgraded.identity_id,
            authenticator_id=upgraded.id,
            was=old_hash.lstrip("$").split("$", 1)[0][:16],
        )
        return upgraded

    def waste(self, password: str) -> None:
        """Spend what a password check costs, on nothing (a refusal decided without one)."""
        self.env.hasher.verify(password, self._dummy_hash)

    def failures(self, authenticator_id: str) -> int:
        """Failed attempts counted against an authenticator since its last success or lockout."""
        return self.env.attempts.failures(password_key(authenticator_id))


def check_password(
    env: Env,
    authenticator: Authenticator,
    identity: Identity,
    password: str,
    *,
    dummy_hash: str | None = None,
    login: LoginAttempt | None = None,
) -> bool:
    """Whether ``password`` is ``authenticator``'s, counted against the identity's lockout.

    The guess takes its place in the ledger before the hash is compared; a guess refused a place
    (as many failed or pending as ``maxAttempts``) is wrong without being compared (the time of a
    comparison is spent on ``dummy_hash`` when given). The failure that reaches ``maxAttempts``
    locks the identity out (``identity.locked_out``, WARNING). ``login`` learns why a password
    was refused.
    """
    note = login if login is not None else LoginAttempt("password")
    if not authenticator.password_hash:
        return False
    updb = rules_for(env.store, identity).updb
    max_attempts = 0 if identity.is_default_admin else updb.max_attempts
    rule = Lockout(max_attempts)
    key = password_key(authenticator.id)
    ledger = env.attempts
    attempt = ledger.begin(key, env.clock.now().timestamp(), rule)
    if not attempt.granted:
        note.refuse(f"refused unchecked: {max_attempts} attempts failed or pending")
        if dummy_hash is not None:
            env.hasher.verify(password, dummy_hash)
        return False
    try:
        right = env.hasher.verify(password, authenticator.password_hash)
    except BaseException:
        ledger.abandon(attempt)
        raise
    if right:
        ledger.succeed(attempt)
        return True
    failures = ledger.fail(attempt, env.clock.now().timestamp(), rule)
    note.refuse("wrong password")
    if max_attempts > 0 and failures >= max_attempts:
        _lock_out(env, identity.id, updb.lockout_duration_minutes, failures)
        ledger.forget(key)
    return False


def _lock_out(env: Env, identity_id: str, minutes: int, failures: int) -> None:
    with env.store.write_lock():
        uow = UnitOfWork(env.store)
        identity = uow.get(Identity, identity_id)
        if identity is None or is_disabled(env, identity):
            return
        locked = disable_identity(uow, identity, minutes, env.clock.now())
        env.commit(uow)
    until = locked.disabled_until
    event(
        log,
        logging.WARNING,
        "identity.locked_out",
        identity_id=locked.id,
        identity_name=locked.name,
        failures=failures,
        until=until.isoformat() if until is not None else "enabled by an administrator",
    )
