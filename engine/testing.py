"""Fakes of the engine's ports for tests, shipped with the package (as httpx ships ``MockTransport``).

- :class:`FixedClock`: a clock that stands still until told to move.
- :class:`CountingIds`: predictable ids (``id-1``, ``id-2``...) and UUID-shaped tokens.
- :class:`CheapHasher`: a real, salted password hasher that costs microseconds, so API tests do
  not spend their time in argon2id. Never use it outside tests: it is not memory-hard.

Tests use these instead of writing their own; the composition root takes them as keyword
arguments (``create_app(settings, clock=FixedClock(...), hasher=CheapHasher())``).
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets
import threading
import uuid
from datetime import UTC, datetime, timedelta

__all__ = ["CheapHasher", "CountingIds", "FixedClock"]


class FixedClock:
    """``now()`` is whatever it was set to; :meth:`advance` moves it forward."""

    def __init__(self, start: datetime | None = None) -> None:
        moment = start if start is not None else datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        self._now = moment.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, moment: datetime) -> None:
        self._now = moment.astimezone(UTC)

    def advance(self, delta: timedelta | None = None, **kwargs: float) -> datetime:
        """Move forward by ``delta`` or by ``timedelta(**kwargs)``; returns the new time."""
        self._now += delta if delta is not None else timedelta(**kwargs)
        return self._now


class CountingIds:
    """Ids ``<prefix>-1``, ``<prefix>-2``... and tokens that are valid, distinct UUIDv4 strings."""

    def __init__(self, prefix: str = "id") -> None:
        self.prefix = prefix
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()

    def new_id(self) -> str:
        with self._lock:
            return f"{self.prefix}-{next(self._ids)}"

    def new_token(self) -> str:
        with self._lock:
            n = next(self._tokens)
        return str(uuid.UUID(int=n, version=4))


class CheapHasher:
    """A salted SHA-256 password hash (``sha256$<salt>$<digest>``): correct and fast, for tests only."""

    _SCHEME = "sha256"

    def hash(self, password: str) -> str:
        salt = secrets.token_hex(8)
        return f"{self._SCHEME}${salt}${self._digest(salt, password)}"

    def verify(self, password: str, encoded: str) -> bool:
        parts = encoded.split("$") if isinstance(encoded, str) else []
        if len(parts) != 3 or parts[0] != self._SCHEME:
            return False
        return hmac.compare_digest(self._digest(parts[1], password), parts[2])

    def needs_rehash(self, encoded: str) -> bool:
        """True for any hash this hasher did not make (a real hasher's, say)."""
        parts = encoded.split("$") if isinstance(encoded, str) else []
        return len(parts) != 3 or parts[0] != self._SCHEME

    @staticmethod
    def _digest(salt: str, password: str) -> str:
        return hashlib.sha256(f"{salt}:{password}".encode()).hexdigest()
