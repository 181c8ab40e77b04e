"""``trellis init`` + ``trellis serve`` as real processes: TLS, login, create, restart, read."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.e2e.server import SAN, Server

pytestmark = pytest.mark.e2e


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


def test_ctrl_c_stops_serve_quietly(tmp_path: Path) -> None:
    """Ctrl-C signals the whole process group: the worker hears SIGINT from the terminal and then
    SIGQUIT from the master while it closes. Each stop ends with no traceback in the log (before,
    half of them printed one from the closed signal wake-up socket)."""
    with Server(tmp_path / "home", own_group=True) as server:
        server.init()
        for _ in range(4):
            server.start()
            proc, server.proc = server.proc, None
            assert proc is not None
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=30) == 0
        log = server.log.read_text(errors="replace")
    assert log.count("Shutting down: Master") == 4, log
    assert "Traceback" not in log, log
    assert "Exception ignored" not in log, log
