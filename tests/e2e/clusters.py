"""``make cluster`` (:mod:`cluster.local`) for the end-to-end tests: three ``trellis serve`` on
127.0.0.1-3 sharing a PostgreSQL server of the launcher's own, two ``trellis router run``
connected to all of them (tests/e2e/test_cluster.py, tests/e2e/test_cluster_traffic.py).

Starting one costs some 20 s on a 2-core machine: a module that does not kill anything shares one.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.local import Api, Cluster, Controller, Options, controller_host
from tests.postgres import find_bindir

PASSWORD = "cluster-admin-password"
#: Generous: a loaded 2-core machine runs three controllers, two routers and PostgreSQL here.
DEADLINE_SECONDS = 90.0


def free_port_on_every_host() -> int:
    """A port nobody listens on at 127.0.0.1, 127.0.0.2 nor 127.0.0.3 now."""
    while True:
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            try:
                for n in (2, 3):
                    with socket.socket() as other:
                        other.bind((controller_host(n), port))
            except OSError:
                continue
            return port


@contextlib.contextmanager
def running_cluster(directory: Path) -> Iterator[Cluster]:
    """A started cluster in ``directory``, stopped at the end (every process ended); skips where
    PostgreSQL is not installed."""
    if find_bindir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb and postgres): make cluster needs them")
    options = Options(
        directory=directory,
        api_port=free_port_on_every_host(),
        ctrl_port=free_port_on_every_host(),
        password=PASSWORD,
    )
    made = Cluster(options, out=io.StringIO())
    try:
        made.start()
        yield made
    finally:
        made.stop()
    assert not any(p.running for p in made.processes())


def wait_listed(api: Api, count: int) -> list[str]:
    """The control addresses ``api``'s controller lists in ``/controllers``, once there are ``count``."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        listed = [str(c["ctrlAddress"]) for c in api.listing("/controllers")]
        if len(listed) == count:
            return listed
        assert time.monotonic() < deadline, f"{api.controller.url} lists {listed}, not {count} controllers"
        time.sleep(0.2)


def wait_offline(api: Api, controller: Controller) -> None:
    """Until ``api``'s controller lists ``controller`` with ``isOnline`` false."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        listed = {str(c["ctrlAddress"]): c.get("isOnline") for c in api.listing("/controllers")}
        if listed.get(f"tls:{controller.ctrl}") is False:
            return
        assert time.monotonic() < deadline, (
            f"{api.controller.url} lists {listed}: {controller.what} not offline"
        )
        time.sleep(0.2)


def kill(controller: Controller) -> None:
    """``kill -9`` the controller's process group (``serve`` and its worker), as a crash would."""
    assert controller.process is not None
    os.killpg(controller.process.pid, signal.SIGKILL)
    controller.process.wait(30)
