"""``trellis init`` + ``trellis serve`` as real processes: TLS, login, create, restart, read."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-admin-password"
TRELLIS = [sys.executable, "-m", "api.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = _free_port()
        self.env = dict(
            os.environ,
            TRELLIS_HOME=str(home),
            TRELLIS_BIND=f"127.0.0.1:{self.port}",
            TRELLIS_ADMIN_PASSWORD=PASSWORD,
            TRELLIS_SAN="trellis.e2e.test",
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = requests.Session()
        self.http.trust_env = False  # these machines set REQUESTS_CA_BUNDLE (design.md §7)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> str:
        return str(self.home / "pki" / "ca-bundle.pem")

    def init(self) -> str:
        done = subprocess.run(
            [*TRELLIS, "init"], env=self.env, cwd=ROOT, capture_output=True, text=True, check=True
        )
        return done.stdout

    def start(self) -> None:
        log = self.home / "serve.log"
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*TRELLIS, "serve"], env=self.env, cwd=ROOT, stdout=sink, stderr=sink
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.http.get(self.url + "/version", verify=self.ca, timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                raise RuntimeError(log.read_text())
        raise RuntimeError("server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> requests.Response:
        headers = {"zt-session": token} if token else {}
        return self.http.request(
            method, self.url + path, headers=headers, verify=self.ca, timeout=10, **kwargs
        )

    def login(self) -> str:
        result = self.call(
            "POST",
            "/edge/management/v1/authenticate",
            params={"method": "password"},
            json={"username": "admin", "password": PASSWORD},
        )
        assert result.status_code == 200, result.text
        return str(result.headers["zt-session"])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "home")
    yield srv
    srv.stop()


def test_init_serve_login_create_restart_read(server: Server) -> None:
    out = server.init()
    assert "created admin 'admin'" in out
    assert "already initialised" in server.init()  # idempotent
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
    env = dict(os.environ, TRELLIS_HOME=str(tmp_path / "home"), TRELLIS_ADMIN_PASSWORD="abc")
    done = subprocess.run([*TRELLIS, "init"], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode != 0
    assert "5 to 100 characters" in done.stderr
    assert not (tmp_path / "home").exists()
