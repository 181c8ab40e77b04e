"""A standalone router through restarts, with the real OpenZiti C SDK (docs/dataplane.md §3).

The controller runs without its embedded router; a router is made in the management API,
enrolled with ``trellis router enroll <jwt>`` and run with ``trellis router run``, as on another
host. A real SDK Binder holds a bind on it throughout (``bind_driver.py`` serving many
connections). Then, in order:

1. the controller restarts: the router reconnects and resynchronises; the bind's terminator is
   the same one (none lost, none stale) and a real Dial reaches the Binder;
2. the router is killed (``kill -9``) and started again: its terminators are reconciled away at
   its hello, the SDK reconnects and binds again (a new terminator, the only one), and a Dial
   reaches the Binder again.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.sdk.sdk_venv import LOCK_TIMEOUT, SKIP_ENV
from tests.e2e.server import HOST, ROOT, TRELLIS, Server, tail
from tests.e2e.test_dataplane import Binder, Network, dial, sdk_python, terminators_of, wait_for
from tests.e2e.test_sdk import run_driver

__all__ = ["sdk_python"]  # the fixture, shared

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(LOCK_TIMEOUT + 420),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: real OpenZiti SDK e2e tests skipped on purpose",
    ),
]

PASSWORD = "e2e-router-faults-password"
#: The C SDK reconnects a lost channel after a random delay of up to 10 s (then longer).
SDK_RECONNECT_TIMEOUT = 45.0
ONLINE_TIMEOUT = 30.0


class Router:
    """``trellis router run`` of a router enrolled in ``home``."""

    def __init__(self, home: Path, env: dict[str, str], log: Path) -> None:
        self.home, self.env, self.log = home, env, log
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

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def standalone(
    sdk_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Network, Router]]:
    base = tmp_path_factory.mktemp("router-faults")
    workdir = tmp_path_factory.mktemp("router-faults-sdk")
    with Server(base / "home", password=PASSWORD, unset=["TRELLIS_*"]) as server:
        server.up()
        admin = server.login()
        net = Network(server, admin, workdir, sdk_python, "", {}, {}, {})
        created = net.call(
            "POST",
            "/edge-routers",
            201,
            "create router-2",
            json={"name": "router-2", "roleAttributes": ["public"], "isTunnelerEnabled": False},
        )
        net.router_id = created["data"]["id"]
        jwt_file = workdir / "router-2.jwt"
        jwt_file.write_text(net.router()["enrollmentJwt"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
        env.update(
            {
                "TRELLIS_ROUTER_HOME": str(base / "router-2"),
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
        assert f"enrolled edge router {net.router_id} in" in enrolled.stdout, enrolled.stdout
        assert oct((base / "router-2").stat().st_mode & 0o777) == "0o700"
        assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in (base / "router-2").iterdir())
        # the quickstart policies are made with the embedded router only: add what this one needs
        net.call(
            "POST",
            "/edge-router-policies",
            201,
            "erp",
            json={
                "name": "all-public",
                "semantic": "AnyOf",
                "identityRoles": ["#all"],
                "edgeRouterRoles": ["#public"],
            },
        )
        net.call(
            "POST",
            "/service-edge-router-policies",
            201,
            "serp",
            json={
                "name": "all-all",
                "semantic": "AnyOf",
                "serviceRoles": ["#all"],
                "edgeRouterRoles": ["#all"],
            },
        )
        router = Router(base / "router-2", env, base / "router.log")
        router.start()
        try:
            wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "router-2 comes online")
            _enroll_sdks(net)
            yield net, router
        finally:
            router.stop()


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
            45,
        )
        assert run.returncode == 0, net.explain(run)
        net.identities[name], net.ids[name] = identity_file, identity_id
    created = net.call(
        "POST", "/services", 201, "create echo", json={"name": "echo", "encryptionRequired": False}
    )
    net.services["echo"] = created["data"]["id"]
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
                "serviceRoles": [f"@{net.services['echo']}"],
            },
        )


def one_terminator(net: Network) -> Any:
    found = terminators_of(net, "echo")
    return found[0]["id"] if len(found) == 1 else None


def echo_works(net: Network, binder: Binder, what: str) -> None:
    run = dial(net, "echo", size=50_000)
    assert run.line("ECHO") == "ECHO 50000 50000 1", f"{what}\n" + net.explain(run, binder.out, binder.err)


def test_a_router_survives_controller_and_router_restarts(standalone: tuple[Network, Router]) -> None:
    net, router = standalone
    binder = Binder(net, "echo", connections=3)
    try:
        wait_for(lambda: binder.line("BOUND") or binder.proc.poll() is not None, 30, "the binder binds")
        first = wait_for(lambda: one_terminator(net), 15, "one terminator for the bind")
        echo_works(net, binder, "before any restart")

        # 1. the controller restarts; the router reconnects and keeps its terminator
        net.server.stop()
        net.server.start()
        net.admin = net.server.login()
        wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "router-2 reconnects")
        assert net.router()["syncStatus"] == "SYNC_DONE", net.router()
        assert one_terminator(net) == first, terminators_of(net, "echo")
        echo_works(net, binder, "after the controller restarted")

        # 2. the router dies and comes back: its old terminator goes, the SDK binds again
        router.kill()
        wait_for(lambda: not net.router().get("isOnline"), 45, "router-2 is seen offline")
        router.start()
        wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "router-2 comes back")
        second = wait_for(
            lambda: (t := one_terminator(net)) not in (None, first) and t,
            SDK_RECONNECT_TIMEOUT,
            "the SDK binds again on the restarted router (and only the new terminator is left)",
        )
        assert second != first
        echo_works(net, binder, "after the router restarted")
    finally:
        binder.stop()
        log = router.log.read_text(errors="replace") if router.log.exists() else ""
        assert "Traceback" not in log, tail(log, 6000)


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append((int(entry.name), cmdline))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_embedded_router_ends_with_a_killed_controller(tmp_path: Path) -> None:
    """``serve`` killed with SIGKILL leaves no router behind holding its ports."""
    with Server(tmp_path / "home", env={"TRELLIS_ROUTER": "on"}, unset=["TRELLIS_*"]) as server:
        server.up()
        routers = wait_for(
            lambda: [pid for pid, cmd in _children(server.pid) if "router run" in cmd], 15, "the router runs"
        )
        os.kill(server.pid, signal.SIGKILL)
        server.proc.wait()  # type: ignore[union-attr]
        wait_for(lambda: not any(_alive(pid) for pid in routers), 15, "the router ends with serve")
