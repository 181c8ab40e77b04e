"""The DuckDB store: every entity in memory for reads, every write committed to DuckDB first.

One process may open the file read-write (design.md §5), so the server runs one worker and
opens the store after the fork. A write batch is one DuckDB transaction; only after COMMIT
returns are the changes applied in memory and the request acknowledged.

The database holds secrets (password hashes, enrollment tokens, API-session token hashes), so
its directory is private (0700) and the database and its WAL are 0600 from the moment they
exist: opening a store tightens the process umask (:func:`restrict_umask`) and the modes of an
existing directory, database and WAL.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb

from engine.entities import ALL_KINDS
from engine.ports import Change, Delete, Put
from storage.codec import decode, encode
from storage.duckdb.migrations import COMPACT_TASK, MAINTENANCE_TABLE, migrate, pending_tasks, table_name
from storage.files import restrict_umask, tighten
from storage.memory import MemoryStore

_CONFIG = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "threads": "2",
    "memory_limit": "1GB",
}


_CHUNK_ROWS = 500

_COMPACT_ALIAS = "trellis_compact"

log = logging.getLogger(__name__)


def _chunks(values: list[object], size: int) -> list[list[object]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


def wal_path(path: Path) -> Path:
    """DuckDB's write-ahead log of the database at ``path``."""
    return path.with_name(path.name + ".wal")


def _fsync(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DuckDBStore(MemoryStore):
    """A write-through ``Store`` on a DuckDB file."""

    def __init__(self, path: Path, *, memory_limit: str = "1GB") -> None:
        super().__init__()
        restrict_umask()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The database's directory is its own (TRELLIS_HOME); ".tmp" is DuckDB's spill directory.
        for existing in (path.parent, path, wal_path(path), path.with_name(path.name + ".tmp")):
            tighten(existing)
        self._config: dict[str, str | bool | int | float | list[str]] = {
            **_CONFIG,
            "memory_limit": memory_limit,
        }
        self._con = duckdb.connect(str(path), config=self._config)
        self._con_lock = threading.Lock()
        self.schema_version = migrate(self._con)
        if COMPACT_TASK in pending_tasks(self._con):
            self._compact(path)
        self._load_all()

    def _compact(self, path: Path) -> None:
        """Rewrite the database into a fresh file, so that no overwritten value (e.g. a plain
        API-session token before migration 2) survives in the old file's freed blocks.

        The copy is made without the ``compact`` task and replaces the file atomically, so a crash
        at any point leaves either the old file (task pending: compacted at the next open) or the
        new one. On failure the old file is kept and served; the next open retries.
        """
        fresh = path.with_name(path.name + ".compact")
        for leftover in (fresh, wal_path(fresh)):
            leftover.unlink(missing_ok=True)
        con = self._con
        try:
            row = con.execute("SELECT current_database()").fetchone()
            name = str(row[0]) if row else ""
            quoted = '"' + name.replace('"', '""') + '"'
            con.execute("CHECKPOINT")
            con.execute(f"ATTACH ? AS {_COMPACT_ALIAS}", [str(fresh)])
            try:
                con.execute(f"COPY FROM DATABASE {quoted} TO {_COMPACT_ALIAS}")
                con.execute(
                    f"DELETE FROM {_COMPACT_ALIAS}.{MAINTENANCE_TABLE} WHERE task = ?", [COMPACT_TASK]
                )
            finally:
                con.execute(f"DETACH {_COMPACT_ALIAS}")
            con.close()
            if wal_path(path).exists() or wal_path(fresh).exists():
                raise RuntimeError("a database was not fully checkpointed")
            _fsync(fresh)
            os.replace(fresh, path)
            _fsync(path.parent, directory=True)
        except (duckdb.Error, OSError, RuntimeError) as ex:
            log.warning("could not compact %s (retried at the next open): %s", path, ex)
            for leftover in (fresh, wal_path(fresh)):
                leftover.unlink(missing_ok=True)
        finally:
            con.close()
            self._con = duckdb.connect(str(path), config=self._config)

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
