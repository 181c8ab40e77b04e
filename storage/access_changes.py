"""The access-change log kept in memory (:class:`~engine.ports.AccessChangeLog`): the in-memory
store's, and the shape the durable stores' tables follow (``storage.duckdb.access_changes``,
``storage.postgres.access_changes``): one row per access-relevant batch, by revision.
"""

from __future__ import annotations

import bisect
import threading
from datetime import datetime

from engine.ports import AccessChangeRow

#: The table of the durable stores (DuckDB migration 9, PostgreSQL migration 10).
TABLE = "access_changes"


def to_micros(at: datetime) -> int:
    """``at`` (timezone-aware) as whole microseconds since the epoch, as the tables keep it."""
    return int(at.timestamp() * 1_000_000)


class MemoryAccessChangeLog:
    """Rows in a list ordered by revision (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._revisions: list[int] = []
        self._rows: list[AccessChangeRow] = []

    def append(self, row: AccessChangeRow) -> bool:
        with self._lock:
            at = bisect.bisect_left(self._revisions, row.revision)
            if at < len(self._revisions) and self._revisions[at] == row.revision:
                return False
            self._revisions.insert(at, row.revision)
            self._rows.insert(at, row)
            return True

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        with self._lock:
            at = bisect.bisect_right(self._revisions, after)
            return self._rows[at : at + max(0, limit)]

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        with self._lock:
            if not self._rows:
                return None, None
            return self._rows[0], self._rows[-1]

    def trim(self, before: datetime) -> int:
        with self._lock:
            keep = 0
            while keep < len(self._rows) - 1 and self._rows[keep].committed_at < before:
                keep += 1
            del self._rows[:keep]
            del self._revisions[:keep]
            return keep
