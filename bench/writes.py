"""The write path: acknowledged durable writes per second with 1, 8 and 32 concurrent writers.

``python -m bench writes`` runs ``trellis init`` in a temporary home, then ``trellis serve``'s
own server (production settings, :func:`bench.serving.running`'s ``trellis`` option) on
127.0.0.1 with the per-client budgets off (``TRELLIS_RATE_AUTH_PER_MINUTE=0``,
``TRELLIS_RATE_WRITE_PER_MINUTE=0``), so that none of the load is refused with a 429. For each
writer count in turn, that many client threads write for ``--seconds`` (10) over TLS, each on
its own kept-alive connection verifying the server against the home's CA bundle. Every writer
repeats this cycle of six writes:

1. ``POST /identities`` (a new Device identity; admin);
2. ``PATCH /services/{id}`` (the writer's own service's ``roleAttributes``, alternating; admin);
3. ``POST /configs`` then 4. ``DELETE /configs/{id}`` (admin);
5. ``POST /sessions`` (Dial, client API, as a device identity with its own API session) then
   6. ``DELETE /sessions/{id}``: a session is kept per (API session, type, service), so asking
   again without the delete would return the same one and write nothing.

A write counts as acknowledged when it is answered 2xx (the server answers only after its
commit). Per writer count the table gives acknowledged writes per second, p50 and p99 latency of
every write, the errors by status (``conn`` for a failed connection), and the CPU the server's
processes and the client threads used (in % of one core; from ``/proc``). The table is
printed and written as JSON with the machine's core count and load average before the run: to
``bench/results/local/writes.json`` (ignored by git; see :mod:`bench.output`), to the committed
``bench/results/writes.json`` (docs/performance.md cites it) with ``--publish``, or to ``--out PATH``.

Run::

    python -m bench writes                           # 1, 8 and 32 writers, 10 s each
    python -m bench writes --writers 1,4 --seconds 3 --out /tmp/writes.json
    python -m bench writes --publish                 # the committed bench/results/writes.json

The writer counts share one server and run one after the other, so later runs find the
identities earlier ones created. The client threads run on the same cores as the server (2 on
these machines): the figures compare write paths with each other on one machine, and vary with
whatever else runs there. Every request has a timeout and every loop a deadline; traffic goes to
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.output import add_output_arguments, results_path
from bench.serving import HOST, PASSWORD, init_home, running, tls_client_context
from bench.writepath import measure_store, open_controller, set_up_store

ROOT = Path(__file__).resolve().parents[1]
#: The results file's name (where: bench.output).
RESULTS = "writes.json"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
DEVICE = "bench-device"
DEVICE_PASSWORD = "bench-device-password"
ROLE = "bench-dial"
#: Budgets off: the benchmark measures the write path, not the rate limiter.
SERVER_ENV = {"TRELLIS_RATE_AUTH_PER_MINUTE": "0", "TRELLIS_RATE_WRITE_PER_MINUTE": "0"}
#: One request's limit (a write waiting this long counts as a failed connection).
REQUEST_TIMEOUT = 30.0
#: The operations of a cycle, in order (the JSON's per-operation counts use these names).
OPERATIONS = (
    "create identity",
    "patch service",
    "create config",
    "delete config",
    "create session",
    "delete session",
)


#: The write paths measured: the managers in this process, and the served API over TLS.
PATHS = ("store", "http")


class SetupError(RuntimeError):
    """A setup request was not answered as expected."""


# -- one kept-alive client ---------------------------------------------------------------------


class Client:
    """One kept-alive HTTPS connection to the server (reopened after a failure)."""

    def __init__(self, port: int, ca: str, timeout: float = REQUEST_TIMEOUT) -> None:
        self.port = port
        self.ca = ca
        self.timeout = timeout
        self.conn: http.client.HTTPSConnection | None = None

    def request(
        self, method: str, path: str, token: str | None = None, body: Any = None
    ) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body or None); status 0 if the connection failed."""
        headers = {"Accept": "application/json"}
        data: bytes | None = None
        if token:
            headers["zt-session"] = token
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(
                HOST, self.port, timeout=self.timeout, context=tls_client_context(self.ca)
            )
        try:
            self.conn.request(method, path, body=data, headers=headers)
            resp = self.conn.getresponse()
            raw = resp.read()
        except (OSError, http.client.HTTPException):
            self.close()
            return 0, {}, None
        if resp.will_close:
            self.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed

    def expect(self, status: int, method: str, path: str, token: str | None = None, body: Any = None) -> Any:
        """The JSON body of a setup request, which must answer ``status``."""
        got, _, parsed = self.request(method, path, token, body)
        if got != status:
            raise SetupError(f"{method} {path}: {got}, expected {status}: {parsed}")
        return parsed

    def login(self, base: str, username: str, password: str) -> str:
        status, headers, parsed = self.request(
            "POST",
            f"{base}/authenticate?method=password",
            body={"username": username, "password": password},
        )
        if status != 200 or "zt-session" not in headers:
            raise SetupError(f"login of {username} on {base}: {status}: {parsed}")
        return headers["zt-session"]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None


# -- the world the writers write in --------------------------------------------------------------


@dataclass
class World:
    """What the writers need: an admin token, a config type, a Dial service, per writer a service
    to patch and a device API session."""

    admin: str
    config_type: str
    dial_service: str
    services: list[str]
    device_tokens: list[str]


def _created(client: Client, path: str, admin: str, body: dict[str, Any]) -> str:
    return str(client.expect(201, "POST", MGMT + path, admin, body)["data"]["id"])


def set_up(port: int, ca: str, writers: int) -> World:
    """A device that may dial a service through an edge router, and ``writers`` of everything
    a writer owns."""
    client = Client(port, ca)
    try:
        admin = client.login(MGMT, "admin", PASSWORD)
        config_type = _created(
            client, "/config-types", admin, {"name": "bench.writes.v1", "schema": {"type": "object"}}
        )
        device = _created(
            client,
            "/identities",
            admin,
            {
                "name": DEVICE,
                "type": "Device",
                "isAdmin": False,
                "roleAttributes": [ROLE],
                "enrollment": {"updb": DEVICE},
            },
        )
        enrollment = client.expect(200, "GET", f"{MGMT}/identities/{device}", admin)["data"]["enrollment"]
        token = enrollment["updb"]["token"]
        client.expect(200, "POST", f"{CLIENT}/enroll/updb?token={token}", body={"password": DEVICE_PASSWORD})
        dial_service = _created(
            client,
            "/services",
            admin,
            {"name": "bench-dial", "encryptionRequired": True, "roleAttributes": [ROLE]},
        )
        roles = [f"#{ROLE}"]
        _created(
            client,
            "/service-policies",
            admin,
            {
                "name": "bench-dial",
                "type": "Dial",
                "semantic": "AnyOf",
                "identityRoles": roles,
                "serviceRoles": roles,
            },
        )
        _created(client, "/edge-routers", admin, {"name": "bench-er", "roleAttributes": [ROLE]})
        _created(
            client,
            "/edge-router-policies",
            admin,
            {"name": "bench-erp", "semantic": "AnyOf", "identityRoles": roles, "edgeRouterRoles": roles},
        )
        _created(
            client,
            "/service-edge-router-policies",
            admin,
            {"name": "bench-serp", "semantic": "AnyOf", "serviceRoles": roles, "edgeRouterRoles": roles},
        )
        services = [
            _created(
                client,
                "/services",
                admin,
                {"name": f"bench-patch-{i}", "encryptionRequired": True, "roleAttributes": ["a"]},
            )
            for i in range(writers)
        ]
        devices = [client.login(CLIENT, DEVICE, DEVICE_PASSWORD) for _ in range(writers)]
        return World(admin, config_type, dial_service, services, devices)
    finally:
        client.close()


# -- the writers ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """One writer's answers: latency (s) of every write, statuses, acknowledged per operation."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    acknowledged: Counter[str] = field(default_factory=Counter)
    failure: str = ""


def _record(tally: Tally, operation: str, started: float, status: int) -> bool:
    tally.latencies.append(time.perf_counter() - started)
    if 200 <= status < 300:
        tally.acknowledged[operation] += 1
        return True
    tally.statuses[str(status) if status else "conn"] += 1
    return False


def write_loop(
    port: int, ca: str, world: World, label: str, index: int, deadline: float, tally: Tally
) -> None:
    """Run the cycle of six writes until ``deadline``; every answer goes to ``tally``."""
    client = Client(port, ca)
    admin, device = world.admin, world.device_tokens[index]
    service = world.services[index]
    n = 0
    try:
        while time.monotonic() < deadline:
            n += 1
            name = f"bench-{label}-{index}-{n}"
            # (operation, method, path, token, body, where its delete goes: None for no delete)
            cycle: tuple[tuple[str, str, str, str, dict[str, Any], str | None], ...] = (
                (
                    "create identity",
                    "POST",
                    f"{MGMT}/identities",
                    admin,
                    {"name": name, "type": "Device", "isAdmin": False},
                    None,
                ),
                (
                    "patch service",
                    "PATCH",
                    f"{MGMT}/services/{service}",
                    admin,
                    {"roleAttributes": ["a" if n % 2 else "b", f"w{index}"]},
                    None,
                ),
                (
                    "create config",
                    "POST",
                    f"{MGMT}/configs",
                    admin,
                    {"name": name, "configTypeId": world.config_type, "data": {"n": n}},
                    f"{MGMT}/configs",
                ),
                (
                    "create session",
                    "POST",
                    f"{CLIENT}/sessions",
                    device,
                    {"serviceId": world.dial_service, "type": "Dial"},
                    f"{CLIENT}/sessions",
                ),
            )
            for operation, method, path, token, body, delete_at in cycle:
                if time.monotonic() >= deadline:
                    return
                started = time.perf_counter()
                status, _, parsed = client.request(method, path, token, body)
                if not _record(tally, operation, started, status) or delete_at is None:
                    continue
                try:
                    created = parsed["data"]["id"]
                except (KeyError, TypeError):
                    tally.statuses["2xx without id"] += 1
                    continue
                started = time.perf_counter()
                status, _, _ = client.request("DELETE", f"{delete_at}/{created}", token)
                _record(tally, operation.replace("create", "delete"), started, status)
    except Exception as exc:  # a bug in the harness: reported, not hidden
        tally.failure = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()


@dataclass
class Row:
    """One writer count's figures."""

    #: ``http`` (served over TLS) or ``store`` (the managers in this process, :mod:`bench.writepath`).
    path: str
    writers: int
    seconds: float
    acknowledged: int
    writes_per_second: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    per_operation: dict[str, int]
    failures: list[str]
    #: CPU the benchmark's own process (the client threads) used, in % of one core.
    client_cpu_percent: float
    #: CPU the server's processes used, in % of one core (None where ``/proc`` cannot tell).
    server_cpu_percent: float | None

    @classmethod
    def of(
        cls,
        path: str,
        writers: int,
        elapsed: float,
        latencies_ms: Sequence[float],
        acknowledged: Counter[str],
        errors: Counter[str],
        *,
        failures: list[str] | None = None,
        client_cpu_percent: float = 0.0,
        server_cpu: float | None = None,
    ) -> Row:
        """The row of one run: ``server_cpu`` in CPU seconds (None when unknown)."""
        total = sum(acknowledged.values())
        return cls(
            path=path,
            writers=writers,
            seconds=round(elapsed, 2),
            acknowledged=total,
            writes_per_second=round(total / elapsed, 1) if elapsed > 0 else 0.0,
            p50_ms=round(percentile(latencies_ms, 50), 2),
            p99_ms=round(percentile(latencies_ms, 99), 2),
            errors=dict(sorted(errors.items())),
            per_operation={op: acknowledged[op] for op in OPERATIONS},
            failures=failures or [],
            client_cpu_percent=client_cpu_percent,
            server_cpu_percent=round(100 * server_cpu / elapsed, 1)
            if server_cpu is not None and elapsed > 0
            else None,
        )


def children_cpu(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) used so far by the descendants of ``pid`` (default: this
    process), read from Linux's ``/proc``; None elsewhere."""
    root = os.getpid() if pid is None else pid
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pending = [root]
    seen = {root}
    try:
        while pending:
            current = pending.pop()
            for children in Path(f"/proc/{current}/task").glob("*/children"):
                for child in (int(c) for c in children.read_text().split()):
                    if child in seen:
                        continue
                    seen.add(child)
                    pending.append(child)
                    stat = Path(f"/proc/{child}/stat").read_text()
                    fields = stat[stat.rindex(")") + 2 :].split()
                    total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    except (OSError, ValueError, IndexError):
        return None
    return total


def percentile(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (1..99) of ``values``; 0 for none."""
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def measure(port: int, ca: str, world: World, writers: int, seconds: float) -> Row:
    """``writers`` threads writing for ``seconds``."""
    tallies = [Tally() for _ in range(writers)]
    label = f"w{writers}"
    start = time.monotonic()
    cpu_start = time.process_time()
    server_start = children_cpu()
    deadline = start + seconds
    threads = [
        threading.Thread(
            target=write_loop, args=(port, ca, world, label, i, deadline, tallies[i]), daemon=True
        )
        for i in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + REQUEST_TIMEOUT * 2 + 5)
    elapsed = time.monotonic() - start
    cpu = time.process_time() - cpu_start
    server_end = children_cpu()
    server_cpu = None if server_start is None or server_end is None else server_end - server_start
    latencies = [s * 1000 for t in tallies for s in t.latencies]
    acknowledged: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for t in tallies:
        acknowledged.update(t.acknowledged)
        errors.update(t.statuses)
    failures = [t.failure for t in tallies if t.failure]
    failures += [f"writer {i} still running" for i, th in enumerate(threads) if th.is_alive()]
    return Row.of(
        "http",
        writers,
        elapsed,
        latencies,
        acknowledged,
        errors,
        failures=failures,
        client_cpu_percent=round(100 * cpu / elapsed, 1) if elapsed > 0 else 0.0,
        server_cpu=server_cpu,
    )


# -- the report ----------------------------------------------------------------------------------


@dataclass
class Report:
    when: str
    cores: int | None
    load_before: list[float]
    python: str
    seconds_per_run: float
    rows: list[Row]

    def table(self) -> str:
        lines = [
            "| path | writers | acknowledged writes | writes/s | p50 ms | p99 ms | errors | server CPU | client CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in self.rows:
            errors = ", ".join(f"{status}: {n}" for status, n in r.errors.items()) or "none"
            if r.failures:
                errors += f"; harness: {'; '.join(r.failures)}"
            server = "?" if r.server_cpu_percent is None else f"{r.server_cpu_percent:.0f} %"
            lines.append(
                f"| {r.path} | {r.writers} | {r.acknowledged} | {r.writes_per_second:.0f} | {r.p50_ms:.1f} "
                f"| {r.p99_ms:.1f} | {errors} | {server} | {r.client_cpu_percent:.0f} % |"
            )
        load = ", ".join(f"{x:.2f}" for x in self.load_before)
        lines.append("")
        lines.append(
            f"{self.seconds_per_run:g} s per writer count, {self.cores} cores shared with the clients, "
            f"load average before the run: {load}; cycle: {', '.join(OPERATIONS)}. "
            "http: served by `trellis serve` over TLS; store: the same use cases called in one process "
            "(server CPU is that process's)."
        )
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def measure_store_path(home: Path, writer_counts: Sequence[int], seconds: float) -> list[Row]:
    """The managers in this process on ``home`` (initialised), each writer count in turn."""
    app = open_controller(home)
    try:
        world = set_up_store(app.ctrl.managers, max(writer_counts), ROLE, DEVICE_PASSWORD)
        rows = []
        for writers in writer_counts:
            print(f"... store path: {writers} writer(s) for {seconds:g} s", file=sys.stderr, flush=True)
            cpu_start = time.process_time()
            elapsed, latencies, acknowledged, errors = measure_store(world, writers, seconds)
            cpu = time.process_time() - cpu_start
            millis = [s * 1000 for s in latencies]
            rows.append(Row.of("store", writers, elapsed, millis, acknowledged, errors, server_cpu=cpu))
        return rows
    finally:
        app.ctrl.env.store.close()


def run(
    writer_counts: Sequence[int],
    seconds: float,
    out: Path | None = None,
    paths: Sequence[str] = PATHS,
) -> Report:
    """Measure each path and writer count in turn on fresh homes, write the JSON to ``out`` (if
    given)."""
    if not writer_counts or min(writer_counts) < 1:
        raise ValueError("writer counts must be 1 or more")
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count(),
        load_before=[round(x, 2) for x in os.getloadavg()],
        python=platform.python_version(),
        seconds_per_run=seconds,
        rows=[],
    )
    with tempfile.TemporaryDirectory(prefix="trellis-bench-writes-") as tmp:
        if "store" in paths:
            home = Path(tmp) / "store-home"
            init_home(home)
            report.rows.extend(measure_store_path(home, writer_counts, seconds))
        if "http" in paths:
            home = Path(tmp) / "home"
            init_home(home)
            ca = str(home / "pki" / "ca-bundle.pem")
            with running(home, "trellis", env=SERVER_ENV) as port:
                world = set_up(port, ca, max(writer_counts))
                for writers in writer_counts:
                    print(f"... http: {writers} writer(s) for {seconds:g} s", file=sys.stderr, flush=True)
                    report.rows.append(measure(port, ca, world, writers, seconds))
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writers", default="1,8,32", help="comma-separated writer counts (default 1,8,32)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each writer count's run (default 10)")
    add_output_arguments(parser, RESULTS)
    parser.add_argument(
        "--path",
        default=",".join(PATHS),
        help="comma-separated: store (in process), http (served); default both",
    )


def main(args: argparse.Namespace) -> str:
    try:
        counts = [int(w) for w in args.writers.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"--writers must be comma-separated whole numbers, not {args.writers!r}") from None
    if not counts or min(counts) < 1:
        raise SystemExit("--writers needs at least one count, each 1 or more")
    if args.seconds <= 0:
        raise SystemExit("--seconds must be more than 0")
    paths = [p.strip() for p in args.path.split(",") if p.strip()]
    if not paths or set(paths) - set(PATHS):
        raise SystemExit(f"--path takes {', '.join(PATHS)}, not {args.path!r}")
    out = results_path(args, RESULTS)
    report = run(counts, args.seconds, out, paths)
    return report.table() + f"\n\nJSON: {out}"
