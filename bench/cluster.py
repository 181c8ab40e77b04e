"""Several serving processes on one PostgreSQL database, side by side with one, in one run.

``python -m bench cluster`` measures, on this machine and in one run, three configurations of
``trellis serve`` (each on a fresh home, a fresh database and the same seeded tier):

* ``duckdb x1``: the embedded default, one process;
* ``postgres x1``: the data in PostgreSQL, ``TRELLIS_WORKERS=1``;
* ``postgres x2``: the same, ``TRELLIS_WORKERS=2``.

The PostgreSQL server is the tests' throwaway one (:mod:`tests.postgres`: a unix socket, ``fsync``
off, so its commits are cheaper than a production server's; Trellis still asks for
``synchronous_commit``). For each configuration:

1. **HTTP scenarios** under wrk (:mod:`bench.http`'s machinery, ``-c16`` by default): a client's
   services in pages of 25, policy advice (reads), and ``POST /sessions`` for (API session,
   service) pairs that have none yet (durable Dial sessions: counted as the sessions the server
   holds after minus before). A bare Falcon hello world on Trellis's worker (one process) runs
   once per round as the yardstick of the machine's speed that moment.
2. **Writes** with 1, 8 and 32 concurrent writers over TLS (:mod:`bench.writes`' cycle: create
   an identity, patch a service, create and delete a config, create and delete a Dial session),
   on a second fresh home and database with the same configuration.

Then, on a fresh database, **the change-log lag**: two processes, each a ``PostgresStore`` (as
two workers hold), a listener on each noting when another process's write is published there.
A write's lag is the time from its writer's acknowledgement (its commit returned) until the
other process has published it (``CLOCK_MONOTONIC`` is one clock for every process of the
machine); a write seen before its writer was answered counts 0. ``idle``: one process writes
100 a second from one thread, the other only follows; ``busy``: both write flat out from 8
threads each (then each also takes the write token in turn, and catches up as it takes it).
The busy run's writes a second are the store's own, without HTTP.

Also measured: a round trip to the PostgreSQL server (``SELECT 1``) and the resident memory of
each server process after the scenarios; with ``--memory-tier``, that tier seeded into
PostgreSQL and opened by one process (the store loaded and the policy graph resolved, as a
serving process starts, without the app): its peak RSS.

Every configuration runs ``--rounds`` times (2 by default), in a rotated order each round so that
a change in the machine's speed falls on each; the table gives the median and the spread
(lowest to highest) of the rounds. These machines have 2 cores shared with wrk, PostgreSQL and
whatever else runs: the spread is part of the result.

Run::

    python -m bench cluster                        # tier S, 8 s per scenario, 2 rounds
    python -m bench cluster --tier L --rounds 1    # tier L (seeding takes minutes)
    python -m bench cluster --memory-tier XL       # and one process's memory at tier XL
    python -m bench cluster --rounds 0 --memory-tier XL   # that alone
    python -m bench cluster --configs postgres:1,postgres:2   # PostgreSQL alone
    python -m bench cluster --seconds 1 --rounds 1 --writers 1,2 --write-seconds 1 --lag-seconds 1

The JSON goes to ``bench/results/local/cluster-<tier>.json`` (ignored by git), to the committed
``bench/results/cluster-<tier>.json`` with ``--publish``, or to ``--out PATH``. Traffic goes to
127.0.0.1 and a unix socket only; every run is bounded in time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench import http, writes
from bench.output import add_output_arguments, results_path
from bench.serving import init_home
from bench.topology import TIERS

#: The configurations, in their first round's order: (database, processes).
CONFIGS: tuple[tuple[str, int], ...] = (("duckdb", 1), ("postgres", 1), ("postgres", 2))
#: The HTTP scenarios (bench.http's names), in order.
SCENARIOS = ("client services", "policy advice", "create session")
#: Idle lag: the writer's pace (writes a second, one thread).
IDLE_RATE = 100.0
#: Busy lag: writer threads per process.
BUSY_THREADS = 8
#: A child of the lag measurement must report within this long after its run (seconds).
CHILD_SECONDS = 120.0


def config_name(database: str, processes: int) -> str:
    return f"{database} x{processes}"


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: int) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return float(values[0])
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


# -- the PostgreSQL server -----------------------------------------------------------------------


@contextmanager
def postgres_server() -> Iterator[Any]:
    """The tests' throwaway PostgreSQL server (tests/postgres.py), stopped and removed on exit."""
    from tests.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("python -m bench cluster: PostgreSQL is not installed (no initdb, postgres)")
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.destroy()


def round_trip(url: str, count: int = 500) -> dict[str, float]:
    """``SELECT 1`` on one connection ``count`` times: the hop's p50 and p99 in microseconds."""
    import psycopg

    times: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(count):
            began = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            times.append((time.perf_counter() - began) * 1e6)
    return {"p50_us": round(percentile(times, 50), 1), "p99_us": round(percentile(times, 99), 1)}


# -- the HTTP scenarios and the writes of one configuration --------------------------------------


def serve_env(url: str, processes: int) -> dict[str, str]:
    env = {"TRELLIS_WORKERS": str(processes)}
    if url:
        env["TRELLIS_DATABASE_URL"] = url
    return env


def measure_scenarios(
    wrk: http.Wrk,
    work: Path,
    url: str,
    processes: int,
    *,
    tier: str,
    seed: int,
    seconds: float,
    connections: int,
    session_rate: float,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The HTTP scenarios on a freshly seeded home (and database, ``url``); their rows and the
    resident memory (MB) of each server process after them."""
    home = work / "home"
    seeded = http.seed_home(home, tier, seed, url)
    rows: list[dict[str, Any]] = []
    command = http.trellis_command("trellis")
    with http.serving(home, "trellis", command, "/version", serve_env(url, processes)) as server:
        services = len(seeded.bench_services)
        api_sessions = max(1, math.ceil(session_rate * max(seconds, 1.0) * 1.2 / services))
        world = http.set_up(server, api_sessions)
        for scenario in http.scenarios(seeded, world):
            if scenario.name not in SCENARIOS:
                continue
            _log(f"  {scenario.name} for {seconds:g} s")
            http.settle(server)
            dialing = scenario.name == "create session"
            before = http.session_count(server, world.admin) if dialing else 0
            row = http.run_wrk(
                wrk, server, scenario, work, seconds=seconds, connections=connections, threads=1
            )
            figures: dict[str, Any] = {
                "scenario": scenario.name,
                "requests_per_second": row.requests_per_second,
                "p50_ms": row.p50_ms,
                "p99_ms": row.p99_ms,
                "errors": row.errors,
                "server_cpu_percent": row.server_cpu_percent,
            }
            if dialing:
                created = http.session_count(server, world.admin) - before
                figures["durable_per_second"] = round(created / row.seconds, 1) if row.seconds else 0.0
            rows.append(figures)
        memory = {role: figures["rss_mb"] for role, figures in server.memory().items() if "rss_mb" in figures}
    return rows, memory


def measure_writes(
    work: Path, url: str, processes: int, writer_counts: Sequence[int], seconds: float
) -> list[dict[str, Any]]:
    """bench.writes' cycle over TLS with each writer count, on a fresh home (and database)."""
    home = work / "writes-home"
    init_home(home, {"TRELLIS_DATABASE_URL": url} if url else None)
    rows: list[dict[str, Any]] = []
    env = {**writes.SERVER_ENV, **serve_env(url, processes)}
    with http.serving(home, "writes", http.trellis_command("trellis"), "/version", env) as server:
        world = writes.set_up(server.port, server.ca, max(writer_counts))
        for count in writer_counts:
            _log(f"  writes: {count} writer(s) for {seconds:g} s")
            row = writes.measure(server.port, server.ca, world, count, seconds)
            rows.append(
                {
                    "writers": count,
                    "writes_per_second": row.writes_per_second,
                    "p50_ms": row.p50_ms,
                    "p99_ms": row.p99_ms,
                    "errors": sum(n for status, n in row.errors.items() if not status.startswith("2")),
                    "failures": row.failures,
                }
            )
    return rows


def measure_bare(wrk: http.Wrk, work: Path, seconds: float, connections: int) -> dict[str, Any]:
    """The bare hello world on Trellis's worker (one process): the machine's speed now."""
    home = work / "bare-home"
    init_home(home)
    scenario = http.Scenario("bare trellis", [("GET", "/", "", "")], "hello world")
    with http.serving(home, "bare", http.bare_command("trellis"), "/") as server:
        row = http.run_wrk(wrk, server, scenario, work, seconds=seconds, connections=connections, threads=1)
    return {"requests_per_second": row.requests_per_second, "p50_ms": row.p50_ms, "p99_ms": row.p99_ms}


# -- the change-log lag between two processes ----------------------------------------------------


def _lag_child(
    url: str, index: int, threads: int, rate: float, seconds: float, start: Any, results: Any
) -> None:
    """(A spawned process) a PostgresStore on ``url``; once it follows the database, says so on
    ``results`` and waits for ``start`` (a shared ``(go event, start time)``: the moment both
    processes are ready, whatever their start-up took on a loaded machine); then ``threads``
    writers (each paced at ``rate`` writes a second, or flat out with 0) for ``seconds``; report
    the writes' acknowledgement times and latencies and when the other process's writes were
    published here."""
    from engine.entities import all as _kinds  # noqa: F401 (registers every kind)
    from engine.entities.identities import Identity
    from engine.ports import Change, Put
    from storage.postgres import PostgresStore

    store = PostgresStore(url)
    now = dt.datetime.now(dt.UTC)
    seen: dict[str, float] = {}

    def listener(changes: list[Change]) -> None:
        if store.replaying:
            at = time.monotonic()
            for change in changes:
                if isinstance(change, Put):
                    seen.setdefault(change.entity.id, at)

    store.subscribe(listener)
    go, start_value = start
    results.put(("ready", index))
    if not go.wait(CHILD_SECONDS):
        store.close()
        return
    start_at = float(start_value.value)
    acknowledged: dict[str, float] = {}
    latencies: list[float] = []
    errors = [0]

    def write(thread: int) -> None:
        while time.monotonic() < start_at:
            time.sleep(0.001)
        end, n = start_at + seconds, 0
        while (moment := time.monotonic()) < end:
            if rate > 0:
                due = start_at + n / rate
                if due > moment:
                    time.sleep(due - moment)
            name = f"lag-{index}-{thread}-{n}"
            began = time.monotonic()
            try:
                with store.write_lock():
                    if store.find_unique(Identity, "name", name) is None:
                        store.commit([Put(Identity(id=name, created_at=now, updated_at=now, name=name))])
            except Exception:
                errors[0] += 1
            else:
                done = time.monotonic()
                acknowledged[name] = done
                latencies.append(done - began)
            n += 1

    workers = [threading.Thread(target=write, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    # what the other wrote last arrives within the lag: wait for it, then one catch-up
    time.sleep(max(0.0, start_at + seconds + 1.0 - time.monotonic()))
    store.catch_up()
    results.put((index, acknowledged, latencies, seen, errors[0]))
    store.close()


def measure_lag(url: str, mode: str, seconds: float) -> dict[str, Any]:
    """Two processes on ``url``: ``idle`` (one writes :data:`IDLE_RATE` a second, the other
    follows) or ``busy`` (both write flat out from :data:`BUSY_THREADS` threads)."""
    context = get_context("spawn")
    results: multiprocessing.Queue[Any] = context.Queue()
    go, start_value = context.Event(), context.Value("d", 0.0)
    plans = (
        [(1, IDLE_RATE, seconds), (0, 0.0, seconds)] if mode == "idle" else [(BUSY_THREADS, 0.0, seconds)] * 2
    )
    children = [
        context.Process(target=_lag_child, args=(url, i, threads, rate, length, (go, start_value), results))
        for i, (threads, rate, length) in enumerate(plans)
    ]
    for child in children:
        child.start()
    try:
        # both stores open and following before the first write (CLOCK_MONOTONIC is the host's)
        for _ in children:
            results.get(timeout=CHILD_SECONDS)
        start_value.value = time.monotonic() + 0.2
        go.set()
        reports = [results.get(timeout=seconds + CHILD_SECONDS) for _ in children]
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    acknowledged: dict[str, float] = {}
    for _, acks, _, _, _ in reports:
        acknowledged.update(acks)
    lags = [
        max(0.0, (at - acknowledged[name]) * 1000)
        for _, _, _, seen, _ in reports
        for name, at in seen.items()
        if name in acknowledged
    ]
    latencies = [s * 1000 for _, _, lat, _, _ in reports for s in lat]
    seen_by = {index: seen for index, _, _, seen, _ in reports}
    missed = sum(1 for index, acks, _, _, _ in reports for name in acks if name not in seen_by[1 - index])
    return {
        "mode": mode,
        "samples": len(lags),
        "not_seen": missed,
        "p50_ms": round(percentile(lags, 50), 2),
        "p99_ms": round(percentile(lags, 99), 2),
        "max_ms": round(max(lags, default=0.0), 2),
        "writes_per_second": round(len(latencies) / seconds, 1),
        "write_p50_ms": round(percentile(latencies, 50), 2),
        "write_p99_ms": round(percentile(latencies, 99), 2),
        "errors": sum(r[4] for r in reports),
    }


# -- one process's memory at a tier --------------------------------------------------------------


def _seed_postgres(url: str, tier: str, seed: int) -> None:
    """(A spawned process) the tier's topology written into ``url`` through the store."""
    from bench.startup import _BATCH, _entities
    from engine.ports import Put
    from storage.postgres import PostgresStore

    entities = _entities(tier, seed)
    store = PostgresStore(url)
    try:
        for start in range(0, len(entities), _BATCH):
            store.commit([Put(e) for e in entities[start : start + _BATCH]])
    finally:
        store.close()


def _open_and_resolve(url: str, results: Any) -> None:
    """(A spawned process) what a serving process does at start with the data: open the store
    (every entity loaded from PostgreSQL) and resolve the policy graph; its peak RSS."""
    import gc
    import resource

    from engine.entities import all as _kinds  # noqa: F401 (registers every kind)
    from engine.managers.access import build_graph
    from storage.postgres import PostgresStore

    gc.disable()  # as the serving worker loads: nothing made at start is garbage
    began = time.perf_counter()
    store = PostgresStore(url)
    loaded = time.perf_counter()
    graph = build_graph(store)
    built = time.perf_counter()
    results.put(
        {
            "entities": sum(graph.counts().values()),
            "load_s": round(loaded - began, 2),
            "graph_s": round(built - loaded, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
    )
    store.close()


def measure_memory(url: str, tier: str, seed: int) -> dict[str, Any]:
    """The tier seeded into ``url`` (a child), then opened and resolved in another: one serving
    process's data and policy graph, without the app around them."""
    context = get_context("spawn")
    began = time.perf_counter()
    seeder = context.Process(target=_seed_postgres, args=(url, tier, seed))
    seeder.start()
    seeder.join()
    if seeder.exitcode != 0:
        raise RuntimeError(f"seeding tier {tier} into PostgreSQL failed (exit {seeder.exitcode})")
    seeded = time.perf_counter() - began
    results: multiprocessing.Queue[Any] = context.Queue()
    child = context.Process(target=_open_and_resolve, args=(url, results))
    child.start()
    try:
        figures = dict(results.get(timeout=3600))
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    return {"tier": tier, "seed_s": round(seeded, 1), **figures}


# -- the report ----------------------------------------------------------------------------------


@dataclass
class Report:
    when: str
    tier: str
    seed: int
    seconds_per_scenario: float
    write_seconds: float
    lag_seconds: float
    rounds: int
    connections: int
    writer_counts: list[int]
    machine: dict[str, Any]
    #: The configurations measured (``--configs``), by name (``postgres x2``).
    configs: list[str] = field(default_factory=lambda: [config_name(d, p) for d, p in CONFIGS])
    #: ``SELECT 1`` on the PostgreSQL server's socket (p50_us, p99_us).
    hop: dict[str, float] = field(default_factory=dict)
    #: One entry per round and configuration: scenarios, writes, memory.
    runs: list[dict[str, Any]] = field(default_factory=list)
    #: One per round: the bare hello world.
    bare: list[dict[str, Any]] = field(default_factory=list)
    #: One per round and mode.
    lag: list[dict[str, Any]] = field(default_factory=list)
    #: ``--memory-tier``: one process's data and graph at that tier (:func:`measure_memory`).
    memory: dict[str, Any] = field(default_factory=dict)

    # -- figures across rounds --
    def values(self, config: str, scenario: str, key: str) -> list[float]:
        return [
            float(row[key])
            for run in self.runs
            if run["config"] == config
            for row in run["scenarios"]
            if row["scenario"] == scenario and row.get(key) is not None
        ]

    def write_values(self, config: str, writers: int, key: str) -> list[float]:
        return [
            float(row[key])
            for run in self.runs
            if run["config"] == config
            for row in run["writes"]
            if row["writers"] == writers
        ]

    def lag_values(self, mode: str, key: str) -> list[float]:
        return [float(row[key]) for row in self.lag if row["mode"] == mode]

    def ratio(self, scenario: str, key: str = "requests_per_second") -> float | None:
        """Median of x2 over median of x1 (PostgreSQL)."""
        two = self.values(config_name("postgres", 2), scenario, key)
        one = self.values(config_name("postgres", 1), scenario, key)
        if not two or not one or statistics.median(one) == 0:
            return None
        return round(statistics.median(two) / statistics.median(one), 2)

    def table(self) -> str:
        configs = self.configs
        lines = [
            "| measure | " + " | ".join(configs) + " | x2 / x1 |",
            "| --- | " + " | ".join("---" for _ in configs) + " | --- |",
        ]

        def spread(values: Sequence[float], digits: int = 0) -> str:
            if not values:
                return "-"
            mid = statistics.median(values)
            text = f"{mid:,.{digits}f}"
            if len(values) > 1:
                text += f" ({min(values):,.{digits}f}-{max(values):,.{digits}f})"
            return text

        def ratio_of(two: list[float], one: list[float]) -> str:
            if not two or not one or statistics.median(one) == 0:
                return "-"
            return f"{statistics.median(two) / statistics.median(one):.2f}"

        pg1, pg2 = config_name("postgres", 1), config_name("postgres", 2)
        for scenario in SCENARIOS:
            key = "durable_per_second" if scenario == "create session" else "requests_per_second"
            label = "durable Dial sessions/s" if scenario == "create session" else f"{scenario} req/s"
            cells = [spread(self.values(c, scenario, key)) for c in configs]
            ratio = ratio_of(self.values(pg2, scenario, key), self.values(pg1, scenario, key))
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
            cells = [spread(self.values(c, scenario, "p99_ms"), 1) for c in configs]
            ratio = ratio_of(self.values(pg2, scenario, "p99_ms"), self.values(pg1, scenario, "p99_ms"))
            lines.append("| ... p99 ms | " + " | ".join(cells) + f" | {ratio} |")
            cells = [spread(self.values(c, scenario, "server_cpu_percent")) for c in configs]
            lines.append("| ... server CPU % | " + " | ".join(cells) + " | |")
        for count in self.writer_counts:
            cells = [spread(self.write_values(c, count, "writes_per_second")) for c in configs]
            ratio = ratio_of(
                self.write_values(pg2, count, "writes_per_second"),
                self.write_values(pg1, count, "writes_per_second"),
            )
            lines.append(f"| writes/s, {count} writer(s) | " + " | ".join(cells) + f" | {ratio} |")
            cells = [spread(self.write_values(c, count, "p99_ms"), 1) for c in configs]
            lines.append("| ... p99 ms | " + " | ".join(cells) + " | |")
        memory = []
        for config in configs:
            workers = [
                mb for run in self.runs if run["config"] == config for role, mb in run["memory"].items()
                if role.startswith("worker")
            ]  # fmt: skip
            memory.append(spread(workers))
        lines.append("| RSS of a serving process, MB | " + " | ".join(memory) + " | |")
        bare = [row["requests_per_second"] for row in self.bare]
        lines += [
            "",
            f"bare hello world, Trellis's worker, one process: {spread(bare)} req/s "
            "(the machine's speed in each round).",
        ]
        for mode in ("idle", "busy"):
            p50, p99 = self.lag_values(mode, "p50_ms"), self.lag_values(mode, "p99_ms")
            if p50:
                text = (
                    f"change-log lag between two processes, {mode}: p50 {spread(p50, 1)} ms, "
                    f"p99 {spread(p99, 1)} ms, max {spread(self.lag_values(mode, 'max_ms'), 1)} ms"
                )
                if mode == "busy":
                    text += (
                        f"; the store's own writes (no HTTP) {spread(self.lag_values(mode, 'writes_per_second'))}/s, "
                        f"p99 {spread(self.lag_values(mode, 'write_p99_ms'), 1)} ms"
                    )
                lines.append(text + ".")
        if self.memory:
            mem = self.memory
            lines.append(
                f"one process's data and policy graph at tier {mem['tier']} ({mem['entities']:,} entities, "
                f"from PostgreSQL): peak RSS {mem['peak_rss_mb']:,.0f} MB; load {mem['load_s']:g} s, "
                f"graph {mem['graph_s']:g} s (seeding {mem['seed_s']:g} s)."
            )
        if self.hop:
            lines.append(
                f"a round trip to PostgreSQL (SELECT 1, unix socket): p50 {self.hop['p50_us']:.0f} µs, "
                f"p99 {self.hop['p99_us']:.0f} µs."
            )
        m = self.machine
        lines += [
            f"tier {self.tier}, wrk -t1 -c{self.connections}, {self.seconds_per_scenario:g} s per scenario, "
            f"writes {self.write_seconds:g} s per writer count, lag {self.lag_seconds:g} s per mode; "
            f"{self.rounds} round(s): median (lowest-highest).",
            f"machine: {m['cores']} cores, load average {m['load_before']} before and {m['load_after']} after; "
            f"Python {m['python']}; {m['wrk']}.",
        ]
        if self.runs:
            lines += ["", "targets (issue 25):"] + [f"- {line}" for line in self.targets()]
        return "\n".join(lines)

    def targets(self) -> list[str]:
        pg1, pg2 = config_name("postgres", 1), config_name("postgres", 2)
        out = []
        for scenario in ("client services", "policy advice"):
            ratio = self.ratio(scenario)
            out.append(
                f"{scenario} with 2 processes at least 1.4x one: {ratio if ratio is not None else '-'}x"
            )
        durable = self.values(pg2, "create session", "durable_per_second")
        best = max(durable + self.values(pg1, "create session", "durable_per_second"), default=0.0)
        out.append(f"durable Dial sessions 3,000/s at tier L: best here {best:,.0f}/s (tier {self.tier})")
        p99 = [v for c in (pg1, pg2) for v in self.values(c, "client services", "p99_ms")]
        out.append(
            f"client services p99 at most 10 ms at -c{self.connections}: {min(p99, default=0):.1f}-{max(p99, default=0):.1f} ms"
        )
        lag = self.lag_values("busy", "p99_ms") + self.lag_values("idle", "p99_ms")
        out.append(f"change-log lag p99 at most 50 ms: {max(lag, default=0):.1f} ms at worst")
        return out

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def run(
    tier: str,
    *,
    seconds: float = 8.0,
    rounds: int = 2,
    connections: int = 16,
    writer_counts: Sequence[int] = (1, 8, 32),
    write_seconds: float = 5.0,
    lag_seconds: float = 5.0,
    seed: int = 1,
    session_rate: float = 3000.0,
    out: Path | None = None,
    wrk: http.Wrk | None = None,
    memory_tier: str = "",
    configs: Sequence[tuple[str, int]] = CONFIGS,
) -> Report:
    """Every configuration of ``configs`` ``rounds`` times (rotated), then the lag, on one
    PostgreSQL server."""
    wrk = wrk or http.ensure_wrk()
    http.compile_sources()
    machine = {
        "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "load_after": [],
        "python": sys.version.split()[0],
        "wrk": wrk.version(),
    }
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        tier=tier,
        seed=seed,
        seconds_per_scenario=seconds,
        write_seconds=write_seconds,
        lag_seconds=lag_seconds,
        rounds=rounds,
        connections=connections,
        writer_counts=list(writer_counts),
        machine=machine,
        configs=[config_name(d, p) for d, p in configs],
    )
    with tempfile.TemporaryDirectory(prefix="trellis-bench-cluster-") as tmp, postgres_server() as pg:
        base = Path(tmp)
        report.hop = round_trip(pg.new_database())
        for number in range(rounds):
            _log(f"round {number + 1} of {rounds}")
            work = base / f"round-{number}"
            work.mkdir()
            report.bare.append({"round": number, **measure_bare(wrk, work, seconds, connections)})
            chosen = tuple(configs)
            order = chosen[number % len(chosen) :] + chosen[: number % len(chosen)]
            for database, processes in order:
                name = config_name(database, processes)
                _log(f"{name}: seeding tier {tier}, then the scenarios")
                place = work / name.replace(" ", "-")
                place.mkdir()
                url = pg.new_database() if database == "postgres" else ""
                scenarios, memory = measure_scenarios(
                    wrk, place, url, processes, tier=tier, seed=seed, seconds=seconds,
                    connections=connections, session_rate=session_rate,
                )  # fmt: skip
                url = pg.new_database() if database == "postgres" else ""
                written = measure_writes(place, url, processes, writer_counts, write_seconds)
                report.runs.append(
                    {
                        "round": number,
                        "config": name,
                        "scenarios": scenarios,
                        "writes": written,
                        "memory": memory,
                    }
                )
            for mode in ("idle", "busy"):
                _log(f"change-log lag, {mode}, {lag_seconds:g} s")
                report.lag.append({"round": number, **measure_lag(pg.new_database(), mode, lag_seconds)})
        if memory_tier:
            _log(f"one process's data and graph at tier {memory_tier}")
            report.memory = measure_memory(pg.new_database(), memory_tier, seed)
    machine["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


def parse_configs(text: str) -> list[tuple[str, int]]:
    """``--configs``: ``database:processes`` pairs (``duckdb:1,postgres:2``; a bare database is 1
    process). DuckDB serves one process only."""
    configs: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        database, _, count = part.partition(":")
        try:
            processes = int(count or "1")
        except ValueError:
            raise SystemExit(f"--configs: {part!r} is not database:processes") from None
        if (
            database not in ("duckdb", "postgres")
            or processes < 1
            or (database == "duckdb" and processes != 1)
        ):
            raise SystemExit(f"--configs: {part!r}: duckdb:1, or postgres:N with N 1 or more")
        if (database, processes) not in configs:
            configs.append((database, processes))
    if not configs:
        raise SystemExit("--configs needs at least one database:processes")
    return configs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument("--seconds", type=float, default=8.0, help="each wrk scenario (default 8)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="times each configuration runs (default 2; 0: --memory-tier alone)",
    )
    parser.add_argument("--connections", type=int, default=16, help="wrk connections (default 16)")
    parser.add_argument("--writers", default="1,8,32", help="comma-separated writer counts (default 1,8,32)")
    parser.add_argument("--write-seconds", type=float, default=5.0, help="each writer count (default 5)")
    parser.add_argument("--lag-seconds", type=float, default=5.0, help="each lag mode (default 5)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--configs",
        default="duckdb:1,postgres:1,postgres:2",
        help="comma-separated database:processes to measure (default duckdb:1,postgres:1,postgres:2)",
    )
    parser.add_argument(
        "--session-rate",
        type=float,
        default=3000.0,
        help="durable session creations per second the Dial scenario has distinct pairs for (default 3000)",
    )
    parser.add_argument(
        "--memory-tier",
        choices=sorted(TIERS),
        default="",
        help="also seed this tier into PostgreSQL and measure one process's data and graph (RSS)",
    )
    add_output_arguments(parser, "cluster-<tier>.json")


def main(args: argparse.Namespace) -> str:
    try:
        counts = [int(w) for w in args.writers.split(",") if w.strip()]
    except ValueError:
        raise SystemExit(f"--writers must be comma-separated whole numbers, not {args.writers!r}") from None
    if not counts or min(counts) < 1:
        raise SystemExit("--writers needs at least one count, each 1 or more")
    if min(args.seconds, args.write_seconds, args.lag_seconds) <= 0:
        raise SystemExit("--seconds, --write-seconds and --lag-seconds must be more than 0")
    if args.rounds < (0 if args.memory_tier else 1):
        raise SystemExit("--rounds must be 1 or more (0 only with --memory-tier: the memory alone)")
    if args.connections < 1:
        raise SystemExit("--connections must be 1 or more")
    configs = parse_configs(args.configs)
    out = results_path(args, f"cluster-{args.tier}.json")
    try:
        wrk = http.ensure_wrk()
    except http.WrkUnavailable as ex:
        raise SystemExit(f"python -m bench cluster needs wrk: {ex}") from None
    report = run(
        args.tier,
        seconds=args.seconds,
        rounds=args.rounds,
        connections=args.connections,
        writer_counts=counts,
        write_seconds=args.write_seconds,
        lag_seconds=args.lag_seconds,
        seed=args.seed,
        session_rate=args.session_rate,
        out=out,
        wrk=wrk,
        memory_tier=args.memory_tier,
        configs=configs,
    )
    return report.table() + f"\n\nJSON: {out}"
