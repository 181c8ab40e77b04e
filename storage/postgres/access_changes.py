"""The access-change log in PostgreSQL (:class:`~engine.ports.AccessChangeLog`): the table
``access_changes`` of migration 10, every process of the database reading and writing the same
rows on a connection of its own (``KeptConnection``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import psycopg

from engine.ports import AccessChangeRow
from storage.access_changes import Statements, row_of, to_micros, values_of
from storage.postgres.connections import KeptConnection

SQL = Statements.marked("%s")


class PostgresAccessChangeLog:
    """Thread-safe; a statement the database does not answer is an empty answer (reads) or
    False (append: the caller tries again)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[tuple[object, ...]]]) -> None:
        self._db = KeptConnection(connect, "access changes")

    def append(self, row: AccessChangeRow) -> bool:
        return bool(self._db.run(SQL.insert, values_of(row), fetch=True))

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        return [row_of(r) for r in self._db.run(SQL.read, [after, limit], fetch=True) or []]

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        low = self._db.run(SQL.first, [], fetch=True)
        high = self._db.run(SQL.last, [], fetch=True)
        return (row_of(low[0]) if low else None, row_of(high[0]) if high else None)

    def trim(self, before: datetime) -> int:
        return len(self._db.run(SQL.trim, [to_micros(before)], fetch=True) or [])

    def close(self) -> None:
        self._db.close()
