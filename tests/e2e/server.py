"""A real ``trellis init`` + ``trellis serve`` on a free loopback port, for the e2e tests.

``Server(home)`` only describes the server; ``init()`` and ``start()`` run the CLI as
subprocesses (``python -m controller.cli``), ``stop()`` ends ``serve`` with SIGINT (then SIGKILL after
20 s). Used as a context manager it is stopped on exit; :func:`running` is the body of a fixture
that yields a started server::

    @pytest.fixture(scope="module")
    def server(tmp_path_factory):
        yield from running(tmp_path_factory.mktemp("x") / "home")

HTTP goes through ``requests`` sessions with ``trust_env = False`` (these machines set
``REQUESTS_CA_BUNDLE``, docs/architecture.md §9) that verify against ``<home>/pki/ca-bundle.pem``.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import requests

ROOT = Path(__file__).resolve().parents[2]
TRELLIS = [sys.executable, "-m", "controller.cli"]
HOST = "127.0.0.1"
PASSWORD = "e2e-admin-password"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
#: ``env=`` for a server whose TLS certificate also names a host (besides the loopback address).
SAN = {"TRELLIS_SAN": "trellis.e2e.test"}

INIT_TIMEOUT = 120.0
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
#: A client certificate and its key, as files: what ``requests`` takes as ``cert=``.
CertPair = tuple[str, str]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"[... {len(text) - limit} chars cut ...]\n" + text[-limit:]


def end_process(proc: subprocess.Popen[Any], sig: signal.Signals, timeout: float) -> None:
    """Send ``sig`` to ``proc`` if it still runs, wait up to ``timeout`` s, then kill it."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def new_session(verify: str | bool = True, cert: CertPair | None = None) -> requests.Session:
    """A ``requests`` session that ignores the proxy/CA variables of the environment."""
    http = requests.Session()
    http.trust_env = False  # these machines set REQUESTS_CA_BUNDLE (docs/architecture.md §9)
    http.verify = verify
    http.cert = cert
    return http


class Server:
    """``trellis init`` + ``trellis serve`` on 127.0.0.1:<free port>.

    The environment is ours less the variables matching an ``unset`` pattern (fnmatch, e.g.
    ``"TRELLIS_*"``), plus ``TRELLIS_HOME``, ``TRELLIS_BIND``, ``TRELLIS_CTRL_BIND``,
    ``TRELLIS_ROUTER=off`` and ``TRELLIS_ADMIN_PASSWORD`` (``password``), then ``env`` (a value of None removes the variable). ``init`` and ``start``
    take more variables for that one run. The log of ``serve`` goes to ``log`` (default: beside
    ``home``, so that the home holds only what trellis writes there). With ``own_group``, ``serve``
    runs in a session (and so a process group) of its own, which :meth:`kill` ends at once.
    """

    def __init__(
        self,
        home: Path,
        *,
        password: str = PASSWORD,
        env: Mapping[str, str | None] | None = None,
        unset: Iterable[str] = (),
        log: Path | None = None,
        umask: int = -1,
        own_group: bool = False,
    ) -> None:
        self.home = home
        self.own_group = own_group
        self.password = password
        self.port = free_port()
        self.ctrl_port = free_port()
        self.log = log if log is not None else home.parent / "serve.log"
        self.umask = umask  # for the processes started here; -1: ours
        patterns = tuple(unset)
        inherited = {
            k: v for k, v in os.environ.items() if not any(fnmatch.fnmatchcase(k, p) for p in patterns)
        }
        self.env = _merged(
            inherited,
            {
                "TRELLIS_HOME": str(home),
                "TRELLIS_BIND": f"{HOST}:{self.port}",
                "TRELLIS_CTRL_BIND": f"{HOST}:{self.ctrl_port}",
                # The embedded router is for the data-plane tests, which turn it on.
                "TRELLIS_ROUTER": "off",
            },
            {"TRELLIS_ADMIN_PASSWORD": password},
            env or {},
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.http = new_session()

    # -- where ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def ca(self) -> str:
        """The CA bundle ``init`` wrote: what clients verify the server against."""
        return str(self.pki / "ca-bundle.pem")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the server is not running"
        return self.proc.pid

    # -- life ----------------------------------------------------------------------------------

    def init(self, *, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        """``trellis init``; with ``check`` a failure raises (with its output)."""
        done = subprocess.run(
            [*TRELLIS, "init"],
            env={**self.env, **env},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=INIT_TIMEOUT,
            umask=self.umask,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"trellis init exited {done.returncode}\n{done.stdout}{tail(done.stderr, 6000)}"
            )
        return done

    def start(self, **env: str) -> Self:
        """``trellis serve``, once ``GET /version`` answers 200."""
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [*TRELLIS, "serve"],
                env={**self.env, **env},
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                umask=self.umask,
                start_new_session=self.own_group,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trellis serve exited {self.proc.returncode}\n{self.log_tail()}")
            try:
                if self.http.get(self.url + "/version", verify=self.ca, timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"trellis serve did not answer within {START_TIMEOUT:.0f} s\n{self.log_tail()}")

    def up(self) -> Self:
        """``init`` (checked) and ``start``."""
        self.init()
        return self.start()

    def stop(self) -> None:
        if self.proc is not None:
            end_process(self.proc, signal.SIGINT, STOP_TIMEOUT)
        self.proc = None

    def kill(self) -> None:
        """``kill -9`` the whole process group (``serve`` and its gunicorn worker), as a crash
        would, and wait until none of its processes runs (zombies hold no file, so the database
        is free for the next ``start``). Needs ``own_group``."""
        assert self.own_group, "kill() ends a process group: construct the server with own_group=True"
        proc, self.proc = self.proc, None
        if proc is None:
            return
        os.killpg(proc.pid, signal.SIGKILL)  # not yet waited for: the group exists
        proc.wait(timeout=STOP_TIMEOUT)
        deadline = time.monotonic() + STOP_TIMEOUT
        while group_alive(proc.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"process group {proc.pid} still runs {STOP_TIMEOUT:.0f} s after SIGKILL")
            time.sleep(0.05)

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
            text = f"(no server log: {exc})"
        return f"--- server log {self.log}:\n{tail(text, limit)}"

    # -- clients -------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> requests.Response:
        """One request on the kept-alive session; ``token`` goes in ``zt-session``."""
        sent = {"zt-session": token} if token else {}
        kwargs.setdefault("verify", self.ca)
        kwargs.setdefault("timeout", 10)
        return self.http.request(method, self.url + path, headers={**sent, **(headers or {})}, **kwargs)

    def expect(self, response: requests.Response, status: int, what: str) -> dict[str, Any]:
        """Assert ``response`` has ``status`` (the message has the server's log); its JSON."""
        assert response.status_code == status, (
            f"{what}: {response.request.method} {response.url} -> {response.status_code}, "
            f"expected {status}\n{response.text[:2000]}\n{self.log_tail()}"
        )
        body: dict[str, Any] = response.json()
        return body

    def login(self, password: str | None = None) -> str:
        """The admin's password login (asserted to succeed): its API session token."""
        result = self.call(
            "POST",
            f"{MGMT}/authenticate",
            params={"method": "password"},
            json={"username": "admin", "password": self.password if password is None else password},
        )
        self.expect(result, 200, "admin password login")
        return str(result.headers["zt-session"])

    def session(self, cert: CertPair | None = None) -> requests.Session:
        """A new session (new connections) that verifies the server, presenting ``cert`` if given."""
        return new_session(self.ca, cert)

    def tls_context(
        self, cert: CertPair | None = None, maximum_version: ssl.TLSVersion | None = None
    ) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if maximum_version is not None:
            ctx.maximum_version = maximum_version
        if cert is not None:
            ctx.load_cert_chain(*cert)
        return ctx

    def tls(self, timeout: float = 5.0, context: ssl.SSLContext | None = None) -> ssl.SSLSocket:
        """A raw TLS connection (``context``: :meth:`tls_context` unless given)."""
        raw = socket.create_connection((HOST, self.port), timeout=timeout)
        try:
            return (context or self.tls_context()).wrap_socket(raw, server_hostname=HOST)
        except BaseException:
            raw.close()
            raise


def running(home: Path, **options: Any) -> Iterator[Server]:
    """A fixture's body: ``yield from running(home, ...)`` yields a started server, then stops it."""
    with Server(home, **options) as server:
        yield server.up()


def children(pid: int) -> list[tuple[int, str]]:
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


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies do not count; Linux ``/proc``)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it ended meanwhile
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after it.
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _merged(*layers: Mapping[str, str | None]) -> dict[str, str]:
    env: dict[str, str] = {}
    for layer in layers:
        for name, value in layer.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
    return env
