"""A service the embedded router hosts itself (``host.v1``), dialled by the real OpenZiti C SDK
(``openziti==0.6.0``).

One ``trellis serve`` with its embedded router (``TRELLIS_ROUTER=on``: tunneler-enabled, its router
identity has the router's id) serves the module. A TCP echo server runs in the test process; the
services ``hosted-echo`` (plain) and ``hosted-echo-enc`` (``encryptionRequired``) carry a
``host.v1`` config pointing at it, and a Bind policy names ``@<router id>``: the router makes a
``tunnel`` terminator for each. The identity ``dialer`` (enrolled by the real SDK) may Dial them;
its Dialer process sends 100 KB, half-closes and must read the same bytes back, with no Binder
anywhere: the router opens the TCP connection and, for the encrypted one, is the kx server.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.dataplane import find_sdk_python, sdk_marks, wait_for
from tests.e2e.server import MGMT, Server, tail
from tests.e2e.test_sdk import DriverRun, run_driver

pytestmark = sdk_marks(300)

PASSWORD = "e2e-hosted-admin-password"
ROUTER = "trellis-router"
HOST_V1 = "NH5p4FpGR"
ONLINE_TIMEOUT = 30.0
ENROLL_TIMEOUT = 45.0
TERMINATOR_TIMEOUT = 30.0
DIAL_TIMEOUT = 60.0
PAYLOAD = 100_000
SERVICES = {"hosted-echo": False, "hosted-echo-enc": True}
#: A service whose host.v1 forwards what the dialer names: the wrapper's by-name dial names nothing.
FORWARDING = "hosted-forward"


class EchoServer:
    """A threaded TCP echo server on 127.0.0.1: what a connection reads it writes back; at EOF it
    half-closes too. Counts connections and the bytes echoed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.lock = threading.Lock()
        self.connections = 0
        self.echoed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="echo-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with self.lock:
            self.connections += 1
        total = 0
        with conn:
            conn.settimeout(DIAL_TIMEOUT)
            try:
                while chunk := conn.recv(65536):
                    conn.sendall(chunk)
                    total += len(chunk)
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)  # until the router closes
            except OSError:
                pass
        with self.lock:
            self.echoed.append(total)

    def close(self) -> None:
        self._stop.set()
        self.sock.close()
        self._thread.join(5)


@dataclass
class Network:
    server: Server
    admin: str
    workdir: Path
    python: Path
    router_id: str
    echo: EchoServer
    identity: Path = field(default_factory=Path)
    services: dict[str, str] = field(default_factory=dict)

    def call(self, method: str, path: str, status: int, what: str, **kwargs: Any) -> dict[str, Any]:
        return self.server.expect(
            self.server.call(method, f"{MGMT}{path}", self.admin, **kwargs), status, what
        )

    def terminators(self, service: str) -> list[dict[str, Any]]:
        sid = self.services[service]
        found = self.call(
            "GET", "/terminators", 200, "list terminators", params={"filter": f'service="{sid}"'}
        )
        return list(found["data"])

    def explain(self, *runs: DriverRun) -> str:
        return "\n".join([*(run.report() for run in runs), self.server.log_tail()])


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    return find_sdk_python()


@pytest.fixture(scope="module")
def network(sdk_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    home = tmp_path_factory.mktemp("hosted") / "home"
    workdir = tmp_path_factory.mktemp("hosted-sdk")
    echo = EchoServer()
    try:
        with Server(home, password=PASSWORD, unset=["TRELLIS_*"], env={"TRELLIS_ROUTER": "on"}) as server:
            server.up()
            admin = server.login()
            found = server.expect(
                server.call("GET", f"{MGMT}/edge-routers", admin, params={"filter": f'name="{ROUTER}"'}),
                200,
                "find the embedded router",
            )["data"]
            assert len(found) == 1, found
            assert found[0]["isTunnelerEnabled"] is True, found
            net = Network(server, admin, workdir, sdk_python, found[0]["id"], echo)
            wait_for(
                lambda: net.call("GET", f"/edge-routers/{net.router_id}", 200, "read the router")["data"][
                    "isOnline"
                ],
                ONLINE_TIMEOUT,
                "the embedded router comes online",
            )
            created = net.call(
                "POST",
                "/identities",
                201,
                "create dialer",
                json={"name": "dialer", "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
            )
            dialer_id = created["data"]["id"]
            detail = net.call("GET", f"/identities/{dialer_id}", 200, "read dialer")
            jwt_file = workdir / "dialer.jwt"
            jwt_file.write_text(detail["data"]["enrollment"]["ott"]["jwt"])
            net.identity = workdir / "dialer.json"
            run = run_driver(
                sdk_python,
                "enroll_driver.py",
                [str(jwt_file), str(net.identity)],
                workdir,
                "enroll",
                ENROLL_TIMEOUT,
            )
            assert run.returncode == 0, net.explain(run)
            config = net.call(
                "POST",
                "/configs",
                201,
                "create the host.v1 config",
                json={
                    "name": "hosted-echo-host",
                    "configTypeId": HOST_V1,
                    "data": {
                        "protocol": "tcp",
                        "address": "127.0.0.1",
                        "port": echo.port,
                        "listenOptions": {"connectTimeoutSeconds": 5},
                    },
                },
            )["data"]["id"]
            for name, encrypted in SERVICES.items():
                net.services[name] = net.call(
                    "POST",
                    "/services",
                    201,
                    f"create {name}",
                    json={"name": name, "encryptionRequired": encrypted, "configs": [config]},
                )["data"]["id"]
            forward = net.call(
                "POST",
                "/configs",
                201,
                "create the forwarding host.v1 config",
                json={
                    "name": "hosted-forward-host",
                    "configTypeId": HOST_V1,
                    "data": {
                        "protocol": "tcp",
                        "forwardAddress": True,
                        "allowedAddresses": ["127.0.0.1"],
                        "forwardPort": True,
                        "allowedPortRanges": [{"low": 1, "high": 65535}],
                    },
                },
            )["data"]["id"]
            net.services[FORWARDING] = net.call(
                "POST",
                "/services",
                201,
                f"create {FORWARDING}",
                json={"name": FORWARDING, "encryptionRequired": False, "configs": [forward]},
            )["data"]["id"]
            roles = [f"@{sid}" for sid in net.services.values()]
            for policy, who, kind in (
                ("bind-hosted", net.router_id, "Bind"),
                ("dial-hosted", dialer_id, "Dial"),
            ):
                net.call(
                    "POST",
                    "/service-policies",
                    201,
                    f"create {policy}",
                    json={
                        "name": policy,
                        "type": kind,
                        "semantic": "AnyOf",
                        "identityRoles": [f"@{who}"],
                        "serviceRoles": roles,
                    },
                )
            yield net
    finally:
        echo.close()


def dial(net: Network, service: str) -> DriverRun:
    return run_driver(
        net.python,
        "dial_driver.py",
        [str(net.identity), service, str(PAYLOAD), "1"],
        net.workdir,
        f"dial-{service}-{time.monotonic_ns()}",
        DIAL_TIMEOUT,
    )


def test_the_router_hosts_a_tcp_service_plain_and_end_to_end_encrypted(network: Network) -> None:
    """The router holds a ``tunnel`` terminator for each hosted service; the real SDK's echo of
    100 KB comes back whole through the router's own TCP connection, plain and encrypted."""
    for service in SERVICES:
        found = wait_for(
            lambda service=service: network.terminators(service),  # type: ignore[misc]
            TERMINATOR_TIMEOUT,
            f"the router's terminator of {service} appears",
        )
        assert [(t["binding"], t["routerId"]) for t in found] == [("tunnel", network.router_id)], found
        assert found[0]["address"] == f"tunnel:{network.services[service]}", found

    for number, service in enumerate(SERVICES, start=1):
        run = dial(network, service)
        assert run.returncode == 0, network.explain(run)
        assert run.line("ECHO") == f"ECHO {PAYLOAD} {PAYLOAD} 1", network.explain(run)
        wait_for(lambda n=number: len(network.echo.echoed) >= n, 10, "the echo server's connection ends")  # type: ignore[misc]
        assert network.echo.echoed[-1] == PAYLOAD, (
            network.echo.echoed,
            tail(network.server.log_tail(), 4000),
        )
    assert network.echo.connections == len(SERVICES)


def test_a_forwarding_config_refuses_the_wrappers_by_name_dial(network: Network) -> None:
    """The 0.29.3 wrapper's dial by service name sends ``dst_hostname`` ``(null)`` and ``dst_port``
    ``0``: a config that forwards the address and port has nothing allowed to dial, so the Connect
    is refused (the dial fails at once) and the echo server sees no connection."""
    wait_for(lambda: network.terminators(FORWARDING), TERMINATOR_TIMEOUT, "the forwarding terminator appears")
    connections = network.echo.connections

    run = dial(network, FORWARDING)

    assert run.returncode == 5, network.explain(run)
    assert run.line("DIAL_FAILED"), network.explain(run)
    assert network.echo.connections == connections
    assert "names no address to forward" in network.server.log_tail(20000), network.explain(run)
