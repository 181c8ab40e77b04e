"""``trellis advise`` and ``trellis test-access`` (docs/analysis.md §7, §8).

Both read either a running controller (``--controller URL --token ZT_SESSION [--ca FILE]``: the
``/analysis/v1`` endpoints) or, offline, a database snapshot (``--snapshot FILE``: a file
``POST /edge/management/v1/database/snapshot`` made, or a stopped controller's database), whose
policy graph is built here; online status and posture data are not in a snapshot.
"""

from __future__ import annotations

import argparse
import csv
import json
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from api.parquet_chunks import PARQUET
from engine.entities import Entity
from engine.entities.identities import Identity
from engine.managers.access import ENTITY_KINDS, POLICY_KINDS

#: The kinds access is made of (what a snapshot is read for).
KINDS: tuple[type[Entity], ...] = tuple(cls for _, cls in (*ENTITY_KINDS.values(), *POLICY_KINDS.values()))


class CliError(Exception):
    """A refusal: one line on stderr, exit status 2."""


class Snapshot:
    """The access-relevant entities of a DuckDB database file, read only."""

    def __init__(self, path: Path) -> None:
        import duckdb

        from storage.codec import decode
        from storage.duckdb.migrations import table_name

        if not path.is_file():
            raise CliError(f"{path}: no such snapshot file")
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error as ex:
            raise CliError(f"{path}: not a database Trellis can read ({ex})") from None
        self.entities: dict[type[Entity], dict[str, Entity]] = {}
        try:
            for kind in KINDS:
                rows = con.execute(f"SELECT id, doc FROM {table_name(kind.ENTITY)}").fetchall()
                self.entities[kind] = {str(i): decode(kind, str(i), str(d)) for i, d in rows}
        except duckdb.Error as ex:
            raise CliError(f"{path}: not a Trellis database ({ex})") from None
        finally:
            con.close()

    def all(self, kind: type[Entity]) -> list[Entity]:
        return list(self.entities.get(kind, {}).values())

    def get(self, kind: type[Entity], entity_id: str) -> Entity | None:
        return self.entities.get(kind, {}).get(entity_id)

    def names(self) -> Callable[[str, str], str]:
        from engine.analysis.manager import CLASSES

        def name(kind: str, entity_id: str) -> str:
            cls = CLASSES.get(kind)
            entity = self.get(cls, entity_id) if cls is not None else None
            return str(getattr(entity, "name", "") or entity_id)

        return name

    def resolver(self) -> Callable[[str, str], str | None]:
        from engine.analysis.manager import CLASSES

        by_name: dict[str, dict[str, str]] = {}
        for kind, cls in CLASSES.items():
            by_name[kind] = {str(getattr(e, "name", "")): e.id for e in self.all(cls)}

        def resolve(kind: str, value: str) -> str | None:
            cls = CLASSES.get(kind)
            if cls is not None and self.get(cls, value) is not None:
                return value
            return by_name.get(kind, {}).get(value)

        return resolve

    def graph(self) -> Any:
        from engine.managers.access import build_graph

        return build_graph(self)  # type: ignore[arg-type]


class Controller:
    """A running controller's ``/analysis/v1``, with an admin's ``zt-session``."""

    def __init__(self, url: str, token: str, ca: Path | None) -> None:
        self.base = url.rstrip("/") + "/analysis/v1"
        self.token = token
        self.context = ssl.create_default_context(cafile=str(ca) if ca else None)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base + path,
            data=data,
            method=method,
            headers={"zt-session": self.token, "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=300) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as ex:
            text = ex.read().decode(errors="replace")
            raise CliError(f"{method} {path}: {ex.code} {text[:500]}") from None
        except urllib.error.URLError as ex:
            raise CliError(f"{self.base}: {ex.reason}") from None

    def download(self, path: str, target: Path, accept: str) -> int:
        """A streamed answer's body into a file; its size."""
        request = urllib.request.Request(
            self.base + path, method="GET", headers={"zt-session": self.token, "accept": accept}
        )
        size = 0
        try:
            with (
                urllib.request.urlopen(request, context=self.context, timeout=300) as answer,
                open(target, "wb") as sink,
            ):
                while chunk := answer.read(1 << 20):
                    size += sink.write(chunk)
        except urllib.error.HTTPError as ex:
            text = ex.read().decode(errors="replace")
            raise CliError(f"GET {path}: {ex.code} {text[:500]}") from None
        except urllib.error.URLError as ex:
            raise CliError(f"{self.base}: {ex.reason}") from None
        return size


def _source(args: argparse.Namespace) -> Snapshot | Controller:
    if args.snapshot and args.controller:
        raise CliError("give --snapshot or --controller, not both")
    if args.snapshot:
        return Snapshot(args.snapshot)
    if args.controller:
        if not args.token:
            raise CliError("--controller needs --token (an admin's zt-session)")
        return Controller(args.controller, args.token, args.ca)
    raise CliError("give --snapshot FILE or --controller URL")


def _disabled(snapshot: Snapshot) -> Callable[[str], bool]:
    from datetime import UTC, datetime

    now = datetime.now(UTC)

    def disabled(identity_id: str) -> bool:
        identity = snapshot.get(Identity, identity_id)
        return isinstance(identity, Identity) and identity.is_disabled_at(now)

    return disabled


def advise_rows(args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """The advice rows (as the API renders them), from a snapshot or a controller."""
    source = _source(args)
    if isinstance(source, Snapshot):
        from engine.analysis.advise import advise, service_summaries

        graph = source.graph()
        if args.level == "services":
            for summary in service_summaries(graph, names=source.names()):
                yield summary.as_dict()
            return
        for row in advise(
            graph,
            names=source.names(),
            disabled=_disabled(source),
            order=args.order,
            errors_only=args.errors_only,
        ):
            yield row.as_dict()
        return
    offset = 0
    while True:
        query = urllib.parse.urlencode(
            {
                "order": args.order,
                "level": args.level,
                "errorsOnly": str(args.errors_only).lower(),
                "limit": 10_000,
                "offset": offset,
            }
        )
        answer = source.call("GET", f"/advice?{query}")
        yield from answer["data"]
        offset += len(answer["data"])
        if not answer["meta"]["pagination"].get("more"):
            return


def _line(row: dict[str, Any]) -> str:
    """A service summary (``--level services``) as a line of text."""
    offline = "?" if row["allOffline"] is None else row["allOffline"]
    return (
        f"{row['serviceName']} ({row['serviceRouterCount']}) Dial: {row['dialIdentities']} "
        f"Bind: {row['bindIdentities']} OKAY: {row['ok']} no identity routers: "
        f"{row['noIdentityRouters']} no common router: {row['noCommonRouter']} all offline: {offline}\n"
    )


def advise_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``trellis advise``: every pair's advice as text, JSON (one object per line) or CSV."""
    out = out or sys.stdout
    if args.format == "parquet":
        _advise_parquet(args)
        return 0
    if args.out is not None:
        with open(args.out, "w", newline="") as sink:
            args.out = None
            return advise_command(args, sink)
    if args.level == "pairs" and args.snapshot and not args.controller:
        _advise_bulk(args, out)
        return 0
    from engine.analysis.advise_bulk import LINES, csv_header

    rows = advise_rows(args)
    if args.format == "csv":
        writer: Any = None
        for row in rows:
            if "ok" not in row:
                if writer is None:
                    writer = out.write(csv_header())
                out.write(LINES["csv"](row))
                continue
            if writer is None:
                writer = csv.DictWriter(out, list(row), extrasaction="ignore")
                writer.writeheader()
            flat = {k: (";".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()}
            writer.writerow(flat)
    elif args.format == "json":
        for row in rows:
            out.write(json.dumps(row) + "\n")
    else:
        for row in rows:
            out.write(_line(row) if "ok" in row else LINES["text"](row))
    return 0


def _bulk_options(source: Snapshot, args: argparse.Namespace) -> dict[str, Any]:
    """What the bulk advice of a snapshot is asked with: its names, who is disabled, the order
    and the errors-only choice of the command line."""
    return {
        "names": source.names(),
        "disabled": _disabled(source),
        "order": args.order,
        "errors_only": args.errors_only,
    }


def _advise_bulk(args: argparse.Namespace, out: TextIO) -> None:
    """Every pair of a snapshot, rendered in bulk (docs/analysis.md §7)."""
    from engine.analysis.advise_bulk import advise_blocks, render

    source = _source(args)
    assert isinstance(source, Snapshot)
    tables, blocks = advise_blocks(source.graph(), **_bulk_options(source, args))
    raw = getattr(out, "buffer", None)
    if raw is not None:
        out.flush()
    for chunk in render(tables, blocks, args.format):
        if raw is not None:
            raw.write(chunk)
        else:
            out.write(chunk.decode())
    if raw is not None:
        raw.flush()


def _advise_parquet(args: argparse.Namespace) -> None:
    """Every pair as one Parquet file (``--out``): built here from a snapshot, or the controller's
    streamed ``GET /advice?format=parquet`` written as it comes (docs/analysis.md §7)."""
    if args.out is None:
        raise CliError("--format parquet needs --out FILE")
    if args.level != "pairs":
        raise CliError("--format parquet gives a row per pair (--level pairs)")
    source = _source(args)
    if isinstance(source, Controller):
        query = urllib.parse.urlencode(
            {"order": args.order, "errorsOnly": str(args.errors_only).lower(), "format": "parquet"}
        )
        source.download(f"/advice?{query}", args.out, PARQUET)
        return
    from api.advice_parquet import write_advice
    from engine.analysis.advise_bulk import advise_block_jobs

    tables, jobs = advise_block_jobs(source.graph(), local_sets=True, **_bulk_options(source, args))
    write_advice(tables, jobs, str(args.out))


def access_test_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``trellis test-access FILE``: 0 when every expectation holds, 1 otherwise."""
    out = out or sys.stdout
    import yaml

    try:
        doc = yaml.safe_load(Path(args.file).read_text())
    except OSError as ex:
        raise CliError(f"{args.file}: {ex.strerror}") from None
    except yaml.YAMLError as ex:
        raise CliError(f"{args.file}: not YAML: {ex}") from None
    from engine.errors import FieldError

    source = _source(args)
    if isinstance(source, Snapshot):
        from engine.analysis.access_tests import parse_expectations, run_access_tests

        try:
            expectations = parse_expectations(doc)
        except FieldError as ex:
            raise CliError(f"{args.file}: {ex.field}: {ex.reason} ({ex.value!r})") from None
        report = run_access_tests(
            source.graph(),
            expectations,
            resolve=source.resolver(),
            names=source.names(),
            disabled=_disabled(source),
        )
        out.write(report.text())
        return 0 if report.passed else 1
    if isinstance(doc, dict) and "expectations" in doc:
        doc = doc["expectations"]
    answer = source.call("POST", "/access-tests", {"expectations": doc})["data"]
    out.write(answer["report"])
    return 0 if answer["passed"] else 1


def add_commands(sub: Any) -> None:
    """Add ``advise`` and ``test-access`` to ``trellis``'s subcommands."""
    raw = argparse.RawDescriptionHelpFormatter
    for name, summary in (
        ("advise", "policy advice for every identity and service (ziti edge policy-advisor, whole network)"),
        ("test-access", "check a YAML file of access expectations (exit 1 on any failure)"),
    ):
        one = sub.add_parser(name, help=summary, description=summary, formatter_class=raw)
        one.add_argument("--snapshot", type=Path, help="a database snapshot file (offline)")
        one.add_argument("--controller", help="a running controller's URL, e.g. https://127.0.0.1:1280")
        one.add_argument("--token", help="an admin's zt-session (with --controller)")
        one.add_argument("--ca", type=Path, help="the CA bundle to trust (with --controller)")
        if name == "advise":
            one.add_argument(
                "--format",
                choices=("text", "json", "csv", "parquet"),
                default="text",
                help="parquet: every pair as one Parquet file (needs --out)",
            )
            one.add_argument("--out", type=Path, help="the file written (default: standard output)")
            one.add_argument("--order", choices=("identities", "services"), default="identities")
            one.add_argument(
                "--level",
                choices=("pairs", "services"),
                default="pairs",
                help="a row per pair (as ziti's), or per service counted over every identity",
            )
            one.add_argument("--errors-only", action="store_true", help="only pairs with an error or problem")
        else:
            one.add_argument("file", type=Path, help="the expectations (YAML)")


def run(args: argparse.Namespace) -> int | None:
    """Run ``advise`` or ``test-access``; None for any other command."""
    command = {"advise": advise_command, "test-access": access_test_command}.get(args.command)
    if command is None:
        return None
    try:
        return command(args)
    except CliError as ex:
        print(f"trellis {args.command}: {ex}", file=sys.stderr)
        return 2
