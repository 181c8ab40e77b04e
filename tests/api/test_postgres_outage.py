"""PostgreSQL stopped, restarted or its connections ended while the controller serves: writes are
refused with 503 ``COMMIT_FAILED`` and ``Retry-After`` while it is away and nothing of them is
written, reads go on from memory, ``/trellis/health-checks`` says the process cannot write, and
once the server is back everything connects again by itself (no restart of the app): the first
writes succeed, the write token and the lead are taken again, two controllers still keep one
order of writes and one leader, and the routers' board (UNLOGGED, emptied by the server's crash
recovery) is filled again.

The server is this module's own (tests/postgres.py), since the tests stop it; every test leaves it
running. Waits are for conditions, with generous deadlines.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from api.info import HEALTH_PATH as HEALTH
from controller.settings import Settings
from storage.postgres import PostgresStore
from storage.postgres.migrations import LEAD_LOCK, WRITE_TOKEN_LOCK
from tests.api.session_helpers import dial, world
from tests.api.test_postgres_store import start
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api
from tests.postgres import PostgresServer, find_bindir

pytestmark = pytest.mark.durable

DEADLINE_SECONDS = 60.0
#: A write refused while the server is away is answered within this (seconds): bounded waits.
REFUSED_WITHIN_SECONDS = 10.0


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed: the PostgreSQL store's tests need it")
    own = PostgresServer(bindir)
    try:
        own.start()
        yield own
    finally:
        own.destroy()


@pytest.fixture
def pg(settings: Settings, server: PostgresServer) -> Settings:
    if server.process is None:  # a test that failed while it was stopped
        server.start()
    return dataclasses.replace(settings, database_url=server.new_database())


def url_of(settings: Settings) -> str:
    assert settings.database_url is not None
    return settings.database_url


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_SECONDS:g} s: {what}"
        time.sleep(0.05)


def health(api: Api) -> Any:
    return api.client.simulate_get(HEALTH)


def healthy(api: Api) -> bool:
    return bool(health(api).status_code == 200)


def identity(name: str) -> dict[str, Any]:
    return {"name": name, "isAdmin": False, "type": "Default"}


def authenticate(api: Api) -> Any:
    return api.client.simulate_post(
        "/edge/client/v1/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
    )


def assert_refused(answer: Any, began: float) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json["error"]["code"] == "COMMIT_FAILED"
    assert 1 <= int(answer.headers["retry-after"]) <= 5
    assert time.monotonic() - began < REFUSED_WITHIN_SECONDS


def advisory_holders(server: PostgresServer, settings: Settings, lock: int) -> int:
    rows = server.execute(
        url_of(settings),
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
        "AND classid::bigint = %s AND objid::bigint = %s",
        [lock >> 32, lock & 0xFFFFFFFF],
    )
    return int(str(rows[0][0]))


def test_a_restart_refuses_writes_while_away_serves_reads_and_recovers(
    pg: Settings, server: PostgresServer
) -> None:
    api = start(pg, first=True)
    try:
        made = world(api)
        kept = api.create("/identities", identity("kept"))
        assert healthy(api)
        assert health(api).json["data"]["healthy"] is True

        server.stop()
        for name in ("while-away-1", "while-away-2"):
            began = time.monotonic()
            assert_refused(api.post("/identities", json=identity(name)), began)
        began = time.monotonic()
        assert_refused(authenticate(api), began)  # it writes an API session
        began = time.monotonic()
        assert_refused(dial(api, made.user.token, made.service), began)
        began = time.monotonic()
        assert_refused(api.delete(f"/identities/{kept}"), began)
        # reads go on from memory, an existing API session too
        listed = api.get("/identities", params={"limit": 500})
        assert listed.status_code == 200
        names = {i["name"] for i in listed.json["data"]}
        assert "kept" in names
        assert not names & {"while-away-1", "while-away-2"}
        assert api.get("/current-api-session").status_code == 200
        assert api.get(f"/identities/{kept}").status_code == 200
        wait_for(lambda: health(api).status_code == 503, "the health check to say unhealthy")
        answer = health(api).json["data"]
        assert answer["healthy"] is False
        failing = [c for c in answer["checks"] if not c["healthy"]]
        assert [c["id"] for c in failing] == ["postgres.reachable"]
        assert failing[0]["failingSince"]

        server.start()
        wait_for(lambda: healthy(api), "the health check to say healthy again")
        # the first writes succeed, without restarting the app
        created = api.post("/identities", json=identity("after-1"))
        assert created.status_code == 201, created.text
        assert authenticate(api).status_code == 200
        assert dial(api, made.user.token, made.service).status_code == 201
        assert api.delete(f"/identities/{kept}").status_code == 200
        rows = server.execute(url_of(pg), "SELECT doc->>'name' FROM identities")
        names = {str(r[0]) for r in rows}
        assert "after-1" in names
        assert not names & {"while-away-1", "while-away-2", "kept"}
        assert api.ctrl.env.store.change_log_problems() == []
    finally:
        api.ctrl.env.store.close()


def test_ended_connections_are_made_again_without_a_refused_write(
    pg: Settings, server: PostgresServer
) -> None:
    """``pg_terminate_backend`` on every connection of the app (the server stays up): the next
    writes, logins (the guesses ledger) and the write token use new connections; none is
    refused."""
    api = start(pg, first=True)
    store = api.ctrl.env.store
    assert isinstance(store, PostgresStore)
    try:
        api.create("/identities", identity("before"))
        for round_ in range(3):
            with store.write_lock():  # the token held while its connection is ended
                pass
            ended = server.execute(
                url_of(pg),
                "WITH app AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE "
                "datname = current_database() AND pid <> pg_backend_pid()) "
                "SELECT pid FROM app WHERE pg_terminate_backend(pid)",
            )
            assert ended
            pids = [int(str(row[0])) for row in ended]
            # pg_terminate_backend only signals: the backends are gone (their sockets closed) soon
            wait_for(
                lambda pids=pids: (
                    not server.execute(
                        url_of(pg), "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", [pids]
                    )
                ),
                "the ended backends to exit",
            )
            created = api.post("/identities", json=identity(f"after-{round_}"))
            assert created.status_code == 201, created.text
            assert authenticate(api).status_code == 200
            assert healthy(api)
    finally:
        store.close()


@pytest.fixture
def pair(pg: Settings) -> Iterator[tuple[Api, Api]]:
    first = start(pg, first=True)
    second = start(pg)
    yield first, second
    for api in (first, second):
        api.ctrl.env.store.close()


def test_two_controllers_after_a_restart_keep_one_order_one_leader_and_their_routers(
    pair: tuple[Api, Api], pg: Settings, server: PostgresServer
) -> None:
    first, second = pair
    stores = [api.ctrl.env.store for api in pair]
    assert [s.lead() for s in stores] == [True, False]
    fleet_rows = "SELECT count(*) FROM fleet_state WHERE expires_at > now()"

    def fleets() -> int:
        return int(str(server.execute(url_of(pg), fleet_rows)[0][0]))

    wait_for(lambda: fleets() == 2, "both controllers' rows on the routers' board")
    assert advisory_holders(server, pg, LEAD_LOCK) == 1

    server.stop()  # an immediate shutdown: the restart is a crash recovery (UNLOGGED tables emptied)
    for api in pair:
        began = time.monotonic()
        assert_refused(api.post("/identities", json=identity("away")), began)
    wait_for(lambda: not healthy(first) and not healthy(second), "both to say unhealthy")
    server.start()
    wait_for(lambda: healthy(first) and healthy(second), "both to say healthy again")

    # one order of writes: each name taken once, whichever controller takes it
    rounds = 20
    statuses = [[0] * rounds, [0] * rounds]
    barrier = threading.Barrier(2)

    def create(n: int) -> None:
        for r in range(rounds):
            barrier.wait(DEADLINE_SECONDS)
            statuses[n][r] = pair[n].post("/identities", json=identity(f"same-{r}")).status_code

    threads = [threading.Thread(target=create, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_SECONDS * 5)
    for r in range(rounds):
        assert sorted((statuses[0][r], statuses[1][r])) == [201, 400], (r, statuses)
    for api in pair:
        wait_for(
            lambda api=api: (
                sorted(
                    i["name"]
                    for i in api.get("/identities", params={"limit": 500}).json["data"]
                    if i["name"].startswith("same-")
                )
                == sorted(f"same-{r}" for r in range(rounds))
            ),
            "every name on both controllers",
        )

    # one leader again: the one that led takes its lock again, the other still does not lead
    wait_for(lambda: advisory_holders(server, pg, LEAD_LOCK) == 1, "the lead lock to be held again")
    assert [s.lead() for s in stores] == [True, False]
    # the write token is held by at most one process, and only while it writes
    assert advisory_holders(server, pg, WRITE_TOKEN_LOCK) <= 1
    # the routers' board, emptied by the crash recovery, is filled again
    wait_for(lambda: fleets() == 2, "both controllers' rows on the routers' board again")
    assert stores[0].change_log_problems() == []


def test_the_health_check_answers_in_openzitis_form(pg: Settings) -> None:
    api = start(pg, first=True)
    try:
        answer = health(api)
        assert answer.status_code == 200
        assert answer.headers["cache-control"] == "no-store"
        assert set(answer.json) == {"data", "meta"}
        data = answer.json["data"]
        assert data["healthy"] is True
        assert {c["id"] for c in data["checks"]} == {"postgres.reachable", "postgres.change-log"}
        assert all(c["healthy"] and c["lastCheckTime"].endswith("Z") for c in data["checks"])
        short = api.client.simulate_get(HEALTH, params={"type": "short"}).json["data"]["checks"]
        assert all(set(c) == {"id", "healthy"} for c in short)
    finally:
        api.ctrl.env.store.close()


def test_the_health_check_of_a_store_of_its_own_is_its_last_commit(api: Api) -> None:
    """Without PostgreSQL (here the tests' memory store, as DuckDB's): one check, the commit."""
    answer = health(api)
    assert answer.status_code == 200
    assert [(c["id"], c["healthy"]) for c in answer.json["data"]["checks"]] == [("store.commit", True)]
    assert api.client.simulate_get("/version").status_code == 200  # /version is OpenZiti's, unchanged
