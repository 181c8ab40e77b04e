"""Where the benchmarks write their results.

``bench/results/`` holds the published results (committed: docs/performance.md cites them). A run writes
into ``bench/results/local/`` unless told otherwise: that folder carries its own ``.gitignore``
(``*``), so whatever a run leaves there is never committed by accident. ``--publish`` writes to
``bench/results/`` itself (to commit it, with docs/performance.md's figures); ``--out PATH`` anywhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The published results (committed).
PUBLISHED = ROOT / "bench" / "results"
#: A run's results unless told otherwise (ignored by git).
LOCAL = PUBLISHED / "local"
IGNORE = "# results of local benchmark runs (bench/output.py): never committed\n*\n"


def add_output_arguments(parser: argparse.ArgumentParser, name: str) -> None:
    """``--out`` and ``--publish`` for a benchmark whose results file is ``name`` (may hold
    ``{tier}``)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"the JSON results (default {LOCAL.relative_to(ROOT)}/{name}, not committed)",
    )
    where.add_argument(
        "--publish",
        action="store_true",
        help=f"write {PUBLISHED.relative_to(ROOT)}/{name}, the committed results docs/performance.md cites",
    )


def results_path(args: argparse.Namespace, name: str) -> Path:
    """Where ``args`` say the results go: ``--out``, else ``--publish``'s published file, else
    the local folder (made, with its ``.gitignore``, if absent)."""
    if args.out is not None:
        return Path(args.out)
    if args.publish:
        return PUBLISHED / name
    local_folder()
    return LOCAL / name


def local_folder() -> Path:
    """``bench/results/local/``, ignored by git (its own ``.gitignore``)."""
    LOCAL.mkdir(parents=True, exist_ok=True)
    ignore = LOCAL / ".gitignore"
    if not ignore.exists():
        ignore.write_text(IGNORE)
    return LOCAL
