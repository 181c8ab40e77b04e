"""``python -m bench``: benchmark runners.

``python -m bench engine --tier L`` prints the policy engine table (see :mod:`bench.engine`).
"""

from __future__ import annotations

import argparse
import sys

from bench import engine
from bench.topology import TIERS


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one benchmark."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    policy = commands.add_parser("engine", help="the policy engine against the OpenZiti-like baseline")
    policy.add_argument("--tier", choices=sorted(TIERS), default="S")
    policy.add_argument("--seed", type=int, default=1)
    policy.add_argument(
        "--no-baseline", dest="baseline", action="store_false", help="skip the baseline (default at XL)"
    )
    policy.add_argument("--baseline", dest="baseline", action="store_true")
    policy.add_argument(
        "--baseline-identities",
        default="2000,4000",
        help="identity sample sizes for the baseline above tier S (comma-separated, two values)",
    )
    policy.set_defaults(baseline=None)
    args = parser.parse_args(argv)
    if args.command == "engine":
        run_baseline = args.baseline if args.baseline is not None else args.tier != "XL"
        samples = tuple(int(n) for n in args.baseline_identities.split(","))
        print(engine.run(args.tier, args.seed, run_baseline, samples), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
