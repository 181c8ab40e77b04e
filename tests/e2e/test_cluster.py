"""``make cluster`` (:mod:`cluster.local`) driven in-process: three ``trellis serve`` on 127.0.0.1-3
sharing a PostgreSQL server of the launcher's own, two ``trellis router run`` connected to all of
them. Each controller lists the three and shows both routers online; one controller is killed
with SIGKILL, and the other two keep showing the routers online, list it offline (a member of the
network until removed), and enroll a new router whose JWT names the three."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from cluster.local import Cluster, Controller
from router import identity
from tests.e2e.clusters import DEADLINE_SECONDS, kill, running_cluster, wait_listed, wait_offline

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.seconds(35)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with running_cluster(tmp_path / "cluster") as made:
        yield made


def test_routers_stay_online_through_the_controllers_left(cluster: Cluster) -> None:
    apis = {c.number: cluster.api(c) for c in cluster.controllers}
    every = sorted(f"tls:{c.ctrl}" for c in cluster.controllers)
    for api in apis.values():
        assert sorted(wait_listed(api, 3)) == every
        cluster.wait_online(api, cluster.routers, DEADLINE_SECONDS)
    assert "Try failover: kill" in cluster.table()
    for router in cluster.routers:  # enrolled with the three controllers' control addresses (ctrls)
        assert sorted(identity.load(router.home).ctrl_addresses) == sorted(
            c.ctrl for c in cluster.controllers
        )

    victim: Controller = cluster.controllers[0]  # the first: the network's CA and id came from it
    kill(victim)  # serve and its worker, as a crash
    assert [line.split(" (")[0] for line in cluster.poll()] == ["controller 1"]

    live = [c for c in cluster.controllers if c is not victim]
    for controller in live:
        cluster.wait_online(apis[controller.number], cluster.routers, DEADLINE_SECONDS)
    for controller in live:  # the killed one stays a member, offline once its row expires (15 s)
        wait_offline(apis[controller.number], victim)
        assert sorted(wait_listed(apis[controller.number], 3)) == every
    for controller in live:  # and the routers are still online once it is
        cluster.wait_online(apis[controller.number], cluster.routers, DEADLINE_SECONDS)

    router, token = cluster.add_router("cluster-router-3", 3)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert sorted(claims["ctrls"]) == every  # every member, online or not
    for controller in live:
        cluster.wait_online(apis[controller.number], [router], DEADLINE_SECONDS)
    assert router.edge.startswith("tls://127.0.0.1:")
