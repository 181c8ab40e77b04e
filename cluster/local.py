"""A local network to try failover by hand: three controllers on one PostgreSQL database, two edge
routers connected to every one of them (``make cluster``, ``python -m cluster``).

What it does, in order:

* the database: ``TRELLIS_DATABASE_URL`` when set (an external one, kept between runs), else a
  PostgreSQL server of its own (:class:`tests.postgres.PostgresServer`: a temporary directory, a
  unix socket), made anew each run and stopped last;
* three controller homes in the directory (``--dir``, default ``.cluster``): ``ctrl-1`` on
  127.0.0.1, ``ctrl-2`` on 127.0.0.2, ``ctrl-3`` on 127.0.0.3, each with the API on ``--api-port``
  (1280) and the control listener on ``--ctrl-port`` (6262) of its own address. Controller 1's
  ``trellis init`` makes the network's CA; 2 and 3 join it as an operator adds a controller: its
  ``pki/`` copied without the server certificate and key, ``TRELLIS_SAN`` naming their address,
  then ``trellis init``, which issues each its own server certificate and controller id. No
  embedded routers (``TRELLIS_ROUTER=off``); each ``trellis serve`` runs one worker
  (``TRELLIS_WORKERS=1``);
* as the admin (``TRELLIS_ADMIN_PASSWORD``, else a generated password, printed once and kept in
  ``<dir>/admin-password``, mode 0600, for the next run): once controller 1 lists the three, two
  edge routers ``cluster-router-1`` and ``cluster-router-2`` (``#public``, tunneler enabled) and
  the policies ``ziti edge quickstart`` makes when absent, each router enrolled with ``trellis router
  enroll`` into ``<dir>/router-N`` (edge listener on ``--edge-port`` + N - 1, or a free port) and
  run with ``trellis router run``, connected to the three control listeners;
* a table of what runs, then it waits for Ctrl-C or SIGTERM and stops the routers, then the
  controllers, then its PostgreSQL server. A process that ends on its own is reported in one line
  and not started again. Every process's log is in ``<dir>/logs``.

A second run on the same directory keeps the homes and the routers when the database is external
and the same as before; otherwise it starts over (the homes, routers and logs it made are removed,
nothing else in the directory). Its processes end with it even when it is killed (Linux's
``PR_SET_PDEATHSIG``); a PostgreSQL server left by a killed run is stopped by the next.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

#: How many controllers and routers, and the router names.
CONTROLLERS = 3
ROUTERS = 2
ROUTER_PREFIX = "cluster-router-"
API_PORT, CTRL_PORT = 1280, 6262
MGMT = "/edge/management/v1"
#: Seconds: a controller's ``init``, its first answer to ``/version``, the network's controllers
#: listed and a router online (generous: a loaded 2-core machine), and a process's stop.
INIT_SECONDS = 120.0
START_SECONDS = 120.0
SETTLE_SECONDS = 90.0
STOP_SECONDS = 20.0
#: Kept in the directory: the generated admin password (0600), which database the homes belong to,
#: the directory of the PostgreSQL server a run started.
PASSWORD_FILE = "admin-password"
DATABASE_FILE = "database"
POSTGRES_FILE = "postgres.dir"
LOGS = "logs"
#: Inherited TRELLIS_* variables the processes keep (the rest would change what is run here).
KEPT_SETTINGS = ("TRELLIS_LOG_LEVEL", "TRELLIS_LOG_FORMAT")


class ClusterError(Exception):
    """The cluster cannot start; the message says why in one line (and where the log is)."""


def controller_host(number: int) -> str:
    return f"127.0.0.{number}"


@dataclass(frozen=True)
class Options:
    directory: Path = Path(".cluster")
    api_port: int = API_PORT
    ctrl_port: int = CTRL_PORT
    #: Router N's edge listener is on ``edge_port + N - 1``; 0: free ports.
    edge_port: int = 0
    #: An external database (kept between runs); "": a PostgreSQL server of the run's own.
    database_url: str = ""
    #: The admin's password; "": the one kept in the directory, else generated.
    password: str = ""


@dataclass
class Process:
    """A process the cluster started, with its log."""

    what: str
    log: Path
    process: subprocess.Popen[bytes] | None = None
    reported: bool = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 12) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        except OSError:
            return f"(no log at {self.log})"
        return "\n".join(f"    {line}" for line in text)


@dataclass
class Controller(Process):
    number: int = 0
    home: Path = Path()
    host: str = ""
    api_port: int = API_PORT
    ctrl_port: int = CTRL_PORT

    @property
    def api(self) -> str:
        return f"{self.host}:{self.api_port}"

    @property
    def url(self) -> str:
        return f"https://{self.api}"

    @property
    def ctrl(self) -> str:
        return f"{self.host}:{self.ctrl_port}"


@dataclass
class Router(Process):
    name: str = ""
    home: Path = Path()
    id: str = ""
    edge: str = ""


class Api:
    """The management API of one controller over HTTPS, verified against the network's CA."""

    def __init__(self, controller: Controller, ca: Path, token: str = "") -> None:
        self.controller = controller
        self.context = ssl.create_default_context(cafile=str(ca))
        self.token = token

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = 10.0
    ) -> tuple[int, dict[str, Any]]:
        conn = http.client.HTTPSConnection(
            self.controller.host, self.controller.api_port, context=self.context, timeout=timeout
        )
        headers = {"Accept": "application/json"}
        if self.token:
            headers["zt-session"] = self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            answer = json.loads(raw) if raw else {}
        except ValueError:
            answer = {}
        return response.status, answer if isinstance(answer, dict) else {}

    def expect(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """The answer's JSON; :class:`ClusterError` unless 2xx."""
        try:
            status, answer = self.call(method, path, body)
        except (OSError, http.client.HTTPException) as ex:
            raise ClusterError(f"{method} {self.controller.url}{path}: {ex}") from None
        if not 200 <= status < 300:
            error = answer.get("error", {}) if isinstance(answer.get("error"), dict) else {}
            raise ClusterError(
                f"{method} {self.controller.url}{path}: HTTP {status} {error.get('code', '')} "
                f"{error.get('message', '')}".rstrip()
            )
        return answer

    def login(self, password: str) -> str:
        answer = self.expect(
            "POST", f"{MGMT}/authenticate?method=password", {"username": "admin", "password": password}
        )
        self.token = str(answer["data"]["token"])
        return self.token

    def listing(self, path: str, filter_: str = "") -> list[dict[str, Any]]:
        query = f"?limit=500&filter={urllib.parse.quote(filter_)}" if filter_ else "?limit=500"
        data = self.expect("GET", f"{MGMT}{path}{query}")["data"]
        return list(data)

    def answers(self) -> bool:
        """Whether ``GET /version`` answers 200 now."""
        try:
            return self.call("GET", "/version", timeout=3)[0] == 200
        except (OSError, http.client.HTTPException):
            return False


@dataclass
class Cluster:
    """The processes of one local network: :meth:`start`, :meth:`poll`, :meth:`stop`."""

    options: Options = field(default_factory=Options)
    out: TextIO = sys.stdout
    controllers: list[Controller] = field(default_factory=list)
    routers: list[Router] = field(default_factory=list)
    postgres: Process | None = None
    database_url: str = ""
    password: str = ""
    generated: bool = False
    _server: Any = None

    def __post_init__(self) -> None:
        self.directory = self.options.directory.absolute()
        self.logs = self.directory / LOGS
        self.controllers = [
            Controller(
                what=f"controller {n}",
                log=self.logs / f"ctrl-{n}.log",
                number=n,
                home=self.directory / f"ctrl-{n}",
                host=controller_host(n),
                api_port=self.options.api_port,
                ctrl_port=self.options.ctrl_port,
            )
            for n in range(1, CONTROLLERS + 1)
        ]

    # -- where ---------------------------------------------------------------------------------

    @property
    def ca_bundle(self) -> Path:
        return self.controllers[0].home / "pki" / "ca-bundle.pem"

    def api(self, controller: Controller | None = None) -> Api:
        """A logged-in client of ``controller`` (default: the first that runs)."""
        if controller is None:
            controller = next((c for c in self.controllers if c.running), self.controllers[0])
        api = Api(controller, self.ca_bundle)
        api.login(self.password)
        return api

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Everything, in order; :class:`ClusterError` when something cannot start (what started
        is left for :meth:`stop`)."""
        check_loopback([c.host for c in self.controllers])
        self._prepare()
        env = self._environment()
        self._password()
        for controller in self.controllers:
            self._init(controller, env)
            self._serve(controller, env)
        for controller in self.controllers:
            self._wait_answering(controller)
        api = self.api(self.controllers[0])
        self._wait_listed(api)
        self._policies(api)
        for number in range(1, ROUTERS + 1):
            self._router(api, number)
        self.wait_online(api, self.routers)

    def _prepare(self) -> None:
        """The directory; what a previous run left that this one cannot keep is removed."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        _stop_leftover_postgres(self.directory / POSTGRES_FILE)
        external = self.options.database_url
        mark = self.directory / DATABASE_FILE
        fingerprint = "external " + hashlib.sha256(external.encode()).hexdigest() if external else "own"
        before = mark.read_text().strip() if mark.is_file() else ""
        homes = any(c.home.exists() for c in self.controllers)
        if external and before == fingerprint and homes:
            self._say(f"reusing the homes and routers in {self.directory} (the same external database)")
        else:
            if homes:
                why = "a database of its own each run" if not external else "another database than before"
                self._say(f"starting over in {self.directory}: {why}; its homes and routers are removed")
            for name in sorted(os.listdir(self.directory)):
                if name.startswith(("ctrl-", "router-")) or name in (LOGS, PASSWORD_FILE):
                    path = self.directory / name
                    if path.is_dir() and not path.is_symlink():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        self.logs.mkdir(mode=0o700, exist_ok=True)
        if external:
            self.database_url = external
            self._say("database: TRELLIS_DATABASE_URL (external, kept)")
        else:
            self.database_url = self._own_database()
        mark.write_text(fingerprint + "\n")

    def _own_database(self) -> str:
        import psycopg

        from tests.postgres import PostgresServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise ClusterError(
                "PostgreSQL is not installed (no initdb and postgres from pg_config --bindir, "
                "/usr/lib/postgresql/*/bin or PATH); install it or set TRELLIS_DATABASE_URL"
            )
        server = PostgresServer(bindir)
        self._server = server
        (self.directory / POSTGRES_FILE).write_text(f"{server.directory}\n")
        server.logfile = self.logs / "postgres.log"  # opened by start(), here rather than in /tmp
        self.postgres = Process(what="PostgreSQL", log=server.logfile)
        try:
            server.start()
        except RuntimeError as ex:
            raise ClusterError(str(ex)) from None
        self.postgres.process = server.process
        with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE trellis TEMPLATE template0 ENCODING 'UTF8'")
        self._say(f"database: a PostgreSQL server of this run's own (socket in {server.directory})")
        return str(server.url("trellis"))

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_") or k in KEPT_SETTINGS}
        env["TRELLIS_DATABASE_URL"] = self.database_url
        env["TRELLIS_ROUTER"] = "off"
        env["TRELLIS_WORKERS"] = "1"
        return env

    def _password(self) -> None:
        kept = self.directory / PASSWORD_FILE
        if self.options.password:
            self.password = self.options.password
        elif kept.is_file():
            self.password = kept.read_text().strip()
        else:
            from pki.passwords import generate_password

            self.password = generate_password()
            self.generated = True
            fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as sink:
                sink.write(self.password + "\n")

    def _controller_env(self, controller: Controller, env: dict[str, str]) -> dict[str, str]:
        return {
            **env,
            "TRELLIS_HOME": str(controller.home),
            "TRELLIS_BIND": controller.api,
            "TRELLIS_CTRL_BIND": controller.ctrl,
            "TRELLIS_SAN": controller.host,
        }

    def _init(self, controller: Controller, env: dict[str, str]) -> None:
        """``trellis init``; a controller after the first joins its network (its CA files)."""
        if controller.number > 1 and not (controller.home / "pki").exists():
            from pki.authority import PkiPaths

            first = PkiPaths.in_directory(self.controllers[0].home / "pki")
            pki = controller.home / "pki"
            pki.mkdir(mode=0o700, parents=True)
            os.chmod(controller.home, 0o700)
            for path in first.all_files():
                if path not in (first.server_cert, first.server_key):
                    shutil.copy2(path, pki / path.name)
        with controller.log.open("ab") as log:
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "controller.cli", "init"],
                    env={**self._controller_env(controller, env), "TRELLIS_ADMIN_PASSWORD": self.password},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    timeout=INIT_SECONDS,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise ClusterError(
                    f"trellis init of {controller.what} took over {INIT_SECONDS:g} s (log: {controller.log})"
                ) from None
        if done.returncode != 0:
            raise ClusterError(
                f"trellis init of {controller.what} exited with status {done.returncode} "
                f"(log: {controller.log}):\n{controller.log_tail()}"
            )

    def _serve(self, controller: Controller, env: dict[str, str]) -> None:
        controller.process = _popen(
            [sys.executable, "-m", "controller.cli", "serve"],
            self._controller_env(controller, env),
            controller.log,
        )

    def _wait_answering(self, controller: Controller) -> None:
        api = Api(controller, self.ca_bundle)
        deadline = time.monotonic() + START_SECONDS
        while not api.answers():
            self._check_starting(controller)
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{controller.what} did not answer on {controller.url} within {START_SECONDS:g} s "
                    f"(log: {controller.log}):\n{controller.log_tail()}"
                )
            time.sleep(0.2)

    def _check_starting(self, process: Process) -> None:
        if process.process is not None and process.process.poll() is not None:
            process.reported = True
            raise ClusterError(
                f"{process.what} exited with status {process.process.returncode} while starting "
                f"(log: {process.log}):\n{process.log_tail()}"
            )

    def _wait_listed(self, api: Api) -> None:
        deadline = time.monotonic() + SETTLE_SECONDS
        # online ones: a database kept from an earlier run lists every member from the start
        while sum(1 for c in api.listing("/controllers") if c.get("isOnline")) < len(self.controllers):
            for controller in self.controllers:
                self._check_starting(controller)
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{api.controller.url} does not list the {len(self.controllers)} controllers online "
                    f"within {SETTLE_SECONDS:g} s"
                )
            time.sleep(0.2)

    def _policies(self, api: Api) -> None:
        """The quickstart's two policies (controller/embedded_router.py), when absent."""
        from controller.embedded_router import ERP_NAME, ROLE, SERP_NAME

        if not api.listing("/edge-router-policies", f'name = "{ERP_NAME}"'):
            api.expect(
                "POST",
                f"{MGMT}/edge-router-policies",
                {
                    "name": ERP_NAME,
                    "semantic": "AnyOf",
                    "identityRoles": ["#all"],
                    "edgeRouterRoles": [f"#{ROLE}"],
                },
            )
        if not api.listing("/service-edge-router-policies", f'name = "{SERP_NAME}"'):
            api.expect(
                "POST",
                f"{MGMT}/service-edge-router-policies",
                {
                    "name": SERP_NAME,
                    "semantic": "AnyOf",
                    "serviceRoles": ["#all"],
                    "edgeRouterRoles": ["#all"],
                },
            )

    def _router(self, api: Api, number: int) -> Router:
        """Router ``number``: kept if its home is enrolled and the network still has it, else
        (re)made and enrolled; then run."""
        from router import identity

        name = f"{ROUTER_PREFIX}{number}"
        home = self.directory / f"router-{number}"
        router = Router(what=f"router {name}", log=self.logs / f"router-{number}.log", name=name, home=home)
        if identity.is_enrolled(home):
            record = identity.load(home)
            if api.call("GET", f"{MGMT}/edge-routers/{record.id}")[0] == 200:
                router.id, router.edge = record.id, record.edge_url
            else:
                shutil.rmtree(home)
        if not router.id:
            if home.exists():
                shutil.rmtree(home)
            for existing in api.listing("/edge-routers", f'name = "{name}"'):
                api.expect("DELETE", f"{MGMT}/edge-routers/{existing['id']}")
            port = self.options.edge_port + number - 1 if self.options.edge_port else 0
            self.enroll(api, router, port)
        self.run_router(router)
        self.routers.append(router)
        return router

    def enroll(self, api: Api, router: Router, edge_port: int = 0) -> str:
        """Create the edge router ``router.name`` on ``api``'s controller and enroll it into its
        home with ``trellis router enroll``; the enrollment JWT."""
        from controller.embedded_router import ROLE
        from router import identity
        from router.enroll import free_port

        made = api.expect(
            "POST",
            f"{MGMT}/edge-routers",
            {"name": router.name, "roleAttributes": [ROLE], "isTunnelerEnabled": True},
        )
        router.id = str(made["data"]["id"])
        jwt = str(api.expect("GET", f"{MGMT}/edge-routers/{router.id}")["data"]["enrollmentJwt"])
        jwt_file = self.directory / f"{router.home.name}.jwt"
        fd = os.open(jwt_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as sink:
            sink.write(jwt)
        env = {
            **self._environment(),
            "TRELLIS_ROUTER_HOME": str(router.home),
            "TRELLIS_ROUTER_EDGE_BIND": f"127.0.0.1:{edge_port or free_port()}",
        }
        try:
            with router.log.open("ab") as log:
                done = subprocess.run(
                    [sys.executable, "-m", "controller.cli", "router", "enroll", str(jwt_file)],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    timeout=INIT_SECONDS,
                    check=False,
                )
        finally:
            jwt_file.unlink(missing_ok=True)  # one use only
        if done.returncode != 0:
            raise ClusterError(
                f"trellis router enroll of {router.name} exited with status {done.returncode} "
                f"(log: {router.log}):\n{router.log_tail()}"
            )
        router.edge = identity.load(router.home).edge_url
        return jwt

    def run_router(self, router: Router) -> None:
        """``trellis router run``, connected to every controller's control listener."""
        env = {
            **self._environment(),
            "TRELLIS_ROUTER_HOME": str(router.home),
            "TRELLIS_ROUTER_CTRL": ",".join(c.ctrl for c in self.controllers),
        }
        router.process = _popen([sys.executable, "-m", "controller.cli", "router", "run"], env, router.log)

    def add_router(self, name: str, number: int) -> tuple[Router, str]:
        """One more router, made and enrolled on a controller that runs, then run; it and its JWT."""
        api = self.api()
        router = Router(
            what=f"router {name}",
            log=self.logs / f"router-{number}.log",
            name=name,
            home=self.directory / f"router-{number}",
        )
        jwt = self.enroll(api, router)
        self.run_router(router)
        self.routers.append(router)
        return router, jwt

    def wait_online(self, api: Api, routers: list[Router], seconds: float = SETTLE_SECONDS) -> None:
        """Until ``api``'s controller shows every router of ``routers`` online; :class:`ClusterError`
        after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            online = {r["id"] for r in api.listing("/edge-routers") if r.get("isOnline")}
            if all(r.id in online for r in routers):
                return
            for router in routers:
                self._check_starting(router)
            if time.monotonic() > deadline:
                missing = ", ".join(r.name for r in routers if r.id not in online)
                raise ClusterError(f"{missing} not online on {api.controller.url} within {seconds:g} s")
            time.sleep(0.2)

    # -- while it runs -------------------------------------------------------------------------

    def processes(self) -> list[Process]:
        found: list[Process] = [*self.routers, *self.controllers]
        if self.postgres is not None:
            found.append(self.postgres)
        return found

    def poll(self) -> list[str]:
        """One line for each process that has ended since the last call (not started again)."""
        lines = []
        for process in self.processes():
            if process.process is None or process.reported or process.process.poll() is None:
                continue
            process.reported = True
            code = process.process.returncode
            status = f"signal {signal.Signals(-code).name}" if code < 0 else f"status {code}"
            lines.append(
                f"{process.what} (pid {process.pid}) ended ({status}); not restarted (log: {process.log})"
            )
        return lines

    def table(self) -> str:
        lines = [f"Trellis cluster in {self.directory} (logs of every process in {self.logs})", ""]
        lines.append(f"  {'controller':<12}{'API':<28}{'control':<20}pid")
        for c in self.controllers:
            lines.append(f"  {c.number:<12}{c.url:<28}{c.ctrl:<20}{c.pid}")
        lines.append("")
        lines.append(f"  {'router':<20}{'edge (SDKs)':<28}pid")
        for r in self.routers:
            lines.append(f"  {r.name:<20}{r.edge:<28}{r.pid}")
        lines.append("")
        if self.generated:
            lines.append(
                f"admin password: {self.password}  (generated; kept in {self.directory / PASSWORD_FILE})"
            )
        elif not self.options.password:
            lines.append(f"admin password: in {self.directory / PASSWORD_FILE}")
        lines.append(f"CA bundle: {self.ca_bundle}")
        second = self.controllers[1]
        lines += [
            "",
            f"Try failover: kill {self.controllers[0].pid} (controller 1; kill -9 -- -<pid> for a crash).",
            "The routers stay online through the other controllers, whose /controllers stop listing",
            "it within ~15 s. Ask one of them:",
            f"  ziti edge login {second.api} --ca {self.ca_bundle} -u admin -p <password>",
            "  ziti edge list edge-routers",
            f"  curl --cacert {self.ca_bundle} {second.url}{MGMT}/controllers -H 'zt-session: <token>'",
            "Ctrl-C stops it all: the routers, then the controllers"
            + (", then PostgreSQL." if self.postgres is not None else " (the database is left alone)."),
        ]
        return "\n".join(lines)

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """The routers, then the controllers (SIGINT, then SIGKILL after a while), then the
        PostgreSQL server this run started. Idempotent."""
        for group, sig in ((self.routers, signal.SIGINT), (self.controllers, signal.SIGINT)):
            running = [p for p in group if p.running]
            for process in running:
                assert process.process is not None
                with contextlib.suppress(ProcessLookupError):
                    process.process.send_signal(sig)
            for process in running:
                assert process.process is not None
                try:
                    process.process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.process.pid, signal.SIGKILL)
                    process.process.wait()
                process.reported = True
        if self._server is not None:
            if self.postgres is not None:
                self.postgres.reported = True
            self._server.destroy()
            self._server = None
            (self.directory / POSTGRES_FILE).unlink(missing_ok=True)

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def check_loopback(hosts: list[str]) -> None:
    """Each of ``hosts`` can be listened on (Linux routes all of 127.0.0.0/8 to the loopback)."""
    for host in hosts:
        with socket.socket() as s:
            try:
                s.bind((host, 0))
            except OSError as ex:
                raise ClusterError(
                    f"cannot listen on {host} ({ex.strerror}): on macOS add it first "
                    f"(sudo ifconfig lo0 alias {host} up)"
                ) from None


def _stop_leftover_postgres(record: Path) -> None:
    """Stop and remove the PostgreSQL server a killed run left (its directory is in ``record``)."""
    if not record.is_file():
        return
    directory = Path(record.read_text().strip())
    pid_file = directory / "data" / "postmaster.pid"
    if directory.name.startswith("trellis-pg-") and pid_file.is_file():
        try:
            pid = int(pid_file.read_text().split()[0])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            pid, cmdline = 0, ""
        if pid and str(directory / "data") in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGQUIT)
            deadline = time.monotonic() + STOP_SECONDS
            while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.1)
    if directory.name.startswith("trellis-pg-"):
        shutil.rmtree(directory, ignore_errors=True)
    record.unlink()


def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()
_PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In the child before it runs: SIGTERM when the launcher dies, even by ``kill -9``."""
    if _LIBC is not None:
        with contextlib.suppress(OSError, AttributeError):
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def _popen(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``command`` in a session of its own (a Ctrl-C reaches the launcher only, which stops the
    processes in order), its output appended to ``log``."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
            preexec_fn=_end_with_parent if _LIBC is not None else None,
        )


# -- the command line ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cluster",
        description="Three Trellis controllers on one PostgreSQL database and two edge routers "
        "connected to all of them, on 127.0.0.1-3, until Ctrl-C (make cluster). "
        "TRELLIS_DATABASE_URL: use that database (kept between runs) instead of a PostgreSQL "
        "server of the run's own; TRELLIS_ADMIN_PASSWORD: the admin's password (else generated).",
    )
    parser.add_argument("--dir", type=Path, default=Path(".cluster"), help="where the homes and logs go")
    parser.add_argument("--api-port", type=int, default=API_PORT, help="each controller's API port")
    parser.add_argument("--ctrl-port", type=int, default=CTRL_PORT, help="each controller's control port")
    parser.add_argument(
        "--edge-port",
        type=int,
        default=0,
        help="router N's edge listener port is this + N - 1 (default: free)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options = Options(
        directory=args.dir,
        api_port=args.api_port,
        ctrl_port=args.ctrl_port,
        edge_port=args.edge_port,
        database_url=os.environ.get("TRELLIS_DATABASE_URL", ""),
        password=os.environ.get("TRELLIS_ADMIN_PASSWORD", ""),
    )
    cluster = Cluster(options)

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    status = 0
    try:
        cluster.start()
        print(cluster.table(), flush=True)
        while any(p.running for p in cluster.processes()):
            for line in cluster.poll():
                print(line, flush=True)
            time.sleep(0.5)
        print("every process has ended", flush=True)
    except KeyboardInterrupt:
        then = ", then its PostgreSQL server" if cluster.postgres is not None else ""
        print(f"\nstopping: the routers, then the controllers{then}", flush=True)
    except ClusterError as ex:
        print(f"cluster: {ex}", file=sys.stderr, flush=True)
        status = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        cluster.stop()
    return status
