"""Request budgets (``TRELLIS_RATE_*``) over two controllers on one PostgreSQL database, as two
apps in one test process (each opens its own store, as each ``trellis serve`` worker does): a
client alternating between them is refused (429 with ``Retry-After``, OpenZiti's error body) once
it has spent one budget, not one per process; a store only one process opens keeps its budgets
to itself."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.settings import Settings
from tests.api.test_postgres_store import start
from tests.api.test_rate_limits import assert_too_many, login, service_body
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, MGMT, Api

pytestmark = [pytest.mark.durable, pytest.mark.seconds(20)]

DEADLINE_SECONDS = 30.0
BURST = 8


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_SECONDS:.0f} s"
        time.sleep(0.02)


@pytest.fixture
def pair(settings: Settings, postgres_url: str) -> Iterator[tuple[Api, Api]]:
    pg = dataclasses.replace(
        settings,
        database_url=postgres_url,
        rate_auth_per_minute=1,
        rate_auth_burst=BURST,
        rate_write_per_minute=1,
        rate_write_burst=BURST,
    )
    first = start(pg, first=True)
    second = start(pg)
    pair = (first, second)
    until(
        lambda: all(api.app.limits.auth.processes == api.app.limits.writes.processes == 2 for api in pair),
        "two processes heard",
    )
    yield pair
    for api in pair:
        api.ctrl.env.store.close()


def test_a_client_alternating_between_two_controllers_gets_one_auth_budget(pair: tuple[Api, Api]) -> None:
    statuses = [
        login(pair[i % 2], ADMIN_USER, ADMIN_PASSWORD, address="198.51.100.7").status_code
        for i in range(4 * BURST)
    ]
    time.sleep(1)  # every round has told each what the other admitted
    last = [login(api, ADMIN_USER, ADMIN_PASSWORD, address="198.51.100.7") for api in pair]

    admitted = statuses.count(200)
    assert set(statuses) <= {200, 429}
    assert BURST <= admitted <= BURST + 3, statuses  # one budget (and a round's shares), not two
    for refused in last:
        assert assert_too_many(refused) >= 1


def test_a_session_alternating_between_two_controllers_gets_one_write_budget(
    pair: tuple[Api, Api],
) -> None:
    first, second = pair
    token = Api(first.app).login(ADMIN_USER, ADMIN_PASSWORD)
    statuses = [
        pair[i % 2].post("/services", json=service_body(), token=token).status_code for i in range(4 * BURST)
    ]
    time.sleep(1)
    last = [api.post("/services", json=service_body(), token=token) for api in pair]

    assert set(statuses) <= {201, 429}
    assert BURST <= statuses.count(201) <= BURST + 3, statuses
    for refused in last:
        assert assert_too_many(refused) >= 1
    # another session's budget is its own
    other = Api(second.app).login(ADMIN_USER, ADMIN_PASSWORD)
    assert second.post("/services", json=service_body(), token=other).status_code == 201


@pytest.mark.e2e
@pytest.mark.slow
def test_serve_with_two_workers_gives_a_client_one_auth_budget(tmp_path: Path, postgres_url: str) -> None:
    """``trellis serve`` with ``TRELLIS_WORKERS=2``: logins on fresh connections (landing on
    either worker) get one budget between them, then 429 with ``Retry-After``."""
    from tests.e2e.server import Server

    burst = 10
    env = {
        "TRELLIS_DATABASE_URL": postgres_url,
        "TRELLIS_WORKERS": "2",
        "TRELLIS_RATE_AUTH_PER_MINUTE": "1",
        "TRELLIS_RATE_AUTH_BURST": str(burst),
    }
    with Server(tmp_path / "home", env=env) as server:
        server.init()
        server.start()
        time.sleep(1)  # both workers have heard each other (every 0.25 s)
        statuses: list[int] = []
        retry_after: set[str] = set()
        for _ in range(3 * burst):
            with server.session() as fresh:
                answer = fresh.post(
                    f"{server.url}{MGMT}/authenticate",
                    params={"method": "password"},
                    json={"username": "admin", "password": server.password},
                    timeout=10,
                )
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                retry_after.add(answer.headers.get("Retry-After", ""))
                assert answer.json()["error"]["code"] == "SERVER_TOO_MANY_REQUESTS"
        server.stop()

    assert set(statuses) <= {200, 429}, statuses
    assert burst - 2 <= statuses.count(200) <= burst + 3, statuses  # one budget, not one per worker
    assert retry_after
    assert all(value.isdigit() for value in retry_after)
