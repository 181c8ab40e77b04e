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
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.sdk.sdk_venv import LOCK_TIMEOUT, SKIP_ENV
from tests.e2e.server import HOST, MGMT, ROOT, TRELLIS, Server, tail
from tests.e2e.test_dataplane import (
    PAYLOAD,
    Binder,
    Network,
    bound,
    dial,
    sdk_python,
    terminators_of,
    wait_for,
)
from tests.e2e.test_sdk import run_driver

__all__ = ["sdk_python"]  # the fixture, shared

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(LOCK_TIMEOUT + 360),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: real OpenZiti SDK e2e tests skipped on purpose",
    ),
]

PASSWORD = "e2e-two-routers-password"
EMBEDDED = "trellis-router"
ONLINE_TIMEOUT = 30.0
LINK_TIMEOUT = 30.0
ENROLL_TIMEOUT = 45.0


class RouterProcess:
    """``trellis router run`` of the router enrolled in ``env``'s ``TRELLIS_ROUTER_HOME``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*TRELLIS, "router", "run"],
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, limit: int = 6000) -> str:
        return f"--- router B log {self.log}:\n{tail(self.text(), limit)}"


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


def _router(net: Network, router_id: str) -> dict[str, Any]:
    return net.call("GET", f"/edge-routers/{router_id}", 200, "read a router")["data"]


def _enroll_sdks(net: Network) -> None:
    for name in ("dialer", "binder"):
        created = net.call(
            "POST",
            "/identities",
            201,
            f"create {name}",
            json={"name": name, "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
        )
        identity_id = created["data"]["id"]
        detail = net.call("GET", f"/identities/{identity_id}", 200, f"read {name}")
        jwt_file = net.workdir / f"{name}.jwt"
        jwt_file.write_text(detail["data"]["enrollment"]["ott"]["jwt"])
        identity_file = net.workdir / f"{name}.json"
        run = run_driver(
            net.python,
            "enroll_driver.py",
            [str(jwt_file), str(identity_file)],
            net.workdir,
            f"enroll-{name}",
            ENROLL_TIMEOUT,
        )
        assert run.returncode == 0, net.explain(run)
        assert identity_file.is_file(), net.explain(run)
        net.identities[name], net.ids[name] = identity_file, identity_id


def _services(net: Network) -> None:
    for name, encrypted in (("echo", False), ("echo-enc", True)):
        created = net.call(
            "POST", "/services", 201, f"create {name}", json={"name": name, "encryptionRequired": encrypted}
        )
        net.services[name] = created["data"]["id"]
    services = [f"@{sid}" for sid in net.services.values()]
    for policy, who, kind in (("dial-echo", "dialer", "Dial"), ("bind-echo", "binder", "Bind")):
        net.call(
            "POST",
            "/service-policies",
            201,
            f"create {policy}",
            json={
                "name": policy,
                "type": kind,
                "semantic": "AnyOf",
                "identityRoles": [f"@{net.ids[who]}"],
                "serviceRoles": services,
            },
        )


def _one_router_each(net: Network, a: str, b: str) -> None:
    """Replace the quickstart policy (every identity on every ``#public`` router) with two: the
    Dialer on router A only, the Binder on router B only."""
    found = net.call(
        "GET",
        "/edge-router-policies",
        200,
        "find the quickstart policy",
        params={"filter": 'name="all-identities-public-routers"'},
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
        net = Network(server, admin, workdir, sdk_python, a, {}, {}, {})
        wait_for(lambda: _router(net, a).get("isOnline"), ONLINE_TIMEOUT, "router A comes online")

        created = net.call(
            "POST",
            "/edge-routers",
            201,
            "create router B",
            json={"name": "router-b", "roleAttributes": ["public"], "isTunnelerEnabled": False},
        )
        b = created["data"]["id"]
        jwt_file = workdir / "router-b.jwt"
        jwt_file.write_text(_router(net, b)["enrollmentJwt"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
        env.update(
            {
                "TRELLIS_ROUTER_HOME": str(base / "router-b"),
                "TRELLIS_ROUTER_CTRL": f"{HOST}:{server.ctrl_port}",
            }
        )
        enrolled = subprocess.run(
            [*TRELLIS, "router", "enroll", str(jwt_file)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert enrolled.returncode == 0, enrolled.stderr
        record = json.loads((base / "router-b" / "router.json").read_text())
        assert record["link"].startswith("127.0.0.1:"), record  # a free port, kept
        assert record["link"] != record["edge"], record

        router_b = RouterProcess(env, base / "router-b.log")
        router_b.start()
        try:
            wait_for(lambda: _router(net, b).get("isOnline"), ONLINE_TIMEOUT, "router B comes online")
            _enroll_sdks(net)
            _services(net)
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
