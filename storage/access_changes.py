"""The access-change log kept in memory (:class:`~engine.ports.AccessChangeLog`): the in-memory
store's, and the shape the durable stores' tables follow (``storage.duckdb.access_changes``,
``storage.postgres.access_changes``): one row per access-relevant batch, by revision.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from engine.ports import AccessChangeRow

#: The table of the durable stores (DuckDB migration 9, PostgreSQL migration 10).
TABLE = "access_changes"
#: Its columns, in the order of :class:`~engine.ports.AccessChangeRow`'s fields.
COLUMNS = "revision, prev, committed_us, pairs, doc"


def to_micros(at: datetime) -> int:
    """``at`` (timezone-aware) as whole microseconds since the epoch, as the tables keep it."""
    return int(at.timestamp() * 1_000_000)


class Statements(NamedTuple):
    """The durable stores' SQL, with their parameter mark (DuckDB ``?``, psycopg ``%s``)."""

    insert: str
    read: str
    first: str
    last: str
    trim: str

    @classmethod
    def marked(cls, mark: str) -> Statements:
        return cls(
            insert=f"INSERT INTO {TABLE} ({COLUMNS}) VALUES ({', '.join([mark] * 5)}) "
            "ON CONFLICT (revision) DO NOTHING RETURNING revision",
            read=f"SELECT {COLUMNS} FROM {TABLE} WHERE revision > {mark} ORDER BY revision LIMIT {mark}",
            first=f"SELECT {COLUMNS} FROM {TABLE} ORDER BY revision LIMIT 1",
            last=f"SELECT {COLUMNS} FROM {TABLE} ORDER BY revision DESC LIMIT 1",
            # the newest row stays, whatever its age: the log's end is where a reader resumes
            trim=f"DELETE FROM {TABLE} WHERE committed_us < {mark} "
            f"AND revision < (SELECT max(revision) FROM {TABLE}) RETURNING revision",
        )


def values_of(row: AccessChangeRow) -> list[Any]:
    """``row`` as the values of :data:`COLUMNS`."""
    return [row.revision, row.prev, to_micros(row.committed_at), row.pairs, row.doc]


def row_of(values: Sequence[Any]) -> AccessChangeRow:
    """A row of :data:`COLUMNS` as read back."""
    return AccessChangeRow(
        int(values[0]),
        int(values[1]),
        datetime.fromtimestamp(int(values[2]) / 1_000_000, UTC),
        int(values[3]),
        bytes(values[4]),
    )


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
