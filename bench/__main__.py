"""``python -m bench``: benchmark runners.

``python -m bench engine --tier L`` prints the policy engine table (see :mod:`bench.engine`);
``python -m bench startup --tier L`` the controller start-up figures (see :mod:`bench.startup`);
``python -m bench serving`` the API workers under stalled connections (see :mod:`bench.serving`);
``python -m bench updates --tier L`` the service-update tracker's cost per write (see
:mod:`bench.updates`);
``python -m bench writes`` acknowledged durable writes per second with 1, 8 and 32 writers
against a real server (see :mod:`bench.writes`);
``python -m bench http --tier L`` the HTTP path under wrk, scenario by scenario, against a bare
Falcon app served the same way (see :mod:`bench.http`);
``python -m bench logins`` password and certificate logins a second at 8 concurrent clients
against a real server (see :mod:`bench.logins`);
``python -m bench dataplane`` bytes through the edge router against a direct TLS connection, dial
set-up time and connections held, with ``trellis serve`` and its router running (see
:mod:`bench.dataplane`);
``python -m bench cluster`` one and two serving processes on PostgreSQL beside DuckDB, the
change-log lag between processes and writes with 1, 8 and 32 writers (see :mod:`bench.cluster`);
``python -m bench peer`` the same seeded topology on OpenZiti v1.6.0 and on Trellis, measured side
by side and reported as ratios (see :mod:`bench.peer`);
``python -m bench analysis-stream --tier L`` how soon a write's access changes are on the stream
(see :mod:`bench.analysis_stream`).
``python -m bench analysis-sql --tier L`` SQL over access: "who can Dial X" and Parquet exports
(see :mod:`bench.analysis_sql`).
``python -m bench advise --tier L`` ``trellis advise`` for every pair of the tier, in bulk, against
the per-pair path (see :mod:`bench.advise`).
``python -m bench analysis --tier L`` the access analysis API: explain, what-if and what guardrails
add to a write (see :mod:`bench.analysis`).

``writes``, ``http``, ``logins``, ``dataplane``, ``cluster`` and ``peer`` write their JSON into ``bench/results/local/``
(ignored by git), into the committed ``bench/results/`` only with ``--publish`` (see
:mod:`bench.output`).
Nothing is installed on the system unless asked (``http --install-wrk``); what a run fetches it
says first.
"""

from __future__ import annotations

import argparse
import sys

from bench import (
    advise,
    analysis,
    analysis_sql,
    analysis_stream,
    cluster,
    dataplane,
    engine,
    http,
    logins,
    peer,
    serving,
    startup,
    updates,
    writes,
)
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
    start = commands.add_parser("startup", help="controller start-up: DuckDB load and graph build")
    start.add_argument("--tier", choices=sorted(TIERS), default="S")
    start.add_argument("--seed", type=int, default=1)
    serving.add_arguments(commands.add_parser("serving", help="the API worker under stalled connections"))
    tracker = commands.add_parser("updates", help="the service-update tracker's cost per write")
    tracker.add_argument("--tier", choices=sorted(TIERS), default="S")
    tracker.add_argument("--seed", type=int, default=1)
    writes.add_arguments(commands.add_parser("writes", help="acknowledged durable writes per second"))
    http.add_arguments(commands.add_parser("http", help="the HTTP path under wrk against a bare Falcon app"))
    logins.add_arguments(
        commands.add_parser("logins", help="password and certificate logins a second at 8 concurrent clients")
    )
    dataplane.add_arguments(
        commands.add_parser("dataplane", help="the edge router's throughput, dial time and connections held")
    )
    cluster.add_arguments(
        commands.add_parser("cluster", help="1 and 2 processes on PostgreSQL beside DuckDB, lag and writes")
    )
    advise.add_arguments(commands.add_parser("advise", help="trellis advise: every pair's row, in bulk"))
    analysis.add_arguments(
        commands.add_parser(
            "analysis", help="the access analysis API: explain, what-if, guardrails on writes"
        )
    )
    analysis_sql.add_arguments(
        commands.add_parser("analysis-sql", help="SQL over access: who can Dial X, Parquet exports")
    )
    analysis_stream.add_arguments(
        commands.add_parser(
            "analysis-stream", help="the access-change stream: a write's record visible after"
        )
    )
    peer.add_arguments(
        commands.add_parser("peer", help="the same topology on OpenZiti v1.6.0 and on Trellis, side by side")
    )
    args = parser.parse_args(argv)
    if args.command == "engine":
        run_baseline = args.baseline if args.baseline is not None else args.tier != "XL"
        samples = tuple(int(n) for n in args.baseline_identities.split(","))
        print(engine.run(args.tier, args.seed, run_baseline, samples), flush=True)
    elif args.command == "startup":
        print(startup.run(args.tier, args.seed), flush=True)
    elif args.command == "serving":
        print(serving.main(args), flush=True)
    elif args.command == "updates":
        print(updates.run(args.tier, args.seed), flush=True)
    elif args.command == "writes":
        print(writes.main(args), flush=True)
    elif args.command == "http":
        print(http.main(args), flush=True)
    elif args.command == "logins":
        print(logins.main(args), flush=True)
    elif args.command == "dataplane":
        print(dataplane.main(args), flush=True)
    elif args.command == "cluster":
        print(cluster.main(args), flush=True)
    elif args.command == "advise":
        print(advise.main(args), flush=True)
    elif args.command == "analysis":
        print(analysis.main(args), flush=True)
    elif args.command == "analysis-sql":
        print(analysis_sql.main(args), flush=True)
    elif args.command == "analysis-stream":
        print(analysis_stream.main(args), flush=True)
    elif args.command == "peer":
        print(peer.main(args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
