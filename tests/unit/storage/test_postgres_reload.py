"""A process that falls behind the change log by more than it keeps (``TRELLIS_CHANGE_LOG_RETAIN``)
reads the database again and carries on, as two :class:`PostgresStore`\\ s in one test process:
its state becomes the other's, its listeners hear the difference as one batch of another
process's, and it writes again without a restart."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.ports import Change, Delete, Put
from storage.postgres import PostgresStore
from tests.unit.storage.test_postgres_cluster import eventually

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
RETAIN = 4


def _identity(key: str, name: str | None = None) -> Identity:
    return Identity(id=f"id-{key}", created_at=NOW, updated_at=NOW, name=name or f"name-{key}")  # type: ignore[call-arg]


@pytest.fixture
def pair(postgres_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    first = PostgresStore(postgres_url, change_log_retain=RETAIN)
    second = PostgresStore(postgres_url, change_log_retain=RETAIN)
    yield first, second
    first.close()
    second.close()


def test_a_process_behind_the_trimmed_log_reloads_and_writes_again(
    pair: tuple[PostgresStore, PostgresStore], postgres_server: object, postgres_url: str
) -> None:
    first, second = pair
    first.commit([Put(_identity("kept")), Put(_identity("changed")), Put(_identity("deleted"))])
    eventually(lambda: second.last_seq == first.last_seq)
    heard: list[tuple[list[Change], bool]] = []
    second.subscribe(lambda changes: heard.append((changes, second.replaying)))

    with second._lock:  # its follower (and any catch-up) waits: the process falls behind
        first.commit([Put(_identity("changed", "renamed"))])
        first.commit([Delete(Identity, "id-deleted")])
        for i in range(3 * RETAIN):
            first.commit([Put(_identity(f"new-{i}"))])
        oldest = postgres_server.execute(postgres_url, "SELECT min(seq) FROM change_log")  # type: ignore[attr-defined]
        assert oldest[0][0] > second.last_seq + 1  # what it needs next is gone
    eventually(lambda: second.last_seq == first.last_seq)

    assert {i.id: i.name for i in second.all(Identity)} == {i.id: i.name for i in first.all(Identity)}
    assert second.health()[-1]["healthy"] is True
    changes, replaying = heard[0]
    assert replaying is True  # another process's batch: its listeners commit no follow-ups
    assert {(type(c).__name__, c.entity.id if isinstance(c, Put) else c.id) for c in changes} == {
        ("Put", "id-changed"),
        ("Delete", "id-deleted"),
        *(("Put", f"id-new-{i}") for i in range(3 * RETAIN)),
    }
    second.commit([Put(_identity("after"))])  # writes again, no restart
    first.catch_up()
    assert first.get(Identity, "id-after") is not None
