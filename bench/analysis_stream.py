"""``python -m bench analysis-stream --tier S|L``: how long after a write is answered its access
changes can be read from the access-change stream (docs/analysis.md §15; target ≤ 100 ms).

A controller is built in process over a tier's network (as ``bench.analysis``); each run PATCHes
a service policy through the management API (Falcon's whole stack, no sockets), alternately
adding and removing one identity (``@id``) to its identity roles, so every write changes pairs.
From the moment the write is answered, the stream is read (``AccessChangeStream.read``, what the
API's JSON form and each SSE answer do, from the store's access-change log) until the write's
record is there; waits are on the stream's own notification, as a waiting SSE answer's are.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.analysis import Bench, _percentiles
from bench.topology import TIERS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100, help="writes measured")
    parser.add_argument("--verbose", action="store_true", help="each run on stderr")


def run(tier: str, seed: int = 1, runs: int = 100, verbose: bool = False) -> str:
    from api.analysis_stream import stream_for
    from engine.analysis.stream import Cursor

    with tempfile.TemporaryDirectory(prefix="trellis-bench-stream-") as tmp:
        bench = Bench(tier, seed, Path(tmp) / "home")
        try:
            stream = stream_for(bench.analysis, timedelta(days=7))
            samples: list[float] = []
            pairs: list[int] = []
            missed = 0
            for n in range(runs + 3):
                policy = bench.managers.service_policies.require(bench.policies[n % len(bench.policies)])
                identity = bench.rng.choice(bench.identities)
                roles = [*policy.identity_roles, f"@{identity}"]
                before = bench.ctrl.env.store.last_seq
                result = bench.client.simulate_patch(
                    f"/edge/management/v1/service-policies/{policy.id}",
                    json={"identityRoles": roles},
                    headers=bench.headers,
                )
                assert result.status_code == 200, result.text
                answered = time.perf_counter()
                cursor = Cursor(before)
                found = None
                while found is None:
                    parts, _ = stream.read(cursor, 10_000)
                    found = next((p for p in parts if p["revision"] > before), None)
                    if found is None:
                        if stream.processed > before and not parts:
                            break  # the write changed no pair (the identity had the access already)
                        stream.wait(cursor, 1.0)
                seen = time.perf_counter()
                # put the policy back (its own record, not measured)
                bench.client.simulate_patch(
                    f"/edge/management/v1/service-policies/{policy.id}",
                    json={"identityRoles": policy.identity_roles},
                    headers=bench.headers,
                )
                if found is None:
                    missed += 1
                    continue
                if verbose:
                    print(
                        f"run {n}: {(seen - answered) * 1e3:.1f} ms, {found['total']} pairs", file=sys.stderr
                    )
                if n >= 3:
                    samples.append((seen - answered) * 1e3)
                    pairs.append(int(found["total"]))
            load = bench.load_seconds
        finally:
            bench.close()
    p50, p99 = _percentiles(samples) if samples else (float("nan"), float("nan"))
    return "\n".join(
        [
            f"tier {tier} (seed {seed}): network loaded and controller built in {load:.1f} s",
            f"{len(samples)} writes measured ({missed} changed no pair), pairs per write: "
            f"median {sorted(pairs)[len(pairs) // 2] if pairs else 0}, max {max(pairs, default=0)}",
            "",
            "| write answered -> its record read from the stream | p50 ms | p99 ms |",
            "| --- | --- | --- |",
            f"| service policy PATCH (one @identity more) | {p50:.1f} | {p99:.1f} |",
        ]
    )


def main(args: argparse.Namespace) -> str:
    return run(args.tier, args.seed, args.runs, args.verbose)
