"""``python -m bench analysis-sql --tier S|L``: SQL over access (docs/analysis.md §13).

A controller is built in process over a tier's network (as ``bench.analysis``), and measured
through the whole API stack (Falcon, authentication, rendering; no sockets):

- the first query at a revision (the snapshot and the revision's database built);
- "who can Dial service X": ``SELECT identity_id, identity_name FROM access_pairs WHERE
  service_id = X AND type = 'Dial'`` (first 1,000 rows, the default budget), p50/p99 over
  random services (target p50 ≤ 50 ms); "what can identity Y Dial" the same way, filtered by
  ``identity_id`` over random identities, and ``access_paths`` of one identity;
- ``POST /export`` of ``access_pairs`` for one service (target ≤ 1 s), and of the whole view
  (target ≤ 60 s), the Parquet bytes read as a client would and counted.

``--memory`` measures instead what the analysis adds to the controller's resident size (issue 27:
under 25 %): RSS after the load, then after 200 explanations, a read of the findings, five
what-ifs, and the SQL queries ("who can Dial X", a count for one service, "what can identity Y
Dial"), each reading taken after a full collection and ``malloc_trim(0)`` (what the allocator
could give back is not counted); the peak of the SQL step too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench.analysis import Bench, _percentiles
from bench.topology import TIERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=50, help="queries measured")
    parser.add_argument("--no-whole", action="store_true", help="skip the export of the whole view")
    parser.add_argument(
        "--memory", action="store_true", help="what the analysis adds to the resident size, step by step"
    )


def run(tier: str, seed: int = 1, runs: int = 50, whole: bool = True) -> str:
    with tempfile.TemporaryDirectory(prefix="trellis-bench-sql-") as tmp:
        bench = Bench(tier, seed, Path(tmp) / "home")
        try:
            base = "/analysis/v1"

            def post(path: str, body: dict[str, object]) -> tuple[float, bytes]:
                started = time.perf_counter()
                result = bench.client.simulate_post(base + path, json=body, headers=bench.headers)
                assert result.status_code == 200, result.text[:500]
                return time.perf_counter() - started, result.content

            first, _ = post("/query", {"sql": "SELECT count(*) FROM services"})

            def timed(columns: str, side: str, ids: list[str]) -> tuple[float, float]:
                """p50 and p99 (ms) of ``runs`` Dial queries filtered on a random ``side``."""
                samples = []
                for n in range(runs + 3):
                    sql = (
                        f"SELECT {columns} FROM access_pairs"
                        f" WHERE {side} = '{bench.rng.choice(ids)}' AND type = 'Dial'"
                    )
                    seconds, _ = post("/query", {"sql": sql})
                    if n >= 3:
                        samples.append(seconds * 1e3)
                return _percentiles(samples)

            p50, p99 = timed("identity_id, identity_name", "service_id", bench.services)
            by_identity = timed("service_id, service_name", "identity_id", bench.identities)
            identity = bench.rng.choice(bench.identities)
            paths, _ = post("/query", {"sql": f"SELECT * FROM access_paths WHERE identity_id = '{identity}'"})
            service = bench.rng.choice(bench.services)
            one, one_bytes = post(
                "/export", {"sql": f"SELECT * FROM access_pairs WHERE service_id = '{service}'"}
            )
            lines = [
                f"analysis-sql tier {tier}: {len(bench.identities)} identities, {len(bench.services)} services",
                f"  first query at a revision (snapshot + database): {first:.2f} s",
                f"  who can Dial X (1,000 rows at most): p50 {p50:.1f} ms, p99 {p99:.1f} ms ({runs} services)",
                f"  what can identity Y Dial (1,000 rows at most): p50 {by_identity[0]:.1f} ms,"
                f" p99 {by_identity[1]:.1f} ms ({runs} identities)",
                f"  access_paths of one identity (1,000 rows at most): {paths * 1e3:.1f} ms",
                f"  export access_pairs of one service: {one:.2f} s ({len(one_bytes):,} bytes)",
            ]
            if whole:
                seconds, size, rows = _stream_to_file(bench, Path(tmp) / "pairs.parquet")
                lines.append(f"  export access_pairs whole: {seconds:.1f} s ({rows:,} rows, {size:,} bytes)")
            return "\n".join(lines)
        finally:
            bench.close()


def _stream_to_file(bench: Bench, target: Path) -> tuple[float, int, int]:
    """``POST /export {"view": "access_pairs"}`` through the WSGI app, its chunks written to a
    file as a client would (not held in memory): (seconds, bytes, rows)."""
    import falcon.testing
    import pyarrow.parquet as pq

    environ = falcon.testing.create_environ(
        path="/analysis/v1/export",
        method="POST",
        headers={**bench.headers, "content-type": "application/json"},
        body=json.dumps({"view": "access_pairs"}),
    )
    status: list[str] = []
    started = time.perf_counter()
    answer = bench.app(environ, lambda s, h, *_: status.append(s))
    size = 0
    with target.open("wb") as sink:
        for chunk in answer:
            sink.write(chunk)
            size += len(chunk)
    getattr(answer, "close", lambda: None)()
    seconds = time.perf_counter() - started
    assert status, "no answer"
    assert status[0].startswith("200"), status
    return seconds, size, pq.ParquetFile(target).metadata.num_rows


def _resident() -> tuple[int, int]:
    """This process's resident bytes, anonymous and file-backed (mapped libraries' pages), after a
    full collection and ``malloc_trim(0)``."""
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: what the allocator keeps counts
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return _status("RssAnon"), _status("RssFile") + _status("RssShmem")


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    """Reset the process's peak resident size (Linux: ``clear_refs`` 5), if allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def memory(tier: str, seed: int = 1) -> str:
    """What the analysis adds to the resident size, step by step (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="trellis-bench-sql-") as tmp:
        bench = Bench(tier, seed, Path(tmp) / "home")
        try:
            base = "/analysis/v1"

            def post(path: str, body: dict[str, object]) -> None:
                result = bench.client.simulate_post(base + path, json=body, headers=bench.headers)
                assert result.status_code == 200, result.text[:500]

            steps: list[tuple[str, tuple[int, int]]] = [("after the load", _resident())]
            for identity, service in bench.pairs(200):
                bench.analysis.explain_service(identity, service, "Dial")
            steps.append(("200 explanations", _resident()))
            result = bench.client.simulate_get(base + "/findings", headers=bench.headers)
            assert result.status_code == 200, result.text[:500]
            steps.append(("a read of the findings", _resident()))
            for n in range(5):
                post("/what-if", {"items": [bench.edit(n)]})
            steps.append(("5 what-ifs", _resident()))
            peaked = _reset_peak()
            service = bench.rng.choice(bench.services)
            post(
                "/query",
                {
                    "sql": "SELECT identity_id, identity_name FROM access_pairs"
                    f" WHERE service_id = '{service}' AND type = 'Dial'"
                },
            )
            post("/query", {"sql": f"SELECT count(*) FROM access_pairs WHERE service_id = '{service}'"})
            peak = _status("VmHWM") if peaked else 0
            steps.append(("2 SQL queries (who can Dial X, a count)", _resident()))
            identity = bench.rng.choice(bench.identities)
            post(
                "/query",
                {
                    "sql": "SELECT service_id, service_name FROM access_pairs"
                    f" WHERE identity_id = '{identity}' AND type = 'Dial'"
                },
            )
            steps.append(("what can identity Y Dial", _resident()))
        finally:
            bench.close()
    anon, mapped = steps[0][1]
    loaded = anon + mapped
    mb = 1 << 20
    lines = [f"analysis-sql --memory tier {tier} (seed {seed}): resident size, MB", ""]
    lines += [
        "| after | RSS | added | added / loaded | of it anonymous | of it file-backed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for what, (a, f) in steps:
        added = a + f - loaded
        lines.append(
            f"| {what} | {(a + f) / mb:.0f} | {added / mb:+.0f} | {100 * added / loaded:+.1f} % |"
            f" {(a - anon) / mb:+.0f} | {(f - mapped) / mb:+.0f} |"
        )
    if peak:
        lines.append(
            f"\npeak during the 2 SQL queries: {peak / mb:.0f} MB ({100 * (peak - loaded) / loaded:+.1f} %)"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> str:
    if args.memory:
        return memory(args.tier, args.seed)
    return run(args.tier, args.seed, args.runs, not args.no_whole)
