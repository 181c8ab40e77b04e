"""Routers connected to one process, known to the others through PostgreSQL
(storage/postgres/fleet.py): each fleet shares its own connections and takes the others' in; a
process that ends withdraws its routers, and one that stops renewing is forgotten at expiry."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from engine.managers.fleet import Fleet, VersionInfo
from engine.testing import FixedClock
from storage.postgres import PostgresStore
from storage.postgres.fleet import FLEET_TABLE, PostgresFleetBoard

#: Generous: the boards read every 0.05 s here; a loaded machine may take seconds.
DEADLINE = 30.0


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE:.0f} s"
        time.sleep(0.02)


@pytest.fixture
def connect(postgres_url: str) -> Callable[[], psycopg.Connection[tuple[object, ...]]]:
    PostgresStore(postgres_url).close()  # makes the table

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(postgres_url, autocommit=True)

    return connect


@pytest.fixture
def pair(
    connect: Callable[[], psycopg.Connection[tuple[object, ...]]],
) -> Iterator[tuple[Fleet, Fleet, PostgresFleetBoard, PostgresFleetBoard]]:
    boards = [PostgresFleetBoard(connect, pull_seconds=0.05, renew_seconds=0.2) for _ in range(2)]
    fleets = [Fleet(FixedClock(), board) for board in boards]
    yield fleets[0], fleets[1], boards[0], boards[1]
    for board in boards:
        board.close()


def join(fleet: Fleet, router_id: str) -> int:
    presence = fleet.connect(
        router_id,
        name=router_id,
        fingerprint="",
        hostname=f"{router_id}.test",
        protocols={"tls": f"tls://{router_id}.test:3022"},
        link_listener="",
        version=VersionInfo(),
        tunneler=True,
    )
    return presence.connection


def test_a_router_connected_to_one_process_is_online_in_the_other(
    pair: tuple[Fleet, Fleet, PostgresFleetBoard, PostgresFleetBoard],
) -> None:
    first, second, _, _ = pair
    heard: list[bool] = []
    second.add_listener(lambda: heard.append(True))
    connection = join(first, "r1")
    first.set_edge_sessions("r1", connection, {"as1": "id1"})

    until(lambda: second.is_online("r1") and second.has_edge_connection("id1"), "r1 online in the second")
    seen = second.presence("r1")
    assert seen is not None
    assert (seen.hostname, seen.tunneler) == ("r1.test", True)
    assert heard  # the second's control listener would tell its routers

    first.disconnect("r1", connection)
    until(lambda: not second.is_online("r1"), "r1 offline in the second")


def test_a_process_that_ends_withdraws_its_routers_at_once(
    connect: Callable[[], psycopg.Connection[tuple[object, ...]]],
) -> None:
    leaving = PostgresFleetBoard(connect, pull_seconds=0.05, renew_seconds=0.2)
    staying = PostgresFleetBoard(connect, pull_seconds=0.05, renew_seconds=0.2)
    gone, here = Fleet(FixedClock(), leaving), Fleet(FixedClock(), staying)
    try:
        join(gone, "r1")
        until(lambda: here.is_online("r1"), "r1 online")
        leaving.close()
        until(lambda: not here.is_online("r1"), "r1 withdrawn")
        with connect() as conn:
            rows = conn.execute(
                f"SELECT count(*) FROM {FLEET_TABLE} WHERE owner = %s", [leaving.owner]
            ).fetchall()
        assert rows == [(0,)]
    finally:
        staying.close()


def test_a_process_that_stops_renewing_is_forgotten_at_expiry(
    connect: Callable[[], psycopg.Connection[tuple[object, ...]]],
) -> None:
    board = PostgresFleetBoard(connect, pull_seconds=0.05)
    here = Fleet(FixedClock(), board)
    try:
        with connect() as conn:  # the row a process killed with SIGKILL leaves: renewed no more
            conn.execute(
                f"INSERT INTO {FLEET_TABLE} (owner, state, expires_at) "
                "VALUES ('killed:1:0', %s::jsonb, now() + interval '1 second')",
                ['{"online": [{"routerId": "r9", "connectedAt": "2026-01-01T00:00:00+00:00"}]}'],
            )
        until(lambda: here.is_online("r9"), "r9 online while the row lives")
        until(lambda: not here.is_online("r9"), "r9 forgotten once the row expired")
    finally:
        board.close()
