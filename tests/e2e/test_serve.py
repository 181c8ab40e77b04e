"""``trellis init`` + ``trellis serve`` as real processes: TLS, login, create, restart, read."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.e2e.server import SAN, Server

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(75)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "home", env=SAN) as srv:
        yield srv


def test_init_serve_login_create_restart_read(server: Server) -> None:
    out = server.init().stdout
    assert "created admin 'admin'" in out
    assert "already initialised" in server.init().stdout  # idempotent
    server.start()

    version = server.call("GET", "/version")
    assert version.headers["server"].startswith("ziti-controller/")
    assert version.json()["data"]["apiVersions"]["edge-management"]["v1"]["path"] == "/edge/management/v1"

    token = server.login()
    created = server.call(
        "POST", "/edge/management/v1/services", token, json={"name": "e2e-svc", "encryptionRequired": True}
    )
    assert created.status_code == 201, created.text
    service_id = created.json()["data"]["id"]
    listed = server.call("GET", "/edge/management/v1/services", token, params={"filter": 'name = "e2e-svc"'})
    assert listed.json()["meta"]["pagination"]["totalCount"] == 1

    server.stop()
    server.start()
    read = server.call("GET", f"/edge/management/v1/services/{service_id}", token)
    assert read.status_code == 200, read.text  # the API session survived the restart too
    assert read.json()["data"]["name"] == "e2e-svc"


def test_tls_is_verified_against_the_written_bundle(server: Server) -> None:
    server.init()
    server.start()
    with pytest.raises(requests.exceptions.SSLError):
        server.http.get(server.url + "/version", verify=True, timeout=5)
    assert server.call("GET", "/version").status_code == 200
    unprefixed = server.call(
        "POST",
        "/authenticate",
        params={"method": "password"},
        json={"username": "admin", "password": "nope!"},
    )
    assert unprefixed.status_code == 401
    assert unprefixed.json()["error"]["code"] == "INVALID_AUTH"


def test_init_refuses_an_admin_password_that_could_not_log_in(tmp_path: Path) -> None:
    done = Server(tmp_path / "home", password="abc").init(check=False)
    assert done.returncode != 0
    assert "5 to 100 characters" in done.stderr
    assert not (tmp_path / "home").exists()


#: Ctrl-C stops in a row: a traceback printed by every other stop shows in one of three.
STOPS = 3


def test_ctrl_c_stops_serve_quietly(tmp_path: Path) -> None:
    """Ctrl-C signals the whole process group: the worker hears SIGINT from the terminal and then
    SIGQUIT from the master while it closes. Each stop ends with no traceback in the log (before,
    half of them printed one from the closed signal wake-up socket)."""
    with Server(tmp_path / "home", own_group=True) as server:
        server.init()
        for _ in range(STOPS):
            server.start()
            proc, server.proc = server.proc, None
            assert proc is not None
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        log = server.log.read_text(errors="replace")
    assert log.count("Shutting down: Master") == STOPS, log
    assert "Traceback" not in log, log
    assert "Exception ignored" not in log, log


#: What the embedded router and serve log when one is started before the other can take it, or
#: is started again while serve stops, or when a second stop signal finds the router closing its
#: loop: false alarms a quiet start and stop never show.
FALSE_ALARMS = (
    "cannot connect",
    "connecting again",
    "exited with status",
    "starting it again",
    "no controller reachable",
    "Traceback",
    "Exception ignored",
)


def test_the_embedded_router_starts_and_stops_quietly(tmp_path: Path) -> None:
    """serve starts its router with itself, and the router connects once the control listener
    accepts, so no early attempt is logged as a failure; and serve stops the router first,
    whichever way it is stopped (Ctrl-C, which reaches the whole process group, or SIGINT or
    SIGTERM to serve alone), with no restart. Read from the real server's output."""
    stops = {
        "Ctrl-C": lambda pid: os.killpg(pid, signal.SIGINT),
        "SIGINT": lambda pid: os.kill(pid, signal.SIGINT),
        "SIGTERM": lambda pid: os.kill(pid, signal.SIGTERM),
    }
    with Server(
        tmp_path / "home", own_group=True, env={"TRELLIS_ROUTER": "on"}, unset=["TRELLIS_*"]
    ) as server:
        server.init()
        for number, (how, stop) in enumerate(stops.items(), start=1):
            server.start()
            proc, server.proc = server.proc, None
            assert proc is not None
            _wait_for_log(server, ": connected as router trellis-router", number)
            stop(proc.pid)
            assert proc.wait(timeout=60) == 0, how
            log = server.log.read_text(errors="replace")
            assert log.count("router trellis-router stopped") == number, f"{how}\n{log}"
            alarms = [line for line in log.splitlines() if any(alarm in line for alarm in FALSE_ALARMS)]
            assert not alarms, f"{how}\n" + "\n".join(alarms)
        assert log.count("Shutting down: Master") == len(stops), log


def _wait_for_log(server: Server, text: str, count: int, timeout: float = 60.0) -> None:
    """Until the server's log holds ``text`` ``count`` times (generous: a loaded machine)."""
    deadline = time.monotonic() + timeout
    while server.log.read_text(errors="replace").count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} not logged {count} times\n{server.log_tail()}"
        time.sleep(0.2)
