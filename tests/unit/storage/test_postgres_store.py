"""The PostgreSQL store's own behaviour, on a real server (tests/postgres.py): the ``log_head``
fence against a second writer, a server that goes away and comes back, migrations raced by two
processes, what it refuses at open and at staging, and its connection string kept secret.

What it shares with the DuckDB store is checked on both in test_store_contract.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.errors import CommitFailedError
from engine.ports import Delete, Put, SnapshotUnsupportedError
from storage.codec import UnstorableValueError
from storage.postgres import (
    DatabaseUrlError,
    LogHeadMovedError,
    PostgresStore,
    StoreOpenError,
    describe,
    parse_url,
)
from storage.postgres.migrations import ENTITY_TABLES_LATER, ENTITY_TABLES_V1, LATEST, table_name
from tests.postgres import PostgresServer, find_bindir

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)


def _identity(i: int | str, **kw: object) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}", **kw)  # type: ignore[arg-type]


@pytest.fixture
def store(postgres_url: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(postgres_url)
    yield opened
    opened.close()


def test_every_entity_kind_has_its_table() -> None:
    from engine.entities import ALL_KINDS

    assert {table_name(kind.ENTITY) for kind in ALL_KINDS} == {*ENTITY_TABLES_V1, *ENTITY_TABLES_LATER}


def test_an_empty_database_is_initialised_with_an_empty_log(postgres_server: Any, postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    assert (store.schema_version, store.last_seq) == (LATEST, 0)
    assert postgres_server.execute(postgres_url, "SELECT id, seq FROM log_head") == [(1, 0)]
    store.close()


def test_a_store_that_lost_its_write_token_is_fenced_off_then_takes_it_again(
    postgres_server: Any, postgres_url: str
) -> None:
    """The write token's connection is cut while its store is inside the write lock (too late to
    notice before staging): another store takes the token and writes; the first one's batch finds
    ``log_head`` moved and is refused whole (the fence), and its next write takes the token again
    and catches up."""
    first = PostgresStore(postgres_url)
    second = PostgresStore(postgres_url, token_linger=600.0)  # keeps the token while idle
    second.commit([Put(_identity(1))])
    assert second.holds_write_token
    token_pid = second._token_conn.info.backend_pid  # type: ignore[union-attr]

    def cut_inside_the_write_lock() -> None:
        with second.write_lock():
            postgres_server.execute(postgres_url, f"SELECT pg_terminate_backend({token_pid})")
            first.commit([Put(_identity(2))])  # the lock went with the connection: first takes it
            second.commit([Put(_identity(3)), Delete(Identity, "id-1")])

    with pytest.raises(CommitFailedError) as refused:
        cut_inside_the_write_lock()
    assert isinstance(refused.value.__cause__, LogHeadMovedError)
    assert "another process" in str(refused.value.__cause__)
    assert second.get(Identity, "id-3") is None  # nothing of it applied in memory either
    second.commit([Put(_identity(4))])  # the token again, after catching up with first's write
    assert sorted(i.id for i in second.all(Identity)) == ["id-1", "id-2", "id-4"]
    second.close()
    first.close()
    assert postgres_server.execute(postgres_url, "SELECT seq FROM log_head") == [(3,)]
    reopened = PostgresStore(postgres_url)
    assert sorted(i.id for i in reopened.all(Identity)) == ["id-1", "id-2", "id-4"]
    assert [(row[0], row[3]) for row in reopened.change_log()] == [(1, "id-1"), (2, "id-2"), (3, "id-4")]
    assert reopened.change_log_problems() == []
    reopened.close()


def test_a_store_whose_token_connection_was_ended_takes_the_token_again_before_writing(
    postgres_server: Any, postgres_url: str
) -> None:
    """The write token's connection is ended (``pg_terminate_backend``; a restart of the server
    does the same) while its store is idle but believes it holds the token: another store takes
    the token and writes; the first one notices the lost connection before its next write, takes
    the token again, catches up, and that write is not refused."""
    first = PostgresStore(postgres_url)
    second = PostgresStore(postgres_url, token_linger=600.0)  # keeps the token while idle
    second.commit([Put(_identity(1))])
    assert second.holds_write_token
    token_pid = second._token_conn.info.backend_pid  # type: ignore[union-attr]
    postgres_server.execute(postgres_url, f"SELECT pg_terminate_backend({token_pid})")
    first.commit([Put(_identity(2))])  # the lock went with the connection: first takes it
    second.commit([Put(_identity(3)), Delete(Identity, "id-2")])  # checked against id-2: caught up
    assert sorted(i.id for i in second.all(Identity)) == ["id-1", "id-3"]
    first.catch_up()
    assert sorted(i.id for i in first.all(Identity)) == ["id-1", "id-3"]
    assert second.change_log_problems() == []
    second.close()
    first.close()


def test_two_stores_committing_at_once_both_land_in_one_order(postgres_url: str) -> None:
    """Both commit concurrently: the write token orders them, every write lands, and each store
    ends with all of them."""
    stores = [PostgresStore(postgres_url), PostgresStore(postgres_url)]
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def write(n: int) -> None:
        start.wait()
        for i in range(20):
            try:
                stores[n].commit([Put(_identity(f"{n}-{i}"))])
            except BaseException as ex:
                failures.append(ex)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    for opened in stores:
        opened.catch_up()
        assert opened.count(Identity) == 40
        opened.close()
    reopened = PostgresStore(postgres_url)
    assert reopened.count(Identity) == 40 == reopened.last_seq
    assert reopened.change_log_problems() == []
    reopened.close()


def test_migrations_raced_by_two_stores_run_once(postgres_server: Any, postgres_url: str) -> None:
    opened: list[PostgresStore] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def open_one() -> None:
        start.wait()
        try:
            opened.append(PostgresStore(postgres_url))
        except BaseException as ex:
            errors.append(ex)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for one in opened:
        one.close()
    assert errors == []
    assert len(opened) == 3
    assert postgres_server.execute(postgres_url, "SELECT count(*) FROM schema_migrations") == [(LATEST,)]


def test_a_database_of_a_newer_schema_is_refused_at_open(postgres_server: Any, postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    postgres_server.execute(postgres_url, "INSERT INTO schema_migrations (version) VALUES (99)")
    with pytest.raises(StoreOpenError, match=f"schema version 99; this Trellis knows up to {LATEST}"):
        PostgresStore(postgres_url)


def test_a_database_not_in_utf8_is_refused_at_open(postgres_server: Any) -> None:
    with psycopg.connect(postgres_server.url("postgres"), autocommit=True) as conn:
        conn.execute("CREATE DATABASE trellis_latin1 TEMPLATE template0 ENCODING 'LATIN1'")
    url = postgres_server.url("trellis_latin1")
    with pytest.raises(StoreOpenError, match="encoding is LATIN1, not UTF8"):
        PostgresStore(url)
    assert postgres_server.execute(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [
        (0,)
    ]


def test_ids_postgresql_cannot_hold_are_refused_at_staging(store: PostgresStore) -> None:
    store.commit([Put(_identity(1))])
    for bad in ("nul\x00id", "lone-\ud800"):
        with pytest.raises(UnstorableValueError) as refused:
            store.commit([Put(_identity(2)), Put(Identity(id=bad, created_at=NOW, updated_at=NOW, name="x"))])
        assert refused.value.field == "id"  # type: ignore[attr-defined]
    store.commit([Put(_identity(3))])  # nothing was staged: the store goes on
    assert sorted(i.id for i in store.all(Identity)) == ["id-1", "id-3"]
    assert [row[0] for row in store.change_log()] == [1, 2]


def test_the_integrity_check_finds_a_log_head_out_of_step(postgres_server: Any, postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    store.commit([Put(_identity(1)), Put(_identity(2))])
    postgres_server.execute(postgres_url, "UPDATE log_head SET seq = 7")
    assert [p.description for p in store.change_log_problems()] == [
        "change log: log_head is at 7 but the log ends at 2"
    ]
    store.close()


def test_a_snapshot_is_refused_naming_postgresqls_tools(store: PostgresStore) -> None:
    with pytest.raises(SnapshotUnsupportedError, match=r"pg_dump.*pg_restore"):
        store.snapshot(NOW)


def test_the_connection_string_is_described_without_its_password() -> None:
    assert describe("postgresql://alice:s3cret@db.example.test:5433/trellis?sslmode=require") == (
        "user=alice password=*** dbname=trellis host=db.example.test port=5433 sslmode=require"
    )
    assert "s3cret" not in describe("host=db.example.test dbname=trellis password='s3cret x'")
    assert describe("host=db.example.test dbname=trellis") == "dbname=trellis host=db.example.test"
    for bad in ("postgresql://alice:s3cret%zz@db/x", "host=db password=s3cret junk", "password='s3cret"):
        with pytest.raises(DatabaseUrlError) as refused:
            parse_url(bad)
        assert "s3cret" not in str(refused.value)
        assert "s3cret" not in describe(bad)


def test_an_unreachable_database_is_refused_at_open_without_its_password(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"postgresql://alice:s3cret@/trellis?host={tmp_path}&connect_timeout=2"
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreOpenError) as refused:
        PostgresStore(url)
    message = str(refused.value)
    assert message.startswith("cannot open the PostgreSQL database user=alice password=*** ")
    assert "s3cret" not in message
    assert "s3cret" not in caplog.text


# -- a server that goes away under the store ----------------------------------------------------


@pytest.fixture
def own_server(postgres_server: Any) -> Iterator[PostgresServer]:
    """A server of the test's own, to stop and start (the session's serves the other tests)."""
    bindir = find_bindir()
    assert bindir is not None  # postgres_server skipped the test otherwise
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def test_a_server_gone_refuses_writes_at_once_and_they_work_again_once_it_is_back(
    own_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = own_server.new_database()
    store = PostgresStore(url)
    store.commit([Put(_identity(1))])
    own_server.stop()
    with caplog.at_level(logging.ERROR, logger="storage.group_commit"):
        for i in (2, 3):  # the connection that broke, then a new one the server is not there for
            began = time.monotonic()
            with pytest.raises(CommitFailedError) as refused:
                store.commit([Put(_identity(i))])
            assert time.monotonic() - began < 15
            assert isinstance(refused.value.__cause__, psycopg.OperationalError)
    failing = [r for r in caplog.records if getattr(r, "event", None) == "commit.failing"]
    assert len(failing) == 1
    assert failing[0].exc_info is None  # an expected failure: one line, no traceback
    assert store.get(Identity, "id-2") is None
    own_server.start()
    store.commit([Put(_identity(4))])  # a new connection, numbering on from the head
    store.put_setting("after", "outage")
    assert sorted(i.id for i in store.all(Identity)) == ["id-1", "id-4"]
    store.close()
    reopened = PostgresStore(url)
    assert sorted(i.id for i in reopened.all(Identity)) == ["id-1", "id-4"]
    assert reopened.get_setting("after") == "outage"
    assert [row[0] for row in reopened.change_log()] == [1, 2]
    assert reopened.change_log_problems() == []
    reopened.close()
