"""The access-change log in the DuckDB file (:class:`~engine.ports.AccessChangeLog`): the table
``access_changes`` of migration 9, written through the store's database (the writer process once
the store is loaded), outside the journal: a row is durable once its own statement commits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import duckdb

from engine.ports import AccessChangeRow
from storage.access_changes import TABLE, to_micros

Run = Callable[[Sequence[tuple[str, list[Any] | None]]], list[list[Any]]]

_COLUMNS = "revision, prev, committed_us, pairs, doc"


def _row(values: Sequence[Any]) -> AccessChangeRow:
    return AccessChangeRow(
        int(values[0]),
        int(values[1]),
        datetime.fromtimestamp(int(values[2]) / 1_000_000, UTC),
        int(values[3]),
        bytes(values[4]),
    )


class DuckDBAccessChangeLog:
    """Statements run by ``run`` (the store's ``Database.run``: one call, one transaction)."""

    def __init__(self, run: Run) -> None:
        self._run = run

    def append(self, row: AccessChangeRow) -> bool:
        try:
            (rows,) = self._run(
                [
                    (
                        f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?) "
                        "ON CONFLICT DO NOTHING RETURNING revision",
                        [row.revision, row.prev, to_micros(row.committed_at), row.pairs, row.doc],
                    )
                ]
            )
        except (duckdb.Error, OSError):
            return False
        return bool(rows)

    def read(self, after: int, limit: int) -> list[AccessChangeRow]:
        (rows,) = self._run(
            [(f"SELECT {_COLUMNS} FROM {TABLE} WHERE revision > ? ORDER BY revision LIMIT ?", [after, limit])]
        )
        return [_row(r) for r in rows]

    def bounds(self) -> tuple[AccessChangeRow | None, AccessChangeRow | None]:
        low, high = self._run(
            [
                (f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY revision LIMIT 1", None),
                (f"SELECT {_COLUMNS} FROM {TABLE} ORDER BY revision DESC LIMIT 1", None),
            ]
        )
        return (_row(low[0]) if low else None, _row(high[0]) if high else None)

    def trim(self, before: datetime) -> int:
        (rows,) = self._run(
            [
                (
                    f"DELETE FROM {TABLE} WHERE committed_us < ? "
                    f"AND revision < (SELECT max(revision) FROM {TABLE}) RETURNING revision",
                    [to_micros(before)],
                )
            ]
        )
        return len(rows)
