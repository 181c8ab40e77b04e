"""``python -m bench advise --tier S|L``: ``trellis advise`` for every pair (docs/analysis.md §7).

The graph of ``bench.topology.generate(tier)`` is built first (not timed), with one disabled
identity in seven and, with ``--online``, every other router online. Measured:

- the bulk path (:mod:`engine.analysis.advise_bulk`): every pair's row, identity by identity, in
  each ``--format`` (CSV by default), written to ``--out`` (a temporary file, removed after, by
  default; ``/dev/null`` measures without the disk): rows, bytes and seconds (target for the
  whole of tier L: ≤ 60 s);
- ``--format parquet``: the same rows as one Parquet file (:mod:`api.advice_parquet`, a row group
  a block; ``--compression``): rows, bytes and seconds;
- for comparison, the per-pair path (:func:`engine.analysis.advise.advise` and a line per row)
  for ``--per-pair-seconds`` (default 20): its rows a second.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from api.advice_parquet import COMPRESSION, write_advice
from bench.topology import TIERS, generate
from engine.analysis.advise import advise
from engine.analysis.advise_bulk import FORMATS, LINES, advise_block_jobs, advise_blocks, render
from engine.policy import PolicyGraph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", choices=sorted(TIERS), default="S")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--format", action="append", choices=(*FORMATS, "parquet"), help="repeatable; default csv"
    )
    parser.add_argument(
        "--compression", default=COMPRESSION, help="of --format parquet: none, snappy, zstd, lz4"
    )
    parser.add_argument("--order", choices=("identities", "services"), default="identities")
    parser.add_argument("--online", action="store_true", help="online status known (every other router)")
    parser.add_argument("--out", type=Path, help="the file written (default: a temporary file)")
    parser.add_argument("--per-pair-seconds", type=float, default=20.0, help="0 skips the per-pair path")


def main(args: argparse.Namespace) -> str:
    started = time.perf_counter()
    topology = generate(args.tier, args.seed)
    graph = PolicyGraph.build(**topology.rows())
    disabled = {row.id for row in topology.identities[::7]}
    online = {row.id for row in topology.edge_routers[::2]}
    options = {
        "online": online.__contains__ if args.online else None,
        "disabled": disabled.__contains__,
        "order": args.order,
    }
    lines = [f"tier {args.tier}: graph built in {time.perf_counter() - started:.1f} s"]
    for fmt in args.format or ["csv"]:
        with tempfile.TemporaryDirectory(prefix="trellis-bench-advise-") as tmp:
            target = args.out or Path(tmp) / f"advice.{fmt}"
            start = time.perf_counter()
            if fmt == "parquet":
                tables, jobs = advise_block_jobs(graph, local_sets=True, **options)
                rows = write_advice(tables, jobs, str(target), compression=args.compression)
                written = os.path.getsize(target)
                fmt = f"parquet ({args.compression})"
            else:
                tables, blocks = advise_blocks(graph, **options)
                rows = written = 0
                with open(target, "wb") as sink:
                    for chunk in render(tables, _counted(blocks, lambda n: None), fmt):
                        written += sink.write(chunk)
                    rows = _counted.rows
            seconds = time.perf_counter() - start
            lines.append(
                f"bulk {fmt} ({args.order}): {rows:,} rows, {written / 1e9:.2f} GB in {seconds:.1f} s "
                f"({rows / seconds / 1e6:.2f} M rows/s) to {'the given file' if args.out else 'a temporary file'}"
                f"; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            )
            if args.out is None:
                os.remove(target)
    if args.per_pair_seconds > 0:
        line = LINES[next((f for f in args.format or [] if f in LINES), "csv")]
        start = time.perf_counter()
        count = 0
        for row in advise(graph, **options):
            line(row.as_dict())
            count += 1
            if count % 10_000 == 0 and time.perf_counter() - start > args.per_pair_seconds:
                break
        seconds = time.perf_counter() - start
        lines.append(f"per pair: {count:,} rows in {seconds:.1f} s ({count / seconds:,.0f} rows/s)")
    return "\n".join(lines)


class _Counter:
    """Counts the rows of the blocks passing through."""

    rows = 0

    def __call__(self, blocks, _):  # type: ignore[no-untyped-def]
        self.rows = 0
        for block in blocks:
            self.rows += len(block)
            yield block


_counted = _Counter()
