"""Real clients carry traffic through a cluster (``make cluster``: three controllers on one
PostgreSQL database, two routers connected to all three; :mod:`tests.e2e.clusters`).

The identities are created through controller 1, so their enrollment JWTs name it and the clients
log in there. Two tests share one cluster (the revocation first, since the other kills):

1. **Revocation from another controller**: the real C SDK holds a connection through a router to
   a real SDK Binder; an administrator on controller 2 deletes the Dialer's API session; the
   router closes the Dialer's channel and the SDK sees its connection end.
2. **One of three controllers killed**: the real C SDK (a Dialer holding a connection, and a
   Binder) and OpenZiti's ``ziti`` tunneler (``tunnel proxy`` holding a TCP connection to a
   ``tunnel host``) carry traffic; controller 1, where they logged in, is killed with SIGKILL
   (its process group); the held connections keep flowing both ways, and new Dials succeed
   through the two controllers left: the C SDK's with the Dial session it holds, and the
   tunneler's of a service made after the kill on controller 2, which the host binds and the
   proxy dials with new sessions from the controllers left (the Go SDK lists the controllers
   after its login and fails over by itself: its log says which it chose). The C SDK 0.29.3
   knows only the controller of its identity file (a Dial needing a new session fails at once,
   "Ziti Controller is not available"): a new SDK process whose file names controller 2 logs in
   there and dials. No Dial is served by a router alone (its offline path,
   docs/dataplane.md §9). Which controllers granted the circuits held at the kill (each lists
   those it granted) is in the run's summary: so far controller 1's, the one killed.

Waits are for conditions with generous deadlines (a loaded 2-core machine runs PostgreSQL, three
controllers, two routers and the clients here).
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from cluster.local import MGMT, Api, Cluster, Controller
from tests.e2e.clusters import DEADLINE_SECONDS, kill, running_cluster
from tests.e2e.dataplane import Binder, Network, bound, find_sdk_python, sdk_marks, wait_for
from tests.e2e.echo import EchoServer
from tests.e2e.server import Server, free_port, tail
from tests.e2e.test_offline_router import Dialer
from tests.e2e.test_sdk import DriverRun
from tests.e2e.test_ziti_cli import Cli, Tunnel
from tests.e2e.ziti_cli import LOCK_TIMEOUT as ZITI_LOCK_TIMEOUT
from tests.e2e.ziti_cli import ZitiCliError, ensure_ziti

pytestmark = [*sdk_marks(ZITI_LOCK_TIMEOUT + 600), pytest.mark.slow, pytest.mark.seconds(45)]

SIZE = 20_000
#: The SDK services (a Binder each).
SDK_SERVICES = ("rv-held", "kl-held", "kl-again")


@dataclass
class ClusterNetwork(Network):
    """:class:`~tests.e2e.dataplane.Network` over a cluster: the admin's calls go to one controller
    (``api``); failure messages carry every controller's and router's log."""

    cluster: Cluster | None = None
    api: Api | None = None
    notes: list[str] = field(default_factory=list)

    def call(self, method: str, path: str, status: int, what: str, **kwargs: Any) -> dict[str, Any]:
        return self.call_on(self.api, method, path, status, what, **kwargs)

    def call_on(
        self, api: Api | None, method: str, path: str, status: int, what: str, **kwargs: Any
    ) -> dict[str, Any]:
        assert api is not None
        query = urllib.parse.urlencode(kwargs.get("params") or {})
        got, answer = api.call(method, f"{MGMT}{path}" + (f"?{query}" if query else ""), kwargs.get("json"))
        assert got == status, f"{what}: HTTP {got} {answer}\n{self.explain()}"
        return answer

    def explain(self, *runs: DriverRun | Path) -> str:
        parts = []
        for run in runs:
            if isinstance(run, Path):
                parts.append(f"--- {run.name}:\n{tail(run.read_text(errors='replace'), 6000)}")
            else:
                parts.append(run.report())
        assert self.cluster is not None
        for process in [*self.cluster.controllers, *self.cluster.routers]:
            parts.append(f"--- {process.what} ({process.log}):\n{process.log_tail(40)}")
        return "\n".join([*parts, *self.notes])


class Logs:
    """What :class:`~tests.e2e.test_ziti_cli.Cli` asks of its server when a command fails."""

    def __init__(self, net: ClusterNetwork) -> None:
        self.net = net

    def log_tail(self, limit: int = 6000) -> str:
        return tail(self.net.explain(), limit)


@dataclass
class Traffic:
    net: ClusterNetwork
    ziti: Path
    cli: Cli
    echo: EchoServer
    #: The ``host.v1`` config of the tunneler's services (to the echo server).
    host_config: str


@pytest.fixture(scope="module")
def ziti() -> Path:
    try:
        return ensure_ziti()
    except ZitiCliError as exc:
        problem = str(exc)
    pytest.fail(f"cannot provide OpenZiti's ziti binary: {problem}", pytrace=False)


@pytest.fixture(scope="module")
def traffic(ziti: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traffic]:
    """One cluster for the module: the SDK's dialer and binder (enrolled by the real C SDK) and
    the tunneler's (enrolled by ``ziti edge enroll``), all through controller 1, their services and
    policies (the cluster's own: every identity may use both routers)."""
    python = find_sdk_python()
    base = tmp_path_factory.mktemp("cluster-traffic")
    workdir = base / "clients"
    workdir.mkdir()
    with running_cluster(base / "cluster") as cluster:
        api = cluster.api(cluster.controllers[0])
        net = ClusterNetwork(
            server=cast(Server, None),
            admin="",
            workdir=workdir,
            python=python,
            router_id=cluster.routers[0].id,
            cluster=cluster,
            api=api,
        )
        net.enroll_sdks()
        net.echo_services(dict.fromkeys(SDK_SERVICES, False))
        echo = EchoServer(60.0)
        cli = Cli(ziti, cast(Server, Logs(net)), workdir)
        try:
            host_config = net.call(
                "POST",
                "/configs",
                201,
                "the tunneler's host.v1 config",
                json={
                    "name": "kl-tun-host",
                    "configTypeId": host_v1(net),
                    "data": {"protocol": "tcp", "address": "127.0.0.1", "port": echo.port},
                },
            )["data"]["id"]
            tunnel_service(net, "kl-tun-held", host_config)
            for name, kind in (("tun-dialer", "Dial"), ("tun-binder", "Bind")):
                made = net.call(
                    "POST",
                    "/identities",
                    201,
                    f"create {name}",
                    json={"name": name, "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
                )["data"]["id"]
                jwt = net.call("GET", f"/identities/{made}", 200, f"read {name}")["data"]["enrollment"][
                    "ott"
                ]["jwt"]
                (workdir / f"{name}.jwt").write_text(jwt)
                cli.out("edge", "enroll", f"{name}.jwt", "-a", "EC", "-o", f"{name}.json")
                net.call(
                    "POST",
                    "/service-policies",
                    201,
                    f"{name}'s policy",
                    json={
                        "name": f"kl-tun-{kind.lower()}",
                        "type": kind,
                        "semantic": "AnyOf",
                        "identityRoles": [f"@{made}"],
                        "serviceRoles": ["#kl-tun"],
                    },
                )
            yield Traffic(net, ziti, cli, echo, host_config)
        finally:
            echo.close()


def tunnel_service(net: ClusterNetwork, name: str, host_config: str) -> None:
    """A service the tunneler hosts (``host.v1``) and proxies (role ``kl-tun``: its policies)."""
    body = {"name": name, "configs": [host_config], "roleAttributes": ["kl-tun"], "encryptionRequired": True}
    net.call("POST", "/services", 201, f"create {name}", json=body)


def host_v1(net: ClusterNetwork) -> str:
    found = net.call("GET", "/config-types", 200, "config types", params={"filter": 'name = "host.v1"'})
    return str(found["data"][0]["id"])


def dialer_of(net: ClusterNetwork, identity: Path) -> Dialer:
    """A :class:`Dialer` of the identity file ``identity`` (the dialer's, or a copy)."""
    kept = net.identities["dialer"]
    net.identities["dialer"] = identity
    try:
        return Dialer(net)
    finally:
        net.identities["dialer"] = kept


def sessions_of(net: ClusterNetwork, api: Api, identity_id: str) -> list[str]:
    listed = net.call_on(api, "GET", "/api-sessions", 200, "list API sessions", params={"limit": 500})
    return [str(s["id"]) for s in listed["data"] if s.get("identityId") == identity_id]


class Held:
    """A TCP connection held open through ``ziti tunnel proxy``, echoed by the hosted server."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.seq = 0

    def exchange(self, size: int) -> bool:
        """Send ``size`` bytes; whether the same came back."""
        self.seq += 1
        payload = (f"{self.seq}:".encode() * size)[:size]
        writer = threading.Thread(target=self.sock.sendall, args=(payload,))
        writer.start()
        got = bytearray()
        while len(got) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            got += chunk
        writer.join(60)
        return bytes(got) == payload

    def close(self) -> None:
        self.sock.close()


def listens(port: int) -> bool:
    """Whether a TCP socket listens on ``port`` (IPv4), without connecting to it."""
    wanted = f":{port:04X}"
    with open("/proc/net/tcp") as table:
        return any(
            fields[1].endswith(wanted) and fields[3] == "0A"
            for fields in (line.split() for line in table.readlines()[1:])
        )


def echo_once(port: int, size: int) -> bool:
    """Whether ``size`` bytes sent on a new connection to ``port`` came back."""
    try:
        held = Held(port)
    except OSError:
        return False
    try:
        return held.exchange(size)
    except OSError:
        return False
    finally:
        held.close()


def terminators(net: ClusterNetwork, service: str) -> list[dict[str, Any]]:
    found = net.call(
        "GET", "/terminators", 200, "terminators", params={"filter": f'service.name = "{service}"'}
    )
    return list(found["data"])


def circuits(net: ClusterNetwork, api: Api) -> int:
    """How many circuits ``api``'s controller lists (those it granted)."""
    status, answer = api.call("GET", "/fabric/v1/circuits?limit=500")
    assert status == 200, f"list circuits: HTTP {status} {answer}\n{net.explain()}"
    return len(answer["data"])


def failed_over(tunnel: Tunnel, victim: Controller) -> bool:
    """Whether the tunneler's Go SDK chose another controller than ``victim`` (it logs so)."""
    chosen = []
    for line in tunnel.text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("msg") == "setting active controller":
            chosen.append(str(record.get("key", "")))
    return bool(chosen) and chosen[0].startswith(victim.url) and not chosen[-1].startswith(victim.url)


def test_an_api_session_deleted_on_another_controller_ends_the_sdk_connection(traffic: Traffic) -> None:
    net = traffic.net
    assert net.cluster is not None
    other = net.cluster.api(net.cluster.controllers[1])
    binder = Binder(net, "rv-held", connections=1)
    dialer: Dialer | None = None

    def explain() -> str:
        return "\n".join([dialer.explain() if dialer else "", net.explain(binder.out, binder.err)])

    try:
        bound(net, binder, "rv-held")
        dialer = Dialer(net)
        assert dialer.expect("LOADED") == "LOADED", explain()
        assert dialer.ask("open a rv-held", "OPEN") == "OPEN a", explain()
        assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()

        sessions = sessions_of(net, other, net.ids["dialer"])
        assert sessions, explain()
        for session in sessions:  # on controller 2; the SDK logged in at controller 1
            net.call_on(other, "DELETE", f"/api-sessions/{session}", 200, "delete the API session")

        answer = dialer.ask(f"eof a {DEADLINE_SECONDS:g}", "EOF")
        assert answer.startswith("EOF a "), explain()
        logs = "".join(r.log.read_text(errors="replace") for r in net.cluster.routers)
        assert any(f"API session {s} is gone: closing" in logs for s in sessions), explain()
    finally:
        if dialer is not None:
            dialer.stop()
        binder.stop()


def test_traffic_flows_on_while_the_controller_the_clients_logged_in_at_is_killed(
    traffic: Traffic, record_property: Callable[[str, object], None]
) -> None:
    net, cli = traffic.net, traffic.cli
    cluster = net.cluster
    assert cluster is not None
    held_binder = Binder(net, "kl-held", connections=1)
    again_binder = Binder(net, "kl-again", connections=4)
    dialers: list[Dialer] = []
    tunnels: list[Tunnel] = []
    held: Held | None = None

    def explain() -> str:
        logs = [f"--- {t.log.name}:\n{tail(t.text(), 4000)}" for t in tunnels]
        return "\n".join(
            [
                *(d.explain() for d in dialers),
                *logs,
                net.explain(held_binder.out, held_binder.err, again_binder.out, again_binder.err),
            ]
        )

    def until(check: Callable[[], Any], what: str) -> None:
        try:
            wait_for(check, DEADLINE_SECONDS, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{explain()}") from None

    try:
        bound(net, held_binder, "kl-held")
        bound(net, again_binder, "kl-again")
        dialer = Dialer(net)
        dialers.append(dialer)
        assert dialer.expect("LOADED") == "LOADED", explain()
        assert dialer.ask("open a kl-held", "OPEN") == "OPEN a", explain()
        assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()
        assert dialer.ask(f"dial kl-again {SIZE}", "ECHO") == f"ECHO {SIZE} {SIZE} 1", explain()

        # the tunnelers poll for services every second (a service made after the kill below)
        tunnels.append(Tunnel(cli, "host", "host", "-i", "tun-binder.json", "--svcPollRate", "1"))
        until(lambda: terminators(net, "kl-tun-held"), "the hosting tunneler's terminator appears")
        held_port, new_port = free_port(), free_port()
        proxied = (f"kl-tun-held:{held_port}", f"kl-tun-new:{new_port}")
        tunnels.append(Tunnel(cli, "proxy", "proxy", *proxied, "-i", "tun-dialer.json", "--svcPollRate", "1"))
        until(lambda: listens(held_port), "the proxy listens")
        held = Held(held_port)
        assert held.exchange(SIZE), explain()
        assert not listens(new_port), explain()  # kl-tun-new does not exist yet

        victim = cluster.controllers[0]
        for path in (net.identities["dialer"], net.workdir / "tun-dialer.json"):
            assert json.loads(path.read_text())["ztAPI"].startswith(victim.url), path  # logged in there
        # which controllers granted the circuits now held (each lists those it granted): said in
        # the run's summary, since the router asks whichever controller answered it last
        granted = {c.number: circuits(net, cluster.api(c)) for c in cluster.controllers}
        kill(victim)
        net.api = cluster.api(cluster.controllers[1])

        # the held connections flow both ways
        for _ in range(3):
            assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()
            assert held.exchange(SIZE), explain()
        # a new Dial of the C SDK with the session it holds: the router asks the controllers left
        assert dialer.ask(f"dial kl-again {SIZE}", "ECHO") == f"ECHO {SIZE} {SIZE} 1", explain()
        assert dialer.ask("close a", "CLOSED") == f"CLOSED a {SIZE * 4}", explain()

        # a service made now, on controller 2: both tunnelers learn of it from another controller
        # (the Go SDK fails over by itself), the host binds it with a new Bind session, the proxy
        # listens and Dials it with a new Dial session
        tunnel_service(net, "kl-tun-new", traffic.host_config)
        until(lambda: terminators(net, "kl-tun-new"), "the hosting tunneler binds the new service")
        until(lambda: listens(new_port), "the proxy listens for the new service")
        until(lambda: echo_once(new_port, SIZE), "a Dial of the new service through the proxy")
        for tunnel in tunnels:
            assert failed_over(tunnel, victim), explain()
        assert held.exchange(SIZE), explain()

        # the C SDK logs in again at controller 2 (its identity file names it) and dials
        moved = net.workdir / "dialer-ctrl-2.json"
        config = json.loads(net.identities["dialer"].read_text())
        config["ztAPI"] = cluster.controllers[1].url
        moved.write_text(json.dumps(config))
        second = dialer_of(net, moved)
        dialers.append(second)
        assert second.expect("LOADED") == "LOADED", explain()
        assert second.ask(f"dial kl-again {SIZE}", "ECHO") == f"ECHO {SIZE} {SIZE} 1", explain()
        for router in cluster.routers:  # every Dial went through a controller, none alone (§9)
            assert "granted alone" not in router.log.read_text(errors="replace"), explain()
        by = ", ".join(f"{n} by controller {c}" for c, n in granted.items() if n)
        record_property(
            "summary",
            f"cluster traffic: controller 1 killed, where the clients logged in; the circuits held "
            f"then were granted {by}; the C SDK and the tunneler carried on through controllers 2 and 3",
        )
    finally:
        if held is not None:
            held.close()
        for one in dialers:
            one.stop()
        for tunnel in tunnels:
            tunnel.stop()
        held_binder.stop()
        again_binder.stop()
