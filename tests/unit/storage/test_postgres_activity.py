"""API sessions' activity shared through PostgreSQL (storage/postgres/activity.py): what one
process notes, another reads once shared; the later time wins; ended sessions are dropped; a
database that does not answer keeps the notes for the next time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from storage.postgres import PostgresStore
from storage.postgres.activity import PostgresActivity

T0 = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


@pytest.fixture
def boards(postgres_url: str) -> Iterator[tuple[PostgresActivity, PostgresActivity]]:
    PostgresStore(postgres_url).close()  # makes the table

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(postgres_url, autocommit=True)

    first, second = (PostgresActivity(connect, retain=timedelta(days=1)) for _ in range(2))
    yield first, second
    first.close()
    second.close()


def test_what_one_notes_the_other_reads_once_shared(
    boards: tuple[PostgresActivity, PostgresActivity],
) -> None:
    first, second = boards
    first.note("s1", T0)
    first.note("s1", T0 + timedelta(minutes=2))
    first.note("s1", T0 + timedelta(minutes=1))  # an earlier time noted later: the later one stays
    first.note("s2", T0)
    assert second.latest(["s1", "s2"]) == {}  # not shared yet

    first.share()
    second.note("s2", T0 - timedelta(minutes=5))  # older than what is shared: changes nothing
    second.share()

    assert second.latest(["s1", "s2", "s3"]) == {"s1": T0 + timedelta(minutes=2), "s2": T0}
    first.forget(["s1"])
    assert second.latest(["s1", "s2"]) == {"s2": T0}


def test_notes_survive_a_database_that_does_not_answer(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    reachable = [False]

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        if not reachable[0]:
            return psycopg.connect("host=/nonexistent-trellis-socket-dir dbname=x connect_timeout=2")
        return psycopg.connect(postgres_url, autocommit=True)

    board = PostgresActivity(connect, retain=timedelta(days=1))
    try:
        board.note("s1", T0)
        board.share()  # refused: kept
        assert board.latest(["s1"]) == {}  # nothing to read either: no answer, no error
        reachable[0] = True
        board.share()
        assert board.latest(["s1"]) == {"s1": T0}
    finally:
        board.close()
