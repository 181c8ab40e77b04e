"""``lastChangeAt`` (``GET /current-api-session/service-updates``) over controllers on one
PostgreSQL database, as apps in one test process (each opens its own store, as each ``trellis
serve`` worker does): every process answers the same time for the same history, dated by the
change log's commit times (a delete-only batch too) and the posture data's own times, and a
client alternating between them never sees it go back; a process that starts later raises the
epoch for all of them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator

import pytest

from api.wire import ts
from controller.settings import Settings
from tests.api.session_helpers import client_get, world
from tests.api.test_postgres_store import start
from tests.api.test_posture import domain, guarded, respond
from tests.conftest import Api

pytestmark = [pytest.mark.durable, pytest.mark.seconds(20)]

DEADLINE_SECONDS = 30.0


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_SECONDS:.0f} s"
        time.sleep(0.02)


@pytest.fixture
def pg(settings: Settings, postgres_url: str) -> Settings:
    return dataclasses.replace(settings, database_url=postgres_url)


@pytest.fixture
def pair(pg: Settings) -> Iterator[tuple[Api, Api]]:
    first = start(pg, first=True)
    second = start(pg)
    yield first, second
    for api in (first, second):
        api.ctrl.env.store.close()


def last_change(api: Api, token: str) -> str:
    result = client_get(api, "/current-api-session/service-updates", token)
    assert result.status_code == 200, result.text
    return str(result.json["data"]["lastChangeAt"])


def agreed(apis: tuple[Api, ...], token: str) -> str:
    """The time every process answers, once they all answer the same (their lag)."""
    answers: list[str] = []

    def same() -> bool:
        answers[:] = [last_change(api, token) for api in apis]
        return len(set(answers)) == 1

    until(same, "the same lastChangeAt everywhere")
    return answers[0]


def test_every_process_answers_the_same_time_and_it_only_moves_on(pair: tuple[Api, Api]) -> None:
    first = pair[0]
    w = world(first)
    token = w.user.token
    before = agreed(pair, token)
    seen = [before]

    assert first.delete(f"/service-policies/{w.dial_policy}").status_code == 200  # a delete-only batch
    after = agreed(pair, token)
    for i in range(20):  # a client alternating between the processes
        seen.append(last_change(pair[i % 2], token))

    assert after > before
    assert seen == sorted(seen)
    assert set(seen[1:]) == {after}
    committed = first.ctrl.env.store.commit_times()
    try:  # the time is the change log's commit time of a batch, not either process's clock
        times = {committed.at(seq) for seq in range(1, first.ctrl.env.store.last_seq + 1)}
        assert after in {ts(t) for t in times if t is not None}
    finally:
        committed.close()  # type: ignore[attr-defined]


def test_a_posture_change_is_dated_by_the_data_on_every_process(pair: tuple[Api, Api]) -> None:
    first, second = pair
    g = guarded(first)
    token = g.user.token
    before = agreed(pair, token)

    assert respond(second, token, domain(g.check, "domain1")).status_code == 201
    after = agreed(pair, token)

    assert after > before


def test_a_process_started_later_raises_the_epoch_for_all(pair: tuple[Api, Api], pg: Settings) -> None:
    first, second = pair
    w = world(first)
    token = w.user.token
    before = agreed(pair, token)
    first.create("/services", {"name": "unrelated", "encryptionRequired": True})  # a batch later

    third = start(pg)
    try:
        everywhere = agreed((first, second, third), token)
    finally:
        third.ctrl.env.store.close()

    assert everywhere > before
