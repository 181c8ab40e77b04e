"""``trellis query "SQL"``: read-only SQL over access (docs/analysis.md §13).

Against a running controller (``POST /analysis/v1/query`` and ``/export``, logged in as
``trellis explain`` is: ``--controller``, ``--token``, ``--ca``), or offline on a database snapshot
(``--snapshot FILE``, as ``trellis advise`` reads one: online status and posture data are not in
it, so ``online`` is null and posture findings are left out). ``--format text|json|csv`` prints the
rows; ``--parquet FILE`` writes all of the result as Parquet instead (no row budget).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, TextIO

from controller.access_cli import CliError, Snapshot
from controller.analysis_cli import Client, Refused, _connection, _error_text

#: Rows printed at most unless ``--limit`` says otherwise (the API's default too).
DEFAULT_LIMIT = 1_000


def _offline(args: argparse.Namespace, out: TextIO) -> int:
    from api.analysis_sql import QueryError, SqlEngine
    from engine.analysis.findings import evaluate
    from engine.analysis.sql import snapshot_of

    snapshot = Snapshot(args.snapshot)
    graph = snapshot.graph()
    names = snapshot.names()
    engine = SqlEngine()
    database = engine.of(snapshot_of(graph, 0, names))

    def findings() -> list[Any]:
        return evaluate(graph, names=names)

    try:
        if args.parquet:
            with args.parquet.open("wb") as sink:
                for chunk in engine.export(database, args.sql, findings=findings):
                    sink.write(chunk)
            return 0
        answer = engine.query(database, args.sql, limit=args.limit, findings=findings)
    except QueryError as ex:
        detail = f" ({ex.reason})" if ex.reason and ex.reason != ex.message else ""
        raise CliError(f"{ex.code}: {ex.message}{detail}") from None
    _print(args.format, answer.columns, answer.rows, answer.truncated, out)
    return 0


def _online(args: argparse.Namespace, out: TextIO) -> int:
    client = Client(args)
    if args.parquet:
        request = urllib.request.Request(
            client.url + "/analysis/v1/export",
            data=json.dumps({"sql": args.sql}).encode(),
            method="POST",
            headers={"content-type": "application/json", "zt-session": client.token},
        )
        try:
            with (
                urllib.request.urlopen(request, context=client.context, timeout=600) as answer,
                args.parquet.open("wb") as sink,
            ):
                while chunk := answer.read(1 << 20):
                    sink.write(chunk)
        except urllib.error.HTTPError as ex:
            raw = ex.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"error": {"message": raw.decode(errors="replace")[:500]}}
            raise Refused(ex.code, body) from None
        except urllib.error.URLError as ex:
            raise CliError(f"{client.url}: {ex.reason}") from None
        return 0
    answer = client.call("POST", "/analysis/v1/query", {"sql": args.sql, "limit": args.limit})
    data = answer["data"]
    _print(args.format, data["columns"], data["rows"], data["truncated"], out)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def _print(
    fmt: str, columns: list[dict[str, str]], rows: list[list[Any]], truncated: bool, out: TextIO
) -> None:
    names = [c["name"] for c in columns]
    if fmt == "json":
        for row in rows:
            out.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")
    elif fmt == "csv":
        writer = csv.writer(out)
        writer.writerow(names)
        writer.writerows([_cell(v) for v in row] for row in rows)
    else:
        cells = [[_cell(v) for v in row] for row in rows]
        widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
        out.write("  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip() + "\n")
        for row_cells in cells:
            out.write("  ".join(c.ljust(w) for c, w in zip(row_cells, widths, strict=True)).rstrip() + "\n")
        out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''}{', truncated' if truncated else ''})\n")
    if truncated and fmt != "text":
        print(f"trellis query: truncated at {len(rows)} rows (--limit)", file=sys.stderr)


def query(args: argparse.Namespace, out: TextIO) -> int:
    if args.snapshot:
        return _offline(args, out)
    return _online(args, out)


def add_commands(sub: Any) -> None:
    """Add ``query`` to ``trellis``'s subcommands."""
    one = sub.add_parser("query", help="read-only SQL over access (identities, services, access_pairs, ...)")
    one.add_argument("sql", help='one SELECT statement, e.g. "SELECT * FROM access_pairs LIMIT 10"')
    one.add_argument("--snapshot", type=Path, help="a database snapshot file, read offline")
    one.add_argument("--format", choices=("text", "json", "csv"), default="text")
    one.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="rows at most (default 1000)")
    one.add_argument("--parquet", type=Path, help="write the whole result to this Parquet file")
    _connection(one)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int | None:
    """Run ``query``; None for any other command."""
    if args.command != "query":
        return None
    try:
        return query(args, out or sys.stdout)
    except CliError as ex:
        print(f"trellis query: {ex}", file=sys.stderr)
        return 2
    except Refused as ex:
        print(f"trellis query: {_error_text(ex)}", file=sys.stderr)
        return 2
