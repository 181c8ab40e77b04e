"""Two routers linked, with the real OpenZiti C SDK (``openziti==0.6.0``): a Dialer that may use
only router A reaches a Binder that may use only router B, over the link between the routers.

One ``trellis serve`` with its embedded router (A, ``TRELLIS_ROUTER=on``); a second router (B) is
made in the management API (``#public``), enrolled with ``trellis router enroll <jwt>`` and run
with ``trellis router run``, as on another host. The quickstart edge-router policy (every identity
to every ``#public`` router) is replaced by two: the Dialer to A, the Binder to B. The real SDK
drivers (``tests/e2e/sdk``) echo 100 KB, plain and end-to-end encrypted; failure messages carry
their output, the server's log (router A's included) and router B's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.dataplane import (
    EMBEDDED,
    ONLINE_TIMEOUT,
    PAYLOAD,
    Binder,
    Network,
    RouterProcess,
    bound,
    dial,
    find_sdk_python,
    sdk_marks,
    terminators_of,
    wait_for,
)
from tests.e2e.server import MGMT, Server

pytestmark = [*sdk_marks(360), pytest.mark.seconds(21)]

PASSWORD = "e2e-two-routers-password"
LINK_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    return find_sdk_python()


@dataclass
class Linked:
    """The network, router A's and B's ids, and router B's process."""

    net: Network
    a: str
    b: str
    router_b: RouterProcess

    def explain(self, *runs: Any) -> str:
        return f"{self.net.explain(*runs)}\n{self.router_b.log_tail()}"

    def routers_of(self, who: str) -> list[str]:
        """The edge routers ``who`` may use, by id."""
        found = self.net.call("GET", f"/identities/{self.net.ids[who]}/edge-routers", 200, f"{who}'s routers")
        return sorted(r["id"] for r in found["data"])


def _one_router_each(net: Network, a: str, b: str) -> None:
    """Replace the quickstart policy (every identity on every ``#public`` router) with two: the
    Dialer on router A only, the Binder on router B only."""
    found = net.call(
        "GET",
        "/edge-router-policies",
        200,
        "find the quickstart policy",
        params={"filter": 'name="all-endpoints-public-routers"'},
    )["data"]
    assert len(found) == 1, found
    net.call("DELETE", f"/edge-router-policies/{found[0]['id']}", 200, "delete the quickstart policy")
    for name, who, router in (("dialer-on-a", "dialer", a), ("binder-on-b", "binder", b)):
        net.call(
            "POST",
            "/edge-router-policies",
            201,
            f"create {name}",
            json={
                "name": name,
                "semantic": "AnyOf",
                "identityRoles": [f"@{net.ids[who]}"],
                "edgeRouterRoles": [f"@{router}"],
            },
        )


@pytest.fixture(scope="module")
def linked(sdk_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Linked]:
    base = tmp_path_factory.mktemp("two-routers")
    workdir = tmp_path_factory.mktemp("two-routers-sdk")
    with Server(
        base / "home", password=PASSWORD, unset=["TRELLIS_*"], env={"TRELLIS_ROUTER": "on"}
    ) as server:
        server.up()
        admin = server.login()
        found = server.expect(
            server.call("GET", f"{MGMT}/edge-routers", admin, params={"filter": f'name="{EMBEDDED}"'}),
            200,
            "find the embedded router",
        )["data"]
        assert len(found) == 1, found
        a = found[0]["id"]
        net = Network(server, admin, workdir, sdk_python, a)
        wait_for(lambda: net.router(a).get("isOnline"), ONLINE_TIMEOUT, "router A comes online")

        router_b = RouterProcess(net, "router-b", base / "router-b", roleAttributes=["public"])
        b = router_b.id
        record = json.loads((base / "router-b" / "router.json").read_text())
        assert record["link"].startswith("127.0.0.1:"), record  # a free port, kept
        assert record["link"] != record["edge"], record
        router_b.start()
        try:
            wait_for(lambda: net.router(b).get("isOnline"), ONLINE_TIMEOUT, "router B comes online")
            net.enroll_sdks()
            net.echo_services({"echo": False, "echo-enc": True})
            _one_router_each(net, a, b)
            yield Linked(net, a, b, router_b)
        finally:
            router_b.stop()


def test_a_dialer_on_router_a_reaches_a_binder_on_router_b(linked: Linked) -> None:
    net, a, b = linked.net, linked.a, linked.b
    assert linked.routers_of("dialer") == [a]
    assert linked.routers_of("binder") == [b]
    embedded = json.loads((net.server.home / "router" / "router.json").read_text())
    assert embedded["link"].startswith("127.0.0.1:"), embedded
    wait_for(
        lambda: f"link>{a}: up" in linked.router_b.text() or f"link<{a}: up" in linked.router_b.text(),
        LINK_TIMEOUT,
        "router B has a link to router A",
    )

    for service in ("echo", "echo-enc"):
        binder = Binder(net, service)
        try:
            bound(net, binder, service)
            [terminator] = terminators_of(net, service)
            assert terminator["routerId"] == b, terminator  # hosted through router B ...

            run = dial(net, service)  # ... dialed through router A

            assert run.returncode == 0, linked.explain(run, binder.out, binder.err)
            assert run.line("ECHO") == f"ECHO {PAYLOAD} {PAYLOAD} 1", linked.explain(run)
            assert binder.wait(20) == 0, linked.explain(binder.out, binder.err)
            assert binder.line("ACCEPTED") == "ACCEPTED dialer", binder.lines()
            assert binder.line("ECHOED") == f"ECHOED {PAYLOAD}", binder.lines()
            # each SDK opened a channel to its own router only (names as the SDK logs them)
            assert f"({EMBEDDED}@tls://" in run.stderr, linked.explain(run)
            assert "(router-b@tls://" not in run.stderr, linked.explain(run)
            binder_log = binder.err.read_text(errors="replace")
            assert "(router-b@tls://" in binder_log, linked.explain(binder.err)
            assert f"({EMBEDDED}@tls://" not in binder_log, linked.explain(binder.err)
        finally:
            binder.stop()
        wait_for(lambda s=service: not terminators_of(net, s), 15, f"the finished bind of {service} goes")
