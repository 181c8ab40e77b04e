"""Database snapshots (``POST /database/snapshot``): a consistent copy of the database beside it.

As OpenZiti's ``Network.SnapshotDatabase``: at most one snapshot a minute (another within the
minute is ``RATE_LIMITED``), named ``<db file>-YYYYMMDD-HHMMSS``; a snapshot of that name that
already exists is kept. The copy is the store's own (:meth:`engine.ports.Store.snapshot`), taken
under the write lock while reads go on. The data integrity fix takes one first, unthrottled, as
OpenZiti's ``CheckIntegrityInTx`` does.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from engine.errors import RateLimitedError, SnapshotNotSupportedError
from engine.managers._base import Env
from engine.ports import SnapshotUnsupportedError

#: OpenZiti's ``DbSnapshotTooFrequentError``: "may snapshot database at most once per minute".
MIN_INTERVAL = timedelta(minutes=1)


class DatabaseManager:
    """Snapshots of the durable store, throttled to one a minute."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self._lock = threading.Lock()
        self._last: datetime | None = None

    def snapshot(self) -> str:
        """Take a snapshot now and return its path (what ``POST /database/snapshot`` answers);
        ``RateLimitedError`` within a minute of the last; ``SnapshotNotSupportedError`` (with the
        store's reason) where the store keeps no file to copy."""
        with self._lock:
            now = self.env.clock.now()
            if self._last is not None and now < self._last + MIN_INTERVAL:
                raise RateLimitedError()
            try:
                path = self.env.store.snapshot(now)
            except SnapshotUnsupportedError as ex:
                raise SnapshotNotSupportedError(str(ex) or None) from None
            self._last = now
            return path

    def snapshot_unthrottled(self) -> str:
        """A snapshot whatever the last one's time (before a data integrity fix)."""
        return self.env.store.snapshot(self.env.clock.now())
