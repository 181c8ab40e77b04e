"""Traffic through a Trellis edge router with the real OpenZiti C SDK (``openziti==0.6.0``).

One ``trellis serve`` with its embedded router (``TRELLIS_ROUTER=on``, as ``make run``) serves
the module. Two identities are enrolled by the real SDK: ``dialer`` and ``binder``. Services
``echo`` (plain) and ``echo-enc`` (``encryptionRequired``) are dialled by the one and bound by the
other; the policies the first ``init`` made (``#all`` identities to ``#public`` routers, every
service on every router) let both use the router. A Binder process echoes; a Dialer process
sends 100 KB, half-closes and must read the same bytes back (docs/dataplane.md).

The SDK runs in bounded subprocesses (``tests/e2e/sdk/*_driver.py``, ``ZITI_LOG=4``); failure
messages carry their output and the server's log, the router's included.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.dataplane import (
    DIAL_TIMEOUT,
    EMBEDDED,
    ONLINE_TIMEOUT,
    PAYLOAD,
    Binder,
    Network,
    bound,
    dial,
    find_sdk_python,
    sdk_marks,
    terminators_of,
    wait_for,
)
from tests.e2e.sdk.sdk_venv import DRIVERS, clean_env
from tests.e2e.server import MGMT, Server, tail

pytestmark = [*sdk_marks(300), pytest.mark.seconds(18)]

PASSWORD = "e2e-dataplane-admin-password"


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    return find_sdk_python()


@pytest.fixture(scope="module")
def network(sdk_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    home = tmp_path_factory.mktemp("dataplane") / "home"
    workdir = tmp_path_factory.mktemp("dataplane-sdk")
    with Server(home, password=PASSWORD, unset=["TRELLIS_*"], env={"TRELLIS_ROUTER": "on"}) as server:
        server.up()
        admin = server.login()
        found = server.expect(
            server.call("GET", f"{MGMT}/edge-routers", admin, params={"filter": f'name="{EMBEDDED}"'}),
            200,
            "find the embedded router",
        )["data"]
        assert len(found) == 1, found
        net = Network(server, admin, workdir, sdk_python, found[0]["id"])
        wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "the embedded router comes online")
        net.enroll_sdks()
        net.echo_services({"echo": False, "echo-enc": True})
        yield net


@pytest.fixture
def binder_factory(network: Network) -> Iterator[Any]:
    made: list[Binder] = []

    def start(service: str, connections: int = 1) -> Binder:
        binder = Binder(network, service, connections)
        made.append(binder)
        return binder

    yield start
    for binder in made:
        binder.stop()


def echo_through(net: Network, binder_factory: Any, service: str) -> None:
    binder = binder_factory(service)
    bound(net, binder, service)
    run = dial(net, service)
    assert run.returncode == 0, net.explain(run, binder.out, binder.err)
    assert run.line("ECHO") == f"ECHO {PAYLOAD} {PAYLOAD} 1", net.explain(run)
    assert binder.wait(20) == 0, net.explain(binder.out, binder.err)
    assert binder.line("ACCEPTED") == "ACCEPTED dialer", binder.lines()
    assert binder.line("ECHOED") == f"ECHOED {PAYLOAD}", binder.lines()


def test_traffic_flows_through_the_embedded_router(network: Network, binder_factory: Any) -> None:
    """One scenario, in order (each step relies on the ones before; the last one retires the
    router): the router is online; a Dialer reaches a Binder, plain and end-to-end encrypted; a
    Dial with no Binder fails; revoking the Dial policy fails the next Connect; a re-enrolled
    router drops offline."""
    router = network.router()
    assert router["isOnline"] is True, router
    assert router["supportedProtocols"].get("tls", "").startswith("tls://127.0.0.1:"), router
    assert router["syncStatus"] == "SYNC_DONE", router

    for service in ("echo", "echo-enc"):
        echo_through(network, binder_factory, service)

    wait_for(lambda: not terminators_of(network, "echo"), 15, "the finished bind's terminator goes")
    alone = dial(network, "echo", size=10)
    assert alone.returncode == 5, network.explain(alone)
    assert alone.line("DIAL_FAILED"), network.explain(alone)

    binder = binder_factory("echo", connections=2)
    bound(network, binder, "echo")
    paced = subprocess.Popen(
        [
            str(network.python),
            str(DRIVERS / "dial_driver.py"),
            str(network.identities["dialer"]),
            "echo",
            "1000",
            "2",
            "--paced",
        ],
        cwd=network.workdir,
        env=clean_env(ZITI_LOG="4"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert paced.stdout is not None
        assert paced.stdin is not None
        lines = []
        while not any(ln.startswith("READY") for ln in lines):
            line = paced.stdout.readline()
            assert line, f"the dialer ended early: {lines} {paced.stderr.read() if paced.stderr else ''}"
            lines.append(line.strip())
        assert "ECHO 1000 1000 1" in lines, lines
        policy = network.call(
            "GET", "/service-policies", 200, "find dial-echo", params={"filter": 'name="dial-echo"'}
        )
        network.call("DELETE", f"/service-policies/{policy['data'][0]['id']}", 200, "delete dial-echo")
        paced.stdin.write("go\n")
        paced.stdin.flush()
        out, err = paced.communicate(timeout=DIAL_TIMEOUT)
    finally:
        if paced.poll() is None:
            paced.kill()
            paced.wait()
    assert paced.returncode == 5, f"{out}\n{tail(err, 4000)}"
    assert "DIAL_FAILED" in out, f"{out}\n{tail(err, 4000)}"

    network.call("POST", f"/edge-routers/{network.router_id}/re-enroll", 200, "re-enroll the router")
    wait_for(lambda: not network.router().get("isOnline"), 10, "the re-enrolled router goes offline")
