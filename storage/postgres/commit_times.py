"""When the change log's batches were committed, as every process of a PostgreSQL database tells it.

Every change-log entry carries ``committed_at``, its transaction's time (``now()``: one per
batch), so each process reads the same time for the same batch whether it committed it or
followed it. :class:`PostgresCommitTimes` is the :class:`~engine.ports.CommitTimes` of a
PostgreSQL store: a batch's time is read once (then kept, :data:`KEEP`); a batch the log no longer
holds (trimmed, ``TRELLIS_CHANGE_LOG_RETAIN``) is given the time of the next one still there.

The epoch: a process that starts knows nothing of what was marked before, so the time it starts
(the database's clock, as commit times) is the least it may answer for anything, and every other
process must answer no less (as one controller's restart makes every client refresh once). It is
kept in the ``settings`` table (``service_updates_epoch``, fixed-width UTC ISO 8601, raised with
``GREATEST``, never lowered) and read again at most every :data:`EPOCH_SECONDS`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

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


#: The database's time now as the setting keeps it: fixed-width UTC, so that text order is time order.
NOW_TEXT = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"+00:00\"')"


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

    def started(self) -> datetime | None:
        rows = self._db.run(
            f"INSERT INTO {SETTINGS_TABLE} (key, value) VALUES (%s, {NOW_TEXT}) "
            f"ON CONFLICT (key) DO UPDATE SET value = GREATEST({SETTINGS_TABLE}.value, EXCLUDED.value) "
            "RETURNING value",
            [EPOCH_KEY],
            fetch=True,
        )
        if not rows:
            return None
        try:
            epoch = datetime.fromisoformat(str(rows[0][0]))
        except ValueError:
            return None
        with self._lock:
            self._epoch, self._epoch_read = epoch, time.monotonic()
        return epoch

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
