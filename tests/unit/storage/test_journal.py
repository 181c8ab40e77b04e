"""The journal in front of DuckDB: records read back whole, a torn or damaged tail ends its
segment, refused appends leave nothing, and a store running on it keeps every acknowledged write
through a kill -9, a refused flush and a restore."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.errors import CommitFailedError
from engine.ports import Delete, Put
from storage.duckdb import DuckDBStore
from storage.duckdb import store as store_module
from storage.duckdb.journal import MAGIC, Entry, Journal, JournalError, Record, segments
from storage.duckdb.store import continuing, restore_snapshot
from tests.unit.storage.crash import run_killed

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def _identity(i: int | str, **kw: object) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}", **kw)  # type: ignore[arg-type]


def _ids(store: DuckDBStore) -> set[str]:
    return {i.id for i in store.all(Identity)}


def _table_ids(store: DuckDBStore) -> set[str]:
    (rows,) = store._db.run([("SELECT id FROM identities", None)])
    return {str(r[0]) for r in rows}


# -- the journal on its own ----------------------------------------------------------------------


def test_records_read_back_in_order_across_segments(tmp_path: Path) -> None:
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    journal.append(2, [(1, "identities", "a", '{"x":1}', False), (2, "identities", "b", None, True)])
    journal.close()  # the next append starts a second segment
    journal.append(3, [(3, "services", "s", '{"y":"z"}', False)])
    journal.close()

    assert [n for n, _ in segments(db)] == [1, 2]
    assert list(Journal(db).records()) == [
        (2, [(1, "identities", "a", '{"x":1}', False), (2, "identities", "b", None, True)]),
        (3, [(3, "services", "s", '{"y":"z"}', False)]),
    ]


@pytest.mark.parametrize("damage", ["torn", "flipped"])
def test_a_damaged_last_record_ends_its_segment_and_nothing_else(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    for batch in (1, 2, 3):
        journal.append(batch, [(batch, "identities", f"i{batch}", "{}", False)])
    journal.close()
    (_, path), *_ = segments(db)
    data = bytearray(path.read_bytes())
    if damage == "torn":  # a crash in the middle of the last append
        path.write_bytes(bytes(data[:-3]))
    else:  # a bit of the last record's payload changed
        data[-2] ^= 0x01
        path.write_bytes(bytes(data))
    journal = Journal(db)
    journal.append(4, [(4, "identities", "i4", "{}", False)])  # goes on in a new segment
    journal.close()

    assert [batch for batch, _ in Journal(db).records()] == [1, 2, 4]


def test_a_failed_append_leaves_nothing_and_the_next_goes_to_a_new_segment(tmp_path: Path) -> None:
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    journal.append(1, [(1, "identities", "a", "{}", False)])
    assert journal._fd is not None
    os.close(journal._fd)  # the file can no longer be written (EBADF), as a failing disk
    with pytest.raises(JournalError, match="could not take the batch"):
        journal.append(2, [(2, "identities", "b", "{}", False)])
    journal.append(3, [(2, "identities", "c", "{}", False)])
    journal.close()

    assert [n for n, _ in segments(db)] == [1, 2]
    assert [batch for batch, _ in Journal(db).records()] == [1, 3]


def test_release_deletes_only_segments_wholly_in_the_database(tmp_path: Path) -> None:
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    for batch in (1, 2, 3):
        journal.append(batch, [(batch, "identities", f"i{batch}", "{}", False)])
        journal.close()
    journal.append(4, [(4, "identities", "i4", "{}", False)])  # the segment being written

    journal.release(2)
    assert [n for n, _ in segments(db)] == [3, 4]
    journal.release(10)
    assert [n for n, _ in segments(db)] == [4]  # never the open one
    assert segments(db)[0][1].read_bytes().startswith(MAGIC)
    journal.clear()
    assert segments(db) == []


def test_a_released_segment_number_is_never_used_again(tmp_path: Path) -> None:
    """Segments are unlinked after the journal's lock is let go, so a new one must never take the
    number of one that may still be on its way out."""
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    journal.append(1, [(1, "identities", "a", "{}", False)])
    journal.close()
    journal.release(1)  # nothing open: every segment goes
    journal.append(2, [(2, "identities", "b", "{}", False)])
    journal.close()

    assert [n for n, _ in segments(db)] == [2]
    assert [batch for batch, _ in Journal(db).records()] == [2]


def test_release_unlinks_segments_without_holding_the_journals_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting a full segment waits on the disk; an append must not wait behind it."""
    db = tmp_path / "j.duckdb"
    journal = Journal(db)
    for batch in (1, 2):
        journal.append(batch, [(batch, "identities", f"i{batch}", "{}", False)])
        journal.close()
    held: list[bool] = []
    unlink = Path.unlink

    def watched(path: Path, missing_ok: bool = False) -> None:
        held.append(journal._lock.locked())
        unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", watched)
    journal.release(2)

    assert held == [False, False]
    assert segments(db) == []


# -- a store on the journal ----------------------------------------------------------------------


@pytest.fixture(params=["thread", "process"])
def writer(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_writes_reach_the_tables_and_change_log_as_without_a_journal(tmp_path: Path, writer: str) -> None:
    logs = []
    for journal in (False, True):
        store = DuckDBStore(tmp_path / f"{journal}.duckdb", writer=writer, journal=journal)
        store.commit([Put(_identity(1)), Put(_identity(2))])
        store.commit([Put(_identity(1, is_admin=True)), Delete(Identity, "id-2"), Put(_identity(3))])
        store.commit([Put(_identity(4)), Delete(Identity, "id-4")])  # created and deleted in one
        logs.append([(seq, kind, id, op, doc) for seq, _, kind, id, op, doc in store.change_log()])
        store.flush()
        assert _table_ids(store) == {"id-1", "id-3"}
        store.close()
        reopened = DuckDBStore(tmp_path / f"{journal}.duckdb", writer=writer)
        assert _ids(reopened) == {"id-1", "id-3"}
        assert reopened.get(Identity, "id-1").is_admin  # type: ignore[union-attr]
        assert reopened.change_log_problems() == []
        reopened.close()
    assert logs[0] == logs[1]
    assert not segments(tmp_path / "True.duckdb")  # a clean close leaves no journal


def test_batches_gather_in_the_journal_before_one_transaction_takes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within the flush delay, batches only wait (durable in the journal); once FLUSH_ENTRIES of
    them are waiting, the flusher takes them all in one transaction without waiting it out."""
    monkeypatch.setattr(store_module, "FLUSH_DELAY_SECONDS", 3600.0)
    monkeypatch.setattr(store_module, "FLUSH_ENTRIES", 3)
    store = DuckDBStore(tmp_path / "t.duckdb", journal=True)
    transactions: list[int] = []
    run = store._db.run

    def counted(statements: Any, on_error: Any = ()) -> Any:
        transactions.append(len(statements))
        return run(statements, on_error)

    store._db.run = counted  # type: ignore[method-assign]
    store.commit([Put(_identity(1))])
    store.commit([Put(_identity(2))])
    assert _ids(store) == {"id-1", "id-2"}  # acknowledged and published, not yet in a table
    assert transactions == []
    store.commit([Put(_identity(3))])
    deadline = time.monotonic() + 60
    while not transactions and time.monotonic() < deadline:
        time.sleep(0.01)

    assert len(transactions) == 1
    assert _table_ids(store) == {"id-1", "id-2", "id-3"}
    store.close()


def test_closing_does_not_wait_out_the_flush_delay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch still gathering when the store closes goes into the database at once (a wait of an
    hour would end this test at its timeout)."""
    monkeypatch.setattr(store_module, "FLUSH_DELAY_SECONDS", 3600.0)
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path, journal=True)
    store.commit([Put(_identity(1))])
    store.close()

    assert not segments(path)
    reopened = DuckDBStore(path)
    assert _table_ids(reopened) == {"id-1"}
    reopened.close()


def test_acknowledged_writes_survive_kill_9_before_any_flush(tmp_path: Path, writer: str) -> None:
    """Nothing reached the tables (the flusher held off): the journal alone brings them back."""
    path = tmp_path / "crash.duckdb"
    run_killed(
        f"""
        store = DuckDBStore(Path({str(path)!r}), writer={writer!r}, journal=True)
        store.commit([Put(Identity(id="early", created_at=now, updated_at=now, name="early"))])
        store.flush()
        store._flush_lock.acquire()  # from here on nothing is put into the tables
        for i in range(50):
            store.commit([Put(Identity(id=f"i{{i}}", created_at=now, updated_at=now, name=f"n{{i}}"))])
        store.commit([Delete(Identity, "early")])
        """
    )
    assert segments(path)

    reopened = DuckDBStore(path, writer=writer)
    assert _ids(reopened) == {f"i{i}" for i in range(50)}
    assert _table_ids(reopened) == _ids(reopened)
    assert reopened.change_log_problems() == []
    assert not segments(path)  # replayed, then deleted
    reopened.close()


def test_a_batch_the_journal_refuses_is_a_commit_failure_and_applies_nothing(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb", journal=True)
    store.commit([Put(_identity(1))])
    journal = store._journal
    assert journal is not None
    assert journal._fd is not None
    os.close(journal._fd)  # the journal's file fails the next write

    with pytest.raises(CommitFailedError):
        store.commit([Put(_identity(2))])
    store.commit([Put(_identity(3))])

    assert _ids(store) == {"id-1", "id-3"}
    store.close()
    reopened = DuckDBStore(tmp_path / "t.duckdb")
    assert _ids(reopened) == {"id-1", "id-3"}
    assert reopened.change_log_problems() == []
    reopened.close()


def test_a_refused_flush_keeps_the_batches_and_retries(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb", journal=True)
    with store._flush_lock:  # the flusher cannot take them before the table is gone
        store._db.run([("ALTER TABLE identities RENAME TO identities_gone", None)])
        store.commit([Put(_identity(1))])  # acknowledged: it is in the journal
    with pytest.raises(Exception, match="identities"):
        store.flush()
    assert _ids(store) == {"id-1"}
    store._db.run([("ALTER TABLE identities_gone RENAME TO identities", None)])
    store.flush()
    assert _table_ids(store) == {"id-1"}
    store.close()


def test_a_restore_keeps_the_replaced_database_whole_and_drops_its_journal(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path, journal=True)
    store.commit([Put(_identity(1))])
    snapshot = Path(store.snapshot(NOW))
    store._flush_lock.acquire()  # as a crash before the flush: id-2 is only in the journal
    store.commit([Put(_identity(2))])
    store._stopping = True  # what close() would flush stays journaled
    assert store._journal is not None
    store._journal.close()
    store._db.close()
    assert segments(path)

    aside = restore_snapshot(path, snapshot, datetime(2026, 3, 4, 6, 0, tzinfo=UTC))

    assert not segments(path)
    restored = DuckDBStore(path)
    assert _ids(restored) == {"id-1"}
    restored.close()
    assert aside is not None
    kept = DuckDBStore(aside)
    assert _ids(kept) == {"id-1", "id-2"}
    kept.close()


# -- a journal that does not continue its database -----------------------------------------------


def _entry(seq: int) -> Entry:
    return (seq, "identities", f"id-{seq}", "{}", False)


def test_replay_takes_the_batches_that_continue_the_database_and_stops_at_a_gap() -> None:
    records: list[Record] = [
        (2, [_entry(1), _entry(2)]),  # already in the database
        (4, [_entry(3), _entry(4)]),
        (5, [_entry(5)]),
        (8, [_entry(7), _entry(8)]),  # change 6 is nowhere: a record lost in the middle
        (9, [_entry(9)]),
    ]

    assert continuing(records, 2) == ([(4, [_entry(3), _entry(4)]), (5, [_entry(5)])], (5, 7))
    assert continuing(records[:3], 2) == ([(4, [_entry(3), _entry(4)]), (5, [_entry(5)])], None)
    assert continuing(records[:3], 5) == ([], None)  # all of it is in the database
    assert continuing(records[1:], 0) == ([], (0, 3))  # the database ends before the journal begins


def test_a_snapshot_copied_over_the_database_by_hand_gets_no_foreign_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The journal resumes past the snapshot's last change: it is set aside, not replayed."""
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path, journal=True)
    store.commit([Put(_identity(1))])
    snapshot = Path(store.snapshot(NOW))
    store.commit([Put(_identity(2))])
    store.flush()
    journal = store._journal
    assert journal is not None
    journal.close()  # id-3 goes to a segment of its own, and the one holding id-1 and id-2 goes
    journal.release(store.last_seq)
    store._flush_lock.acquire()  # as a crash before the flush: id-3 is only in the journal
    store.commit([Put(_identity(3))])
    store._stopping = True
    journal.close()
    store._db.close()
    path.write_bytes(snapshot.read_bytes())  # an operator puts the snapshot back by hand

    reopened = DuckDBStore(path)

    assert _ids(reopened) == {"id-1"}
    assert reopened.change_log_problems() == []
    reopened.close()
    assert not segments(path)
    (kept,) = [p for p in tmp_path.iterdir() if p.name.endswith(".orphaned")]
    assert kept.name.startswith("t.duckdb.journal.")
    assert kept.stat().st_size > len(MAGIC)
    assert "does not continue it" in caplog.text
