"""Traffic survives the controller (docs/dataplane.md §9), with the real OpenZiti C SDK.

A standalone router (``trellis router run``, ``TRELLIS_ROUTER_OFFLINE_GRACE`` short) serves two
real SDK Binders and one real SDK Dialer (``offline_driver.py``, driven line by line). The Dialer
holds a connection to one service open and dials the other once, so the router holds the grant.
Then the controller, ``trellis serve`` and its worker, is killed with SIGKILL, and:

1. the held connection keeps carrying data both ways, and the router does not close it;
2. within the grace, a new Dial of the other service with the Dial session the SDK holds is
   served by the router alone (the Binder is on the same router);
3. once the router says the grace is over, the held connection still flows, and a new Dial is
   refused with OpenZiti's answer for a router without a controller (the router's log says so;
   the StateClosed's text and missing error code are checked in tests/router/test_offline.py).

Waits are for conditions (log lines, driver lines) with generous deadlines; the grace is long
enough that a loaded machine does the Dial of step 2 well inside it.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.dataplane import (
    ONLINE_TIMEOUT,
    Binder,
    Network,
    RouterProcess,
    bound,
    find_sdk_python,
    sdk_marks,
    wait_for,
)
from tests.e2e.sdk.sdk_venv import DRIVERS, clean_env
from tests.e2e.server import Server, tail

pytestmark = [*sdk_marks(420), pytest.mark.seconds(60)]

PASSWORD = "e2e-offline-router-password"
#: The router's grace: long enough for step 2 on a loaded machine, short enough to wait out.
GRACE_SECONDS = 45
#: How long one driver command may take (a dial or an echo on a loaded machine).
COMMAND_TIMEOUT = 60.0
#: What the router logs (router/offline.py, router/edge.py).
OFFLINE = "offline: no controller reachable"
GRACE_OVER = "the grace is over"
SERVED_ALONE = "granted alone"
NO_CONTROLLER = "no controller available, cannot create circuit"
SIZE = 20_000


class Dialer:
    """``offline_driver.py`` under the SDK venv's python, one command a line."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self.err = net.workdir / f"offline-dialer-{time.monotonic_ns()}.stderr"
        self.said: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        with self.err.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [str(net.python), str(DRIVERS / "offline_driver.py"), str(net.identities["dialer"])],
                cwd=net.workdir,
                env=clean_env(ZITI_LOG="4"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def expect(self, prefix: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """The next line starting with ``prefix`` (others are kept in :attr:`said`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(0.1, left))
            except queue.Empty:
                line = None
            if line is not None:
                self.said.append(line)
                if line.startswith(prefix):
                    return line
                if line.startswith(("DIAL_FAILED", "DRIVER_ERROR", "LOAD_FAILED")):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"the dialer said no {prefix} within {timeout:.0f} s\n{self.explain()}")

    def ask(self, command: str, prefix: str) -> str:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            time.sleep(1)  # its last words
            raise AssertionError(f"the dialer is gone before {command!r}\n{self.explain()}") from None
        return self.expect(prefix)

    def explain(self) -> str:
        while not self._lines.empty():
            self.said.append(self._lines.get_nowait())
        status = "running" if self.proc.poll() is None else f"exit {self.proc.returncode}"
        said = "\n".join(self.said)
        return f"--- dialer ({status}) said:\n{said}\n--- its stderr:\n" + tail(
            self.err.read_text(errors="replace"), 6000
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


@pytest.fixture(scope="module")
def sdk_python() -> Path:
    return find_sdk_python()


@pytest.fixture
def network(sdk_python: Path, tmp_path: Path) -> Iterator[tuple[Network, RouterProcess]]:
    workdir = tmp_path / "sdk"
    workdir.mkdir()
    with Server(tmp_path / "home", password=PASSWORD, unset=["TRELLIS_*"], own_group=True) as server:
        server.up()
        net = Network(server, server.login(), workdir, sdk_python, "")
        router = RouterProcess(net, "router-offline", tmp_path / "router", roleAttributes=["public"])
        router.env["TRELLIS_ROUTER_OFFLINE_GRACE"] = str(GRACE_SECONDS)
        net.router_id = router.id
        for path, body in (
            (
                "/edge-router-policies",
                {
                    "name": "all-public",
                    "semantic": "AnyOf",
                    "identityRoles": ["#all"],
                    "edgeRouterRoles": ["#public"],
                },
            ),
            (
                "/service-edge-router-policies",
                {
                    "name": "all-all",
                    "semantic": "AnyOf",
                    "serviceRoles": ["#all"],
                    "edgeRouterRoles": ["#all"],
                },
            ),
        ):
            net.call("POST", path, 201, path, json=body)
        router.start()
        try:
            wait_for(lambda: net.router().get("isOnline"), ONLINE_TIMEOUT, "the router comes online")
            net.enroll_sdks()
            net.echo_services({"held": False, "again": False})
            yield net, router
        finally:
            router.stop()


def logged(router: RouterProcess, words: str) -> bool:
    return words in router.text()


def test_traffic_survives_the_controller_for_the_grace_and_established_connections_beyond(
    network: tuple[Network, RouterProcess],
) -> None:
    net, router = network
    held_binder = Binder(net, "held", connections=1)
    again_binder = Binder(net, "again", connections=3)
    dialer: Dialer | None = None

    def explain() -> str:
        parts = [dialer.explain() if dialer is not None else "", router.log_tail()]
        return "\n".join(
            [*parts, net.explain(held_binder.out, held_binder.err, again_binder.out, again_binder.err)]
        )

    try:
        bound(net, held_binder, "held")
        bound(net, again_binder, "again")
        dialer = Dialer(net)
        assert dialer.expect("LOADED") == "LOADED", explain()

        assert dialer.ask("open a held", "OPEN") == "OPEN a", explain()
        assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()
        # the controller grants a Dial of "again": the SDK keeps its session, the router the grant
        assert dialer.ask(f"dial again {SIZE}", "ECHO") == f"ECHO {SIZE} {SIZE} 1", explain()

        net.server.kill()
        wait_for(lambda: logged(router, OFFLINE), 30, "the router sees the controller gone")

        # 1. the established connection flows both ways (the Binder echoes what it is sent)
        for _ in range(3):
            assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()

        # 2. within the grace, the router serves a Dial it was granted before, alone
        assert dialer.ask(f"dial again {SIZE}", "ECHO") == f"ECHO {SIZE} {SIZE} 1", explain()
        assert logged(router, SERVED_ALONE), explain()
        assert not logged(router, GRACE_OVER), "the Dial came after the grace: " + explain()

        # 3. past the grace: the held connection flows on, a new Dial is refused as OpenZiti does
        wait_for(lambda: logged(router, GRACE_OVER), GRACE_SECONDS + 60, "the router's grace ends")
        for _ in range(2):
            assert dialer.ask(f"send a {SIZE}", "SENT") == f"SENT a {SIZE} {SIZE} 1", explain()
        assert dialer.ask("close a", "CLOSED") == f"CLOSED a {SIZE * 6}", explain()
        # (last: after a refused connect, the SDK 0.29.3 wrapper's bridge closes a file descriptor
        # that is not the refused socket's, and the driver's next use of a socket fails: EBADF)
        answer = dialer.ask(f"dial again {SIZE}", "DIAL_FAILED")
        assert answer.startswith("DIAL_FAILED"), explain()
        wait_for(lambda: logged(router, f"refused: {NO_CONTROLLER}"), 30, "the router logs its refusal")
        assert "Traceback" not in router.text(), explain()
    finally:
        if dialer is not None:
            dialer.stop()
        held_binder.stop()
        again_binder.stop()
