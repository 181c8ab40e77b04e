"""When the change log's batches were committed, as every process of a PostgreSQL database tells it.

Every change-log entry carries ``committed_at``, its transaction's time (``now()``: one per
batch), so each process reads the same time for the same batch whether it committed it or
followed it. :class:`PostgresCommitTimes` is the :class:`~engine.ports.CommitTimes` of a
PostgreSQL store: a batch's time is read once (then kept, :data:`KEEP`); a batch the log no longer
holds (trimmed, ``TRELLIS_CHANGE_LOG_RETAIN``) is given the time of the next one still there.

The epoch: a process that starts knows nothing of what happened before it loaded the database,
so the time of the batch it loaded at is the least it may answer for anything, and every other
process must answer no less. It is kept in the ``settings`` table (``service_updates_epoch``, UTC
ISO 8601, raised with ``GREATEST``, never lowered) and read again at most every
:data:`EPOCH_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg

from storage.postgres.connections import KeptConnection
from storage.postgres.migrations import CHANGE_LOG_TABLE, SETTINGS_TABLE

#: The setting holding the epoch.
EPOCH_KEY = "service_updates_epoch"
#: How long the epoch read is used before it is read again.
EPOCH_SECONDS = 1.0
#: Batch times kept.
KEEP = 4096

Connection = psycopg.Connection[tuple[object, ...]]


def _text(at: datetime) -> str:
    """``at`` as the setting keeps it: fixed-width UTC, so that text order is time order."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class PostgresCommitTimes:
    """The :class:`~engine.ports.CommitTimes` of a PostgreSQL database (thread-safe)."""

    shared = True

    def __init__(self, connect: Callable[[], Connection], *, epoch_seconds: float = EPOCH_SECONDS) -> None:
        self._db = KeptConnection(connect, "commit times")
        self.epoch_seconds = epoch_seconds
        self._times: OrderedDict[int, datetime] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch: datetime | None = None
        self._epoch_read = -float("inf")

    def at(self, seq: int) -> datetime | None:
        with self._lock:
            known = self._times.get(seq)
            if known is not None:
                self._times.move_to_end(seq)
                return known
        rows = self._db.run(
            f"SELECT committed_at FROM {CHANGE_LOG_TABLE} WHERE seq >= %s ORDER BY seq LIMIT 1",
            [seq],
            fetch=True,
        )
        if not rows or not isinstance(rows[0][0], datetime):
            return None
        at: datetime = rows[0][0]
        with self._lock:
            self._times[seq] = at
            while len(self._times) > KEEP:
                self._times.popitem(last=False)
        return at

    def started(self, seq: int) -> datetime | None:
        at = self.at(seq) if seq > 0 else None
        if at is None:
            return None
        done = self._db.run(
            f"INSERT INTO {SETTINGS_TABLE} (key, value) VALUES (%s, %s) "
            f"ON CONFLICT (key) DO UPDATE SET value = GREATEST({SETTINGS_TABLE}.value, EXCLUDED.value)",
            [EPOCH_KEY, _text(at)],
        )
        if done is not None:
            with self._lock:
                self._epoch_read = -float("inf")  # read it again: another may have raised it more
        return at

    def epoch(self) -> datetime | None:
        now = time.monotonic()
        with self._lock:
            if now - self._epoch_read < self.epoch_seconds:
                return self._epoch
        rows = self._db.run(f"SELECT value FROM {SETTINGS_TABLE} WHERE key = %s", [EPOCH_KEY], fetch=True)
        with self._lock:
            if rows is None:
                return self._epoch  # the last one read: the database did not answer
            self._epoch_read = now
            if rows:
                try:
                    epoch = datetime.fromisoformat(str(rows[0][0]))
                except ValueError:
                    return self._epoch
                if self._epoch is None or epoch > self._epoch:
                    self._epoch = epoch
            return self._epoch

    def close(self) -> None:
        self._db.close()
