"""Database snapshots (``DuckDBStore.snapshot``) and putting one back (``restore_snapshot``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.ports import Put, SnapshotUnsupportedError
from storage.duckdb import DuckDBStore, RestoreError, restore_snapshot, snapshot_path
from storage.duckdb.migrations import MIGRATIONS
from storage.duckdb.store import wal_path
from storage.memory import MemoryStore

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def _identity(i: int) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}")


def _ids(path: Path) -> list[str]:
    store = DuckDBStore(path)
    try:
        return sorted(i.id for i in store.all(Identity))
    finally:
        store.close()


# -- snapshot --------------------------------------------------------------------------------------
def test_a_snapshot_holds_every_committed_row_and_setting_next_to_the_database(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.commit([Put(_identity(1)), Put(_identity(2))])
    store.put_setting("instance_id", "ctrl-1")

    taken = store.snapshot(NOW)
    store.close()

    path = Path(taken)
    assert path == tmp_path / "t.duckdb-20260304-050607"
    assert path == snapshot_path(tmp_path / "t.duckdb", NOW)
    assert path.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.duckdb", "t.duckdb-20260304-050607"]
    copy = DuckDBStore(path)
    assert copy.get(Identity, "id-1") == _identity(1)
    assert copy.get_setting("instance_id") == "ctrl-1"
    assert copy.schema_version == max(version for version, _ in MIGRATIONS)
    copy.close()


def test_a_snapshot_name_is_in_utc(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    at = datetime(2026, 3, 5, 1, 30, tzinfo=timezone(timedelta(hours=2)))  # 23:30 UTC the day before

    taken = store.snapshot(at)
    store.close()

    assert Path(taken).name == "t.duckdb-20260304-233000"


def test_a_snapshot_of_the_same_second_is_kept(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.commit([Put(_identity(1))])
    first = store.snapshot(NOW)
    store.commit([Put(_identity(2))])

    second = store.snapshot(NOW + timedelta(milliseconds=500))
    store.close()

    assert second == first
    assert _ids(Path(first)) == ["id-1"]


def test_the_memory_store_has_no_file_to_snapshot() -> None:
    with pytest.raises(SnapshotUnsupportedError):
        MemoryStore().snapshot(NOW)


def test_reads_are_served_while_a_snapshot_holds_the_write_lock(tmp_path: Path) -> None:
    """The snapshot keeps writers out (no batch is half in it) but never readers: reads come from
    memory. Reads made while the snapshot thread holds the write lock, before and after which the
    lock was seen held, were served during the snapshot."""
    store = DuckDBStore(tmp_path / "t.duckdb")
    store.commit([Put(_identity(i)) for i in range(20_000)])
    lock = store._lock  # the write lock's own RLock: peeked at without waiting for commits
    taken: list[str] = []
    snapshotter = threading.Thread(target=lambda: taken.append(store.snapshot(NOW)))

    served_during = 0
    snapshotter.start()
    while snapshotter.is_alive():
        if lock.acquire(blocking=False):  # not held by the snapshot (yet, or any more)
            lock.release()
            continue
        reads = [store.get(Identity, "id-7"), store.find_unique(Identity, "name", "name-19999")]
        listed = len(store.all(Identity))
        if lock.acquire(blocking=False):
            lock.release()
        else:
            assert reads == [_identity(7), _identity(19999)]
            assert listed == 20_000
            served_during += 1
    snapshotter.join()
    store.close()

    assert served_during > 0
    assert len(_ids(Path(taken[0]))) == 20_000


# -- restore ---------------------------------------------------------------------------------------
@pytest.fixture
def db_with_snapshot(tmp_path: Path) -> tuple[Path, Path]:
    """A database whose snapshot holds id-1, with id-2 written after the snapshot."""
    db = tmp_path / "t.duckdb"
    store = DuckDBStore(db)
    store.commit([Put(_identity(1))])
    snapshot = Path(store.snapshot(NOW))
    store.commit([Put(_identity(2))])
    store.close()
    return db, snapshot


def test_restore_puts_the_snapshot_in_place_and_keeps_the_old_database(
    db_with_snapshot: tuple[Path, Path],
) -> None:
    db, snapshot = db_with_snapshot

    aside = restore_snapshot(db, snapshot, NOW + timedelta(hours=1))

    assert aside == db.with_name("t.duckdb.pre-restore-20260304-060607")
    assert _ids(db) == ["id-1"]
    assert aside is not None
    assert _ids(aside) == ["id-1", "id-2"]
    assert _ids(snapshot) == ["id-1"]  # the snapshot itself is left as it was
    assert not db.with_name("t.duckdb.restore").exists()
    assert db.stat().st_mode & 0o077 == 0


def test_restore_without_a_database_creates_it(tmp_path: Path, db_with_snapshot: tuple[Path, Path]) -> None:
    _, snapshot = db_with_snapshot
    fresh = tmp_path / "new-home" / "t.duckdb"
    fresh.parent.mkdir()

    assert restore_snapshot(fresh, snapshot, NOW) is None
    assert _ids(fresh) == ["id-1"]


def test_restore_refuses_while_a_server_holds_the_database(db_with_snapshot: tuple[Path, Path]) -> None:
    db, snapshot = db_with_snapshot
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import duckdb, sys
                con = duckdb.connect({str(db)!r})
                print("holding", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(RestoreError, match="in use by a running server: stop it first"):
            restore_snapshot(db, snapshot, NOW)
    finally:
        holder.communicate("", timeout=30)

    assert _ids(db) == ["id-1", "id-2"]
    assert sorted(p.name for p in db.parent.iterdir()) == ["t.duckdb", snapshot.name]


def test_restore_refuses_what_is_no_trellis_snapshot(
    tmp_path: Path, db_with_snapshot: tuple[Path, Path]
) -> None:
    db, _ = db_with_snapshot
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    foreign = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(foreign))
    con.execute("CREATE TABLE things (id INTEGER)")
    con.close()
    newer = tmp_path / "newer.duckdb"
    store = DuckDBStore(newer)
    store.close()
    con = duckdb.connect(str(newer))
    con.execute("INSERT INTO schema_migrations (version) VALUES (999)")
    con.close()

    cases = [
        (tmp_path / "missing", "no such snapshot file"),
        (db, "is the database itself"),
        (text, "is not a DuckDB database"),
        (foreign, "is not a Trellis database"),
        (newer, "has schema version 999"),
    ]
    for snapshot, reason in cases:
        with pytest.raises(RestoreError, match=reason):
            restore_snapshot(db, snapshot, NOW)

    assert _ids(db) == ["id-1", "id-2"]
    assert not db.with_name("t.duckdb.restore").exists()
    assert not wal_path(db.with_name("t.duckdb.restore")).exists()
