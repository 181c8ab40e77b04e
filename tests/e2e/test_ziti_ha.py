"""OpenZiti's tunneler in HA mode (``ziti tunnel --ha``: the Go SDK 1.1 inside ``ziti`` v1.6.0 logs in
through OIDC) against a real ``trellis serve`` and its router (issue 26, docs/api.md §16).

In that mode the SDK logs in with the authorization-code flow (``/oidc/authorize`` with its
certificate, PKCE), calls the client API with ``Authorization: Bearer``, creates its Dial and
Bind sessions as any client, opens its router channels with the JWT access token in the hello
(header 1002), which the router verifies on its own (docs/dataplane.md §4), and refreshes its
tokens by token exchange shortly before they expire, sending the new access token to every router
it is connected to (UpdateToken, 60803). A host and a proxy tunneler carry TCP through the
embedded router; with a short access-token lifetime (half of ``TRELLIS_SESSION_TIMEOUT_MINUTES``:
30 s here) the channels outlive several refreshes and keep carrying traffic.

With several controllers (``make cluster``: three on one PostgreSQL database, two routers,
:mod:`tests.e2e.clusters`) every controller advertises ``HA_CONTROLLER``; two HA tunnelers log in
at controller 1 and carry a held TCP connection; controller 1 is killed; the held connection
flows on, and a service made afterwards on controller 2 is bound and dialed by the same tunnelers,
whose Go SDK moves to another controller by itself with the tokens controller 1 signed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from cluster.local import MGMT, Api, Cluster
from tests.e2e.clusters import DEADLINE_SECONDS, kill, running_cluster
from tests.e2e.echo import EchoServer
from tests.e2e.server import Server, free_port, running, tail
from tests.e2e.test_cluster_traffic import Held, echo_once
from tests.e2e.test_ziti_cli import (
    ECHO_TIMEOUT,
    PASSWORD,
    TUNNEL_READY_TIMEOUT,
    Cli,
    Tunnel,
    echo_through,
    listening,
    table_rows,
    wait_for,
)
from tests.e2e.ziti_cli import LOCK_TIMEOUT, SKIP_ENV, ZitiCliError, ensure_ziti

pytestmark = [
    pytest.mark.seconds(90),
    pytest.mark.e2e,
    pytest.mark.timeout(LOCK_TIMEOUT + 300),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: OpenZiti ziti CLI e2e tests skipped on purpose",
    ),
]

#: The access tokens' lifetime here (half the API sessions' idle timeout of one minute): the SDK
#: refreshes 10 s before expiry, so every ~20 s.
ACCESS_SECONDS = 30


@pytest.fixture(scope="module")
def ziti() -> Path:
    try:
        return ensure_ziti()
    except ZitiCliError as exc:
        problem = str(exc)
    pytest.fail(f"cannot provide OpenZiti's ziti binary: {problem}", pytrace=False)


@pytest.fixture(scope="module")
def server(ziti: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(
        tmp_path_factory.mktemp("ziti-ha") / "home",
        password=PASSWORD,
        unset=["TRELLIS_*"],
        env={
            "TRELLIS_ROUTER": "on",
            "TRELLIS_LOG_LEVEL": "debug",
            "TRELLIS_SESSION_TIMEOUT_MINUTES": "1",
        },
    )


def test_ha_tunnelers_log_in_with_oidc_and_carry_tcp_through_refreshes(
    ziti: Path, server: Server, tmp_path: Path
) -> None:
    cli = Cli(ziti, server, tmp_path)
    cli.admin()
    wait_for(
        lambda: table_rows(cli.out("edge", "list", "edge-routers"))[0][2] == "true",
        30,
        "the embedded router comes online",
    )
    for name in ("ha-dialer", "ha-binder"):
        cli.out("edge", "create", "identity", name, "-a", name, "-o", f"{name}.jwt")
        cli.out("edge", "enroll", f"{name}.jwt", "-a", "EC", "-o", f"{name}.json")
    echo = EchoServer(ECHO_TIMEOUT)
    host_config = json.dumps({"protocol": "tcp", "address": "127.0.0.1", "port": echo.port})
    cli.out("edge", "create", "config", "ha-echo-host", "host.v1", host_config)
    cli.out("edge", "create", "service", "ha-echo", "--configs", "ha-echo-host", "-a", "ha-echo")
    for name, kind, who in (("ha-dial", "Dial", "#ha-dialer"), ("ha-bind", "Bind", "#ha-binder")):
        cli.out(
            "edge",
            "create",
            "service-policy",
            name,
            kind,
            "--identity-roles",
            who,
            "--service-roles",
            "#ha-echo",
        )
    tunnels: list[Tunnel] = []

    def explain(what: str) -> str:
        logs = [f"--- {t.log.name}:\n{tail(t.text(), 5000)}" for t in tunnels]
        return cli.explain("\n".join([what, *logs]))

    def terminators() -> list[list[str]]:
        return table_rows(cli.out("edge", "list", "terminators", 'service.name = "ha-echo"'))

    try:
        tunnels.append(Tunnel(cli, "host", "host", "--ha", "-i", "ha-binder.json"))
        try:
            wait_for(terminators, TUNNEL_READY_TIMEOUT, "the hosting tunneler's terminator appears")
        except AssertionError as exc:
            raise AssertionError(explain(str(exc))) from None
        port = free_port()
        tunnels.append(Tunnel(cli, "proxy", "proxy", f"ha-echo:{port}", "--ha", "-i", "ha-dialer.json"))
        try:
            wait_for(lambda: listening(port), TUNNEL_READY_TIMEOUT, "the proxy listens")
            echo_through(port, 100_000)
        except (AssertionError, OSError) as exc:
            raise AssertionError(explain(f"echo through the tunnel: {exc!r}")) from None

        log = server.log.read_text(errors="replace")
        assert "hello of ha-dialer (API session" in log, explain("the router's log")
        assert ", OIDC) accepted" in log, explain("the router's log")
        # both logged in through OIDC: each an API session, as any login
        sessions = cli.json("edge", "list", "api-sessions")["data"]
        names = {(s.get("identity") or {}).get("name") for s in sessions}
        assert names >= {"ha-dialer", "ha-binder"}, sessions
        assert log.count("event=oidc.tokens_issued") >= 2, explain("the OIDC logins")

        # past two refreshes the channels are the same and carry traffic
        def refreshed() -> bool:
            text = server.log.read_text(errors="replace")
            return text.count("token updated") >= 4

        try:
            wait_for(refreshed, ACCESS_SECONDS * 3, "each tunneler's token is updated twice on the router")
            echo_through(port, 100_000)
            text = server.log.read_text(errors="replace")
            assert "token update refused" not in text, explain("refusals")
            assert "hello refused" not in text, explain("refusals")
        except (AssertionError, OSError) as exc:
            raise AssertionError(explain(f"after the refreshes: {exc!r}")) from None
    finally:
        for tunnel in tunnels:
            tunnel.stop()
        echo.close()


# -- several controllers: failover -----------------------------------------------------------------
class ClusterLogs:
    """What :class:`~tests.e2e.test_ziti_cli.Cli` asks of its server when a command fails."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def log_tail(self, limit: int = 6000) -> str:
        parts = [
            f"--- {p.what} ({p.log}):\n{p.log_tail(40)}"
            for p in [*self.cluster.controllers, *self.cluster.routers]
        ]
        return tail("\n".join(parts), limit)


def expect(api: Api, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    status, answer = api.call(method, path, body)
    assert 200 <= status < 300, f"{method} {path}: HTTP {status} {answer}"
    return answer


def ha_service(api: Api, name: str, host_config: str) -> None:
    body = {"name": name, "configs": [host_config], "roleAttributes": ["ha-tun"], "encryptionRequired": True}
    expect(api, "POST", f"{MGMT}/services", body)


def terminators_of(api: Api, service: str) -> list[dict[str, Any]]:
    return api.listing("/terminators", f'service.name = "{service}"')


def failed_over(tunnel: Tunnel, victim_url: str) -> bool:
    """Whether the tunneler's Go SDK chose another controller than the victim (it logs so)."""
    chosen = []
    for line in tunnel.text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("msg") == "setting active controller":
            chosen.append(str(record.get("key", "")))
    return bool(chosen) and not chosen[-1].startswith(victim_url)


@pytest.mark.slow
@pytest.mark.seconds(90)
def test_ha_tunnelers_move_to_another_controller_when_theirs_is_killed(
    ziti: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = tmp_path_factory.mktemp("ziti-ha-cluster")
    workdir = base / "clients"
    workdir.mkdir()
    with running_cluster(base / "cluster") as cluster:
        first, second = cluster.controllers[0], cluster.controllers[1]
        api = cluster.api(first)
        cli = Cli(ziti, cast(Server, ClusterLogs(cluster)), workdir)
        for controller in cluster.controllers:
            version = expect(cluster.api(controller), "GET", "/version")["data"]
            assert version["capabilities"] == ["OIDC_AUTH", "HA_CONTROLLER"], version
        echo = EchoServer(ECHO_TIMEOUT)
        tunnels: list[Tunnel] = []
        held: Held | None = None

        def explain(what: str) -> str:
            logs = [f"--- {t.log.name}:\n{tail(t.text(), 4000)}" for t in tunnels]
            return "\n".join([what, *logs, ClusterLogs(cluster).log_tail(12000)])

        def until(check: Any, what: str) -> None:
            try:
                wait_for(check, DEADLINE_SECONDS, what)
            except AssertionError as exc:
                raise AssertionError(explain(str(exc))) from None

        try:
            host_v1 = api.listing("/config-types", 'name = "host.v1"')[0]["id"]
            data = {"protocol": "tcp", "address": "127.0.0.1", "port": echo.port}
            body = {"name": "ha-tun-host", "configTypeId": host_v1, "data": data}
            host_config = str(expect(api, "POST", f"{MGMT}/configs", body)["data"]["id"])
            ha_service(api, "ha-held", host_config)
            for name, kind in (("ha-dialer", "Dial"), ("ha-binder", "Bind")):
                body = {"name": name, "type": "Device", "isAdmin": False, "enrollment": {"ott": True}}
                made = str(expect(api, "POST", f"{MGMT}/identities", body)["data"]["id"])
                detail = expect(api, "GET", f"{MGMT}/identities/{made}")["data"]
                (workdir / f"{name}.jwt").write_text(detail["enrollment"]["ott"]["jwt"])
                cli.out("edge", "enroll", f"{name}.jwt", "-a", "EC", "-o", f"{name}.json")
                policy = {
                    "name": f"ha-tun-{kind.lower()}",
                    "type": kind,
                    "semantic": "AnyOf",
                    "identityRoles": [f"@{made}"],
                    "serviceRoles": ["#ha-tun"],
                }
                expect(api, "POST", f"{MGMT}/service-policies", policy)

            poll = ("--ha", "--svcPollRate", "1")
            tunnels.append(Tunnel(cli, "host", "host", "-i", "ha-binder.json", *poll))
            until(lambda: terminators_of(api, "ha-held"), "the hosting tunneler's terminator appears")
            held_port, new_port = free_port(), free_port()
            proxied = (f"ha-held:{held_port}", f"ha-new:{new_port}")
            tunnels.append(Tunnel(cli, "proxy", "proxy", *proxied, "-i", "ha-dialer.json", *poll))
            until(lambda: listening(held_port), "the proxy listens")
            held = Held(held_port)
            assert held.exchange(20_000), explain("the held connection")
            logs = "".join(r.log.read_text(errors="replace") for r in cluster.routers)
            assert ", OIDC) accepted" in logs, explain("the routers took the tunnelers' JWT hellos")

            kill(first)
            api = cluster.api(second)
            for _ in range(3):
                assert held.exchange(20_000), explain("the held connection after the kill")
            ha_service(api, "ha-new", host_config)
            until(lambda: terminators_of(api, "ha-new"), "the hosting tunneler binds the new service")
            until(lambda: listening(new_port), "the proxy listens for the new service")
            until(lambda: echo_once(new_port, 20_000), "a Dial of the new service through the proxy")
            for tunnel in tunnels:
                assert failed_over(tunnel, first.url), explain(
                    f"{tunnel.log.name} moved to another controller"
                )
            assert held.exchange(20_000), explain("the held connection at the end")
            for router in cluster.routers:
                text = router.log.read_text(errors="replace")
                assert "hello refused" not in text, explain("no JWT hello refused")
                assert "granted alone" not in text, explain("every Dial went through a controller")
        finally:
            if held is not None:
                held.close()
            for tunnel in tunnels:
                tunnel.stop()
            echo.close()
