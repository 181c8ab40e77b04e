"""``make cluster`` (:mod:`cluster.local`) driven in-process: three ``trellis serve`` on 127.0.0.1-3
sharing a PostgreSQL server of the launcher's own, two ``trellis router run`` connected to all of
them. Each controller lists the three and shows both routers online; one controller is killed
with SIGKILL, and the other two keep showing the routers online, stop listing it, and enroll a new
router whose JWT names the two of them only."""

from __future__ import annotations

import io
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from cluster.local import Api, Cluster, Controller, Options, controller_host
from tests.postgres import find_bindir

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if find_bindir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb and postgres): make cluster needs them")
    options = Options(
        directory=tmp_path / "cluster",
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
    deadline = time.monotonic() + DEADLINE_SECONDS
    while True:
        listed = [str(c["ctrlAddress"]) for c in api.listing("/controllers")]
        if len(listed) == count:
            return listed
        assert time.monotonic() < deadline, f"{api.controller.url} lists {listed}, not {count} controllers"
        time.sleep(0.2)


def test_routers_stay_online_through_the_controllers_left(cluster: Cluster) -> None:
    apis = {c.number: cluster.api(c) for c in cluster.controllers}
    every = sorted(f"tls:{c.ctrl}" for c in cluster.controllers)
    for api in apis.values():
        assert sorted(wait_listed(api, 3)) == every
        cluster.wait_online(api, cluster.routers, DEADLINE_SECONDS)
    assert "Try failover: kill" in cluster.table()

    victim: Controller = cluster.controllers[0]  # the first: the network's CA and id came from it
    assert victim.process is not None
    os.killpg(victim.process.pid, signal.SIGKILL)  # serve and its worker, as a crash
    victim.process.wait(30)
    assert [line.split(" (")[0] for line in cluster.poll()] == ["controller 1"]

    live = [c for c in cluster.controllers if c is not victim]
    for controller in live:
        cluster.wait_online(apis[controller.number], cluster.routers, DEADLINE_SECONDS)
    for controller in live:  # the killed one is forgotten when its row expires (15 s)
        assert sorted(wait_listed(apis[controller.number], 2)) == sorted(f"tls:{c.ctrl}" for c in live)
    for controller in live:  # and the routers are still online once it is
        cluster.wait_online(apis[controller.number], cluster.routers, DEADLINE_SECONDS)

    router, token = cluster.add_router("cluster-router-3", 3)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["ctrls"] == [f"tls:{c.ctrl}" for c in live]
    for controller in live:
        cluster.wait_online(apis[controller.number], [router], DEADLINE_SECONDS)
    assert router.edge.startswith("tls://127.0.0.1:")
