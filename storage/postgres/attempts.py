"""Guesses at secrets counted in the PostgreSQL database: one ledger for every process.

:class:`~engine.attempts.MemoryAttempts` counts a process's guesses in its memory, so N workers
on one database would give an attacker N times the guesses an auth policy allows (and N times
the MFA codes before the backoff). :class:`PostgresAttempts` keeps the same ledger, with the same
rules (see :mod:`engine.attempts`: a place taken before the secret is checked, a lockout counting
pending guesses as failed ones, a backoff taking one guess at a time past its free failures, a
claim refused unless above the last one), in two tables every process shares. Each operation is
one short transaction that locks the key's row, so guesses sent to several processes at once are
counted as if they were sent to one.

The tables are ``UNLOGGED``: no write-ahead log to wait for on every guess. A crash of the
PostgreSQL server empties them, as a restart of a one-process controller empties its memory
(the lockout itself is stored on the identity, through the change log). A place taken by a
process that died before settling it would count for ever: a pending guess older than
:data:`PENDING_SECONDS` no longer counts.

Should the database not answer, the guess is refused with 503 ``COMMIT_FAILED``
(:class:`~engine.errors.CommitFailedError`): a ledger that cannot count never lets a guess through
uncounted.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from engine.errors import CommitFailedError
from engine.ports import Attempt, Backoff, Lockout
from storage.postgres.connections import alive

log = logging.getLogger(__name__)

ATTEMPTS_TABLE = "attempts"
CLAIMS_TABLE = "attempt_claims"
#: A pending guess older than this (seconds) was left by a process that died while checking it.
PENDING_SECONDS = 120.0
#: Claims are pruned (those older than ``claim_ttl``) once every this many claims.
PRUNE_EVERY = 1000

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresAttempts:
    """The :class:`~engine.ports.Attempts` ledger in the database (thread-safe; one connection,
    opened with ``connect`` and again after it fails)."""

    def __init__(self, connect: Callable[[], Connection], *, claim_ttl: float = 600.0) -> None:
        self.claim_ttl = claim_ttl
        self._connect = connect
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._claims = 0

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[tuple[object, ...]]]:
        """A transaction on the ledger's connection; a database that fails is a 503."""
        with self._lock:
            try:
                conn = self._conn
                if not alive(conn):  # a server restarted since: a new connection, not a refusal
                    if conn is not None:
                        conn.close()
                    self._conn = None
                    conn = self._conn = self._connect()
                assert conn is not None
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.Error as ex:
                log.warning("the attempts ledger cannot reach the database: %s", " ".join(str(ex).split()))
                raise CommitFailedError("the guess could not be counted") from None

    @staticmethod
    def _row(cur: psycopg.Cursor[tuple[object, ...]], key: str) -> tuple[int, int, float, float]:
        """(failures, pending, pending_at, blocked_until) of ``key``, its row locked until the
        transaction ends (made if absent). One upsert: PostgreSQL makes its outcome atomic, where
        an insert-if-absent then a ``SELECT ... FOR UPDATE`` found nothing when another process
        dropped the row between the two."""
        cur.execute(
            f"INSERT INTO {ATTEMPTS_TABLE} AS a (key) VALUES (%s) ON CONFLICT (key) DO UPDATE SET key = a.key "
            "RETURNING failures, pending, pending_at, blocked_until",
            [key],
        )
        row = cur.fetchone()
        assert row is not None
        return int(str(row[0])), int(str(row[1])), float(str(row[2])), float(str(row[3]))

    @staticmethod
    def _store(
        cur: psycopg.Cursor[tuple[object, ...]],
        key: str,
        failures: int,
        pending: int,
        pending_at: float,
        blocked_until: float,
    ) -> None:
        """Write ``key``'s row back, or drop it once it holds nothing."""
        if failures == 0 and pending == 0 and blocked_until == 0.0:
            cur.execute(f"DELETE FROM {ATTEMPTS_TABLE} WHERE key = %s", [key])
            return
        cur.execute(
            f"UPDATE {ATTEMPTS_TABLE} SET failures = %s, pending = %s, pending_at = %s, "
            "blocked_until = %s WHERE key = %s",
            [failures, pending, pending_at, blocked_until, key],
        )

    def begin(self, key: str, at: float, rule: Lockout | Backoff) -> Attempt:
        with self._transaction() as cur:
            failures, pending, pending_at, blocked_until = self._row(cur, key)
            if pending and at - pending_at > PENDING_SECONDS:
                pending = 0  # left by a process that ended while checking them
            attempt: Attempt | None = None
            if isinstance(rule, Lockout):
                if rule.max_attempts > 0 and failures + pending >= rule.max_attempts:
                    attempt = Attempt(key, granted=False)
            elif blocked_until > at:
                attempt = Attempt(key, granted=False, retry_after=blocked_until - at)
            elif failures + pending >= rule.free and pending > 0:  # past the free ones: one at a time
                attempt = Attempt(key, granted=False, retry_after=rule.base)
            if attempt is None:
                pending, pending_at = pending + 1, at
                attempt = Attempt(key, granted=True)
            self._store(cur, key, failures, pending, pending_at, blocked_until)
            return attempt

    def fail(self, attempt: Attempt, at: float, rule: Lockout | Backoff) -> int:
        if not attempt.granted:
            return 0
        with self._transaction() as cur:
            failures, pending, pending_at, blocked_until = self._row(cur, attempt.key)
            failures += 1
            if isinstance(rule, Backoff) and failures >= rule.free:
                wait = rule.base * 2.0 ** min(failures - rule.free, 32)
                blocked_until = at + min(rule.cap, wait)
            self._store(cur, attempt.key, failures, max(0, pending - 1), pending_at, blocked_until)
            return failures

    def succeed(self, attempt: Attempt) -> None:
        if not attempt.granted:
            return
        with self._transaction() as cur:
            _, pending, pending_at, _ = self._row(cur, attempt.key)
            self._store(cur, attempt.key, 0, max(0, pending - 1), pending_at, 0.0)

    def abandon(self, attempt: Attempt) -> None:
        if not attempt.granted:
            return
        with self._transaction() as cur:
            failures, pending, pending_at, blocked_until = self._row(cur, attempt.key)
            self._store(cur, attempt.key, failures, max(0, pending - 1), pending_at, blocked_until)

    def failures(self, key: str) -> int:
        with self._transaction() as cur:
            cur.execute(f"SELECT failures FROM {ATTEMPTS_TABLE} WHERE key = %s", [key])
            row = cur.fetchone()
            return int(str(row[0])) if row is not None else 0

    def forget(self, key: str) -> None:
        with self._transaction() as cur:
            _, pending, pending_at, _ = self._row(cur, key)
            self._store(cur, key, 0, pending, pending_at, 0.0)

    def claim(self, key: str, value: int, at: float) -> bool:
        with self._transaction() as cur:
            cur.execute(
                f"INSERT INTO {CLAIMS_TABLE} AS c (key, value, at) VALUES (%s, %s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, at = EXCLUDED.at "
                "WHERE c.value < EXCLUDED.value RETURNING key",
                [key, value, at],
            )
            claimed = cur.fetchone() is not None
            self._claims += 1
            if self._claims % PRUNE_EVERY == 0:
                cur.execute(f"DELETE FROM {CLAIMS_TABLE} WHERE at < %s", [at - self.claim_ttl])
            return claimed

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
