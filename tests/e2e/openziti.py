"""OpenZiti's own controller (``ziti edge quickstart``, v1.6.0) on free loopback ports: the oracle.

The differential tests (``tests/differential``) and ``python -m bench peer`` drive it beside a
Trellis server with the same requests. :class:`OpenZiti` runs the ``ziti`` binary of
:mod:`tests.e2e.ziti_cli` as ``ziti edge quickstart --home <dir> --ctrl-address 127.0.0.1
--ctrl-port <free> --router-address 127.0.0.1 --router-port <free>`` (a controller and its
edge router in one process, with a generated PKI, an admin ``admin`` with the password given,
and the quickstart's two policies), with ``HOME`` and ``ZITI_CONFIG_DIR`` in its own directory so
nothing leaks to or from the machine's user. It is ready when ``GET /edge/client/v1/version``
answers 200 over TLS verified against the quickstart's root CA, and when its router is online
(``wait_router``). ``stop`` ends it with SIGINT, then SIGKILL.

The process's output goes to ``<dir>/quickstart.log``; :meth:`OpenZiti.log_tail` returns its end
for failure messages.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import requests

from tests.e2e.server import HOST, MGMT, end_process, free_port, new_session, tail
from tests.e2e.ziti_cli import clean_env, ensure_ziti

START_TIMEOUT = 180.0
STOP_TIMEOUT = 20.0
ADMIN = "admin"


def quickstart_argv(
    binary: Path, home: Path, port: int, router_port: int, password: str, *, router: bool = True
) -> list[str]:
    """``ziti edge quickstart`` on 127.0.0.1: controller on ``port``, router on ``router_port``
    (none without ``router``), the admin ``admin`` with ``password``, everything in ``home``."""
    argv = [
        str(binary),
        "edge",
        "quickstart",
        "--home",
        str(home),
        "--ctrl-address",
        HOST,
        "--ctrl-port",
        str(port),
        "--router-address",
        HOST,
        "--router-port",
        str(router_port),
        "--username",
        ADMIN,
        "--password",
        password,
    ]
    return argv if router else [*argv, "--no-router"]


def ziti_env(user: Path) -> dict[str, str]:
    """The environment of a ``ziti`` process: ours without Go's and ziti's variables, with a home
    and config directory of its own in ``user`` (nothing read from or left in the machine's user)."""
    env = clean_env(HOME=str(user), ZITI_CONFIG_DIR=str(user / "ziti"))
    for name in [k for k in env if k.startswith("ZITI_") and k != "ZITI_CONFIG_DIR"]:
        del env[name]
    return env


class OpenZiti:
    """``ziti edge quickstart`` in ``directory`` (created), on free ports of 127.0.0.1."""

    def __init__(self, directory: Path, *, password: str = "openziti-admin-1", router: bool = True) -> None:
        self.directory = directory
        self.home = directory / "home"
        self.password = password
        self.router = router
        self.port = free_port()
        self.router_port = free_port()
        self.log = directory / "quickstart.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = new_session()

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def ca(self) -> str:
        """The quickstart's root CA: the controller's and router's chains end there."""
        return str(self.home / "pki" / "root-ca" / "certs" / "root-ca.cert")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "OpenZiti is not running"
        return self.proc.pid

    def start(self) -> Self:
        binary = ensure_ziti()
        self.directory.mkdir(parents=True, exist_ok=True)
        user = self.directory / "user"
        user.mkdir(exist_ok=True)
        argv = quickstart_argv(
            binary, self.home, self.port, self.router_port, self.password, router=self.router
        )
        env = ziti_env(user)
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ziti edge quickstart exited {self.proc.returncode}\n{self.log_tail()}")
            if Path(self.ca).exists():
                try:
                    answer = self.http.get(self.url + "/edge/client/v1/version", verify=self.ca, timeout=2)
                    if answer.status_code == 200:
                        return self
                except requests.RequestException:
                    pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(
            f"ziti edge quickstart did not answer within {START_TIMEOUT:.0f} s\n{self.log_tail()}"
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        end_process(proc, signal.SIGINT, STOP_TIMEOUT)
        with contextlib.suppress(ProcessLookupError):  # the quickstart's helpers share its session
            os.killpg(proc.pid, signal.SIGKILL)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        self.http.close()

    def log_tail(self, limit: int = 6000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError as exc:
            text = f"(no quickstart log: {exc})"
        return f"--- quickstart log {self.log}:\n{tail(text, limit)}"

    # -- clients -------------------------------------------------------------------------------

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> requests.Response:
        headers = {"zt-session": token} if token else {}
        headers.update(kwargs.pop("headers", None) or {})
        kwargs.setdefault("verify", self.ca)
        kwargs.setdefault("timeout", 30)
        return self.http.request(method, self.url + path, headers=headers, **kwargs)

    def login(self) -> str:
        answer = self.call(
            "POST",
            f"{MGMT}/authenticate",
            params={"method": "password"},
            json={"username": ADMIN, "password": self.password},
        )
        if answer.status_code != 200:
            raise RuntimeError(f"OpenZiti admin login: {answer.status_code} {answer.text[:500]}")
        return str(answer.json()["data"]["token"])

    def wait_router(self, token: str, timeout: float = 120.0) -> dict[str, Any]:
        """The quickstart's edge router, once it is online."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            answer = self.call("GET", f"{MGMT}/edge-routers", token)
            if answer.status_code == 200:
                last = answer.json()["data"]
                online = [r for r in last if r.get("isOnline")]
                if online:
                    return dict(online[0])
            time.sleep(0.5)
        raise RuntimeError(
            f"the quickstart's router was not online within {timeout:.0f} s: {last}\n{self.log_tail()}"
        )
