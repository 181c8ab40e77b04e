"""The access-change log in PostgreSQL (:class:`~engine.ports.AccessChangeLog`): the table
``access_changes`` of migration 10, every process of the database reading and writing the same
rows on a connection of its own (``KeptConnection``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg

from engine.ports import AccessChangeRow
from storage.access_changes import TABLE, to_micros
from storage.postgres.connections import KeptConnection

_COLUMNS = "revision, prev, committed_us, pairs, doc"


def _row(values: Sequence[Any]) -> AccessChangeRow:
    return AccessChangeRow(
        int(values[0]),
        int(values[1]),
        datetime.fromtimestamp(int(values[2]) / 1_000_000, UTC),
        int(values[3]),
        bytes(values[4]),
    )


class PostgresAccessChangeLog:
    """Thread-safe; a statement the database does not answer is an empty answer (reads) or
    False (append: the caller tries again)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[tuple[object, ...]]]) -> None:
        self._db = KeptConnection(connect, "access changes")

    def append(self, row: AccessChangeRow) -> bool:
        rows = self._db.run(
            f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (revision) DO NOTHING RETURNING revision",
            [row.revision, row.prev, to_micros(row.committed_at), row.pairs, row.doc],
            fetch=True,
        )
        return bool(rows)

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        rows = self._db.run(
            f"SELECT {_COLUMNS} FROM {TABLE} WHERE revision > %s ORDER BY revision LIMIT %s",
            [after, limit],
            fetch=True,
        )
        return [_row(r) for r in rows or []]

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        low = self._db.run(f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY revision LIMIT 1", [], fetch=True)
        high = self._db.run(f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY revision DESC LIMIT 1", [], fetch=True)
        return (_row(low[0]) if low else None, _row(high[0]) if high else None)

    def trim(self, before: datetime) -> int:
        rows = self._db.run(
            f"DELETE FROM {TABLE} WHERE committed_us < %s "
            f"AND revision < (SELECT max(revision) FROM {TABLE}) RETURNING revision",
            [to_micros(before)],
            fetch=True,
        )
        return len(rows or [])

    def close(self) -> None:
        self._db.close()
