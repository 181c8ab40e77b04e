"""The writer process (storage/duckdb/writer.py) on a real DuckDB file: its life and its failures."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.ports import Put
from storage.duckdb import DuckDBStore
from storage.duckdb.writer import ProcessDatabase

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def _identity(i: int) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}")


def _writer(store: DuckDBStore) -> ProcessDatabase:
    db = store._db
    assert isinstance(db, ProcessDatabase)
    return db


def _gone(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # our own child: reap it when it has ended
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_the_writer_holds_the_file_and_ends_when_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    store = DuckDBStore(path, writer="process")
    pid = _writer(store).pid
    assert pid is not None
    assert pid != os.getpid()
    store.commit([Put(_identity(1))])
    with pytest.raises(duckdb.IOException, match="lock"):  # the child holds DuckDB's lock
        duckdb.connect(str(path), read_only=True)
    store.close()
    assert _gone(pid)
    reopened = DuckDBStore(path, writer="process")
    assert reopened.get(Identity, "id-1") is not None
    reopened.close()


def test_a_killed_writer_is_started_again_and_nothing_committed_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    store = DuckDBStore(path, writer="process")
    store.commit([Put(_identity(1))])
    first = _writer(store).pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert _gone(first)
    store.commit([Put(_identity(2))])  # a new writer opens the file and takes the batch
    assert _writer(store).pid not in (None, first)
    assert store.change_log_problems() == []
    store.close()
    reopened = DuckDBStore(path)
    assert {i.id for i in reopened.all(Identity)} == {"id-1", "id-2"}
    reopened.close()


def test_ctrl_c_reaches_the_server_not_its_writer(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "w.duckdb", writer="process")
    pid = _writer(store).pid
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    time.sleep(0.2)
    store.commit([Put(_identity(1))])
    assert _writer(store).pid == pid  # the same writer answered
    store.close()


def test_a_failed_statement_is_raised_as_duckdbs_error_and_rolled_back(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "w.duckdb", writer="process")
    db = _writer(store)
    with pytest.raises(duckdb.CatalogException, match="no_such_table"):
        db.run(
            [("BEGIN TRANSACTION", None), ("INSERT INTO no_such_table VALUES (1)", None)],
            on_error=[("ROLLBACK", None)],
        )
    # the transaction was rolled back in the writer: a new one begins
    assert db.run([("BEGIN TRANSACTION", None), ("SELECT 41 + ?", [1]), ("COMMIT", None)]) == [
        [],
        [(42,)],
        [],
    ]
    store.close()
    with pytest.raises(duckdb.Error, match="closed"):
        db.run([("SELECT 1", None)])


def test_a_server_killed_9_takes_its_writer_along(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    script = textwrap.dedent(
        f"""
        import os
        from datetime import UTC, datetime
        from engine.entities import all as _
        from engine.entities.identities import Identity
        from engine.ports import Put
        from storage.duckdb import DuckDBStore
        now = datetime.now(UTC)
        store = DuckDBStore(__import__("pathlib").Path({str(path)!r}), writer="process")
        store.commit([Put(Identity(id="kept", created_at=now, updated_at=now, name="kept"))])
        print("writer", store._db.pid, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[3],
        timeout=120,
    )
    assert done.returncode == -9, done.stderr
    pid = int(done.stdout.split()[1])
    assert _gone(pid)  # its input closed: it closed the database and ended
    reopened = DuckDBStore(path)
    assert reopened.get(Identity, "kept") is not None
    reopened.close()
