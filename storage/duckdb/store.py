"""The DuckDB store: every entity in memory for reads, every write committed to DuckDB first.

One process may open the file read-write (design.md §5), so the server runs one worker and
opens the store after the fork. A write batch is one DuckDB transaction; only after COMMIT
returns are the changes applied in memory and the request acknowledged.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb

from engine.entities import ALL_KINDS
from engine.ports import Change, Delete, Put
from storage.codec import decode, encode
from storage.duckdb.migrations import migrate, table_name
from storage.memory import MemoryStore

_CONFIG = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "threads": "2",
    "memory_limit": "1GB",
}


_CHUNK_ROWS = 500


def _chunks(values: list[object], size: int) -> list[list[object]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


class DuckDBStore(MemoryStore):
    """A write-through ``Store`` on a DuckDB file."""

    def __init__(self, path: Path, *, memory_limit: str = "1GB") -> None:
        super().__init__()
        path.parent.mkdir(parents=True, exist_ok=True)
        config: dict[str, str | bool | int | float | list[str]] = {**_CONFIG, "memory_limit": memory_limit}
        self._con = duckdb.connect(str(path), config=config)
        self._con_lock = threading.Lock()
        self.schema_version = migrate(self._con)
        self._load_all()

    def _load_all(self) -> None:
        for kind in ALL_KINDS:
            rows = self._con.execute(f"SELECT id, doc FROM {table_name(kind.ENTITY)}").fetchall()
            self.load([decode(kind, row[0], row[1]) for row in rows])
        settings = self._con.execute("SELECT key, value FROM settings").fetchall()
        self._settings.update({str(k): str(v) for k, v in settings})

    def _persist(self, changes: Sequence[Change]) -> None:
        puts: dict[str, list[object]] = {}
        deletes: dict[str, list[object]] = {}
        for change in changes:
            if isinstance(change, Put):
                puts.setdefault(table_name(change.entity.ENTITY), []).extend(
                    (change.entity.id, encode(change.entity))
                )
            elif isinstance(change, Delete):
                deletes.setdefault(table_name(change.kind.ENTITY), []).append(change.id)
        with self._con_lock:
            con = self._con
            con.execute("BEGIN TRANSACTION")
            try:
                # Multi-row statements: one round trip per chunk instead of per row.
                for table, ids in deletes.items():
                    for chunk in _chunks(ids, _CHUNK_ROWS):
                        marks = ", ".join("?" * len(chunk))
                        con.execute(f"DELETE FROM {table} WHERE id IN ({marks})", chunk)
                for table, values in puts.items():
                    for chunk in _chunks(values, 2 * _CHUNK_ROWS):
                        rows = ", ".join(["(?, ?)"] * (len(chunk) // 2))
                        con.execute(f"INSERT OR REPLACE INTO {table} (id, doc) VALUES {rows}", chunk)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise

    def _persist_setting(self, key: str, value: str) -> None:
        with self._con_lock:
            self._con.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", [key, value])

    def close(self) -> None:
        with self._con_lock:
            self._con.close()
