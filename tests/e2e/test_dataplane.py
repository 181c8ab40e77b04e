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

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.sdk.sdk_venv import DRIVERS, LOCK_TIMEOUT, SKIP_ENV, SdkVenvError, clean_env, ensure_sdk_python
from tests.e2e.server import MGMT, Server, tail
from tests.e2e.test_sdk import DriverRun, run_driver

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(LOCK_TIMEOUT + 300),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: real OpenZiti SDK e2e tests skipped on purpose",
    ),
]

PASSWORD = "e2e-dataplane-admin-password"
ROUTER = "trellis-router"
ONLINE_TIMEOUT = 30.0
ENROLL_TIMEOUT = 45.0
BIND_TIMEOUT = 30.0
DIAL_TIMEOUT = 60.0
PAYLOAD = 100_000


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    try:
        return ensure_sdk_python()
    except SdkVenvError as exc:
        problem = str(exc)
    pytest.fail(f"cannot provide the real OpenZiti SDK: {problem}", pytrace=False)


@dataclass
class Network:
    server: Server
    admin: str
    workdir: Path
    python: Path
    router_id: str
    identities: dict[str, Path]
    ids: dict[str, str]
    services: dict[str, str]

    def call(self, method: str, path: str, status: int, what: str, **kwargs: Any) -> dict[str, Any]:
        return self.server.expect(
            self.server.call(method, f"{MGMT}{path}", self.admin, **kwargs), status, what
        )

    def router(self) -> dict[str, Any]:
        return self.call("GET", f"/edge-routers/{self.router_id}", 200, "read the router")["data"]

    def explain(self, *runs: DriverRun | Path) -> str:
        parts = []
        for run in runs:
            if isinstance(run, Path):
                parts.append(f"--- {run.name}:\n{tail(run.read_text(errors='replace'), 6000)}")
            else:
                parts.append(run.report())
        return "\n".join([*parts, self.server.log_tail()])


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


@pytest.fixture(scope="module")
def network(sdk_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    home = tmp_path_factory.mktemp("dataplane") / "home"
    workdir = tmp_path_factory.mktemp("dataplane-sdk")
    with Server(
        home,
        password=PASSWORD,
        unset=["TRELLIS_*"],
        env={"TRELLIS_ROUTER": "on"},
    ) as server:
        server.up()
        admin = server.login()
        found = server.expect(
            server.call("GET", f"{MGMT}/edge-routers", admin, params={"filter": f'name="{ROUTER}"'}),
            200,
            "find the embedded router",
        )["data"]
        assert len(found) == 1, found
        net = Network(server, admin, workdir, sdk_python, found[0]["id"], {}, {}, {})
        wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "the embedded router comes online")
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
            jwt_file = workdir / f"{name}.jwt"
            jwt_file.write_text(detail["data"]["enrollment"]["ott"]["jwt"])
            identity_file = workdir / f"{name}.json"
            run = run_driver(
                sdk_python,
                "enroll_driver.py",
                [str(jwt_file), str(identity_file)],
                workdir,
                f"enroll-{name}",
                ENROLL_TIMEOUT,
            )
            assert run.returncode == 0, net.explain(run)
            assert identity_file.is_file(), net.explain(run)
            net.identities[name], net.ids[name] = identity_file, identity_id
        for name, encrypted in (("echo", False), ("echo-enc", True)):
            created = net.call(
                "POST",
                "/services",
                201,
                f"create {name}",
                json={"name": name, "encryptionRequired": encrypted},
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
        yield net


class Binder:
    """A Binder driver running in the background."""

    def __init__(self, net: Network, service: str, connections: int = 1) -> None:
        self.out = net.workdir / f"bind-{service}-{time.monotonic_ns()}.stdout"
        self.err = self.out.with_suffix(".stderr")
        with self.out.open("wb") as stdout, self.err.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [
                    str(net.python),
                    str(DRIVERS / "bind_driver.py"),
                    str(net.identities["binder"]),
                    service,
                    str(connections),
                ],
                cwd=net.workdir,
                env=clean_env(ZITI_LOG="4"),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines()

    def line(self, prefix: str) -> str:
        return next((ln for ln in self.lines() if ln.startswith(prefix)), "")

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


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


def terminators_of(net: Network, service: str) -> list[dict[str, Any]]:
    sid = net.services[service]
    return net.call("GET", "/terminators", 200, "list terminators", params={"filter": f'service="{sid}"'})[
        "data"
    ]


def dial(net: Network, service: str, size: int = PAYLOAD, dials: int = 1) -> DriverRun:
    return run_driver(
        net.python,
        "dial_driver.py",
        [str(net.identities["dialer"]), service, str(size), str(dials)],
        net.workdir,
        f"dial-{service}-{time.monotonic_ns()}",
        DIAL_TIMEOUT,
    )


def bound(net: Network, binder: Binder, service: str) -> None:
    """Wait until ``binder`` listens and the controller shows its terminator."""
    wait_for(lambda: binder.line("BOUND") or binder.proc.poll() is not None, BIND_TIMEOUT, "the binder binds")
    assert binder.line("BOUND"), net.explain(binder.out, binder.err)
    wait_for(lambda: terminators_of(net, service), 10, f"the bind's terminator of {service} appears")


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
