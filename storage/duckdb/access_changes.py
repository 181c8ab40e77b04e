"""The access-change log in the DuckDB file (:class:`~engine.ports.AccessChangeLog`): the table
``access_changes`` of migration 9, written through the store's database (the writer process once
the store is loaded), outside the journal: a row is durable once its own statement commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import duckdb

from engine.ports import AccessChangeRow
from storage.access_changes import Statements, row_of, to_micros, values_of

Run = Callable[[Sequence[tuple[str, list[Any] | None]]], list[list[Any]]]

SQL = Statements.marked("?")


class DuckDBAccessChangeLog:
    """Statements run by ``run`` (the store's ``Database.run``: one call, one transaction)."""

    def __init__(self, run: Run) -> None:
        self._run = run

    def append(self, row: AccessChangeRow) -> bool:
        try:
            (rows,) = self._run([(SQL.insert, values_of(row))])
        except (duckdb.Error, OSError):
            return False
        return bool(rows)

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        (rows,) = self._run([(SQL.read, [after, limit])])
        return [row_of(r) for r in rows]

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        low, high = self._run([(SQL.first, None), (SQL.last, None)])
        return (row_of(low[0]) if low else None, row_of(high[0]) if high else None)

    def trim(self, before: datetime) -> int:
        (rows,) = self._run([(SQL.trim, [to_micros(before)])])
        return len(rows)
