"""The DuckDB store on a real file: round trips, atomic batches, migrations, crash durability."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Enrollment, Identity
from engine.entities.services import Service
from engine.errors import CommitFailedError
from engine.ports import Delete, Put
from storage.duckdb import DuckDBStore
from storage.duckdb.migrations import MIGRATIONS
from tests.unit.storage.crash import run_killed

NOW = datetime(2026, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)
Opener = Callable[[Path], DuckDBStore]


@pytest.fixture(params=["thread", "process"])
def writer(request: pytest.FixtureRequest) -> str:
    """Every test runs with the statements in the committer thread and in a writer process."""
    return str(request.param)


@pytest.fixture
def open_store(writer: str) -> Opener:
    return functools.partial(DuckDBStore, writer=writer)


def _identity(i: int, **kw: object) -> Identity:
    return Identity(id=f"id-{i}", created_at=NOW, updated_at=NOW, name=f"name-{i}", **kw)  # type: ignore[arg-type]


def test_entities_round_trip_with_datetimes_and_nested_values(tmp_path: Path, open_store: Opener) -> None:
    store = open_store(tmp_path / "t.duckdb")
    identity = _identity(1, role_attributes=["b", "a"], app_data={"x": [1, {"y": None}]}, disabled_until=NOW)
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
    reopened = open_store(tmp_path / "t.duckdb")
    assert reopened.get(Identity, "id-1") == identity
    assert reopened.get(Enrollment, "e1") == enrollment
    assert reopened.find_unique(Identity, "name", "name-1") == identity
    assert reopened.find_by(Enrollment, "identity_id", "id-1") == [enrollment]
    reopened.close()


def test_a_failed_batch_applies_nothing(tmp_path: Path, open_store: Opener) -> None:
    store = open_store(tmp_path / "t.duckdb")
    store.commit([Put(_identity(1))])
    bad = Service(id="s1", created_at=NOW, updated_at=NOW, name="svc", tags={"x": object()})
    with pytest.raises(TypeError):
        store.commit([Put(_identity(2)), Delete(Identity, "id-1"), Put(bad)])
    assert store.get(Identity, "id-1") is not None
    assert store.get(Identity, "id-2") is None
    store.close()
    reopened = open_store(tmp_path / "t.duckdb")
    assert [i.id for i in reopened.all(Identity)] == ["id-1"]
    reopened.close()


def test_a_rolled_back_transaction_leaves_memory_untouched(tmp_path: Path, open_store: Opener) -> None:
    store = open_store(tmp_path / "t.duckdb")
    store.commit([Put(_identity(1))])
    # Make the database refuse the batch inside the transaction: a table that no longer exists.
    store._db.run([("DROP TABLE services", None)])
    svc = Service(id="s1", created_at=NOW, updated_at=NOW, name="svc")
    with pytest.raises(CommitFailedError) as failed:
        store.commit([Put(_identity(2)), Put(svc)])
    assert isinstance(failed.value.__cause__, duckdb.Error)
    assert store.get(Identity, "id-2") is None
    assert store.get(Service, "s1") is None
    counts = store._db.run(
        [("SELECT count(*) FROM identities", None), ("SELECT count(*) FROM change_log", None)]
    )
    assert counts == [[(1,)], [(1,)]]
    store.close()


def test_migrations_run_once(tmp_path: Path, open_store: Opener) -> None:
    first = open_store(tmp_path / "t.duckdb")
    assert first.schema_version == MIGRATIONS[-1][0]
    first.close()
    second = open_store(tmp_path / "t.duckdb")
    rows = second._db.run([("SELECT count(*) FROM schema_migrations", None)])[0][0]
    assert rows == (len(MIGRATIONS),)
    second.close()


def test_settings_persist(tmp_path: Path, open_store: Opener) -> None:
    store = open_store(tmp_path / "t.duckdb")
    store.put_setting("instance_id", "abc")
    store.close()
    reopened = open_store(tmp_path / "t.duckdb")
    assert reopened.get_setting("instance_id") == "abc"
    reopened.close()


def test_acknowledged_writes_survive_kill_9(tmp_path: Path, open_store: Opener, writer: str) -> None:
    """A process killed without closing keeps every committed batch and nothing else."""
    path = tmp_path / "crash.duckdb"
    run_killed(
        f"""
        store = DuckDBStore(Path({str(path)!r}), writer={writer!r})
        for i in range(50):
            store.commit([Put(Identity(id=f"i{{i}}", created_at=now, updated_at=now, name=f"n{{i}}"))])
        store._db.run([("BEGIN TRANSACTION", None), ("INSERT INTO identities VALUES ('uncommitted', '{{}}')", None)])
        """
    )
    reopened = open_store(path)
    ids = {i.id for i in reopened.all(Identity)}
    assert ids == {f"i{i}" for i in range(50)}
    reopened.close()
