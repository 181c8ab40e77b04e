"""Every serving process answers as the policy engine's oracle, once it has caught up.

``trellis serve`` with ``TRELLIS_WORKERS`` 2 and 4 on one PostgreSQL database: four client threads
(:class:`tests.e2e.workload.Worker`) create, update and delete identities, services and service
policies, log a device in and open Dial sessions, on kept-alive connections spread over the
processes. Then, with the writes stopped, the oracle is a :class:`~engine.policy.PolicyGraph`
built from the database itself, as a start builds it, and the served answers (entity lists, each
sampled identity's services and edge routers, each sampled service's identities) are asked again
and again, every request on a fresh connection, so each lands on whichever process accepts it.
Once one round agrees (the processes follow the change log within their lag), every later round
must agree too: 0 mismatches whatever process answers. Every acknowledged write is there.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from random import Random
from typing import Any

import pytest
import requests

from tests.e2e.server import Server
from tests.e2e.workload import (
    NO_BUDGETS,
    Tally,
    Worker,
    audit,
    differences,
    engine_answers,
    postgres_answers,
    provision,
    run_workers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.seconds(70)]

WRITERS = 4
LOAD_SECONDS = 4.0
#: Identities and services whose link sets are compared in each round.
SAMPLE = 10
#: Rounds that must all agree once the first has.
ROUNDS = 3
CATCH_UP_SECONDS = 60.0


class FreshConnections(requests.Session):
    """A session that closes its connection after each answer: the next request is accepted by
    whichever serving process takes it."""

    def __init__(self) -> None:
        super().__init__()
        self.trust_env = False  # as tests.e2e.server.new_session: no proxy or CA from the environment

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        headers = dict(kwargs.pop("headers", None) or {})
        headers["Connection"] = "close"
        return super().request(*args, headers=headers, **kwargs)


@pytest.mark.parametrize("workers", [2, 4])
def test_every_process_agrees_with_the_oracle_once_caught_up(
    tmp_path: Path, postgres_url: str, workers: int
) -> None:
    rng = Random(workers)
    env = {**NO_BUDGETS, "TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": str(workers)}
    with Server(tmp_path / "home", env=env) as server:
        server.up()
        device = provision(server, server.login())
        tally, stop = Tally(), threading.Event()
        writers = [
            Worker(server, i, Random(rng.random()), tally, stop, device, reads=0.3) for i in range(WRITERS)
        ]
        deadline = time.monotonic() + LOAD_SECONDS
        run_workers(writers, stop, lambda: time.monotonic() >= deadline)
        summary = f"{workers} processes: {tally.summary()}"
        assert [w.crashed for w in writers] == [None] * WRITERS, summary
        assert tally.wrong == [], summary
        assert tally.server_errors() == 0, summary
        assert sum(w.ledger.writes for w in writers) > 0, summary

        server.http.close()
        server.http = FreshConnections()
        token = server.login()
        assert audit(server, token, (w.ledger for w in writers)) == [], summary

        served = engine_answers(server, token, rng, SAMPLE)
        truth = postgres_answers(postgres_url, served)
        caught_up = time.monotonic() + CATCH_UP_SECONDS
        while (late := differences(served, truth)) != []:
            assert time.monotonic() < caught_up, "\n".join(late[:30]) + f"\n{summary}"
            time.sleep(0.2)
            served = engine_answers(server, token, rng, SAMPLE)
            truth = postgres_answers(postgres_url, served)
        for _ in range(ROUNDS):
            served = engine_answers(server, token, rng, SAMPLE)
            mismatches = differences(served, postgres_answers(postgres_url, served))
            assert mismatches == [], "\n".join(mismatches[:30]) + f"\n{summary}"
        server.stop()
        log = server.log.read_text()
    assert log.count("Booting worker") == workers, log[-4000:]
    print(f"cluster oracle: {summary}")
