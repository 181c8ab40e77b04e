"""``kill -9`` of one serving process, and of a whole controller, under write load on PostgreSQL.

Issue 25's faults: writer threads (tests/e2e/workload.py) create, update and delete identities,
services and service policies, log in and open Dial sessions, spread over the processes; then one
of them is killed as a crash would. No acknowledged write is lost (a change whose answer never
came may or may not have happened), what is left keeps serving (new writers succeed there, with
no 5xx), and the engine of every process left answers as a policy graph built from the database.

- One worker of ``trellis serve`` with ``TRELLIS_WORKERS=2``: gunicorn starts another in its place.
- One of two controllers (two ``trellis serve`` with homes of their own, the second joined to the
  first's network as docs/operations.md §9 says) on one database: its whole process group.
"""

from __future__ import annotations

import gc
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from random import Random

import pytest

from pki.authority import PkiPaths
from tests.e2e.server import Server, children
from tests.e2e.workload import (
    NO_BUDGETS,
    Device,
    Tally,
    Worker,
    audit,
    differences,
    engine_answers,
    postgres_answers,
    provision,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.seconds(60),
    # A request in flight when its server is killed may leave urllib3 an SSL socket it drops
    # without closing (the client's side, not the server's): collected here (load_then), its
    # ResourceWarning is no failure of what these tests check.
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

WRITERS = 6
#: The kill comes once this many writes have been acknowledged, or after LOAD_LIMIT seconds.
KILL_AFTER = 150
LOAD_LIMIT = 8.0
#: The writers that are left, and new ones, go on after the kill until this many more writes are
#: acknowledged, or AFTER_LIMIT seconds (generous: a busy machine's logins are slow).
AFTER_WRITES = 50
AFTER_LIMIT = 60.0
SAMPLE = 10
CATCH_UP_SECONDS = 60.0


def load_then(
    servers: list[Server], device: Device, rng: Random, crash: Callable[[], None]
) -> tuple[list[Worker], Tally]:
    """Writers spread over ``servers`` until KILL_AFTER writes are acknowledged (or LOAD_LIMIT
    seconds), then ``crash()``, then the writers left and two new ones on the first server (which
    survives) until AFTER_WRITES more are acknowledged (or AFTER_LIMIT seconds); their tally."""
    tally, stop = Tally(), threading.Event()
    writers = [
        Worker(servers[i % len(servers)], i, Random(rng.random()), tally, stop, device, reads=0.2)
        for i in range(WRITERS)
    ]
    for worker in writers:
        worker.start()
    deadline = time.monotonic() + LOAD_LIMIT
    while tally.acknowledged < KILL_AFTER and time.monotonic() < deadline:
        time.sleep(0.02)
    crash()
    at_kill = tally.acknowledged
    fresh = [
        Worker(servers[0], WRITERS + i, Random(rng.random()), tally, stop, device, reads=0.2)
        for i in range(2)
    ]
    for worker in fresh:
        worker.start()
    deadline = time.monotonic() + AFTER_LIMIT
    while tally.acknowledged < at_kill + AFTER_WRITES and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    everyone = writers + fresh
    for worker in everyone:
        worker.thread.join(timeout=60)
        assert not worker.thread.is_alive(), f"{worker.thread.name} did not stop"
    gc.collect()  # the sockets dropped by the killed server's clients, while ResourceWarning is ignored
    summary = tally.summary()
    assert [w.crashed for w in everyone] == [None] * len(everyone), summary
    assert tally.wrong == [], summary
    assert tally.server_errors() == 0, summary
    assert tally.acknowledged > at_kill, f"nothing was acknowledged after the kill: {summary}"
    return everyone, tally


def agree_with_the_database(server: Server, token: str, url: str, rng: Random, summary: str) -> None:
    """Every answer of ``server``'s processes, once caught up, as the database's policy graph."""

    deadline = time.monotonic() + CATCH_UP_SECONDS
    while True:
        served = engine_answers(server, token, rng, SAMPLE)
        late = differences(served, postgres_answers(url, served))
        if not late:
            return
        assert time.monotonic() < deadline, "\n".join(late[:30]) + f"\n{summary}"
        time.sleep(0.2)


def test_a_worker_killed_under_writes_loses_nothing_and_serving_goes_on(
    tmp_path: Path, postgres_url: str
) -> None:
    rng = Random(25)
    env = {**NO_BUDGETS, "TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": "2"}
    with Server(tmp_path / "home", env=env) as server:
        server.up()
        assert server.proc is not None
        master = server.proc.pid
        device = provision(server, server.login())
        before = [pid for pid, _ in children(master)]
        assert len(before) == 2, before
        victim: list[int] = []

        def crash() -> None:
            victim.append(before[0])
            os.kill(before[0], signal.SIGKILL)

        writers, tally = load_then([server], device, rng, crash)
        summary = f"worker {victim} killed: {tally.summary()}"
        token = server.login()
        assert audit(server, token, (w.ledger for w in writers)) == [], summary
        agree_with_the_database(server, token, postgres_url, rng, summary)
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while (
            len(now := [pid for pid, _ in children(master)]) != 2 or victim[0] in now
        ):  # gunicorn boots another
            assert time.monotonic() < deadline, f"workers of {master}: {now}\n{server.log_tail()}"
            time.sleep(0.1)
        server.stop()
        log = server.log.read_text()
    assert log.count("Booting worker") == 3, log[-4000:]
    print(f"cluster crash: {summary}")


def join(first: Server, second: Server) -> None:
    """Make ``second``'s home join ``first``'s network: the CA files without the server's
    certificate and key (``trellis init`` issues its own), as an operator adds a controller."""
    paths = PkiPaths.in_directory(first.home / "pki")
    pki = second.home / "pki"
    pki.mkdir(mode=0o700, parents=True)
    os.chmod(second.home, 0o700)
    for path in paths.all_files():
        if path.exists() and path not in (paths.server_cert, paths.server_key):
            shutil.copy2(path, pki / path.name)


def test_a_controller_killed_under_writes_loses_nothing_and_the_other_serves_on(
    tmp_path: Path, postgres_url: str
) -> None:
    rng = Random(52)
    env = {**NO_BUDGETS, "TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": "1"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        Server(tmp_path / "b" / "home", env=env) as survivor,
        Server(tmp_path / "a" / "home", env=env, own_group=True) as victim,
    ):
        victim.up()
        join(victim, survivor)
        survivor.up()
        device = provision(survivor, survivor.login())
        writers, tally = load_then([survivor, victim], device, rng, victim.kill)
        summary = f"controller killed: {tally.summary()}"
        token = survivor.login()
        assert audit(survivor, token, (w.ledger for w in writers)) == [], summary
        agree_with_the_database(survivor, token, postgres_url, rng, summary)
    print(f"cluster crash: {summary}")
