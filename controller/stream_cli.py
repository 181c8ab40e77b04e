"""``trellis watch-access [--since REV]``: print the access-change stream of a running controller
(docs/analysis.md §15), one line per added (``+``) or removed (``-``) pair, with the revision and
who made the write; it reads Server-Sent Events answers one after another, each resumed with
``Last-Event-ID`` from the last event read, so nothing is missed or printed twice. ``--json``
prints each event's data as one JSON line; ``--once`` stops once caught up.

The connection and the login are ``trellis explain``'s (``controller.analysis_cli``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any, TextIO

from controller.analysis_cli import Client, CliError, Refused, _connection, _error_text

PATH = "/analysis/v1/access-changes"


def read_events(lines: Iterator[bytes]) -> Iterator[dict[str, str]]:
    """SSE events (``id``, ``event``, ``data``) from an answer's lines; comments are skipped."""
    fields: dict[str, str] = {}
    for raw in lines:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if "event" in fields or "data" in fields:
                yield fields
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name == "data" and name in fields else value
    if "event" in fields or "data" in fields:
        yield fields


def lines_of(data: dict[str, Any]) -> list[str]:
    """The human lines of one event's data."""
    actors = sorted(
        {
            (w.get("actor") or {}).get("identityName") or (w.get("actor") or {}).get("identityId") or "-"
            for w in data.get("writes", [])
        }
    )
    by = ", ".join(actors) or "-"
    tail = f"(revision {data['revision']}, by {by})"
    if data.get("kind") == "gap":
        return [f"! changes after revision {data['gap']['after']} are unknown {tail}"]
    out = []
    for op, sign in (("added", "+"), ("removed", "-")):
        for pair in data["services"][op]:
            out.append(f"{sign} {pair['type']} {pair['identityId']} -> service {pair['serviceId']} {tail}")
        for pair in data["routers"][op]:
            out.append(f"{sign} router {pair['identityId']} -> {pair['edgeRouterId']} {tail}")
    return out


def watch(args: argparse.Namespace, out: TextIO) -> int:
    client = Client(args)
    cursor: str | None = args.since
    if cursor is None:
        cursor = str(client.call("GET", "/analysis/v1/revision")["data"]["revision"])
    while True:
        headers = {"accept": "text/event-stream", "zt-session": client.token, "last-event-id": cursor}
        # --once: one bounded answer; else answers that stay open, each event printed as it comes
        query = urllib.parse.urlencode({"wait": "0", "duration": "0"} if args.once else {"wait": "15"})
        request = urllib.request.Request(f"{client.url}{PATH}?{query}", headers=headers)
        got = 0
        try:
            with urllib.request.urlopen(request, context=client.context, timeout=60) as answer:
                for event in read_events(iter(answer.readline, b"")):
                    data = json.loads(event["data"])
                    for line in [json.dumps(data)] if args.json else lines_of(data):
                        print(line, file=out, flush=True)
                    cursor = event.get("id") or cursor
                    got += 1
        except urllib.error.HTTPError as ex:
            try:
                body = json.loads(ex.read())
            except ValueError:
                body = {}
            if ex.code == 429:
                time.sleep(1)
                continue
            raise Refused(ex.code, body) from None
        except urllib.error.URLError as ex:
            raise CliError(f"{client.url}: {ex.reason}") from None
        if args.once and not got:
            return 0


def add_commands(sub: Any) -> None:
    """Add ``watch-access`` to ``trellis``'s subcommands."""
    one = sub.add_parser("watch-access", help="print the access changes of every write as they happen")
    one.add_argument("--since", help="the revision to start after (REV or REV.OFFSET; default: now)")
    one.add_argument("--json", action="store_true", help="each event's data as one JSON line")
    one.add_argument("--once", action="store_true", help="stop once caught up")
    _connection(one)


def run(args: argparse.Namespace, out: TextIO = sys.stdout) -> int | None:
    """Run ``watch-access``; None for any other command."""
    if args.command != "watch-access":
        return None
    try:
        return watch(args, out)
    except CliError as ex:
        print(f"trellis {args.command}: {ex}", file=sys.stderr)
        return 2
    except Refused as ex:
        print(f"trellis {args.command}: {_error_text(ex)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
