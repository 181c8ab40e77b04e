"""The reviewed baseline (``baseline.json``): the operations the runs leave out, and the accepted
deviations from OpenZiti's specs, each with a one-line reason.

``excluded``: ``{api, operation, reason}``; the operation (``METHOD /path`` as the spec names it) is
not fuzzed in that API's runs. ``deviations``: ``{api, operation, check, reason}``; a failure of
that check on that operation is expected. A 5xx is never a deviation (``not_a_server_error`` is
refused here): it is a bug.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.fuzz.runner import CHECKS, Failure
from tests.e2e.fuzz.specs import APIS

PATH = Path(__file__).with_name("baseline.json")


@dataclass(frozen=True)
class Entry:
    api: str
    operation: str
    check: str
    reason: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.api, self.operation, self.check)


@dataclass(frozen=True)
class Baseline:
    excluded: tuple[Entry, ...]
    deviations: tuple[Entry, ...]

    def excluded_from(self, api: str) -> list[str]:
        return [entry.operation for entry in self.excluded if entry.api == api]

    def accepts(self, failure: Failure) -> bool:
        return (failure.api, failure.operation, failure.check) in {entry.key for entry in self.deviations}

    def unseen(self, failures: Iterable[Failure], apis: Iterable[str]) -> list[Entry]:
        """Deviations of ``apis`` that no failure matched (a bounded run need not meet them all)."""
        seen = {(f.api, f.operation, f.check) for f in failures}
        wanted = set(apis)
        return [entry for entry in self.deviations if entry.api in wanted and entry.key not in seen]


def _entry(raw: dict[str, Any], *, check: bool) -> Entry:
    fields = {"api", "operation", "reason", *(("check",) if check else ())}
    if set(raw) != fields:
        raise ValueError(f"baseline entry needs exactly {sorted(fields)}: {raw}")
    entry = Entry(raw["api"], raw["operation"], raw.get("check", ""), raw["reason"])
    method, _, path = entry.operation.partition(" ")
    if (
        entry.api not in APIS
        or method not in {"GET", "POST", "PUT", "PATCH", "DELETE"}
        or not path.startswith("/")
    ):
        raise ValueError(f"baseline entry: bad api or operation: {raw}")
    if check and (entry.check not in CHECKS or entry.check == "not_a_server_error"):
        raise ValueError(f"baseline entry: a 5xx is a bug, and the check must be one of {CHECKS}: {raw}")
    if not entry.reason.strip() or "\n" in entry.reason:
        raise ValueError(f"baseline entry: the reason is one line: {raw}")
    return entry


def load(path: Path = PATH) -> Baseline:
    raw = json.loads(path.read_text(encoding="utf-8"))
    excluded = tuple(_entry(item, check=False) for item in raw["excluded"])
    deviations = tuple(_entry(item, check=True) for item in raw["deviations"])
    for name, entries in (("excluded", excluded), ("deviations", deviations)):
        keys = [entry.key for entry in entries]
        if len(keys) != len(set(keys)):
            raise ValueError(f"baseline: duplicate entries in {name}")
    return Baseline(excluded, deviations)
