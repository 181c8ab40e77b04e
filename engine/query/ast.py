"""The ZitiQL syntax tree: positions, literals, expressions and the parsed query."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from engine.errors import InvalidFilterError


class Pos(NamedTuple):
    """A source position: 1-based line, 0-based column."""

    line: int
    col: int


def filter_error(pos: Pos, message: str) -> InvalidFilterError:
    """An :class:`InvalidFilterError` whose message is prefixed with ``line L:C``."""
    return InvalidFilterError(f"line {pos.line}:{pos.col} {message}")


class ValueKind(enum.Enum):
    STRING = "string"
    NUMBER = "number"
    DATETIME = "datetime"
    BOOL = "bool"
    NULL = "null"


LiteralValue = str | int | float | bool | datetime | None


@dataclass(frozen=True)
class Literal:
    kind: ValueKind
    value: LiteralValue
    pos: Pos


@dataclass(frozen=True)
class SymbolRef:
    """An identifier (quotes already removed)."""

    name: str
    pos: Pos


@dataclass(frozen=True)
class SubQuery:
    """``from <name> where <query>`` inside ``isEmpty(...)`` / ``count(...)``."""

    name: str
    query: ParsedQuery
    pos: Pos


@dataclass(frozen=True)
class SetFunction:
    """``anyOf(name)`` or ``allOf(name)`` on the left-hand side of an operation."""

    func: str  # "anyOf" | "allOf"
    name: str
    pos: Pos


@dataclass(frozen=True)
class Count:
    target: SetExpr
    pos: Pos


@dataclass(frozen=True)
class BoolConst:
    value: bool


@dataclass(frozen=True)
class Not:
    expr: Expr


@dataclass(frozen=True)
class And:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class BareSymbol:
    """A boolean field used on its own, meaning ``field = true``."""

    ref: SymbolRef


@dataclass(frozen=True)
class IsEmpty:
    target: SetExpr
    pos: Pos


@dataclass(frozen=True)
class Compare:
    """``lhs op value``; op is one of ``= != < <= > >= contains icontains``."""

    lhs: Lhs
    op: str
    value: Literal
    negated: bool = False  # only for contains / icontains


@dataclass(frozen=True)
class InList:
    lhs: Lhs
    values: tuple[Literal, ...]
    negated: bool = False


@dataclass(frozen=True)
class Between:
    lhs: Lhs
    low: Literal
    high: Literal
    negated: bool = False


SetExpr = SymbolRef | SubQuery
Lhs = SymbolRef | SetFunction | Count
Expr = BoolConst | Not | And | Or | BareSymbol | IsEmpty | Compare | InList | Between


@dataclass(frozen=True)
class SortField:
    name: str
    ascending: bool
    pos: Pos


@dataclass(frozen=True)
class ParsedQuery:
    """A whole query. ``filter`` is None for an empty filter (meaning ``true``);
    ``limit`` is -1 for ``limit none``."""

    filter: Expr | None
    sort: tuple[SortField, ...] | None = None
    skip: int | None = None
    limit: int | None = None
