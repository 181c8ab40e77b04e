"""The group-commit write path on a real DuckDB file: batches, acknowledgement after commit, the
change log, failed batches, whole-batch reads, and activity writes that never wait."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Authenticator, Identity
from engine.entities.services import Service
from engine.errors import CommitFailedError
from engine.ports import Change, Delete, Durable, Put, StoreView
from storage.codec import encode
from storage.duckdb import DuckDBStore

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def _identity(i: int | str, **kw: object) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}", **kw)  # type: ignore[arg-type]


def _authenticator(i: int) -> Authenticator:
    return Authenticator(
        id=f"au-{i}",
        created_at=NOW,
        updated_at=NOW,
        identity_id=f"id-{i}",
        method="updb",
        username=f"user-{i}",
    )


def _log(store: DuckDBStore) -> list[tuple[int, int, str, str, str, str | None]]:
    return store.change_log(limit=100_000)


def _wait_until(predicate: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


@pytest.fixture(params=["thread", "process"])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> DuckDBStore:
    """A store whose statements run in the committer thread, and one with a writer process."""
    opened = DuckDBStore(tmp_path / "t.duckdb", writer=request.param)
    yield opened  # type: ignore[misc]
    opened.close()


def test_writers_waiting_on_one_commit_share_the_next_batch_and_are_answered_after_it(
    store: DuckDBStore,
) -> None:
    store.commit([Put(_identity("seed"))])
    answered: list[int] = []
    # The database is busy (its connection held): the writers stage and wait, none is answered.
    with store._db.lock:
        writers = [
            threading.Thread(target=lambda i=i: (store.commit([Put(_identity(i))]), answered.append(i)))
            for i in range(16)
        ]
        for writer in writers:
            writer.start()
        _wait_until(lambda: store._seq == 17)
        time.sleep(0.05)
        assert answered == []
        # staged, not published: other readers do not see them
        assert [store.get(Identity, f"id-{i}") for i in range(16)] == [None] * 16
    for writer in writers:
        writer.join(10)
    assert sorted(answered) == list(range(16))
    assert all(store.get(Identity, f"id-{i}") is not None for i in range(16))
    log = _log(store)
    assert [row[0] for row in log] == list(range(1, 18))
    # the first writer's batch was taken before the database was free; the other 15 or so shared
    # one or two batches instead of one transaction each
    assert len({row[1] for row in log}) <= 4


def test_a_writer_reads_what_earlier_writers_staged(store: DuckDBStore) -> None:
    store.commit([Put(_identity(0))])
    with store._db.lock:
        first = threading.Thread(target=lambda: store.commit([Put(_identity(1)), Delete(Identity, "id-0")]))
        first.start()
        _wait_until(lambda: store._seq == 3)
        with store.write_lock():
            seen = [store.get(Identity, "id-1"), store.find_unique(Identity, "name", "name-1")]
            gone = [store.get(Identity, "id-0"), store.find_unique(Identity, "name", "name-0")]
            counted, listed = store.count(Identity), [e.id for e in store.all(Identity)]
        # outside the lock: not yet published
        assert (store.get(Identity, "id-1"), store.get(Identity, "id-0")) == (None, _identity(0))
    first.join(10)
    assert seen == [_identity(1), _identity(1)]
    assert gone == [None, None]
    assert (counted, listed) == (1, ["id-1"])


def test_the_change_log_holds_every_change_in_order_and_the_tables_the_last(store: DuckDBStore) -> None:
    store.commit([Put(_identity(1)), Put(_authenticator(1))])
    renamed = _identity(1, role_attributes=["a"])
    store.commit([Put(renamed)])
    store.commit([Delete(Authenticator, "au-1")])
    log = _log(store)
    assert [(seq, batch, kind, id, op) for seq, batch, kind, id, op, _ in log] == [
        (1, 2, "identities", "id-1", "put"),
        (2, 2, "authenticators", "au-1", "put"),
        (3, 3, "identities", "id-1", "put"),
        (4, 4, "authenticators", "au-1", "delete"),
    ]
    assert log[2][5] == encode(renamed)
    assert log[3][5] is None
    assert store.change_log_problems() == []


def test_numbering_goes_on_after_a_restart(tmp_path: Path) -> None:
    first = DuckDBStore(tmp_path / "t.duckdb")
    first.commit([Put(_identity(1)), Put(_identity(2))])
    first.close()
    second = DuckDBStore(tmp_path / "t.duckdb")
    second.commit([Put(_identity(3))])
    assert [row[0] for row in _log(second)] == [1, 2, 3]
    second.close()


def test_the_change_log_is_trimmed_to_its_newest_entries_after_a_checkpoint(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb", change_log_retain=10)
    for i in range(40):
        store.commit([Put(_identity(i))])
    seqs = [row[0] for row in _log(store)]
    assert 10 <= len(seqs) < 16
    assert seqs == list(range(41 - len(seqs), 41))
    assert store.change_log_problems() == []
    store.close()
    reopened = DuckDBStore(tmp_path / "t.duckdb", change_log_retain=10)
    reopened.commit([Put(_identity(40))])
    assert _log(reopened)[-1][0] == 41
    assert reopened.count(Identity) == 41
    reopened.close()


def test_a_failed_batch_fails_it_and_everything_staged_after_it_and_applies_nothing(
    store: DuckDBStore,
) -> None:
    published: list[list[Change]] = []
    store.subscribe(published.append)
    store.commit([Put(_identity(1))])
    errors: dict[str, BaseException] = {}

    def write(name: str, changes: list[Change]) -> None:
        try:
            store.commit(changes)
        except CommitFailedError as ex:
            errors[name] = ex

    with store._db.lock:
        # the database will refuse the next transaction: its identities table is gone
        store._db.run([("ALTER TABLE identities RENAME TO identities_gone", None)])
        first = threading.Thread(target=write, args=("first", [Put(_identity(2))]))
        first.start()
        _wait_until(lambda: store._seq == 2)
        # staged after the first, and checked against it: it fails with it
        second = threading.Thread(
            target=write, args=("second", [Put(Service(id="s1", created_at=NOW, updated_at=NOW, name="svc"))])
        )
        second.start()
        _wait_until(lambda: store._seq == 3)
    first.join(10)
    second.join(10)
    assert sorted(errors) == ["first", "second"]
    assert all(isinstance(ex.__cause__, duckdb.Error) for ex in errors.values())
    assert store.get(Identity, "id-2") is None
    assert store.get(Service, "s1") is None
    assert len(published) == 1  # the listeners (the engine) saw only the first commit
    with store.write_lock():
        assert store.get(Identity, "id-2") is None  # nothing of them is left staged either
    with store._db.lock:
        store._db.run([("ALTER TABLE identities_gone RENAME TO identities", None)])
    store.commit([Put(_identity(3))])
    assert [row[0] for row in _log(store)] == [1, 2]  # numbered on without a gap
    assert store.get(Identity, "id-3") is not None
    assert store.change_log_problems() == []


def test_pinned_readers_see_whole_batches_only(store: DuckDBStore) -> None:
    """Each commit puts (or deletes) an identity together with its authenticator; a pinned reader
    never finds one without the other."""
    stop = threading.Event()
    torn: list[int] = []
    reads = 0

    def writer(base: int) -> None:
        i = base
        while not stop.is_set():
            store.commit([Put(_identity(i)), Put(_authenticator(i))])
            store.commit([Delete(Identity, f"id-{i}"), Delete(Authenticator, f"au-{i}")])
            i += 1

    threads = [threading.Thread(target=writer, args=(n * 1_000_000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        with store.pinned():
            identities = {e.id.removeprefix("id-") for e in store.all(Identity)}
            time.sleep(0)  # let batches publish meanwhile
            authenticators = {e.id.removeprefix("au-") for e in store.all(Authenticator)}
        torn.extend(int(i) for i in identities ^ authenticators)
        reads += 1
    stop.set()
    for thread in threads:
        thread.join(10)
    assert reads > 10
    assert torn == []
    assert store.change_log_problems() == []


def test_the_change_log_check_finds_tables_changed_behind_its_back(store: DuckDBStore) -> None:
    store.commit([Put(_identity(1)), Put(_identity(2)), Put(_identity(3))])
    store.commit([Delete(Identity, "id-3")])
    with store._db.lock:
        store._db.run([("UPDATE identities SET doc = json_object('id', 'id-1') WHERE id = 'id-1'", None)])
        store._db.run([("DELETE FROM identities WHERE id = 'id-2'", None)])
        store._db.run([("INSERT INTO identities (id, doc) VALUES ('id-3', '{}')", None)])
        store._db.run([("DELETE FROM change_log WHERE seq = 2", None)])
    found = {(p.kind, p.id): p.description for p in store.change_log_problems()}
    assert found == {
        (None, None): "change log: 1 sequence numbers missing between 1 and 4",
        ("identities", "id-1"): "change log: identities id-1 differs from its newest change-log entry",
        (
            "identities",
            "id-3",
        ): "change log: identities id-3 is deleted in the change log but present in its table",
    }


def test_activity_writes_never_wait_for_the_write_lock(store: DuckDBStore) -> None:
    store.commit([Put(_identity(1))])

    def touched(view: StoreView) -> list[Change]:
        current = view.get(Identity, "id-1")
        assert current is not None
        return [Put(_identity(1, role_attributes=["touched"]))]

    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with store.write_lock():
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    assert store.try_submit(touched) is False
    release.set()
    thread.join(10)
    assert store.try_submit(touched) is True
    _wait_until(lambda: (store.get(Identity, "id-1") or _identity(0)).role_attributes == ["touched"])


def test_a_deferred_write_is_handed_over_pending_and_reported_once_durable(store: DuckDBStore) -> None:
    """``deferring``: the writer goes on at once (the server's event loop must not block); its
    pending batch is in the list, and its callbacks run once it is durable and published."""
    deferred: list[Durable] = []
    done = threading.Event()
    with store._db.lock:  # the database is busy: the batch cannot be written yet
        with store.pinned(), store.deferring(deferred):
            store.commit([Put(_identity(1))])
            assert store.get(Identity, "id-1") is None  # reads go on seeing the state before it
        assert len(deferred) == 1
        (pending,) = deferred
        pending.when_done(done.set)
        assert not done.wait(0.2)
    assert done.wait(10)
    assert pending.error is None
    assert store.get(Identity, "id-1") is not None
    late = threading.Event()
    pending.when_done(late.set)  # once done, a callback runs at once
    assert late.is_set()
    with store.deferring([]):  # no write: nothing handed over, nothing to wait for
        assert store.get(Identity, "id-1") is not None


def test_a_deferred_write_that_is_refused_reports_its_error(store: DuckDBStore) -> None:
    deferred: list[Durable] = []
    store._db.run([("ALTER TABLE identities RENAME TO identities_gone", None)])
    try:
        with store.deferring(deferred):
            store.commit([Put(_identity(1))])
        done = threading.Event()
        deferred[0].when_done(done.set)
        assert done.wait(10)
    finally:
        store._db.run([("ALTER TABLE identities_gone RENAME TO identities", None)])
    assert isinstance(deferred[0].error, duckdb.Error)
    assert store.get(Identity, "id-1") is None
    store.commit([Put(_identity(2))])  # outside ``deferring``: waited for as ever
    assert store.get(Identity, "id-2") is not None


def test_after_a_costly_publish_the_committer_gathers_writes_before_the_next_batch(tmp_path: Path) -> None:
    """As PostgreSQL's commit_delay: only once publishing is costly, never longer than the cap."""
    from storage.group_commit import GATHER_AFTER_SECONDS, GATHER_MAX_SECONDS

    store = DuckDBStore(tmp_path / "t.duckdb", journal=True)
    costly = threading.Event()
    store.subscribe(lambda changes: time.sleep(0.02) if costly.is_set() else None)
    store.commit([Put(_identity(1))])
    # a cheap publish: the next batch goes at once (set, not measured: how long this one took
    # depends on the machine's load; the costly one below takes 20 ms on any machine)
    store._publish_seconds = GATHER_AFTER_SECONDS
    assert store._gather_seconds() == 0.0

    costly.set()
    store.commit([Put(_identity(2))])  # its publish took 20 ms

    assert store._publish_seconds > GATHER_AFTER_SECONDS
    assert store._gather_seconds() == GATHER_MAX_SECONDS
    store.close()
    assert store._gather_seconds() == 0.0  # nor while closing


def test_writers_gathered_behind_costly_publishes_are_all_answered_in_order(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(path, journal=True)
    store.subscribe(lambda changes: time.sleep(0.005))
    answered: list[int] = []
    lock = threading.Lock()

    def write(i: int) -> None:
        for round in range(5):
            store.commit([Put(_identity(f"{i}-{round}"))])
            with lock:
                answered.append(i)

    writers = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(30)
    store.close()

    assert len(answered) == 40
    reopened = DuckDBStore(path)
    assert len(reopened.all(Identity)) == 40
    log = _log(reopened)
    assert [row[0] for row in log] == list(range(1, 41))
    assert len({row[1] for row in log}) < 40  # they shared batches
    reopened.close()
