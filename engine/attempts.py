"""Guesses at secrets, counted before each is checked: the one place lockouts and throttles live.

Every check of a guessable secret (a password at login or at a change of one's own password, a
TOTP or recovery code) goes through an :class:`~engine.ports.Attempts` ledger in three steps:

1. :meth:`~MemoryAttempts.begin` takes a place for the guess *before* the secret is looked at.
   The guess counts from then on: a guess still being checked counts as much as a failed one, so
   32 guesses sent at once under ``maxAttempts: 3`` get three places and 29 refusals, and no
   fourth guess is ever checked, however many connections they come on;
2. the caller checks the secret (a password hash, a code), outside the ledger's lock;
3. :meth:`~MemoryAttempts.fail` or :meth:`~MemoryAttempts.succeed` settles the place
   (:meth:`~MemoryAttempts.abandon` when the check itself could not run: it counts nothing).

Two rules decide whether a guess gets a place (:class:`~engine.ports.Lockout`,
:class:`~engine.ports.Backoff`): a lockout's guesses are refused once failed and pending ones
reach its limit (the caller then locks the identity out and :meth:`~MemoryAttempts.forget` s the
key); a backoff's past its free failures are taken one at a time, each failure doubling the wait
before the next (up to a cap). A success clears the key.

:meth:`~MemoryAttempts.claim` keeps the last value claimed per key and refuses any not above it:
a TOTP time step once accepted (RFC 6238 §5.2: a code is accepted once).

This is kept in process memory: a restart forgets pending counts (a lockout itself is stored on
the identity). A deployment of several controller processes implements the same port on shared
storage; nothing else needs to change. Memory is bounded: a key is dropped once it holds nothing
(no failure, no pending guess, no wait), and claims older than ``claim_ttl`` are pruned.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from engine.ports import Attempt, Backoff, Lockout


def password_key(authenticator_id: str) -> str:
    """The key of a ``updb`` authenticator's password guesses (its auth policy's lockout)."""
    return f"updb:{authenticator_id}"


def code_key(identity_id: str) -> str:
    """The key of an identity's MFA code guesses (TOTP and recovery codes)."""
    return f"mfa:{identity_id}"


def step_key(identity_id: str) -> str:
    """The claim key of an identity's last accepted TOTP time step."""
    return f"totp-step:{identity_id}"


#: Claims are pruned once this many are held (the oldest past their time to live first).
_PRUNE_CLAIMS_AT = 4096


@dataclass
class _Key:
    failures: int = 0
    pending: int = 0
    #: Seconds (the caller's clock) before which a backoff refuses every guess.
    blocked_until: float = 0.0

    @property
    def idle(self) -> bool:
        return self.failures == 0 and self.pending == 0 and self.blocked_until == 0.0


class MemoryAttempts:
    """The in-process :class:`~engine.ports.Attempts` ledger (thread-safe)."""

    def __init__(self, claim_ttl: float = 600.0) -> None:
        self.claim_ttl = claim_ttl
        self._keys: dict[str, _Key] = {}
        self._claims: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def begin(self, key: str, at: float, rule: Lockout | Backoff) -> Attempt:
        with self._lock:
            state = self._keys.get(key) or _Key()
            if isinstance(rule, Lockout):
                if rule.max_attempts > 0 and state.failures + state.pending >= rule.max_attempts:
                    return Attempt(key, granted=False)
            else:
                if state.blocked_until > at:
                    return Attempt(key, granted=False, retry_after=state.blocked_until - at)
                past_free = state.failures + state.pending >= rule.free
                if past_free and state.pending > 0:  # past the free ones: one guess at a time
                    return Attempt(key, granted=False, retry_after=rule.base)
            state.pending += 1
            self._keys[key] = state
            return Attempt(key, granted=True)

    def fail(self, attempt: Attempt, at: float, rule: Lockout | Backoff) -> int:
        if not attempt.granted:
            return 0
        with self._lock:
            state = self._keys.setdefault(attempt.key, _Key())
            state.pending = max(0, state.pending - 1)
            state.failures += 1
            if isinstance(rule, Backoff) and state.failures >= rule.free:
                wait = rule.base * 2.0 ** min(state.failures - rule.free, 32)
                state.blocked_until = at + min(rule.cap, wait)
            return state.failures

    def succeed(self, attempt: Attempt) -> None:
        if not attempt.granted:
            return
        with self._lock:
            state = self._keys.get(attempt.key)
            if state is None:
                return
            state.pending = max(0, state.pending - 1)
            state.failures = 0
            state.blocked_until = 0.0
            self._drop_if_idle(attempt.key, state)

    def abandon(self, attempt: Attempt) -> None:
        if not attempt.granted:
            return
        with self._lock:
            state = self._keys.get(attempt.key)
            if state is not None:
                state.pending = max(0, state.pending - 1)
                self._drop_if_idle(attempt.key, state)

    def failures(self, key: str) -> int:
        with self._lock:
            state = self._keys.get(key)
            return state.failures if state is not None else 0

    def forget(self, key: str) -> None:
        with self._lock:
            state = self._keys.get(key)
            if state is not None:
                state.failures = 0
                state.blocked_until = 0.0
                self._drop_if_idle(key, state)

    def claim(self, key: str, value: int, at: float) -> bool:
        with self._lock:
            held = self._claims.get(key)
            if held is not None and held[0] >= value:
                return False
            self._claims[key] = (value, at)
            if len(self._claims) > _PRUNE_CLAIMS_AT:
                self._prune_claims(at)
            return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._keys) + len(self._claims)

    def _drop_if_idle(self, key: str, state: _Key) -> None:
        if state.idle:
            self._keys.pop(key, None)

    def _prune_claims(self, at: float) -> None:
        stale = [k for k, (_, when) in self._claims.items() if at - when > self.claim_ttl]
        for k in stale:
            del self._claims[k]
