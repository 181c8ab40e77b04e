"""What every durable store promises, checked on each: DuckDB (a file) and PostgreSQL (a server).

Each test runs on both backends through their real connections: round trips, batches applied
whole or not at all, settings, a restart, the change log, migrations, and the integrity check
of the change log against the tables. What only one backend has (DuckDB's writer process and
journal, PostgreSQL's fence and reconnection) is tested in its own module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.services import Service
from engine.errors import CommitFailedError
from engine.ports import AccessChangeRow, Delete, Put
from storage.codec import encode
from storage.duckdb import DuckDBStore
from storage.duckdb.migrations import MIGRATIONS as DUCKDB_MIGRATIONS
from storage.postgres import PostgresStore
from storage.postgres.migrations import MIGRATIONS as POSTGRES_MIGRATIONS

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)
Store = DuckDBStore | PostgresStore


@dataclass
class Backend:
    """One durable store under test: how to open it (again: the same database), how to run SQL
    on its database behind its back, the errors its database raises, its migrations."""

    name: str
    open: Callable[[], Store]
    sql: Callable[[Store, str], list[tuple[Any, ...]]]
    error: type[BaseException]
    migrations: int


def _duckdb_sql(store: Store, statement: str) -> list[tuple[Any, ...]]:
    assert isinstance(store, DuckDBStore)
    with store._db.lock:
        rows: list[tuple[Any, ...]] = store._db.run([(statement, None)])[0]
        return rows


@pytest.fixture(params=["duckdb", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "duckdb":
        path = tmp_path / "t.duckdb"
        return Backend(
            "duckdb",
            lambda: DuckDBStore(path, writer="thread"),
            _duckdb_sql,
            duckdb.Error,
            len(DUCKDB_MIGRATIONS),
        )
    server = request.getfixturevalue("postgres_server")
    url = server.new_database()
    return Backend(
        "postgres",
        lambda: PostgresStore(url),
        lambda store, statement: server.execute(url, statement),
        psycopg.Error,
        len(POSTGRES_MIGRATIONS),
    )


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


def test_entities_round_trip_with_datetimes_and_nested_values(backend: Backend) -> None:
    store = backend.open()
    identity = _identity(
        1,
        role_attributes=["b", "a"],
        # values a database could rewrite: a float beyond 64-bit integers, a NUL, non-ASCII text
        app_data={"x": [1, {"y": None}], "big": 1e300, "tiny": 5e-324, "nul": "a\x00b", "text": "é✓𝄞"},
        disabled_until=NOW,
    )
    enrollment = Enrollment(
        id="e1",
        created_at=NOW,
        updated_at=NOW,
        identity_id="id-1",
        method="ott",
        token="tok",
        expires_at=NOW + timedelta(hours=3),
    )
    store.commit([Put(identity), Put(enrollment)])
    store.close()
    reopened = backend.open()
    assert reopened.get(Identity, "id-1") == identity
    assert reopened.get(Enrollment, "e1") == enrollment
    assert reopened.find_unique(Identity, "name", "name-1") == identity
    assert reopened.find_by(Enrollment, "identity_id", "id-1") == [enrollment]
    reopened.close()


def test_a_value_that_cannot_be_stored_is_refused_at_staging_and_applies_nothing(backend: Backend) -> None:
    store = backend.open()
    store.commit([Put(_identity(1))])
    bad = Service(id="s1", created_at=NOW, updated_at=NOW, name="svc", tags={"x": object()})
    with pytest.raises(TypeError):
        store.commit([Put(_identity(2)), Delete(Identity, "id-1"), Put(bad)])
    assert store.get(Identity, "id-1") is not None
    assert store.get(Identity, "id-2") is None
    store.commit([Put(_identity(3))])  # the store goes on, numbering without a gap
    store.close()
    reopened = backend.open()
    assert sorted(i.id for i in reopened.all(Identity)) == ["id-1", "id-3"]
    assert [row[0] for row in reopened.change_log()] == [1, 2]
    reopened.close()


def test_a_batch_the_database_refuses_applies_nothing_anywhere(backend: Backend) -> None:
    store = backend.open()
    published: list[object] = []
    store.subscribe(published.append)
    store.commit([Put(_identity(1))])
    # The database refuses the next batch inside its transaction: a table it writes is gone.
    backend.sql(store, "ALTER TABLE services RENAME TO services_gone")
    svc = Service(id="s1", created_at=NOW, updated_at=NOW, name="svc")
    with pytest.raises(CommitFailedError) as failed:
        store.commit([Put(_identity(2)), Put(svc)])
    assert isinstance(failed.value.__cause__, backend.error)
    assert store.get(Identity, "id-2") is None
    assert store.get(Service, "s1") is None
    assert len(published) == 1  # the listeners saw only the first batch
    assert backend.sql(store, "SELECT count(*) FROM identities") == [(1,)]
    assert backend.sql(store, "SELECT count(*) FROM change_log") == [(1,)]
    backend.sql(store, "ALTER TABLE services_gone RENAME TO services")
    store.commit([Put(_identity(3)), Put(svc)])
    assert [row[0] for row in store.change_log()] == [1, 2, 3]  # numbered on without a gap
    assert store.change_log_problems() == []
    store.close()


def test_settings_persist(backend: Backend) -> None:
    store = backend.open()
    store.put_setting("instance_id", "abc")
    store.put_setting("instance_id", "def")
    store.put_setting("other", "é")
    store.close()
    reopened = backend.open()
    assert (reopened.get_setting("instance_id"), reopened.get_setting("other")) == ("def", "é")
    assert reopened.get_setting("missing") is None
    reopened.close()


def test_a_restart_brings_everything_back_and_numbering_goes_on(backend: Backend) -> None:
    store = backend.open()
    for i in range(20):
        store.commit([Put(_identity(i)), Put(_authenticator(i))])
    store.commit([Delete(Identity, f"id-{i}") for i in range(0, 20, 2)])
    store.commit([Put(_identity(1, role_attributes=["changed"]))])
    store.put_setting("instance_id", "abc")
    expected = {
        "identities": sorted(store.all(Identity), key=lambda e: e.id),
        "authenticators": sorted(store.all(Authenticator), key=lambda e: e.id),
    }
    last = store.last_seq
    store.close()

    reopened = backend.open()
    assert sorted(reopened.all(Identity), key=lambda e: e.id) == expected["identities"]
    assert sorted(reopened.all(Authenticator), key=lambda e: e.id) == expected["authenticators"]
    assert reopened.get(Identity, "id-1") == _identity(1, role_attributes=["changed"])
    assert reopened.get_setting("instance_id") == "abc"
    assert reopened.last_seq == last == 51
    reopened.commit([Put(_identity(100))])
    assert reopened.change_log(after=last)[0][:2] == (52, 52)
    assert reopened.change_log_problems() == []
    reopened.close()


def test_the_change_log_holds_every_change_in_order_and_the_tables_the_last(backend: Backend) -> None:
    store = backend.open()
    store.commit([Put(_identity(1)), Put(_authenticator(1))])
    renamed = _identity(1, role_attributes=["a"])
    store.commit([Put(renamed)])
    store.commit([Delete(Authenticator, "au-1")])
    log = store.change_log(limit=100)
    assert [(seq, batch, kind, id, op) for seq, batch, kind, id, op, _ in log] == [
        (1, 2, "identities", "id-1", "put"),
        (2, 2, "authenticators", "au-1", "put"),
        (3, 3, "identities", "id-1", "put"),
        (4, 4, "authenticators", "au-1", "delete"),
    ]
    assert log[2][5] == encode(renamed)
    assert log[3][5] is None
    assert store.change_log(after=2, limit=1) == [log[2]]
    assert store.change_log_problems() == []
    store.close()


def test_writers_on_many_threads_are_all_committed_in_one_order(backend: Backend) -> None:
    store = backend.open()

    def write(n: int) -> None:
        for i in range(10):
            store.commit([Put(_identity(f"{n}-{i}")), Put(_authenticator(n * 100 + i))])

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert store.count(Identity) == 60
    seqs = [row[0] for row in store.change_log(limit=1000)]
    assert seqs == list(range(1, 121))
    assert store.change_log_problems() == []
    store.close()
    reopened = backend.open()
    assert (reopened.count(Identity), reopened.count(Authenticator), reopened.last_seq) == (60, 60, 120)
    reopened.close()


def test_migrations_run_once(backend: Backend) -> None:
    first = backend.open()
    assert first.schema_version == backend.migrations
    first.close()
    second = backend.open()
    assert second.schema_version == backend.migrations
    assert backend.sql(second, "SELECT count(*) FROM schema_migrations") == [(backend.migrations,)]
    second.close()


def test_the_change_log_check_finds_tables_changed_behind_its_back(backend: Backend) -> None:
    store = backend.open()
    store.commit([Put(_identity(1)), Put(_identity(2)), Put(_identity(3))])
    store.commit([Delete(Identity, "id-3")])
    assert store.change_log_problems() == []
    backend.sql(store, """UPDATE identities SET doc = '{"id": "id-1"}' WHERE id = 'id-1'""")
    backend.sql(store, "DELETE FROM identities WHERE id = 'id-2'")
    backend.sql(store, "INSERT INTO identities (id, doc) VALUES ('id-3', '{}')")
    backend.sql(store, "DELETE FROM change_log WHERE seq = 2")
    found = {(p.kind, p.id): p.description for p in store.change_log_problems()}
    assert found == {
        (None, None): "change log: 1 sequence numbers missing between 1 and 4",
        ("identities", "id-1"): "change log: identities id-1 differs from its newest change-log entry",
        (
            "identities",
            "id-3",
        ): "change log: identities id-3 is deleted in the change log but present in its table",
    }
    store.close()


def test_the_change_log_is_trimmed_to_its_newest_entries(backend: Backend) -> None:
    opener = backend.open
    store = opener()
    store.change_log_retain = 10
    for i in range(40):
        store.commit([Put(_identity(i))])
    seqs = [row[0] for row in store.change_log(limit=1000)]
    assert 10 <= len(seqs) < 16
    assert seqs == list(range(41 - len(seqs), 41))
    assert store.change_log_problems() == []
    store.close()
    reopened = opener()
    reopened.commit([Put(_identity(40))])
    assert reopened.change_log(limit=1000)[-1][0] == 41
    assert reopened.count(Identity) == 41
    reopened.close()


def test_the_access_change_log_keeps_rows_by_revision_across_a_reopen(backend: Backend) -> None:
    """The stream's rows (docs/analysis.md §15): one per revision (a second is refused), read in
    order after a revision, kept across a reopen, trimmed by time but for the newest."""
    store = backend.open()
    log = store.access_change_log()
    rows = [
        AccessChangeRow(r, r - 3, NOW + timedelta(seconds=r), r * 10, bytes([r, 0, 255])) for r in (3, 6, 9)
    ]
    assert [log.append(row) for row in rows] == [True, True, True]
    assert log.append(AccessChangeRow(6, 0, NOW, 0, b"other")) is False
    assert log.read(3, 10) == rows[1:]
    assert log.read(0, 1) == rows[:1]
    store.close()
    reopened = backend.open()
    log = reopened.access_change_log()
    assert log.bounds() == (rows[0], rows[-1])
    assert log.trim(NOW + timedelta(days=1)) == 2
    assert log.read(0, 10) == rows[2:]
    reopened.close()


def test_the_memory_store_keeps_one_access_change_log() -> None:
    from storage.memory import MemoryStore

    store = MemoryStore()
    row = AccessChangeRow(1, 0, NOW, 0, b"x")
    assert store.access_change_log().append(row)
    assert store.access_change_log().read(0, 5) == [row]
