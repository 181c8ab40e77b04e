"""A bounded soak: 8 client threads mixing reads and writes on a real ``trellis serve`` (issue 8,
consistency under concurrency).

For ``TRELLIS_SOAK_SECONDS`` (default 60) each thread lists with filters, reads details (which must
show its own acknowledged writes), asks policy advice, lists the device's services on the client
API, and creates, updates and deletes identities, services and service policies, logs in and opens
Dial sessions (tests/e2e/workload.py). Afterwards no request was answered 5xx (nor anything else
unexpected), every acknowledged write is served, the data integrity check finds nothing, and the
engine's answers equal a policy graph rebuilt from the database file once the server has stopped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest

from tests.e2e.server import Server
from tests.e2e.workload import (
    NO_BUDGETS,
    Tally,
    Worker,
    audit,
    differences,
    engine_answers,
    graph_answers,
    integrity_results,
    provision,
    rebuilt_graph,
    run_workers,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.seconds(35)]

#: How long the load runs (CI runs the default).
SOAK_SECONDS = float(os.environ.get("TRELLIS_SOAK_SECONDS", "60"))
THREADS = 8
#: The share of each thread's steps that read.
READS = 0.5
#: Live entities per thread and kind (creates turn into updates and deletes past it).
CAP = 25
SEED = 8
SAMPLE = 40


@pytest.mark.timeout(SOAK_SECONDS + 300)  # the load, then the server's start, the audit and the rebuild
def test_a_mixed_soak_answers_no_5xx_and_leaves_the_engine_equal_to_the_database(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    rng = Random(SEED)
    with Server(tmp_path / "home", env=NO_BUDGETS) as server:
        server.up()
        device = provision(server, server.login())
        tally, stop = Tally(), threading.Event()
        workers = [
            Worker(server, i, Random(rng.random()), tally, stop, device, reads=READS, cap=CAP)
            for i in range(THREADS)
        ]
        deadline = time.monotonic() + SOAK_SECONDS
        run_workers(workers, stop, lambda: time.monotonic() >= deadline)

        token = server.login()
        missing = audit(server, token, (w.ledger for w in workers))
        integrity = integrity_results(server, token)
        served = engine_answers(server, token, rng, SAMPLE)
        server.stop()
        rebuilt = rebuilt_graph(server.home / "trellis.duckdb", tmp_path / "after-soak")

    report = f"{tally.summary()}\n{server.log_tail()}"
    # printed at the end of the run (tests/conftest.py)
    record_property("summary", f"soak {SOAK_SECONDS:.0f} s, {THREADS} threads: {tally.summary()}")
    assert [w.crashed for w in workers] == [None] * THREADS, report
    assert tally.server_errors() == 0, "\n".join(tally.wrong[:30]) + f"\n{report}"
    assert tally.unanswered == [], "\n".join(tally.unanswered[:30]) + f"\n{report}"
    assert tally.wrong == [], "\n".join(tally.wrong[:30]) + f"\n{report}"
    assert missing == [], "\n".join(missing[:30]) + f"\n{report}"
    assert integrity["results"] == [], f"{integrity}\n{report}"
    assert integrity["error"] is None
    mismatches = differences(served, graph_answers(rebuilt, served))
    assert mismatches == [], "\n".join(mismatches[:30]) + f"\n{report}"
