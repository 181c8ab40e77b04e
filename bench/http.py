"""The HTTP path end to end: ``trellis serve`` under wrk, side by side with a bare Falcon app.

``python -m bench http [--tier S|L] [--seconds N] [--connections 16] [--out PATH | --publish]``:

1. **Seed.** ``trellis init`` makes a home (PKI, database, the admin) in a temporary directory;
   then, in a child process, the tier's generated topology (:mod:`bench.topology`: identities,
   services, edge routers, posture checks and the three kinds of policies, as
   :mod:`bench.startup` writes them) goes into the DuckDB file through the store in batches of
   20,000 rows, not through 100k HTTP calls. Added to it: 100 ``bench-svc-NNN`` services
   (``#bench-services``), the ``bench-er`` edge router, and a Dial service policy, an edge router
   policy and a service edge router policy that give ``#bench-client`` identities those services
   through that router.
2. **The yardstick.** :mod:`bench.bare` (``{"hello": "world"}`` from a bare Falcon app) is served
   with ``trellis serve``'s settings (one gunicorn worker, the same TLS certificate,
   context and access log) twice: with gunicorn's ``gthread`` worker and 8 threads (the issue's yardstick) and
   with the controller's own worker (:mod:`controller.worker`). wrk drives ``GET /`` for ``--seconds``.
3. **The server.** ``trellis serve`` (``--worker trellis``, the default: exactly the shipped
   command) or the same app under gthread with 8 threads (``--worker gthread``) starts on
   127.0.0.1 with the per-client budgets off (``TRELLIS_RATE_AUTH_PER_MINUTE=0``,
   ``TRELLIS_RATE_WRITE_PER_MINUTE=0``). Its start time is from the process's start to the
   first ``GET /version`` answered (polled every 50 ms); its memory is the resident set of the
   gunicorn master, its worker and the worker's database writer process just after start, the
   worker's peak at the end, and at the end each process's resident and proportional sets (RSS,
   and PSS, which counts a library the processes share once); its CPU is theirs together. The
   control listener gets a free port too (another server may hold 6262).
4. **Set-up over HTTP** (a few calls): the ``bench-device`` identity (``#bench-client``, a
   password through an ``updb`` enrollment), an admin API session, and the device's API sessions
   for the Dial scenario (see below).
5. **Scenarios**, each one wrk run of ``--seconds`` with ``-t{threads} -c{connections}``
   (default ``-t1 -c16``) on kept-alive TLS connections, requests from
   ``bench/wrk/scenario.lua``:

   - ``version``: ``GET /version`` (no authentication; the app's fixed cost);
   - ``authenticate``: ``POST /edge/client/v1/authenticate?method=password`` as the device
     (an argon2id verification and a new API session each; ``python -m bench logins`` has both
     login methods at 8 clients);
   - ``client services``: ``GET /edge/client/v1/services?limit=25&offset=N`` as the device,
     page after page, as the C SDK lists them (its page size is 25): every service it may use
     (100 bench services, plus at tier L those of the tier's ``#all`` service policies: the row
     names the count);
   - ``client services 500``: the same services in one ``limit=500`` page;
   - ``policy advice``: ``GET /identities/{device}/policy-advice/{bench service}`` (admin);
   - ``identities``, ``identities name=``, ``identities anyOf``: ``GET /identities?limit=10``
     with no filter, ``filter=name="<a tier identity>"`` and
     ``filter=anyOf(roleAttributes)="<its first attribute>"`` (admin);
   - ``patch service policy``: ``PATCH /service-policies/{id}`` of a tier Dial policy, its
     ``identityRoles`` alternating between the generated roles and those plus one ``@identity``
     (admin; a durable write and a policy role change each);
   - ``create session``: ``POST /edge/client/v1/sessions`` (Dial) as the device;
   - ``repeat session``: the same request over the device's own API session and the 100 bench
     services, each of which has its session after its first request: the whole path of a
     ``create session`` (TLS, authentication, the policy checks, the answer) but the durable
     write, which is what separates the two rows.

   **Durable session creations.** A session is kept per (API session, type, service): asking
   again returns the same session (also 201) and writes nothing. So the harness logs the device
   in ``K`` times before the run and the requests rotate over ``K`` x 100 distinct (API session,
   service) pairs, API session first (each API session gains one session per round), enough for
   ``--session-rate`` (default 3,000, the issue's target) creations per second for the whole
   run. What counts as created is the number of sessions the server holds after the run minus
   before (``GET /sessions``' ``totalCount``), over wrk's duration: ``durable creations/s``. If
   the server got through every pair, later answers are repeats, and the row says so.

   The scenarios run in this order on one server, so each finds what earlier ones wrote (the
   API sessions of ``authenticate``, for one). ``patch service policy`` runs before
   ``create session``: a service policy change re-checks every session there is. Before each
   scenario the harness waits (up to 30 s) until the server is idle, so that requests an earlier
   scenario left in flight (16 password logins take seconds) are not counted against it.

6. **Report.** Per scenario: requests/s, p50 and p99 latency (wrk's distribution, printed by
   the script's ``done()``), errors (answers other than 2xx, plus wrk's socket errors and
   timeouts), the ratio of its requests/s to each bare app's, and the CPU the server and wrk used
   meanwhile (% of one core, from ``/proc`` and ``getrusage``). The table is printed and written
   as JSON with the machine: cores, load average before and after, Python, platform, wrk's
   version. The JSON goes to ``bench/results/local/http-<tier>.json`` (ignored by git; see
   :mod:`bench.output`), to the committed ``bench/results/http-<tier>.json`` with ``--publish``,
   or to ``--out PATH``.

**wrk** comes from Debian's packages. When it is not on ``PATH`` (nor already fetched) the
harness says what it is about to do, then fetches it without touching the system:
``apt-get download`` of wrk and its LuaJIT library, unpacked with ``dpkg-deb -x`` under the
repository's ``.cache/wrk/`` (ignored by git: the directory carries its own ``.gitignore``) and
run from there with ``LD_LIBRARY_PATH``. Installing it system-wide (``apt-get install -y wrk``,
after an ``apt-get update`` if the first attempt fails; as root) happens only when asked,
with ``--install-wrk``, and is tried first then. If nothing works it stops with a clear error.

``--only "policy advice,create session"`` runs just those scenarios (the bare apps always run).
``--profile DIR`` has py-spy (a dev dependency) sample the server's worker during each scenario,
100 times a second without pausing it, and write a flame graph per scenario as ``DIR/<name>.svg``.

Run::

    python -m bench http                              # tier S, 10 s per scenario
    python -m bench http --tier L --seconds 10
    python -m bench http --tier L --only "create session" --profile /tmp/flames
    python -m bench http --tier S --seconds 1 --out /tmp/http.json
    python -m bench http --tier L --publish           # the committed bench/results/http-L.json

Everything runs on one machine: wrk (one thread) shares the cores with the server, so the
figures compare the scenarios with each other and with the bare app in the same run, and vary
with whatever else runs there. Every wrk run is bounded by ``--seconds`` (and a process time
limit), every setup request by a timeout; traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench.output import add_output_arguments, results_path
from bench.serving import HOST, PASSWORD, free_port, init_home, timed
from bench.topology import TIERS
from bench.writes import Client

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "wrk" / "scenario.lua"
CACHE = ROOT / ".cache" / "wrk"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
#: Budgets off: the benchmark measures the request path, not the rate limiter.
SERVER_ENV = {"TRELLIS_RATE_AUTH_PER_MINUTE": "0", "TRELLIS_RATE_WRITE_PER_MINUTE": "0"}
DEVICE = "bench-device"
DEVICE_PASSWORD = "bench-device-password"
DEVICE_ROLE = "bench-client"
SERVICE_ROLE = "bench-services"
ROUTER_ROLE = "bench-er"
BENCH_SERVICES = 100
#: The Debian packages the cached wrk is unpacked from (wrk needs LuaJIT; libssl3 is the system's).
WRK_PACKAGES = ("wrk", "libluajit-5.1-2")
#: Answers slower than this count as wrk timeouts (a list at tier L under 16 connections queues).
WRK_TIMEOUT_SECONDS = 30
READY_TIMEOUT_SECONDS = 180.0


class WrkUnavailable(RuntimeError):
    """wrk is not on PATH and could not be installed."""


# -- wrk -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wrk:
    """How to run wrk: the executable and what its environment needs (LD_LIBRARY_PATH)."""

    path: str
    env: dict[str, str] = field(default_factory=dict)

    def version(self) -> str:
        out = subprocess.run(
            [self.path, "-v"], env=dict(os.environ, **self.env), capture_output=True, text=True, timeout=30
        )
        text = (out.stdout + out.stderr).strip()
        return text.splitlines()[0].split(" Copyright")[0] if text else "?"


def _cached_wrk(cache: Path) -> Wrk | None:
    binary = cache / "root" / "usr" / "bin" / "wrk"
    if not binary.is_file():
        return None
    libs = sorted(str(p) for p in (cache / "root" / "usr" / "lib").glob("*-linux-gnu") if p.is_dir())
    libs.append(str(cache / "root" / "usr" / "lib"))
    return Wrk(str(binary), {"LD_LIBRARY_PATH": os.pathsep.join(libs)})


def _run_quietly(command: Sequence[str], cwd: Path | None = None, timeout: float = 600) -> tuple[bool, str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as ex:
        return False, f"{' '.join(command)}: {ex}"
    tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
    return out.returncode == 0, f"{' '.join(command)}: exit {out.returncode}: {' / '.join(tail)}"


def _apt_install() -> tuple[Wrk | None, list[str]]:
    notes: list[str] = []
    for update_first in (False, True):
        if update_first:
            ok, note = _run_quietly(["apt-get", "update"])
            if not ok:
                notes.append(note)
        ok, note = _run_quietly(["apt-get", "install", "-y", "wrk"])
        found = shutil.which("wrk")
        if ok and found:
            return Wrk(found), notes
        notes.append(note)
    return None, notes


def _download_into(cache: Path) -> tuple[Wrk | None, list[str]]:
    """``apt-get download`` wrk and LuaJIT, unpacked under ``cache`` (no root needed)."""
    notes: list[str] = []
    debs = cache / "debs"
    if debs.exists():
        shutil.rmtree(debs)
    debs.mkdir(parents=True)
    ignore = cache.parent / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# downloads and unpacked tools of the benchmarks (bench/http.py)\n*\n")
    for package in WRK_PACKAGES:
        ok, note = _run_quietly(["apt-get", "download", package], cwd=debs)
        if not ok:
            notes.append(note)
            return None, notes
    for deb in sorted(debs.glob("*.deb")):
        ok, note = _run_quietly(["dpkg-deb", "-x", str(deb), str(cache / "root")])
        if not ok:
            notes.append(note)
            return None, notes
    found = _cached_wrk(cache)
    if found is None:
        notes.append(f"no usr/bin/wrk under {cache / 'root'} after unpacking")
    return found, notes


def ensure_wrk(*, cache: Path = CACHE, allow_system_install: bool = False) -> Wrk:
    """wrk from PATH, else from ``cache``, else fetched: installed system-wide only with
    ``allow_system_install`` (``apt-get install``, as root), else unpacked into ``cache``. Each
    attempt is announced on stderr before it runs; :class:`WrkUnavailable` with every attempt's
    outcome if none works."""
    found = shutil.which("wrk")
    if found:
        return Wrk(found)
    cached = _cached_wrk(cache)
    if cached is not None:
        return cached
    notes: list[str] = []
    if not shutil.which("apt-get"):
        raise WrkUnavailable(
            "wrk is not on PATH and apt-get is not available: install wrk (Debian: apt-get install wrk)"
        )
    if allow_system_install:
        if os.geteuid() == 0:
            _log(
                "wrk is not on PATH: installing it system-wide (--install-wrk): apt-get install -y wrk "
                "(apt-get update first if that fails)"
            )
            installed, more = _apt_install()
            notes += more
            if installed is not None:
                return installed
        else:
            notes.append("--install-wrk: apt-get install needs root; fetching into the cache instead")
    if shutil.which("dpkg-deb"):
        _log(
            f"wrk is not on PATH: fetching the Debian packages {', '.join(WRK_PACKAGES)} with apt-get download "
            f"and unpacking them into {cache} (nothing is installed on the system)"
        )
        unpacked, more = _download_into(cache)
        notes += more
        if unpacked is not None:
            return unpacked
    else:
        notes.append("dpkg-deb is not available")
    if not allow_system_install:
        notes.append("or install it yourself (apt-get install wrk), or pass --install-wrk to have it done")
    raise WrkUnavailable("wrk is not on PATH and could not be fetched:\n  " + "\n  ".join(notes))


# -- seeding -------------------------------------------------------------------------------------


@dataclass
class Seeded:
    """What the scenarios need to know of the seeded data."""

    tier: str
    rows: int
    seconds: float
    identity_name: str
    identity_attribute: str
    policy_id: str
    policy_identity_roles: list[str]
    extra_identity_role: str
    bench_services: list[str]


def _bench_entities(now: dt.datetime) -> list[Any]:
    from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
    from engine.entities.routers import EdgeRouter
    from engine.entities.services import Service

    def common(row_id: str) -> dict[str, Any]:
        return {"id": row_id, "created_at": now, "updated_at": now, "name": row_id}

    out: list[Any] = [
        Service(**common(f"bench-svc-{n:03d}"), role_attributes=[SERVICE_ROLE]) for n in range(BENCH_SERVICES)
    ]
    out.append(EdgeRouter(**common("bench-er"), role_attributes=[ROUTER_ROLE]))
    out.append(
        ServicePolicy(
            **common("bench-dial"),
            semantic="AnyOf",
            type="Dial",
            identity_roles=[f"#{DEVICE_ROLE}"],
            service_roles=[f"#{SERVICE_ROLE}"],
        )
    )
    out.append(
        EdgeRouterPolicy(
            **common("bench-erp"),
            semantic="AnyOf",
            identity_roles=[f"#{DEVICE_ROLE}"],
            edge_router_roles=[f"#{ROUTER_ROLE}"],
        )
    )
    out.append(
        ServiceEdgeRouterPolicy(
            **common("bench-serp"),
            semantic="AnyOf",
            service_roles=[f"#{SERVICE_ROLE}"],
            edge_router_roles=[f"#{ROUTER_ROLE}"],
        )
    )
    return out


def _seed_child(database: str, tier: str, seed: int, out: str) -> None:
    """(In a spawned child) write the tier and the bench entities into ``database`` (a DuckDB
    file, or a PostgreSQL URL)."""
    from bench.startup import _BATCH, _entities
    from bench.topology import generate
    from engine.ports import Put, Store

    began = time.perf_counter()
    topology = generate(tier, seed)
    entities = _entities(tier, seed) + _bench_entities(dt.datetime.now(dt.UTC))
    store: Store
    if database.startswith("postgresql:"):
        from storage.postgres import PostgresStore

        store = PostgresStore(database)
    else:
        from storage.duckdb import DuckDBStore

        store = DuckDBStore(Path(database))
    try:
        for start in range(0, len(entities), _BATCH):
            store.commit([Put(e) for e in entities[start : start + _BATCH]])
    finally:
        store.close()
    probe = topology.identities[len(topology.identities) // 2]
    policy = next(p for p in topology.service_policies if p.type == "Dial" and not p.posture_check_roles)
    extra = f"@{topology.identities[-1].id}"
    roles = [r for r in policy.identity_roles if r != extra]
    seeded = Seeded(
        tier=tier,
        rows=len(entities),
        seconds=round(time.perf_counter() - began, 2),
        identity_name=probe.id,  # bench.startup names every entity by its id
        identity_attribute=probe.attributes[0],
        policy_id=policy.id,
        policy_identity_roles=roles,
        extra_identity_role=extra,
        bench_services=[f"bench-svc-{n:03d}" for n in range(BENCH_SERVICES)],
    )
    Path(out).write_text(json.dumps(asdict(seeded)))


def seed_home(home: Path, tier: str, seed: int, database_url: str = "") -> Seeded:
    """``trellis init`` in ``home``, then the tier written into its database (a child process):
    its DuckDB file, or the PostgreSQL database of ``database_url``."""
    init_home(home, {"TRELLIS_DATABASE_URL": database_url} if database_url else None)
    out = home / "seeded.json"
    child = get_context("spawn").Process(
        target=_seed_child, args=(database_url or str(home / "trellis.duckdb"), tier, seed, str(out))
    )
    child.start()
    child.join()
    if child.exitcode != 0 or not out.exists():
        raise RuntimeError(f"seeding tier {tier} failed (exit {child.exitcode})")
    return Seeded(**json.loads(out.read_text()))


# -- servers -------------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (kB) of ``pid`` from ``/proc``; empty where it cannot be read."""
    out: dict[str, int] = {}
    with suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


def _rss_pss(pid: int) -> dict[str, float]:
    """``pid``'s resident set (RSS) and proportional set (PSS: each shared page divided among the
    processes that map it, so that the sum over processes counts a shared library once), in MB,
    from ``/proc/<pid>/smaps_rollup``; empty where it cannot be read."""
    out: dict[str, float] = {}
    with suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            key, _, value = line.partition(":")
            if key in ("Rss", "Pss"):
                out[f"{key.lower()}_mb"] = round(int(value.split()[0]) / 1024, 1)
    return out


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with suppress(OSError, ValueError):
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            found.extend(int(c) for c in children.read_text().split())
    return found


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants: gunicorn's master, its worker and the worker's database writer."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(_children(current))
    return found


def _cpu_seconds(pids: Sequence[int]) -> float | None:
    """User + system CPU seconds used so far by ``pids`` (Linux ``/proc``); None elsewhere."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    try:
        for pid in pids:
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
    except (OSError, ValueError, IndexError):
        return None
    return total


@dataclass
class Running:
    """A server process started by :func:`serving`: its port, CA, pids and start figures."""

    name: str
    port: int
    ca: str
    pid: int
    start_seconds: float
    rss_mb_at_start: float
    log: Path

    def pids(self) -> list[int]:
        return _tree(self.pid)

    def cpu_seconds(self) -> float | None:
        return _cpu_seconds(self.pids())

    def worker_peak_rss_mb(self) -> float:
        peaks = [_status(pid).get("VmHWM", 0) for pid in _children(self.pid)]
        return round(max(peaks, default=0) / 1024, 1)

    def memory(self) -> dict[str, dict[str, float]]:
        """Per process of the server (``master``, ``worker``, ``writer``, ``router``), its resident
        and proportional sets in MB (:func:`_rss_pss`)."""
        out: dict[str, dict[str, float]] = {}
        for pid in self.pids():
            with suppress(OSError):
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                role = (
                    "master" if pid == self.pid
                    else "writer" if "storage.duckdb.writer" in command
                    else "router" if " router " in command
                    else "worker"
                )  # fmt: skip
                out[role if role not in out else f"{role} {pid}"] = _rss_pss(pid)
        return out


@contextmanager
def serving(
    home: Path, name: str, command: Sequence[str], ready_path: str, extra_env: dict[str, str] | None = None
) -> Iterator[Running]:
    """Start ``command`` (a server reading TRELLIS_HOME/TRELLIS_BIND) in its own process group,
    wait until ``ready_path`` answers 200, stop it on exit (SIGINT, then SIGKILL to its group)."""
    port = free_port()
    ca = str(home / "pki" / "ca-bundle.pem")
    env = dict(os.environ, TRELLIS_HOME=str(home), TRELLIS_BIND=f"{HOST}:{port}", **SERVER_ENV)
    env.update(extra_env or {})
    # The control listener on a free port too: another server on this machine (a test's, or
    # OpenZiti's quickstart) may hold the default 6262, and serve would stop at once.
    env["TRELLIS_CTRL_BIND"] = f"{HOST}:{free_port()}"
    env.pop("TRELLIS_ADMIN_PASSWORD", None)
    env.pop("TRELLIS_ADMIN_PASSWORD_FILE", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    log_path = home / f"serve-{name}.log"
    log = log_path.open("ab")
    began = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited {proc.returncode}; see {log_path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer in {READY_TIMEOUT_SECONDS:.0f} s; see {log_path}")
            if timed(port, ca, "GET", ready_path, timeout=2)[1] == 200:
                break
            time.sleep(0.05)
        started = time.perf_counter() - began
        rss = sum(_status(pid).get("VmRSS", 0) for pid in _tree(proc.pid))
        yield Running(name, port, ca, proc.pid, round(started, 2), round(rss / 1024, 1), log_path)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()


def settle(server: Running, *, idle_percent: float = 15.0, limit_seconds: float = 30.0) -> None:
    """Wait (at most ``limit_seconds``) until the server uses less than ``idle_percent`` of a core
    over 0.25 s: what a scenario left running (slow requests still in flight when wrk stopped,
    a batch being written) does not count against the next one."""
    deadline = time.monotonic() + limit_seconds
    while time.monotonic() < deadline:
        before = server.cpu_seconds()
        time.sleep(0.25)
        after = server.cpu_seconds()
        if before is None or after is None or (after - before) / 0.25 * 100 < idle_percent:
            return


@contextmanager
def _database(database: str) -> Iterator[str]:
    """The PostgreSQL URL of a new database on a server started for the run (``postgres``), or
    "" (``duckdb``: the home's file)."""
    if database != "postgres":
        yield ""
        return
    from tests.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("--database postgres: PostgreSQL is not installed (no initdb, postgres)")
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server.new_database()
    finally:
        server.destroy()


def trellis_command(worker: str) -> list[str]:
    """``trellis serve`` itself, or the same app under gthread (bench.serving's ``gthread-8``)."""
    if worker == "trellis":
        return [sys.executable, "-m", "controller.cli", "serve"]
    return [sys.executable, "-m", "bench.serving", "--serve", "gthread-8"]


def bare_command(worker: str) -> list[str]:
    return [sys.executable, "-m", "bench.bare", "--worker", worker]


# -- set-up over HTTP ----------------------------------------------------------------------------


@dataclass
class World:
    admin: str
    device_id: str
    device_token: str
    dial_tokens: list[str]
    device_services: int


def _total(client: Client, path: str, token: str) -> int:
    body = client.expect(200, "GET", path, token)
    return int(body["meta"]["pagination"]["totalCount"])


def session_count(server: Running, admin: str) -> int:
    """The sessions the server holds (``GET /sessions``' ``totalCount``), on a new connection."""
    client = Client(server.port, server.ca)
    try:
        return _total(client, f"{MGMT}/sessions?limit=1", admin)
    finally:
        client.close()


def set_up(server: Running, api_sessions: int) -> World:
    """The device (password, ``#bench-client``), an admin API session, ``api_sessions`` device
    API sessions for the Dial scenario."""
    client = Client(server.port, server.ca)
    try:
        admin = client.login(MGMT, "admin", PASSWORD)
        created = client.expect(
            201,
            "POST",
            f"{MGMT}/identities",
            admin,
            {
                "name": DEVICE,
                "type": "Device",
                "isAdmin": False,
                "roleAttributes": [DEVICE_ROLE],
                "enrollment": {"updb": DEVICE},
            },
        )
        device_id = str(created["data"]["id"])
        detail = client.expect(200, "GET", f"{MGMT}/identities/{device_id}", admin)
        token = detail["data"]["enrollment"]["updb"]["token"]
        client.expect(200, "POST", f"{CLIENT}/enroll/updb?token={token}", body={"password": DEVICE_PASSWORD})
        device_token = client.login(CLIENT, DEVICE, DEVICE_PASSWORD)
        services = _total(client, f"{CLIENT}/services?limit=1", device_token)
    finally:
        client.close()

    def login(_: int) -> str:
        one = Client(server.port, server.ca)
        try:
            return one.login(CLIENT, DEVICE, DEVICE_PASSWORD)
        finally:
            one.close()

    with ThreadPoolExecutor(4) as pool:
        dial_tokens = list(pool.map(login, range(api_sessions)))
    return World(admin, device_id, device_token, dial_tokens, services)


# -- scenarios -----------------------------------------------------------------------------------

#: (method, path, token, body) of one request line of the scenario file.
Request = tuple[str, str, str, str]


@dataclass
class Scenario:
    name: str
    requests: list[Request]
    #: What the row says besides the figures.
    note: str = ""


#: The C SDK lists services ``limit=25`` at a time (its ``DEFAULT_PAGE_SIZE``), page after page.
SDK_PAGE = 25
#: Every scenario :func:`scenarios` makes, in order (``--only`` takes these names).
SCENARIO_NAMES = (
    "version",
    "authenticate",
    "client services",
    "client services 500",
    "policy advice",
    "identities",
    "identities name=",
    "identities anyOf",
    "patch service policy",
    "create session",
    "repeat session",
)


def _query(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def scenarios(seeded: Seeded, world: World) -> list[Scenario]:
    """The scenarios, in the order they run (see the module docstring)."""
    admin, device = world.admin, world.device_token
    login = json.dumps({"username": DEVICE, "password": DEVICE_PASSWORD})
    name_filter = _query(f'name="{seeded.identity_name}"')
    any_filter = _query(f'anyOf(roleAttributes)="{seeded.identity_attribute}"')
    roles = seeded.policy_identity_roles
    patch_path = f"{MGMT}/service-policies/{seeded.policy_id}"
    patches = [
        ("PATCH", patch_path, admin, json.dumps({"identityRoles": [*roles, seeded.extra_identity_role]})),
        ("PATCH", patch_path, admin, json.dumps({"identityRoles": roles})),
    ]
    services = seeded.bench_services
    dials: list[Request] = [
        ("POST", f"{CLIENT}/sessions", token, json.dumps({"serviceId": service, "type": "Dial"}))
        for service in services
        for token in world.dial_tokens
    ]
    return [
        Scenario("version", [("GET", "/version", "", "")], "no authentication"),
        Scenario(
            "authenticate",
            [("POST", f"{CLIENT}/authenticate?method=password", "", login)],
            "password (argon2id), a new API session each",
        ),
        Scenario(
            "client services",
            [
                ("GET", f"{CLIENT}/services?limit={SDK_PAGE}&offset={offset}", device, "")
                for offset in range(0, max(world.device_services, 1), SDK_PAGE)
            ],
            f"{world.device_services} services in pages of {SDK_PAGE}, as the C SDK asks",
        ),
        Scenario(
            "client services 500",
            [("GET", f"{CLIENT}/services?limit=500", device, "")],
            f"{world.device_services} services in one page",
        ),
        Scenario(
            "policy advice",
            [("GET", f"{MGMT}/identities/{world.device_id}/policy-advice/{services[0]}", admin, "")],
        ),
        Scenario("identities", [("GET", f"{MGMT}/identities?limit=10", admin, "")], "limit=10, no filter"),
        Scenario(
            "identities name=",
            [("GET", f"{MGMT}/identities?limit=10&filter={name_filter}", admin, "")],
            'filter=name="..."',
        ),
        Scenario(
            "identities anyOf",
            [("GET", f"{MGMT}/identities?limit=10&filter={any_filter}", admin, "")],
            f'filter=anyOf(roleAttributes)="{seeded.identity_attribute}"',
        ),
        Scenario("patch service policy", patches, "identityRoles alternating"),
        Scenario("create session", dials, f"Dial; {len(dials):,} (API session, service) pairs"),
        Scenario(
            "repeat session",
            [
                ("POST", f"{CLIENT}/sessions", device, json.dumps({"serviceId": service, "type": "Dial"}))
                for service in services
            ],
            f"Dial; the device's own {len(services)} pairs, each open after its first: nothing to write",
        ),
    ]


def write_requests(path: Path, requests: Sequence[Request]) -> None:
    lines = []
    for method, target, token, body in requests:
        if any("\t" in part or "\n" in part for part in (method, target, token, body)):
            raise ValueError(f"a request line may hold no tab or newline: {method} {target}")
        lines.append("\t".join((method, target, token, body)))
    path.write_text("\n".join(lines) + "\n")


@dataclass
class Row:
    """One scenario's figures."""

    scenario: str
    server: str
    seconds: float
    requests: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    #: Answers other than 2xx plus wrk's socket errors and timeouts.
    errors: int
    statuses: dict[str, int]
    socket_errors: dict[str, int]
    server_cpu_percent: float | None
    wrk_cpu_percent: float
    ratio_to_bare_gthread: float | None = None
    ratio_to_bare_trellis: float | None = None
    #: ``create session`` only: sessions the server holds after minus before, and per second.
    durable_creations: int | None = None
    durable_creations_per_second: float | None = None
    note: str = ""


def run_wrk(
    wrk: Wrk,
    server: Running,
    scenario: Scenario,
    workdir: Path,
    *,
    seconds: float,
    connections: int,
    threads: int,
) -> Row:
    """One wrk run of ``scenario`` against ``server``."""
    requests_file = workdir / f"requests-{scenario.name.replace(' ', '-').replace('=', '')}.tsv"
    write_requests(requests_file, scenario.requests)
    duration = max(1, math.ceil(seconds))
    command = [
        wrk.path,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration}s",
        f"--timeout={WRK_TIMEOUT_SECONDS}s",
        "-s",
        str(SCRIPT),
        f"https://{HOST}:{server.port}/",
    ]
    env = dict(os.environ, **wrk.env, BENCH_REQUESTS=str(requests_file), BENCH_THREADS=str(threads))
    server_cpu = server.cpu_seconds()
    wrk_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=duration + WRK_TIMEOUT_SECONDS + 60
    )
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_after = server.cpu_seconds()
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCH-RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(
            f"wrk failed for {scenario.name} (exit {out.returncode}): {out.stderr.strip() or out.stdout.strip()}"
        )
    result = json.loads(line.removeprefix("BENCH-RESULT "))
    elapsed = result["duration_us"] / 1e6
    statuses = {k: int(v) for k, v in sorted(result["statuses"].items())}
    sockets = {k: int(v) for k, v in result["socket_errors"].items() if v}
    non_2xx = sum(n for code, n in statuses.items() if not 200 <= int(code) < 300)
    latency = result["latency_us"]
    wrk_seconds = (used.ru_utime - wrk_cpu.ru_utime) + (used.ru_stime - wrk_cpu.ru_stime)
    server_seconds = None if server_cpu is None or server_after is None else server_after - server_cpu
    return Row(
        scenario=scenario.name,
        server=server.name,
        seconds=round(elapsed, 2),
        requests=int(result["requests"]),
        requests_per_second=round(result["requests"] / elapsed, 1) if elapsed > 0 else 0.0,
        p50_ms=round(latency["p50"] / 1000, 2),
        p99_ms=round(latency["p99"] / 1000, 2),
        max_ms=round(latency["max"] / 1000, 2),
        errors=non_2xx + sum(sockets.values()),
        statuses=statuses,
        socket_errors=sockets,
        server_cpu_percent=None if server_seconds is None else round(100 * server_seconds / elapsed, 1),
        wrk_cpu_percent=round(100 * wrk_seconds / elapsed, 1) if elapsed > 0 else 0.0,
        note=scenario.note,
    )


# -- profiles ------------------------------------------------------------------------------------


def ensure_py_spy() -> str:
    """py-spy (a dev dependency) next to this interpreter, else on ``PATH``."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install -e '.[dev]'")
    return found


def profile_file(directory: Path, scenario: str) -> Path:
    return directory / f"{scenario.replace(' ', '-').replace('=', '')}.svg"


@contextmanager
def profiling(
    spy: str | None, server: Running, scenario: Scenario, directory: Path | None, seconds: float
) -> Iterator[None]:
    """While the body runs, py-spy samples the server's worker (100 Hz, without pausing it; only the
    thread holding the GIL, so the graph is where the one core goes) for the scenario's duration
    and writes a flame graph (SVG) to ``directory``; nothing without ``spy``."""
    if spy is None or directory is None:
        yield
        return
    directory.mkdir(parents=True, exist_ok=True)
    workers = _children(server.pid) or [server.pid]
    target = profile_file(directory, scenario.name)
    command = [
        spy, "record", "--gil", "--nonblocking", "--rate", "100", "--duration", str(max(1, math.ceil(seconds))),
        "--pid", str(workers[0]), "--format", "flamegraph", "--output", str(target),
    ]  # fmt: skip
    spying = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield
    finally:
        try:
            _, err = spying.communicate(timeout=seconds + 60)
        except subprocess.TimeoutExpired:
            spying.kill()
            _, err = spying.communicate()
        if spying.returncode != 0:
            _log(f"py-spy failed for {scenario.name}: {err.strip()[-300:]}")
        elif target.exists():
            # the graph's title is py-spy's command line: no path of this machine in a result
            text = target.read_text().replace(spy, "py-spy").replace(f"{ROOT}{os.sep}", "")
            target.write_text(text)


# -- the report ----------------------------------------------------------------------------------


@dataclass
class Report:
    when: str
    tier: str
    seed: int
    seconds_per_scenario: float
    connections: int
    threads: int
    worker: str
    machine: dict[str, Any]
    seeding: dict[str, Any]
    servers: dict[str, dict[str, Any]]
    rows: list[Row]
    notes: list[str]

    def table(self) -> str:
        lines = [
            "| scenario | req/s | p50 ms | p99 ms | errors | vs bare gthread | vs bare trellis worker "
            "| server CPU | wrk CPU | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]

        def ratio(value: float | None) -> str:
            if value is None:
                return "-"
            return f"{100 * value:.0f} %" if value >= 0.01 else f"{100 * value:.1f} %"

        for r in self.rows:
            errors = str(r.errors)
            if r.errors:
                detail = [f"{k}: {n}" for k, n in r.statuses.items() if not k.startswith("2")]
                detail += [f"{k}: {n}" for k, n in r.socket_errors.items()]
                errors += f" ({', '.join(detail)})"
            server = "?" if r.server_cpu_percent is None else f"{r.server_cpu_percent:.0f} %"
            note = r.note
            if r.durable_creations is not None:
                note += f"; {r.durable_creations:,} created, {r.durable_creations_per_second:,.0f} durable/s"
            lines.append(
                f"| {r.scenario} | {r.requests_per_second:,.0f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {errors} "
                f"| {ratio(r.ratio_to_bare_gthread)} | {ratio(r.ratio_to_bare_trellis)} | {server} "
                f"| {r.wrk_cpu_percent:.0f} % | {note} |"
            )
        m = self.machine
        trellis = self.servers.get("trellis", {})
        lines += [
            "",
            f"tier {self.tier} (seed {self.seed}): {self.seeding['rows']:,} rows seeded in "
            f"{self.seeding['seconds']:.1f} s; wrk -t{self.threads} -c{self.connections}, "
            f"{self.seconds_per_scenario:g} s per scenario; server worker: {self.worker}.",
            f"trellis serve ({self.worker} worker): started in {trellis.get('start_seconds', 0):.2f} s "
            f"(process start to first answer), {trellis.get('rss_mb_at_start', 0):.0f} MB resident after start "
            f"(master, worker and database writer), worker peak {trellis.get('worker_peak_rss_mb', 0):.0f} MB.",
        ]
        after = trellis.get("memory_after") or {}
        if after:
            parts = ", ".join(
                f"{role} {mem.get('rss_mb', 0):.0f} / {mem.get('pss_mb', 0):.0f}"
                for role, mem in after.items()
            )
            rss = sum(mem.get("rss_mb", 0) for mem in after.values())
            pss = sum(mem.get("pss_mb", 0) for mem in after.values())
            lines.append(
                f"resident after the scenarios, RSS / PSS MB: {parts}; together {rss:.0f} / {pss:.0f} "
                "(RSS counts a library shared by processes in each, PSS once)."
            )
        lines += [
            f"machine: {m['cores']} cores, load average {m['load_before']} before and "
            f"{m['load_after']} after; Python {m['python']}; {m['platform']}; {m['wrk']}.",
        ]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


#: The packages the servers import from this repository.
PACKAGES = ("api", "engine", "pki", "storage", "bench")


def compile_sources() -> None:
    """Write the repository's bytecode caches first, as an installation does (pip compiles what
    it installs): the servers' starts are measured as a deployed controller's, also where
    ``PYTHONDONTWRITEBYTECODE`` is set (then every start would compile every module again)."""
    import compileall

    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1)


def _machine(wrk: Wrk) -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "load_after": [],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "wrk": wrk.version(),
    }


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def run(
    tier: str,
    *,
    seconds: float = 10.0,
    connections: int = 16,
    threads: int = 1,
    worker: str = "trellis",
    seed: int = 1,
    session_rate: float = 3000.0,
    out: Path | None = None,
    wrk: Wrk | None = None,
    only: Sequence[str] = (),
    profile: Path | None = None,
    database: str = "duckdb",
    workers: int = 1,
) -> Report:
    """Seed, measure the bare apps and every scenario (or those named in ``only``), write the JSON
    to ``out``; with ``profile``, a py-spy flame graph of the server's worker per scenario there.
    ``database`` ``postgres``: the data in a PostgreSQL server this run starts (tests/postgres.py,
    on a unix socket, ``fsync`` off), served by ``workers`` processes."""
    wrk = wrk or ensure_wrk()
    spy = ensure_py_spy() if profile is not None else None
    compile_sources()
    machine = _machine(wrk)
    rows: list[Row] = []
    servers: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="trellis-bench-http-") as tmp, _database(database) as url:
        work = Path(tmp)
        home = work / "home"
        serve_env = {"TRELLIS_WORKERS": str(workers)}
        if url:
            serve_env["TRELLIS_DATABASE_URL"] = url
        _log(f"seeding tier {tier}" + (" into PostgreSQL" if url else ""))
        seeded = seed_home(home, tier, seed, url)
        measure = functools.partial(run_wrk, wrk, seconds=seconds, connections=connections, threads=threads)
        for bare in ("gthread", "trellis"):
            name = f"bare {bare}"
            _log(f"{name}: GET / for {seconds:g} s")
            with serving(home, f"bare-{bare}", bare_command(bare), "/") as server:
                row = measure(server, Scenario(name, [("GET", "/", "", "")], "hello world"), work)
                servers[name] = {
                    "start_seconds": server.start_seconds,
                    "rss_mb_at_start": server.rss_mb_at_start,
                }
            rows.append(row)
        bare_rps = {r.scenario: r.requests_per_second for r in rows}
        _log(f"trellis serve ({worker} worker, {workers} process(es), {database}) at tier {tier}")
        with serving(home, "trellis", trellis_command(worker), "/version", serve_env) as server:
            services = len(seeded.bench_services)
            api_sessions = max(1, math.ceil(session_rate * max(seconds, 1.0) * 1.2 / services))
            _log(f"set-up: the device and {api_sessions} API sessions for the Dial scenario")
            world = set_up(server, api_sessions)
            for scenario in scenarios(seeded, world):
                if only and scenario.name not in only:
                    continue
                _log(f"{scenario.name} for {seconds:g} s")
                settle(server)
                dialing = scenario.name == "create session"
                before = session_count(server, world.admin) if dialing else 0
                with profiling(spy, server, scenario, profile, seconds):
                    row = measure(server, scenario, work)
                if dialing:
                    created = session_count(server, world.admin) - before
                    row.durable_creations = created
                    row.durable_creations_per_second = round(created / row.seconds, 1) if row.seconds else 0
                    answered = sum(n for code, n in row.statuses.items() if code.startswith("2"))
                    if answered > created:
                        notes.append(
                            f"create session: {answered - created} of {answered} answers returned an "
                            "existing session (every pair was used): raise --session-rate"
                        )
                rows.append(row)
            servers["trellis"] = {
                "worker": worker,
                "database": database,
                "workers": workers,
                "start_seconds": server.start_seconds,
                "rss_mb_at_start": server.rss_mb_at_start,
                "worker_peak_rss_mb": server.worker_peak_rss_mb(),
                "memory_after": server.memory(),
                "device_services": world.device_services,
                "dial_api_sessions": len(world.dial_tokens),
            }
    for row in rows:
        if bare_rps.get("bare gthread"):
            row.ratio_to_bare_gthread = round(row.requests_per_second / bare_rps["bare gthread"], 3)
        if bare_rps.get("bare trellis"):
            row.ratio_to_bare_trellis = round(row.requests_per_second / bare_rps["bare trellis"], 3)
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tier=tier,
        seed=seed,
        seconds_per_scenario=seconds,
        connections=connections,
        threads=threads,
        worker=worker,
        machine=machine,
        seeding={"rows": seeded.rows, "seconds": seeded.seconds},
        servers=servers,
        rows=rows,
        notes=notes,
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="each scenario's wrk run, whole seconds (rounded up; default 10)",
    )
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (default 16)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    parser.add_argument(
        "--worker",
        choices=("trellis", "gthread"),
        default="trellis",
        help="the server's worker: trellis serve's own (default) or gunicorn's gthread with 8 threads",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--session-rate",
        type=float,
        default=3000.0,
        help="durable session creations per second the Dial scenario has distinct pairs for (default 3000)",
    )
    add_output_arguments(parser, "http-<tier>.json")
    parser.add_argument(
        "--install-wrk",
        action="store_true",
        help="if wrk is missing, install it system-wide (apt-get install, as root) rather than fetch it "
        "into .cache/wrk",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated scenario names to run (default all; the bare apps always run)",
    )
    parser.add_argument(
        "--database",
        choices=("duckdb", "postgres"),
        default="duckdb",
        help="where the data is: the home's DuckDB file (default), or a PostgreSQL server the run starts",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="serving processes (TRELLIS_WORKERS; more than 1 needs postgres)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="write a py-spy flame graph of the server's worker per scenario into DIR",
    )


def main(args: argparse.Namespace) -> str:
    if args.seconds <= 0:
        raise SystemExit("--seconds must be more than 0")
    if args.threads < 1 or args.connections < args.threads:
        raise SystemExit("--threads must be 1 or more and --connections at least --threads")
    if args.session_rate <= 0:
        raise SystemExit("--session-rate must be more than 0")
    if args.workers < 1 or (args.workers > 1 and args.database != "postgres"):
        raise SystemExit("--workers must be 1, or more with --database postgres")
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    known = set(SCENARIO_NAMES)
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SystemExit(
            f"--only: unknown scenario(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    out = results_path(args, f"http-{args.tier}.json")
    try:
        wrk = ensure_wrk(allow_system_install=args.install_wrk)
    except WrkUnavailable as ex:
        raise SystemExit(f"python -m bench http needs wrk: {ex}") from None
    report = run(
        args.tier,
        seconds=args.seconds,
        connections=args.connections,
        threads=args.threads,
        worker=args.worker,
        seed=args.seed,
        session_rate=args.session_rate,
        out=out,
        wrk=wrk,
        only=only,
        profile=args.profile,
        database=args.database,
        workers=args.workers,
    )
    return report.table() + f"\n\nJSON: {out}"
