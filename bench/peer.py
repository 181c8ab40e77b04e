"""Trellis beside OpenZiti v1.6.0: the same seeded topology on both, measured in one run, interleaved.

``python -m bench peer [--identities 1000] [--rounds 3] [--seconds 4] [--quick] [--out PATH | --publish]``:

1. **Two networks.** OpenZiti's own controller, ``ziti edge quickstart`` (v1.6.0: controller and
   edge router in one Go process, bbolt storage), from the ``ziti`` binary that
   :mod:`tests.e2e.ziti_cli` builds once per machine into ``~/.cache/trellis/ziti-v1.6.0/bin``;
   and ``trellis init`` + ``trellis serve`` with its embedded router (``TRELLIS_ROUTER=on``:
   gunicorn's master, its worker, the worker's DuckDB writer and the router are four processes).
   Both on free ports of 127.0.0.1, each in a process session of its own, admin ``admin``.
   Trellis runs with its per-client budgets off (``TRELLIS_RATE_AUTH_PER_MINUTE=0``,
   ``TRELLIS_RATE_WRITE_PER_MINUTE=0``), as :mod:`bench.http` runs it; OpenZiti with the
   quickstart's configuration (its adaptive authentication limiter only refuses when 250 logins
   queue, which 8 clients never reach). This module imports the build helper (``ensure_ziti``)
   from ``tests/e2e/ziti_cli.py`` and the quickstart's command line and environment from
   ``tests/e2e/openziti.py``: the benchmark runs the same binary the same way the tests do, and
   those modules are their one owners.
2. **The same topology, through the REST API.** :func:`bench.topology.generate` with ``N``
   identities (``--identities``), ``N/10`` services with two configs each (``intercept.v1`` and
   ``host.v1``), ``N/100`` edge routers, ``N/20`` service policies (Dial and Bind, AnyOf and
   AllOf), ``N/100`` edge router and service edge router policies, no posture checks; role
   attributes and ``@id`` roles as the generator makes them (``@`` roles name each side's own
   ids). Posted by ``--seed-concurrency`` (8) writers on kept-alive connections, one side after
   the other: entities first, then services, then policies. Then the benchmark's own entities:
   ``peer-client`` (Dial on ``#all`` services, enrolled with a certificate: ``POST
   /edge/client/v1/enroll/ott {token, clientCsr}``), ``peer-password`` (``updb``), ``peer-watch``
   (certificate), two tunneler identities (enrolled by ``ziti edge enroll``), the ``peer-echo``
   service (``host.v1`` to a local TCP echo server) and ``peer-watched``.
3. **Measures, interleaved.** Every measure runs on both sides in turn, the order swapped from
   one round to the next (``--rounds``), so that whatever else the 2 cores do falls on both:

   - with wrk (:mod:`bench.http`'s scenario script, ``-t1 -c{--connections}``, ``--seconds``
     per run): policy advice (``GET /identities/{id}/policy-advice/{svc}``); the client's
     ``GET /services`` in pages of 25 as the C SDK asks (``peer-client``'s API session from a
     certificate login); ``GET /identities?limit=10``, with ``filter=name="..."`` and with
     ``filter=anyOf(roleAttributes)="..."``; Dial session creation (``POST
     /edge/client/v1/sessions``) rotating over (API session, service) pairs that have no
     session yet (both controllers answer an open pair's session again without a write),
     counted by what ``GET /sessions`` totals after minus before. The API sessions each side
     holds meanwhile are counted too (the run's set-up logs in some 360 for the Dial sessions):
     OpenZiti queries the API sessions for every identity it renders, so its identity lists
     slow down as they grow;
   - admin lists of 500 (``GET /identities?limit=500``), ``--list-requests`` (5) one at a time
     per side and round: OpenZiti takes seconds for one, so a wrk run would finish none;
   - password and certificate logins at ``--clients`` (8) concurrent clients (the client of
     :mod:`bench.logins`);
   - a policy change until visible: ``PATCH`` ``peer-watch``'s role attributes to add
     (``--changes`` times) and remove the one a Dial policy of ``peer-watched`` selects, and poll
     its client ``GET /services?filter=name="peer-watched"`` until the service appears (or
     goes); the time from the PATCH sent to the first answer that shows it;
   - through each network's own router, with the same Go tunneler (OpenZiti's ``ziti tunnel
     proxy`` dialing, ``ziti tunnel host`` hosting, both end-to-end encrypted), to one TCP echo
     server: dial latency (``--dials``: connect to the proxy's port, 16 bytes there and back;
     the proxy dials the service for every connection) and bulk throughput (``--bulk-mb``
     echoed on one connection, ``--bulk-repeat`` times);
   - start time (process start to ``GET /version`` answering 200, polled every 50 ms) of a
     restart with the seeded data (``--restarts``), and until the router is online; the first
     start too (OpenZiti's quickstart makes its PKI and database then; Trellis's is ``trellis
     init`` and ``serve``);
   - resident memory: the sum of ``VmRSS`` over each controller's process tree (``/proc``; PSS,
     which counts the pages forked processes share once, is in the JSON), idle after seeding,
     after the load and after a restart.

4. **Report.** A table of the headline figures with Trellis / OpenZiti beside them (a rate's
   ratio above 1, a time's or memory's below 1, is Trellis ahead), printed and written as JSON
   with every run's figures, both sides' CPU during each measure and the machine's load: to
   ``bench/results/local/peer.json`` (ignored by git; see :mod:`bench.output`), to the committed
   ``bench/results/peer.json`` with ``--publish``, or to ``--out PATH``.

Run::

    python -m bench peer                          # 1,000 identities, 3 rounds of 4 s per measure
    python -m bench peer --identities 10000 --rounds 2
    python -m bench peer --quick --out /tmp/peer.json   # the smoke test's size (a minute or two)

Everything shares the machine's cores (2 here): the two controllers (the idle one too), wrk, the
tunnelers and the echo server. The figures compare the two sides measured in the same run, not
days. Every wait is bounded; traffic goes to 127.0.0.1 only; every process started here is
ended on the way out (SIGINT, then SIGKILL to its process group), also on SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import json
import math
import os
import platform
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from bench import logins
from bench.http import Row as WrkRow
from bench.http import (
    Running,
    Scenario,
    Wrk,
    compile_sources,
    ensure_wrk,
    run_wrk,
    settle,
)
from bench.output import add_output_arguments, results_path
from bench.serving import timed
from bench.topology import Tier, Topology, generate
from bench.writes import Client, SetupError, percentile
from tests.e2e.echo import EchoServer
from tests.e2e.openziti import quickstart_argv, ziti_env
from tests.e2e.ziti_cli import VERSION as ZITI_VERSION
from tests.e2e.ziti_cli import ensure_ziti

ROOT = Path(__file__).resolve().parents[1]
#: The results file's name (where: bench.output).
RESULTS = "peer.json"
HOST = "127.0.0.1"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
OPENZITI = "openziti"
TRELLIS = "trellis"
SIDES = (OPENZITI, TRELLIS)
LABELS = {OPENZITI: f"OpenZiti {ZITI_VERSION}", TRELLIS: "Trellis"}
ADMIN = "admin"
ADMIN_PASSWORD = "bench-peer-admin-password-1"
PASSWORD_USER = "peer-password"
PASSWORD_SECRET = "peer-password-Secret-1"
#: Trellis's per-client budgets off, as bench.http serves it.
TRELLIS_ENV = {"TRELLIS_RATE_AUTH_PER_MINUTE": "0", "TRELLIS_RATE_WRITE_PER_MINUTE": "0"}
#: Seconds one step may take (a safety net, not a measure).
WAIT = 60.0
START_TIMEOUT = 180.0
STOP_TIMEOUT = 20.0
REQUEST_TIMEOUT = 30.0
POLL = 0.05
#: Seconds a kept-alive connection may idle before it is opened afresh (OpenZiti closes at 5).
IDLE = 2.0
#: The C SDK's page size for its services.
SDK_PAGE = 25
#: Bytes of the dial measure's message, there and back.
DIAL_MESSAGE = 16
WARM_UP_DIALS = 3
#: API sessions logged in for session creation, per side and round, at most.
MAX_SESSION_TOKENS = 400

#: Every row of the report, in order (the smoke test checks them).
ROW_NAMES = (
    "policy advice",
    "client services, pages of 25",
    "identities limit=10",
    'identities name="..."',
    'identities anyOf(roleAttributes)="..."',
    "identities limit=500",
    "Dial session creation",
    "password logins",
    "certificate logins",
    "policy change visible: service appears",
    "policy change visible: service goes",
    "dial through the router",
    "bulk echo through the router",
    "start after a restart (to /version)",
    "start until the router is online",
    "first start",
    "resident memory, seeded, idle",
    "resident memory after the load",
    "resident memory after a restart",
    "seeding through REST",
)


class BenchError(RuntimeError):
    """A controller, a tunneler or a set-up step did not do what it must."""


def say(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def order(i: int) -> tuple[str, str]:
    """The sides in the order of round ``i``: swapped from one round to the next."""
    return SIDES if i % 2 == 0 else (SIDES[1], SIDES[0])


# == processes ======================================================================================


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc``)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for path in Path(f"/proc/{current}/task").glob("*/children"):
            with suppress(OSError, ValueError):
                todo.extend(int(c) for c in path.read_text().split())
    return found


def _kb(path: str, key: str) -> int:
    with suppress(OSError, ValueError, IndexError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def process_memory(pid: int) -> list[dict[str, Any]]:
    """Each process of ``pid``'s tree: its name, RSS and PSS in MB."""
    out = []
    for p in tree(pid):
        try:
            name = Path(f"/proc/{p}/comm").read_text().strip()
            args = Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        out.append(
            {
                "pid": p,
                "name": name,
                # paths shortened to their last part: results name no directory of the machine
                "command": " ".join(Path(a).name if a.startswith("/") else a for a in args[:6] if a)[:160],
                "rss_mb": round(_kb(f"/proc/{p}/status", "VmRSS") / 1024, 1),
                "pss_mb": round(_kb(f"/proc/{p}/smaps_rollup", "Pss") / 1024, 1),
            }
        )
    return out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds used so far by ``pids`` (those that can be read)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def end_group(proc: subprocess.Popen[bytes], sig: int, timeout: float) -> None:
    """Send ``sig`` to ``proc`` if it runs, wait ``timeout`` s, then SIGKILL its whole process
    group (it was started in a session of its own, so the group is its own and its children's)."""
    try:
        if proc.poll() is None:
            proc.send_signal(sig)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
    finally:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(STOP_TIMEOUT)


class Controller:
    """One controller process (and what it starts), in a session of its own."""

    name: str

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.log = directory / "controller.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ca(self) -> str:
        raise NotImplementedError

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        raise NotImplementedError

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise BenchError(f"{self.name} is not running")
        return self.proc.pid

    def pids(self) -> list[int]:
        return tree(self.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.pids())

    def memory(self) -> dict[str, Any]:
        processes = process_memory(self.pid)
        return {
            "rss_mb": round(sum(p["rss_mb"] for p in processes), 1),
            "pss_mb": round(sum(p["pss_mb"] for p in processes), 1),
            "processes": processes,
        }

    def running(self) -> Running:
        """What bench.http's wrk runner and ``settle`` take."""
        return Running(self.name, self.port, self.ca, self.pid, 0.0, 0.0, self.log)

    def start(self) -> float:
        """Start the process; seconds from its start to ``GET /version`` answering 200."""
        argv, env, cwd = self.command()
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as sink:
            began = time.perf_counter()
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise BenchError(f"{self.name} exited {code}\n{self.log_tail()}")
            if Path(self.ca).exists() and timed(self.port, self.ca, "GET", "/version", timeout=2)[1] == 200:
                return time.perf_counter() - began
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"{self.name} did not answer in {START_TIMEOUT:.0f} s\n{self.log_tail()}")
            time.sleep(POLL)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            end_group(proc, signal.SIGINT, STOP_TIMEOUT)

    def log_tail(self, limit: int = 4000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log})"
        return f"--- {self.log}:\n{text[-limit:]}"


class OpenZitiController(Controller):
    """``ziti edge quickstart --home <dir>/home`` (controller and router in one process); a
    restart on the same home and ports reuses its PKI, database and router."""

    name = OPENZITI

    def __init__(self, directory: Path, binary: Path) -> None:
        super().__init__(directory)
        self.binary = binary
        self.home = directory / "home"
        self.user = directory / "user"
        self.router_port = free_port()

    @property
    def ca(self) -> str:
        return str(self.home / "pki" / "root-ca" / "certs" / "root-ca.cert")

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        self.user.mkdir(parents=True, exist_ok=True)
        argv = quickstart_argv(self.binary, self.home, self.port, self.router_port, ADMIN_PASSWORD)
        return argv, ziti_env(self.user), self.directory


class TrellisController(Controller):
    """``trellis serve`` with its embedded router on a home ``trellis init`` made."""

    name = TRELLIS

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.home = directory / "home"
        self.ctrl_port = free_port()

    @property
    def ca(self) -> str:
        return str(self.home / "pki" / "ca-bundle.pem")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
        env.update(
            TRELLIS_HOME=str(self.home),
            TRELLIS_BIND=f"{HOST}:{self.port}",
            TRELLIS_CTRL_BIND=f"{HOST}:{self.ctrl_port}",
            TRELLIS_ROUTER="on",
            TRELLIS_ADMIN_PASSWORD=ADMIN_PASSWORD,
            **TRELLIS_ENV,
        )
        return env

    def init(self) -> float:
        """``trellis init``: its seconds."""
        self.directory.mkdir(parents=True, exist_ok=True)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "controller.cli", "init"],
            env=self.env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise BenchError(f"trellis init exited {done.returncode}: {done.stdout}{done.stderr[-3000:]}")
        return time.perf_counter() - began

    def command(self) -> tuple[list[str], dict[str, str], Path]:
        return [sys.executable, "-m", "controller.cli", "serve"], self.env(), ROOT


# == REST set-up ====================================================================================


class Kept(Client):
    """:class:`bench.writes.Client` for a connection that may sit idle: OpenZiti closes a
    connection idle for 5 s, so one idle for :data:`IDLE` seconds is opened afresh, and a GET whose
    connection failed is sent once more."""

    def __init__(self, port: int, ca: str, timeout: float = REQUEST_TIMEOUT) -> None:
        super().__init__(port, ca, timeout)
        self.used = 0.0

    def request(
        self, method: str, path: str, token: str | None = None, body: Any = None
    ) -> tuple[int, dict[str, str], Any]:
        if time.monotonic() - self.used > IDLE:
            self.close()
        answer = super().request(method, path, token, body)
        if answer[0] == 0 and method == "GET":
            answer = super().request(method, path, token, body)
        self.used = time.monotonic()
        return answer


class Api:
    """Requests to one controller: a kept-alive admin connection, a pool for concurrent writes."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.client = Kept(controller.port, controller.ca, REQUEST_TIMEOUT)
        self.admin = ""

    def login(self) -> str:
        self.admin = self.client.login(MGMT, ADMIN, ADMIN_PASSWORD)
        return self.admin

    def get(self, path: str, token: str | None = None) -> Any:
        return self.client.expect(200, "GET", path, token or self.admin)

    def create(self, path: str, body: dict[str, Any]) -> str:
        return str(self.client.expect(201, "POST", MGMT + path, self.admin, body)["data"]["id"])

    def patch(self, path: str, body: dict[str, Any]) -> None:
        self.client.expect(200, "PATCH", MGMT + path, self.admin, body)

    def total(self, path: str) -> int:
        sep = "&" if "?" in path else "?"
        return int(self.get(f"{path}{sep}limit=1")["meta"]["pagination"]["totalCount"])

    def create_many(
        self, path: str, bodies: Sequence[tuple[str, dict[str, Any]]], writers: int
    ) -> dict[str, str]:
        """POST every body with ``writers`` concurrent connections; key -> the new id. A refused
        or failed write is tried again (3 times at most)."""
        local = threading.local()
        made: list[Client] = []
        lock = threading.Lock()

        def one(item: tuple[str, dict[str, Any]]) -> tuple[str, str]:
            key, body = item
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = Kept(self.controller.port, self.controller.ca, REQUEST_TIMEOUT)
                with lock:
                    made.append(client)
            last: Any = None
            for attempt in range(3):
                status, _, parsed = client.request("POST", MGMT + path, self.admin, body)
                if status == 201:
                    return key, str(parsed["data"]["id"])
                last = (status, parsed)
                if status not in (0, 429, 503):
                    break
                time.sleep(0.2 * (attempt + 1))
            raise SetupError(f"{self.controller.name}: POST {path} {body.get('name')}: {last}")

        try:
            with ThreadPoolExecutor(max_workers=writers) as pool:
                return dict(pool.map(one, bodies))
        finally:
            for client in made:
                client.close()

    def close(self) -> None:
        self.client.close()


def tier_for(identities: int) -> Tier:
    """The generator's sizes for ``identities``: services a tenth, routers a hundredth, service
    policies a twentieth, no posture checks (a posture check would refuse the sessions)."""
    n = identities
    return Tier(
        f"peer-{n}",
        n,
        max(2, n // 10),
        max(1, n // 100),
        0,
        max(2, n // 20),
        max(1, n // 100),
        max(1, n // 100),
        attributes=max(10, min(500, n // 2)),
    )


@dataclass
class Seeding:
    entities: int
    seconds: float
    per_second: float
    #: Per kind (the REST path): [created, seconds].
    kinds: dict[str, list[float]] = field(default_factory=dict)
    #: The controller's processes meanwhile, % of one core.
    cpu_percent: float | None = None


def _roles(roles: Sequence[str], ids: dict[str, str]) -> list[str]:
    return [f"@{ids[r[1:]]}" if r.startswith("@") else r for r in roles]


def seed(api: Api, topology: Topology, writers: int) -> Seeding:
    """The topology through the REST API (``writers`` at a time): entities, services, policies."""
    config_types = {c["name"]: c["id"] for c in api.get(f"{MGMT}/config-types?limit=100")["data"]}
    began = time.perf_counter()
    ids: dict[str, str] = {}
    identities = [
        (
            e.id,
            {
                "name": f"peer-id-{i:06d}",
                "type": "Device",
                "isAdmin": False,
                "roleAttributes": list(e.attributes),
            },
        )
        for i, e in enumerate(topology.identities)
    ]
    routers = [
        (e.id, {"name": f"peer-er-{i:04d}", "roleAttributes": list(e.attributes), "isTunnelerEnabled": False})
        for i, e in enumerate(topology.edge_routers)
    ]
    configs: list[tuple[str, dict[str, Any]]] = []
    for i in range(len(topology.services)):
        intercept = {
            "protocols": ["tcp"],
            "addresses": [f"svc-{i:05d}.peer.test"],
            "portRanges": [{"low": 443, "high": 443}],
        }
        host = {"protocol": "tcp", "address": "127.0.0.1", "port": 8443}
        configs.append(
            (
                f"intercept-{i}",
                {
                    "name": f"peer-intercept-{i:05d}",
                    "configTypeId": config_types["intercept.v1"],
                    "data": intercept,
                },
            )
        )
        configs.append(
            (
                f"host-{i}",
                {"name": f"peer-host-{i:05d}", "configTypeId": config_types["host.v1"], "data": host},
            )
        )
    kinds: dict[str, list[float]] = {}

    def create(path: str, bodies: Sequence[tuple[str, dict[str, Any]]]) -> None:
        started = time.perf_counter()
        ids.update(api.create_many(path, bodies, writers))
        kinds[path.strip("/")] = [len(bodies), round(time.perf_counter() - started, 2)]

    create("/identities", identities)
    create("/edge-routers", routers)
    create("/configs", configs)
    services = [
        (
            e.id,
            {
                "name": f"peer-svc-{i:05d}",
                "roleAttributes": list(e.attributes),
                "encryptionRequired": True,
                "configs": [ids[f"intercept-{i}"], ids[f"host-{i}"]],
            },
        )
        for i, e in enumerate(topology.services)
    ]
    create("/services", services)
    policies = [
        (
            p.id,
            {
                "name": f"peer-sp-{i:05d}",
                "type": p.type,
                "semantic": p.semantic,
                "identityRoles": _roles(p.identity_roles, ids),
                "serviceRoles": _roles(p.service_roles, ids),
                "postureCheckRoles": [],
            },
        )
        for i, p in enumerate(topology.service_policies)
    ]
    erps = [
        (
            p.id,
            {
                "name": f"peer-erp-{i:05d}",
                "semantic": p.semantic,
                "identityRoles": _roles(p.identity_roles, ids),
                "edgeRouterRoles": _roles(p.edge_router_roles, ids),
            },
        )
        for i, p in enumerate(topology.edge_router_policies)
    ]
    serps = [
        (
            p.id,
            {
                "name": f"peer-serp-{i:05d}",
                "semantic": p.semantic,
                "serviceRoles": _roles(p.service_roles, ids),
                "edgeRouterRoles": _roles(p.edge_router_roles, ids),
            },
        )
        for i, p in enumerate(topology.service_edge_router_policies)
    ]
    create("/service-policies", policies)
    create("/edge-router-policies", erps)
    create("/service-edge-router-policies", serps)
    seconds = time.perf_counter() - began
    count = (
        len(identities) + len(routers) + len(configs) + len(services) + len(policies) + len(erps) + len(serps)
    )
    return Seeding(count, round(seconds, 2), round(count / seconds, 1), kinds)


# -- enrollment ------------------------------------------------------------------------------------


def _key_and_csr(name: str) -> tuple[bytes, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    return pem, csr.public_bytes(serialization.Encoding.PEM).decode()


def new_identity(
    api: Api, name: str, roles: Sequence[str], enrollment: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Create an identity; its id and its enrollment (as its detail shows it)."""
    body = {
        "name": name,
        "type": "Device",
        "isAdmin": False,
        "roleAttributes": list(roles),
        "enrollment": enrollment,
    }
    identity = api.create("/identities", body)
    detail = api.get(f"{MGMT}/identities/{identity}")["data"]
    return identity, dict(detail.get("enrollment") or {})


def enroll_cert(api: Api, name: str, roles: Sequence[str], workdir: Path) -> tuple[str, tuple[str, str]]:
    """An identity enrolled with a CSR (``POST /enroll/ott {token, clientCsr}``): its id and
    (certificate file, key file)."""
    identity, enrollment = new_identity(api, name, roles, {"ott": True})
    key, csr = _key_and_csr(name)
    answer = api.client.expect(
        200, "POST", f"{CLIENT}/enroll/ott", body={"token": enrollment["ott"]["token"], "clientCsr": csr}
    )
    cert_file, key_file = workdir / f"{name}.cert.pem", workdir / f"{name}.key.pem"
    key_file.write_bytes(key)
    key_file.chmod(0o600)
    cert_file.write_text(answer["data"]["cert"])
    return identity, (str(cert_file), str(key_file))


def enroll_password(api: Api, name: str) -> bytes:
    """A ``updb`` identity with its password set: the login body."""
    _, enrollment = new_identity(api, name, [], {"updb": name})
    token = urllib.parse.quote(enrollment["updb"]["token"])
    api.client.expect(
        200,
        "POST",
        f"{CLIENT}/enroll/updb?token={token}",
        body={"username": name, "password": PASSWORD_SECRET},
    )
    return json.dumps({"username": name, "password": PASSWORD_SECRET}).encode()


def enroll_tunneler(api: Api, binary: Path, name: str, roles: Sequence[str], workdir: Path) -> Path:
    """An identity enrolled by ``ziti edge enroll`` (as a tunneler's user does): its identity file."""
    _, enrollment = new_identity(api, name, roles, {"ott": True})
    jwt = workdir / f"{name}.jwt"
    jwt.write_text(enrollment["ott"]["jwt"])
    out = workdir / f"{name}.json"
    done = subprocess.run(
        [str(binary), "edge", "enroll", str(jwt), "-a", "EC", "-o", str(out)],
        env=ziti_env(workdir / "user"),
        cwd=workdir,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    if done.returncode != 0 or not out.exists():
        raise BenchError(f"ziti edge enroll {name}: exit {done.returncode}: {done.stdout}{done.stderr}")
    return out


def cert_context(ca: str, cert: tuple[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(*cert)
    return context


def cert_logins(controller: Controller, cert: tuple[str, str], count: int, workers: int = 8) -> list[str]:
    """``count`` certificate logins (``workers`` at a time): their API session tokens."""
    context = cert_context(controller.ca, cert)

    def one(_: int) -> str:
        conn = http.client.HTTPSConnection(HOST, controller.port, timeout=REQUEST_TIMEOUT, context=context)
        try:
            conn.request(
                "POST",
                f"{CLIENT}/authenticate?method=cert",
                body=b"{}",
                headers={"Content-Type": "application/json", "Accept": "application/json"},
            )
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        token = resp.getheader("zt-session")
        if resp.status != 200 or not token:
            raise SetupError(f"{controller.name}: certificate login: {resp.status}: {data[:500]!r}")
        return token

    with ThreadPoolExecutor(max_workers=max(1, min(workers, count))) as pool:
        return list(pool.map(one, range(count)))


# == the tunnelers ==================================================================================


class Tunneler:
    """``ziti tunnel <mode> ...`` in a session of its own, its output in a log file."""

    def __init__(self, binary: Path, workdir: Path, name: str, *args: str) -> None:
        self.name = name
        self.log = workdir / f"tunnel-{name}.log"
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                [str(binary), "tunnel", *args, "--cli-agent=false"],
                env=ziti_env(workdir / "user"),
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=sink,
                start_new_session=True,
            )

    def tail(self, limit: int = 3000) -> str:
        try:
            return f"--- {self.log}:\n{self.log.read_text(errors='replace')[-limit:]}"
        except OSError:
            return ""

    def stop(self) -> None:
        end_group(self.proc, signal.SIGTERM, 10)


def echo_once(port: int, message: bytes) -> float:
    """Connect to 127.0.0.1:``port``, send ``message``, read it back: the seconds it took."""
    began = time.perf_counter()
    with socket.create_connection((HOST, port), timeout=WAIT) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(message)
        got = b""
        while len(got) < len(message):
            chunk = conn.recv(65536)
            if not chunk:
                raise BenchError(
                    f"the echo through port {port} ended after {len(got)} of {len(message)} bytes"
                )
            got += chunk
    if got != message:
        raise BenchError(f"the echo through port {port} answered other bytes")
    return time.perf_counter() - began


def echo_bulk(port: int, size: int) -> float:
    """``size`` bytes sent through 127.0.0.1:``port`` while the echo is read back: the seconds."""
    block = os.urandom(1 << 20)
    failure: list[BaseException] = []
    with socket.create_connection((HOST, port), timeout=WAIT) as conn:
        began = time.perf_counter()

        def send() -> None:
            left = size
            try:
                while left > 0:
                    n = min(left, len(block))
                    conn.sendall(block[:n])
                    left -= n
            except OSError as exc:
                failure.append(exc)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        received = 0
        while received < size:
            chunk = conn.recv(1 << 20)
            if not chunk:
                break
            received += len(chunk)
        elapsed = time.perf_counter() - began
        sender.join(WAIT)
    if failure or received != size:
        raise BenchError(f"bulk echo through port {port}: {received} of {size} bytes back {failure}")
    return elapsed


def wait_for(check: Callable[[], Any], timeout: float, what: str, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with suppress(OSError, BenchError, SetupError):
            value = check()
            if value:
                return value
        time.sleep(poll)
    raise BenchError(f"{what}: not within {timeout:.0f} s")


# == one side, set up ===============================================================================


@dataclass
class Net:
    """One network, seeded and set up for the measures."""

    name: str
    controller: Controller
    api: Api
    seeding: Seeding
    client_id: str
    client_cert: tuple[str, str]
    client_token: str
    client_services: int
    advice_service: str
    identity_name: str
    identity_attribute: str
    session_services: list[str]
    #: Per round: the API sessions whose (session, service) pairs that round's creations use.
    session_tokens: list[list[str]]
    password_body: bytes
    watch_id: str
    watch_token: str
    watched_service: str
    echo_service: str
    dialer_file: Path
    binder_file: Path
    proxy_port: int = 0
    tunnelers: list[Tunneler] = field(default_factory=list)

    def running(self) -> Running:
        return self.controller.running()


def router_online(api: Api, timeout: float, poll: float = 0.2) -> None:
    def online() -> bool:
        # OpenZiti's edge router lists take no isOnline filter: read the flags
        return any(r.get("isOnline") for r in api.get(f"{MGMT}/edge-routers?limit=500")["data"])

    wait_for(online, timeout, f"{api.controller.name}'s router is online", poll)


def quote(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def equals(symbol: str, value: str) -> str:
    """``symbol="value"``, quoted for a query string."""
    return quote(f"{symbol}={json.dumps(value)}")


WATCHED_FILTER = equals("name", "peer-watched")


def set_up(
    controller: Controller,
    topology: Topology,
    *,
    binary: Path,
    echo_port: int,
    workdir: Path,
    writers: int,
    rounds: int,
    session_pairs: int,
) -> Net:
    """Seed ``controller`` and make the benchmark's own identities, services and policies."""
    api = Api(controller)
    api.login()
    router_online(api, START_TIMEOUT)
    say(f"{controller.name}: seeding {len(topology.identities):,} identities through REST, {writers} writers")
    cpu = controller.cpu()
    seeding = seed(api, topology, writers)
    seeding.cpu_percent = round(100 * (controller.cpu() - cpu) / seeding.seconds, 1)
    say(f"{controller.name}: {seeding.entities:,} entities in {seeding.seconds:.1f} s")
    (workdir / "user").mkdir(parents=True, exist_ok=True)
    host_type = next(
        c["id"] for c in api.get(f"{MGMT}/config-types?limit=100")["data"] if c["name"] == "host.v1"
    )
    host = api.create(
        "/configs",
        {
            "name": "peer-echo-host",
            "configTypeId": host_type,
            "data": {"protocol": "tcp", "address": HOST, "port": echo_port},
        },
    )
    echo = api.create("/services", {"name": "peer-echo", "encryptionRequired": True, "configs": [host]})
    watched = api.create("/services", {"name": "peer-watched", "encryptionRequired": True})
    for name, kind, identity_role, service_role in (
        ("peer-client-dial", "Dial", "#peer-client", "#all"),
        ("peer-tun-dial", "Dial", "#peer-tun-dialer", f"@{echo}"),
        ("peer-tun-bind", "Bind", "#peer-tun-binder", f"@{echo}"),
        ("peer-watch-dial", "Dial", "#peer-watch-on", f"@{watched}"),
    ):
        api.create(
            "/service-policies",
            {
                "name": name,
                "type": kind,
                "semantic": "AnyOf",
                "identityRoles": [identity_role],
                "serviceRoles": [service_role],
                "postureCheckRoles": [],
            },
        )
    client_id, client_cert = enroll_cert(api, "peer-client", ["peer-client"], workdir)
    watch_id, watch_cert = enroll_cert(api, "peer-watch", ["peer-watch"], workdir)
    password_body = enroll_password(api, PASSWORD_USER)
    dialer = enroll_tunneler(api, binary, "peer-tun-dialer", ["peer-tun-dialer"], workdir)
    binder = enroll_tunneler(api, binary, "peer-tun-binder", ["peer-tun-binder"], workdir)
    [client_token] = cert_logins(controller, client_cert, 1)
    [watch_token] = cert_logins(controller, watch_cert, 1)
    client_services = int(
        api.get(f"{CLIENT}/services?limit=1", client_token)["meta"]["pagination"]["totalCount"]
    )
    watched_now = api.get(f"{CLIENT}/services?filter={WATCHED_FILTER}", watch_token)["data"]
    if watched_now:
        raise BenchError(f"{controller.name}: peer-watch sees peer-watched before its role is added")
    session_services = [
        s["id"]
        for s in api.get(
            f"{MGMT}/services?limit=500&filter={quote('name contains ' + json.dumps('peer-svc-'))}"
        )["data"]
    ]
    per_round = max(1, min(MAX_SESSION_TOKENS, math.ceil(session_pairs / max(1, len(session_services)))))
    tokens = cert_logins(controller, client_cert, per_round * rounds)
    attribute = topology.identities[0].attributes[0]
    return Net(
        name=controller.name,
        controller=controller,
        api=api,
        seeding=seeding,
        client_id=client_id,
        client_cert=client_cert,
        client_token=client_token,
        client_services=client_services,
        advice_service=session_services[0],
        identity_name=f"peer-id-{len(topology.identities) // 2:06d}",
        identity_attribute=attribute,
        session_services=session_services,
        session_tokens=[tokens[i * per_round : (i + 1) * per_round] for i in range(rounds)],
        password_body=password_body,
        watch_id=watch_id,
        watch_token=watch_token,
        watched_service=watched,
        echo_service="peer-echo",
        dialer_file=dialer,
        binder_file=binder,
    )


def start_tunnelers(net: Net, binary: Path, workdir: Path) -> None:
    """``ziti tunnel host`` (the binder) and ``ziti tunnel proxy`` (the dialer) of ``net``,
    ready once the service has a terminator and an echo goes through the proxy."""
    host = Tunneler(binary, workdir, f"{net.name}-host", "host", "-i", str(net.binder_file))
    net.tunnelers.append(host)
    service = net.api.get(f"{MGMT}/services?filter={equals('name', net.echo_service)}")["data"][0]["id"]

    def terminators() -> bool:
        return bool(net.api.get(f"{MGMT}/terminators?filter={equals('service', service)}")["data"])

    try:
        wait_for(terminators, WAIT, f"{net.name}: the hosting tunneler's terminator")
    except BenchError as exc:
        raise BenchError(f"{exc}\n{host.tail()}\n{net.controller.log_tail()}") from None
    net.proxy_port = free_port()
    proxy = Tunneler(
        binary,
        workdir,
        f"{net.name}-proxy",
        "proxy",
        f"{net.echo_service}:{net.proxy_port}",
        "-i",
        str(net.dialer_file),
    )
    net.tunnelers.append(proxy)
    try:
        wait_for(lambda: echo_once(net.proxy_port, b"ready?"), WAIT, f"{net.name}: an echo through the proxy")
    except BenchError as exc:
        raise BenchError(f"{exc}\n{proxy.tail()}\n{host.tail()}\n{net.controller.log_tail()}") from None


def stop_tunnelers(net: Net) -> None:
    tunnelers, net.tunnelers = net.tunnelers, []
    for tunneler in tunnelers:
        tunneler.stop()


# == the measures ===================================================================================


@dataclass
class Figure:
    """One side's figures for one row. ``value`` is the headline (in the row's unit)."""

    value: float
    p50_ms: float | None = None
    p99_ms: float | None = None
    count: int = 0
    errors: int = 0
    cpu_percent: float | None = None
    runs: list[Any] = field(default_factory=list)
    #: A rate's value per CPU-second of the controller's processes (``cpu_percent``).
    per_cpu_second: float | None = None


@dataclass
class Row:
    name: str
    unit: str
    higher_is_better: bool
    openziti: Figure
    trellis: Figure
    ratio: float | None
    verdict: str
    note: str = ""
    #: Trellis / OpenZiti of the rate per CPU-second of each controller's processes: what each
    #: request costs, whatever share of the cores each got while others ran.
    cpu_ratio: float | None = None


def make_row(name: str, unit: str, higher: bool, figures: dict[str, Figure], note: str = "") -> Row:
    ozt, tls = figures[OPENZITI], figures[TRELLIS]
    ratio = round(tls.value / ozt.value, 3) if ozt.value else None
    verdict = "?"
    if ratio is not None:
        better = ratio if higher else (1 / ratio if ratio else math.inf)
        verdict = "ahead" if better > 1.1 else "behind" if better < 1 / 1.1 else "level"
    if unit.endswith("/s"):
        for figure in (ozt, tls):
            if figure.cpu_percent:
                figure.per_cpu_second = round(figure.value / (figure.cpu_percent / 100), 1)
    cpu_ratio = None
    if ozt.per_cpu_second and tls.per_cpu_second:
        cpu_ratio = round(tls.per_cpu_second / ozt.per_cpu_second, 3)
    return Row(name, unit, higher, ozt, tls, ratio, verdict, note, cpu_ratio)


def settle_both(nets: dict[str, Net]) -> None:
    for net in nets.values():
        settle(net.running(), idle_percent=15.0, limit_seconds=15.0)


def _sessions(net: Net) -> int:
    return net.api.total(f"{MGMT}/sessions")


def wrk_scenarios(net: Net, round_: int) -> list[Scenario]:
    """The wrk measures of one side, in order (a Dial session rotation of its own per round)."""
    admin, client = net.api.admin, net.client_token
    name = quote(f'name="{net.identity_name}"')
    attribute = quote(f'anyOf(roleAttributes)="{net.identity_attribute}"')
    pages = [
        ("GET", f"{CLIENT}/services?limit={SDK_PAGE}&offset={offset}", client, "")
        for offset in range(0, max(net.client_services, 1), SDK_PAGE)
    ]
    dials = [
        ("POST", f"{CLIENT}/sessions", token, json.dumps({"serviceId": service, "type": "Dial"}))
        for service in net.session_services
        for token in net.session_tokens[round_]
    ]
    return [
        Scenario(
            ROW_NAMES[0],
            [("GET", f"{MGMT}/identities/{net.client_id}/policy-advice/{net.advice_service}", admin, "")],
        ),
        Scenario(ROW_NAMES[1], pages, f"{net.client_services} services"),
        Scenario(ROW_NAMES[2], [("GET", f"{MGMT}/identities?limit=10", admin, "")]),
        Scenario(ROW_NAMES[3], [("GET", f"{MGMT}/identities?limit=10&filter={name}", admin, "")]),
        Scenario(ROW_NAMES[4], [("GET", f"{MGMT}/identities?limit=10&filter={attribute}", admin, "")]),
        Scenario(ROW_NAMES[6], dials, f"{len(dials):,} (API session, service) pairs"),
    ]


def wrk_figure(rows: list[WrkRow], created: list[int] | None = None) -> Figure:
    """Runs of one measure on one side: the rate over all of them, the median of their
    percentiles; for session creation the rate of sessions created."""
    seconds = sum(r.seconds for r in rows) or 1.0
    requests = sum(r.requests for r in rows)
    value = (sum(created) if created is not None else requests) / seconds
    cpus = [r.server_cpu_percent for r in rows if r.server_cpu_percent is not None]
    runs: list[Any] = [asdict(r) for r in rows]
    if created is not None:
        for run_, made in zip(runs, created, strict=True):
            run_["created"] = made
    answered = [r for r in rows if r.requests] or rows
    return Figure(
        value=round(value, 1),
        p50_ms=round(statistics.median(r.p50_ms for r in answered), 2),
        p99_ms=round(statistics.median(r.p99_ms for r in answered), 2),
        count=requests if created is None else sum(created),
        errors=sum(r.errors for r in rows),
        cpu_percent=round(statistics.mean(cpus), 1) if cpus else None,
        runs=runs,
    )


def _answered(figure: Figure) -> int:
    """The 2xx answers of a wrk figure's runs."""
    return sum(n for run_ in figure.runs for code, n in run_["statuses"].items() if code.startswith("2"))


def measure_wrk(
    nets: dict[str, Net], wrk: Wrk, workdir: Path, rounds: int, seconds: float, connections: int
) -> list[Row]:
    runs: dict[tuple[str, str], list[WrkRow]] = {}
    created: dict[str, list[int]] = {side: [] for side in SIDES}
    api_sessions: dict[tuple[str, str], list[int]] = {}
    notes: dict[str, str] = {}
    names = [s.name for s in wrk_scenarios(next(iter(nets.values())), 0)]
    for round_ in range(rounds):
        for index, scenario_name in enumerate(names):
            for side in order(round_ + index):
                net = nets[side]
                scenario = next(s for s in wrk_scenarios(net, round_) if s.name == scenario_name)
                settle_both(nets)
                before = _sessions(net) if scenario_name == ROW_NAMES[6] else 0
                # OpenZiti renders each identity with a query of the API sessions: say how many
                api_sessions.setdefault((scenario_name, side), []).append(
                    net.api.total(f"{MGMT}/api-sessions")
                )
                say(f"round {round_ + 1}/{rounds}: {scenario_name} on {side}")
                row = run_wrk(
                    wrk,
                    net.running(),
                    scenario,
                    workdir,
                    seconds=seconds,
                    connections=connections,
                    threads=1,
                )
                runs.setdefault((scenario_name, side), []).append(row)
                if scenario_name == ROW_NAMES[6]:
                    created[side].append(_sessions(net) - before)
                notes[f"{scenario_name} {side}"] = scenario.note
    rows = []
    for scenario_name in names:
        is_sessions = scenario_name == ROW_NAMES[6]
        figures = {
            side: wrk_figure(runs[(scenario_name, side)], created[side] if is_sessions else None)
            for side in SIDES
        }
        for side in SIDES:
            for run_, count in zip(figures[side].runs, api_sessions[(scenario_name, side)], strict=True):
                run_["api_sessions"] = count
        unit = "sessions/s" if is_sessions else "req/s"
        note = f"wrk -t1 -c{connections}, {rounds} x {seconds:g} s"
        if scenario_name.startswith("identities"):
            counts = [n for side in SIDES for n in api_sessions[(scenario_name, side)]]
            note += f"; {min(counts):,}-{max(counts):,} API sessions on each side"
        if scenario_name == ROW_NAMES[1]:
            note += f"; {notes[f'{scenario_name} {OPENZITI}']} on OpenZiti, {notes[f'{scenario_name} {TRELLIS}']} on Trellis"
        if is_sessions:
            note += "; a new session per request (pairs without one), counted by GET /sessions"
            short = [side for side in SIDES if figures[side].count < _answered(figures[side])]
            if short:
                note += f"; the pairs ran out on {', '.join(short)} (later requests answered open sessions)"
        rows.append(make_row(scenario_name, unit, True, figures, note))
    return rows


def measure_logins(nets: dict[str, Net], rounds: int, seconds: float, clients: int) -> list[Row]:
    runs: dict[tuple[str, str], list[logins.Row]] = {}
    for round_ in range(rounds):
        for index, method in enumerate(logins.LEGACY_METHODS):
            for side in order(round_ + index):
                net = nets[side]
                settle_both(nets)
                say(f"round {round_ + 1}/{rounds}: {method} logins on {side}, {clients} clients")
                creds = logins.Credentials(net.password_body, *net.client_cert)
                cpu_before = net.controller.cpu()
                row = logins.measure(net.controller.port, net.controller.ca, method, creds, clients, seconds)
                cpu = net.controller.cpu() - cpu_before
                row = replace(
                    row, server_cpu_percent=round(100 * cpu / row.seconds, 1) if row.seconds else None
                )
                runs.setdefault((method, side), []).append(row)
    rows = []
    for method, name in zip(logins.LEGACY_METHODS, (ROW_NAMES[7], ROW_NAMES[8]), strict=True):
        figures = {}
        for side in SIDES:
            done = runs[(method, side)]
            total = sum(r.logins for r in done)
            cpus = [r.server_cpu_percent for r in done if r.server_cpu_percent is not None]
            figures[side] = Figure(
                value=round(total / (sum(r.seconds for r in done) or 1.0), 1),
                p50_ms=round(statistics.median(r.p50_ms for r in done), 1),
                p99_ms=round(statistics.median(r.p99_ms for r in done), 1),
                count=total,
                errors=sum(sum(r.errors.values()) for r in done),
                cpu_percent=round(statistics.mean(cpus), 1) if cpus else None,
                runs=[asdict(r) for r in done],
            )
        note = f"{clients} clients, kept-alive TLS, {rounds} x {seconds:g} s; a new API session each"
        rows.append(make_row(name, "logins/s", True, figures, note))
    return rows


def _latency_figure(samples: list[float], errors: int, runs: list[Any] | None = None) -> Figure:
    ms = sorted(s * 1000 for s in samples)
    p50 = round(percentile(ms, 50), 2) if ms else 0.0
    return Figure(
        value=p50,
        p50_ms=p50,
        p99_ms=round(percentile(ms, 99), 2) if ms else 0.0,
        count=len(ms),
        errors=errors,
        runs=runs or [],
    )


def watch_change(net: Net, on: bool) -> tuple[float, dict[str, float]]:
    """PATCH ``peer-watch``'s roles (``on``: with the one that gives it ``peer-watched``), then
    poll its client services until the change shows: seconds from the PATCH sent, and the
    PATCH's own milliseconds and the polls it took."""
    roles = ["peer-watch", "peer-watch-on"] if on else ["peer-watch"]
    path = f"{CLIENT}/services?filter={WATCHED_FILTER}"
    began = time.perf_counter()
    net.api.patch(f"/identities/{net.watch_id}", {"roleAttributes": roles})
    patched = time.perf_counter() - began
    deadline = time.monotonic() + WAIT
    polls = 0
    while time.monotonic() < deadline:
        status, _, body = net.api.client.request("GET", path, net.watch_token)
        polls += 1
        if status == 200 and bool(body["data"]) == on:
            seconds = time.perf_counter() - began
            return seconds, {
                "ms": round(seconds * 1000, 2),
                "patch_ms": round(patched * 1000, 2),
                "polls": polls,
            }
    raise BenchError(f"{net.name}: peer-watched did not {'appear' if on else 'go'} within {WAIT:.0f} s")


def measure_lists(nets: dict[str, Net], rounds: int, requests: int) -> Row:
    """Admin lists of 500 identities, one at a time (``requests`` per side and round): OpenZiti
    takes seconds for one, so a concurrent run of a few seconds would finish none."""
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    errors = dict.fromkeys(SIDES, 0)
    api_sessions: dict[str, list[int]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        for side in order(round_ + 1):
            net = nets[side]
            settle_both(nets)
            api_sessions[side].append(net.api.total(f"{MGMT}/api-sessions"))
            say(f"round {round_ + 1}/{rounds}: {requests} lists of 500 identities on {side}, one at a time")
            for _ in range(requests):
                began = time.perf_counter()
                status, _, body = net.api.client.request("GET", f"{MGMT}/identities?limit=500", net.api.admin)
                if status == 200 and len(body["data"]) == min(500, body["meta"]["pagination"]["totalCount"]):
                    times[side].append(time.perf_counter() - began)
                else:
                    errors[side] += 1
    figures = {}
    for side in SIDES:
        figure = _latency_figure(times[side], errors[side])
        total = sum(times[side])
        figure.runs = [
            {
                "per_second": round(len(times[side]) / total, 2) if total else 0.0,
                "api_sessions": api_sessions[side],
            }
        ]
        figures[side] = figure
    counts = [n for side in SIDES for n in api_sessions[side]]
    note = (
        f"GET /identities?limit=500 one at a time, {rounds} x {requests} on each side, "
        f"{min(counts):,}-{max(counts):,} API sessions on each side (p50)"
    )
    return make_row(ROW_NAMES[5], "ms", False, figures, note)


def measure_policy_change(nets: dict[str, Net], changes: int) -> list[Row]:
    times: dict[tuple[bool, str], list[float]] = {}
    details: dict[tuple[bool, str], list[dict[str, float]]] = {}
    errors: dict[tuple[bool, str], int] = {}
    say(f"policy change until visible: {changes} times each way on each side")
    for i in range(changes):
        for side in order(i):
            for on in (True, False):
                try:
                    seconds, detail = watch_change(nets[side], on)
                    times.setdefault((on, side), []).append(seconds)
                    details.setdefault((on, side), []).append(detail)
                except BenchError as exc:
                    say(str(exc))
                    errors[(on, side)] = errors.get((on, side), 0) + 1
    rows = []
    for on, name in ((True, ROW_NAMES[9]), (False, ROW_NAMES[10])):
        figures = {
            side: _latency_figure(
                times.get((on, side), []), errors.get((on, side), 0), details.get((on, side), [])
            )
            for side in SIDES
        }
        note = (
            "PATCH of the identity's roleAttributes sent to its client GET /services showing it "
            f"(p50 of {changes}; each try's PATCH time and polls in the JSON)"
        )
        rows.append(make_row(name, "ms", False, figures, note))
    return rows


def measure_dataplane(
    nets: dict[str, Net], rounds: int, dials: int, bulk_bytes: int, bulk_repeat: int
) -> list[Row]:
    message = b"peer-dial-0123456789abcdef"[:DIAL_MESSAGE]
    dial_times: dict[str, list[float]] = {side: [] for side in SIDES}
    dial_errors = dict.fromkeys(SIDES, 0)
    for net in nets.values():
        for _ in range(WARM_UP_DIALS):
            echo_once(net.proxy_port, message)
    per_round = max(1, math.ceil(dials / rounds))
    for round_ in range(rounds):
        for side in order(round_):
            net = nets[side]
            settle_both(nets)
            say(f"round {round_ + 1}/{rounds}: {per_round} dials through {side}'s router")
            for _ in range(per_round):
                try:
                    dial_times[side].append(echo_once(net.proxy_port, message))
                except (OSError, BenchError):
                    dial_errors[side] += 1
    bulk: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for repeat in range(bulk_repeat):
        for side in order(repeat):
            net = nets[side]
            settle_both(nets)
            say(f"bulk {repeat + 1}/{bulk_repeat}: {bulk_bytes / 1e6:g} MB echoed through {side}'s router")
            tunnel_pids = [p for t in net.tunnelers for p in tree(t.proc.pid)]
            cpu_before = (net.controller.cpu(), cpu_seconds(tunnel_pids))
            try:
                elapsed = echo_bulk(net.proxy_port, bulk_bytes)
            except (OSError, BenchError) as exc:
                bulk[side].append({"error": str(exc)})
                continue
            cpu_after = (net.controller.cpu(), cpu_seconds(tunnel_pids))
            bulk[side].append(
                {
                    "seconds": round(elapsed, 3),
                    "mb_per_s": round(bulk_bytes / elapsed / 1e6, 1),
                    "controller_cpu_percent": round(100 * (cpu_after[0] - cpu_before[0]) / elapsed, 1),
                    "tunnelers_cpu_percent": round(100 * (cpu_after[1] - cpu_before[1]) / elapsed, 1),
                }
            )
    dial_figures = {side: _latency_figure(dial_times[side], dial_errors[side]) for side in SIDES}
    bulk_figures = {}
    for side in SIDES:
        good = [r for r in bulk[side] if "mb_per_s" in r]
        bulk_figures[side] = Figure(
            value=round(statistics.median(r["mb_per_s"] for r in good), 1) if good else 0.0,
            count=len(good) * bulk_bytes,
            errors=len(bulk[side]) - len(good),
            cpu_percent=round(statistics.median(r["controller_cpu_percent"] for r in good), 1)
            if good
            else None,
            runs=bulk[side],
        )
    return [
        make_row(
            ROW_NAMES[11],
            "ms",
            False,
            dial_figures,
            f"{dials} connections to ziti tunnel proxy, {DIAL_MESSAGE} bytes there and back; each dials the service (p50)",
        ),
        make_row(
            ROW_NAMES[12],
            "MB/s",
            True,
            bulk_figures,
            f"{bulk_bytes / 1e6:g} MB echoed on one connection, ziti tunnel proxy -> router -> ziti tunnel host; "
            f"median of {bulk_repeat}; CPU: the controller's processes (its router included)",
        ),
    ]


def memory_figure(memory: dict[str, Any]) -> Figure:
    return Figure(value=memory["rss_mb"], count=len(memory["processes"]), runs=[memory])


def restart(net: Net) -> dict[str, float]:
    """Stop and start ``net``'s controller: seconds to ``/version``, and until its router is
    online (polled from there)."""
    controller = net.controller
    controller.stop()
    seconds = controller.start()
    answered = time.perf_counter()
    net.api.close()
    net.api.login()
    router_online(net.api, START_TIMEOUT, poll=POLL)
    online = seconds + time.perf_counter() - answered
    return {"version_seconds": round(seconds, 3), "router_online_seconds": round(online, 3)}


def measure_restarts(nets: dict[str, Net], restarts: int) -> tuple[list[Row], dict[str, Figure]]:
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    memory: dict[str, Figure] = {}
    for i in range(restarts):
        for side in order(i):
            say(f"restart {i + 1}/{restarts} of {side}")
            runs[side].append(restart(nets[side]))
    settle_both(nets)
    for side in SIDES:
        memory[side] = memory_figure(nets[side].controller.memory())
    version = {
        side: Figure(
            value=round(statistics.median(r["version_seconds"] for r in runs[side]), 2),
            count=len(runs[side]),
            runs=runs[side],
        )
        for side in SIDES
    }
    online = {
        side: Figure(
            value=round(statistics.median(r["router_online_seconds"] for r in runs[side]), 2),
            count=len(runs[side]),
            runs=runs[side],
        )
        for side in SIDES
    }
    rows = [
        make_row(
            ROW_NAMES[13],
            "s",
            False,
            version,
            f"process start to GET /version 200, seeded; median of {restarts}",
        ),
        make_row(ROW_NAMES[14], "s", False, online, "process start to the router listed online"),
    ]
    return rows, memory


# == the report =====================================================================================


@dataclass
class Report:
    when: str
    machine: dict[str, Any]
    options: dict[str, Any]
    topology: dict[str, int]
    rows: list[Row]

    def table(self) -> str:
        lines = [
            f"| measure | {LABELS[OPENZITI]} | {LABELS[TRELLIS]} | Trellis / OpenZiti | Trellis "
            "| per CPU-second |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for row in self.rows:
            ratio = "?" if row.ratio is None else f"{row.ratio:.2f}"
            per_cpu = "" if row.cpu_ratio is None else f"{row.cpu_ratio:.2f}"
            lines.append(
                f"| {row.name} | {cell(row, row.openziti)} | {cell(row, row.trellis)} | {ratio} "
                f"| {row.verdict} | {per_cpu} |"
            )
        load = ", ".join(f"{x:.2f}" for x in self.machine["load_before"])
        after = ", ".join(f"{x:.2f}" for x in self.machine["load_after"])
        lines += [
            "",
            f"{self.topology['identities']:,} identities, {self.topology['services']:,} services, "
            f"{self.topology['configs']:,} configs, {self.topology['edge_routers']:,} edge routers, "
            f"{self.topology['service_policies']:,} / {self.topology['edge_router_policies']:,} / "
            f"{self.topology['service_edge_router_policies']:,} policies on each; "
            f"{self.options['rounds']} rounds interleaved; {self.machine['cores']} cores, load average "
            f"before {load}, after {after}.",
            "A rate's ratio above 1 is Trellis ahead, a time's or memory's below 1; 'level' is within 10 %. "
            "CPU: the controller's processes (% of one core) during the measure; per CPU-second: "
            "Trellis / OpenZiti of the rate per CPU-second they used.",
        ]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def _n(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def cell(row: Row, figure: Figure) -> str:
    """One side's figures as the table shows them."""
    errors = f", {figure.errors} errors" if figure.errors else ""
    latency = ""
    if figure.p50_ms is not None and figure.p99_ms is not None:
        latency = f"p50 {_n(figure.p50_ms)} / p99 {_n(figure.p99_ms)} ms"
    if row.unit == "ms":
        return latency + errors
    if row.unit == "MB":
        pss = sum(m["pss_mb"] for m in figure.runs)
        processes = "1 process" if figure.count == 1 else f"{figure.count} processes"
        return f"{_n(figure.value)} MB (PSS {_n(pss)}), {processes}"
    if row.unit == "s":
        return f"{figure.value:.2f} s{errors}"
    if row.unit == "MB/s":
        value = f"{_n(figure.value)} MB/s"
    elif row.unit.endswith("/s"):
        value = f"{_n(figure.value)}/s"
    else:
        value = f"{_n(figure.value)} {row.unit}"
    cpu = f"{figure.cpu_percent:.0f} % CPU" if figure.cpu_percent is not None else ""
    return ", ".join(x for x in (value, latency, cpu) if x) + errors


# == the run ========================================================================================


@dataclass(frozen=True)
class Options:
    identities: int
    seed: int
    rounds: int
    seconds: float
    connections: int
    clients: int
    writers: int
    dials: int
    bulk_mb: float
    bulk_repeat: int
    changes: int
    restarts: int
    session_pairs: int
    list_requests: int


QUICK = {
    "identities": 40,
    "rounds": 1,
    "seconds": 1.0,
    "connections": 4,
    "clients": 2,
    "dials": 5,
    "bulk_mb": 1.0,
    "bulk_repeat": 1,
    "changes": 2,
    "restarts": 1,
    "session_pairs": 200,
    "list_requests": 1,
}


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def ended_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run as an exception does, so every process is stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(options: Options, out: Path | None = None) -> Report:
    binary = ensure_ziti()
    wrk = ensure_wrk()
    compile_sources()
    tier = tier_for(options.identities)
    topology = generate(tier, options.seed)
    machine: dict[str, Any] = {
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "load_after": [],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "wrk": wrk.version(),
        "ziti": ZITI_VERSION,
    }
    rows: list[Row] = []
    bulk_bytes = int(options.bulk_mb * 1e6)
    with (
        tempfile.TemporaryDirectory(prefix="trellis-bench-peer-") as tmp,
        ExitStack() as stack,
        ended_on_signals(),
    ):
        work = Path(tmp)
        echo = EchoServer(WAIT)
        stack.callback(echo.close)
        controllers: dict[str, Controller] = {
            OPENZITI: OpenZitiController(work / OPENZITI, binary),
            TRELLIS: TrellisController(work / TRELLIS),
        }
        first: dict[str, Figure] = {}
        for side in SIDES:
            controller = controllers[side]
            stack.callback(controller.stop)
            say(f"first start of {side}")
            init = controller.init() if isinstance(controller, TrellisController) else 0.0
            started = controller.start()
            first[side] = Figure(
                value=round(init + started, 2),
                count=1,
                runs=[{"init_seconds": round(init, 2), "start_seconds": round(started, 2)}],
            )
        nets: dict[str, Net] = {}
        for side in SIDES:
            nets[side] = set_up(
                controllers[side],
                topology,
                binary=binary,
                echo_port=echo.port,
                workdir=work / f"{side}-clients",
                writers=options.writers,
                rounds=options.rounds,
                session_pairs=options.session_pairs,
            )
            stack.callback(stop_tunnelers, nets[side])
            stack.callback(nets[side].api.close)
        settle_both(nets)
        idle = {side: memory_figure(controllers[side].memory()) for side in SIDES}
        rows += measure_wrk(nets, wrk, work, options.rounds, options.seconds, options.connections)
        rows.append(measure_lists(nets, options.rounds, options.list_requests))
        rows += measure_logins(nets, options.rounds, options.seconds, options.clients)
        rows += measure_policy_change(nets, options.changes)
        for side in SIDES:
            say(f"starting the tunnelers of {side}")
            start_tunnelers(nets[side], binary, work / f"{side}-clients")
        rows += measure_dataplane(nets, options.rounds, options.dials, bulk_bytes, options.bulk_repeat)
        settle_both(nets)
        loaded = {side: memory_figure(controllers[side].memory()) for side in SIDES}
        for side in SIDES:
            stop_tunnelers(nets[side])
        restart_rows, restarted = measure_restarts(nets, options.restarts)
        rows += restart_rows
        rows.append(
            make_row(
                ROW_NAMES[15],
                "s",
                False,
                first,
                "an empty home: OpenZiti's quickstart makes its PKI and database; Trellis: init, then serve",
            )
        )
        memory_note = "sum of VmRSS over the controller's processes (PSS in the JSON)"
        rows.append(make_row(ROW_NAMES[16], "MB", False, idle, memory_note + "; after seeding"))
        rows.append(make_row(ROW_NAMES[17], "MB", False, loaded, memory_note + "; after every measure above"))
        rows.append(make_row(ROW_NAMES[18], "MB", False, restarted, memory_note))
        seeding = {
            side: Figure(
                value=nets[side].seeding.per_second,
                count=nets[side].seeding.entities,
                cpu_percent=nets[side].seeding.cpu_percent,
                runs=[asdict(nets[side].seeding)],
            )
            for side in SIDES
        }
        rows.append(
            make_row(
                ROW_NAMES[19],
                "creates/s",
                True,
                seeding,
                f"{options.writers} concurrent writers, one side after the other (not interleaved)",
            )
        )
    rows.sort(key=lambda row: ROW_NAMES.index(row.name))
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    counts = {
        "identities": len(topology.identities),
        "services": len(topology.services),
        "configs": 2 * len(topology.services),
        "edge_routers": len(topology.edge_routers),
        "service_policies": len(topology.service_policies),
        "edge_router_policies": len(topology.edge_router_policies),
        "service_edge_router_policies": len(topology.service_edge_router_policies),
    }
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        machine=machine,
        options=asdict(options),
        topology=counts,
        rows=rows,
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--identities", type=int, default=1000, help="identities seeded on each side (default 1,000)"
    )
    parser.add_argument("--seed", type=int, default=1, help="the topology generator's seed")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds, the sides' order swapped each (default 3)"
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="each wrk or login run (default 4)")
    parser.add_argument("--connections", type=int, default=16, help="wrk's connections (default 16)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent login clients (default 8)")
    parser.add_argument(
        "--seed-concurrency", type=int, default=8, help="concurrent writers seeding (default 8)"
    )
    parser.add_argument("--dials", type=int, default=60, help="dials through each router (default 60)")
    parser.add_argument("--bulk-mb", type=float, default=20.0, help="MB echoed per bulk run (default 20)")
    parser.add_argument("--bulk-repeat", type=int, default=3, help="bulk runs per side (default 3)")
    parser.add_argument(
        "--changes", type=int, default=20, help="policy changes each way per side (default 20)"
    )
    parser.add_argument("--restarts", type=int, default=2, help="restarts of each controller (default 2)")
    parser.add_argument(
        "--session-pairs",
        type=int,
        default=12000,
        help="(API session, service) pairs per side and round for Dial session creation (default 12,000)",
    )
    parser.add_argument(
        "--list-requests",
        type=int,
        default=5,
        help="lists of 500 identities per side and round, one at a time (default 5)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the smoke test's sizes: 40 identities, 1 round of 1 s, a few dials",
    )
    add_output_arguments(parser, RESULTS)


def options_of(args: argparse.Namespace) -> Options:
    values = {
        "identities": args.identities,
        "seed": args.seed,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "clients": args.clients,
        "writers": args.seed_concurrency,
        "dials": args.dials,
        "bulk_mb": args.bulk_mb,
        "bulk_repeat": args.bulk_repeat,
        "changes": args.changes,
        "restarts": args.restarts,
        "session_pairs": args.session_pairs,
        "list_requests": args.list_requests,
    }
    if args.quick:
        values.update(QUICK)
    options = Options(**values)
    flags = {name: name.replace("_", "-") for name in values}
    flags["writers"] = "seed-concurrency"
    for name in (
        "identities",
        "rounds",
        "connections",
        "clients",
        "writers",
        "dials",
        "bulk_repeat",
        "changes",
    ):
        if getattr(options, name) < 1:
            raise SystemExit(f"--{flags[name]} must be 1 or more")
    for name in ("restarts", "session_pairs", "list_requests"):
        if getattr(options, name) < 1:
            raise SystemExit(f"--{flags[name]} must be 1 or more")
    if options.seconds <= 0 or options.bulk_mb <= 0:
        raise SystemExit("--seconds and --bulk-mb must be more than 0")
    return options


def main(args: argparse.Namespace) -> str:
    options = options_of(args)
    out = results_path(args, RESULTS)
    report = run(options, out)
    return report.table() + f"\n\nJSON: {out}"
