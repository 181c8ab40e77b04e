"""OS checks: the reported operating system type and version (``model/posture_check_model_os.go``).

A check lists ``{type, versions}``; the reported type is compared case-insensitively, and when the
same type is listed twice the last entry wins. No versions means any version. Otherwise the
reported version must be a strict semantic version satisfying one of the listed ranges, written as
blang/semver ranges: comparators ``>=``, ``<=``, ``>``, ``<``, ``=``/``==`` (the default),
``!=``/``!``, joined by spaces (and) and ``||`` (or), with ``x`` wildcards. A range that does not
parse is skipped, as OpenZiti logs and skips it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from engine.entities.posture import PostureCheck
from engine.managers.posture._core import NoTimeout, PostureData

_VERSION = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
_COMPARATOR = re.compile(r"^(>=|<=|!=|==|>|<|=|!)?(.+)$")
_WILDCARDS = ("x", "X", "*")

Version = tuple[int, int, int, tuple[str, ...]]
Predicate = Callable[[Version], bool]


def parse_version(text: str) -> Version | None:
    """A strict ``MAJOR.MINOR.PATCH[-pre][+build]`` version, or None."""
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    pre = tuple(match.group(4).split(".")) if match.group(4) else ()
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), pre


def _pre_key(pre: tuple[str, ...]) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    """Pre-release ordering: none sorts after any; numeric parts before alphanumeric ones."""
    if not pre:
        return (1, ())
    return (0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre))


def compare(a: Version, b: Version) -> int:
    left = (a[:3], _pre_key(a[3]))
    right = (b[:3], _pre_key(b[3]))
    return (left > right) - (left < right)


_OPERATORS: dict[str, Callable[[int], bool]] = {
    "": lambda c: c == 0,
    "=": lambda c: c == 0,
    "==": lambda c: c == 0,
    "!": lambda c: c != 0,
    "!=": lambda c: c != 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _bound(operator: str, version: Version) -> Predicate:
    test = _OPERATORS[operator]
    return lambda v: test(compare(v, version))


def _wildcard(operator: str, parts: list[str]) -> Predicate | None:
    """``1.x`` / ``1.2.x`` under an operator, expanded as blang/semver does."""
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[:-1]):
        return None
    if len(parts) == 3 and parts[1] in _WILDCARDS:
        parts = parts[:2]
    numbers = [int(p) for p in parts[:-1]]
    if len(numbers) == 1:
        low: Version = (numbers[0], 0, 0, ())
        high: Version = (numbers[0] + 1, 0, 0, ())
    else:
        low = (numbers[0], numbers[1], 0, ())
        high = (numbers[0], numbers[1] + 1, 0, ())
    ge, lt = _bound(">=", low), _bound("<", high)
    if operator in ("", "=", "=="):
        return lambda v: ge(v) and lt(v)
    if operator in ("!", "!="):
        return lambda v: not (ge(v) and lt(v))
    if operator == ">":
        return _bound(">=", high)
    if operator == ">=":
        return ge
    if operator == "<":
        return _bound("<", low)
    return lt  # "<="


def _comparator(text: str) -> Predicate | None:
    match = _COMPARATOR.match(text)
    if match is None:
        return None
    operator, body = match.group(1) or "", match.group(2)
    parts = body.split(".")
    if parts and parts[-1] in _WILDCARDS:
        return _wildcard(operator, parts)
    version = parse_version(body)
    return None if version is None else _bound(operator, version)


def parse_range(text: str) -> Predicate | None:
    """A blang/semver range as a predicate over versions, or None when it does not parse."""
    alternatives: list[list[Predicate]] = []
    for alternative in text.split("||"):
        tokens = alternative.split()
        if not tokens:
            return None
        predicates = [_comparator(token) for token in tokens]
        if any(p is None for p in predicates):
            return None
        alternatives.append([p for p in predicates if p is not None])
    return lambda v: any(all(p(v) for p in group) for group in alternatives)


def _allowed(check: PostureCheck) -> dict[str, list[Predicate]]:
    allowed: dict[str, list[Predicate]] = {}
    for entry in check.details.get("operatingSystems") or []:
        ranges = [parse_range(v) for v in entry.get("versions") or []]
        allowed[str(entry.get("type", "")).lower()] = [r for r in ranges if r is not None]
    return allowed


class OsEvaluator(NoTimeout):
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        if data.os.timed_out:
            return False
        ranges = _allowed(check).get(data.os.type.lower())
        if ranges is None:
            return False
        if not ranges:
            return True
        version = parse_version(data.os.version)
        return version is not None and any(r(version) for r in ranges)

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        return {
            "actualValue": {"type": data.os.type, "version": data.os.version},
            "expectedValue": list(check.details.get("operatingSystems") or []),
        }
