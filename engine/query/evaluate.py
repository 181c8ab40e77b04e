"""Compile ZitiQL against a symbol table and run it over in-memory objects (docs/api.md §5.2/5.3).

:func:`compile_query` type-checks the AST from :func:`engine.query.zitiparse` once and builds a
tree of closures; :func:`execute` filters, sorts and pages a collection with it.

Semantics follow OpenZiti's ``storage/ast`` evaluator:

* A comparison whose field value is missing (``None``) or - for ``tags.*`` - of another type than
  the literal is **false**, for every operator including ``!=`` and ``not contains``; only
  ``= null`` / ``!= null`` look at missingness.
* ``x not in [...]`` and ``x not between a and b`` are the negation of the positive form, so they
  are true for a missing value; for set functions the negation wraps the whole set test
  (``anyOf(s) not in [..]`` means "no element is in the list"), exactly as upstream builds it.
* ``between a and b`` is half-open: ``a <= x < b``.
* ``anyOf(s) ...`` is false for an empty set; ``allOf(s) ...`` is **true** for an empty set
  (upstream's AllOfSetExprNode starts from true and only looks for a failing element).
* ``contains`` is a case-sensitive substring test, ``icontains`` a case-insensitive one; a number
  operand is compared through its decimal text.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Container, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from engine.errors import InvalidFilterError, InvalidSortError
from engine.query import ast as ql
from engine.query.ast import Pos, ValueKind, filter_error
from engine.query.zitiql import parse

T = TypeVar("T")
Predicate = Callable[[Any], bool]

LIST_LIMIT_DEFAULT = 10
LIST_LIMIT_MAX = 500
LIST_OFFSET_MAX = 100_000


class SymbolType(enum.Enum):
    STRING = "string"
    NUMBER = "number"
    BOOL = "bool"
    DATETIME = "datetime"
    ANY = "any"  # tag values: str | bool | int | float | None


@dataclass(frozen=True)
class Symbol:
    """A filterable field. For set symbols ``getter`` returns an iterable of element values.

    ``related`` (with ``related_getter`` returning the related objects, defaulting to ``getter``)
    enables subqueries ``isEmpty(from <name> where ...)`` / ``count(from <name> where ...)``.
    """

    type: SymbolType
    getter: Callable[[Any], Any]
    is_set: bool = False
    related: SymbolTable | None = None
    related_getter: Callable[[Any], Iterable[Any]] | None = None


def _is_system(item: Any) -> bool:
    return getattr(item, "is_system", False) is True


#: The symbol a table of stored entities has unless it names its own ``isSystem``.
IS_SYSTEM = Symbol(SymbolType.BOOL, _is_system)


class SymbolTable:
    """Named symbols of one entity type; ``tags.<key>`` resolves through ``tags_getter``.

    A table with a ``tags_getter`` is one of stored entities, and has OpenZiti's symbols of every
    stored entity: ``tags`` is listed among its names (though only ``tags.<key>`` may be filtered
    on, as OpenZiti answers an unknown symbol for ``tags`` alone) and ``isSystem`` is the item's
    ``is_system``, false for a kind that has none (unless ``symbols`` names its own).
    """

    def __init__(
        self,
        symbols: Mapping[str, Symbol],
        *,
        tags_getter: Callable[[Any], Mapping[str, Any]] | None = None,
    ) -> None:
        self._symbols = dict(symbols)
        self._tags_getter = tags_getter
        if tags_getter is not None:
            self._symbols.setdefault("isSystem", IS_SYSTEM)
        listed = [*self._symbols, "tags"] if tags_getter is not None else list(self._symbols)
        self._names = sorted(set(listed))

    def names(self) -> list[str]:
        """Public filterable field names, sorted (``meta.filterableFields``)."""
        return list(self._names)

    def resolve(self, name: str, pos: Pos = Pos(1, 0)) -> Symbol:
        """The symbol called ``name``; raises :class:`InvalidFilterError` when there is none."""
        symbol = self._symbols.get(name)
        if symbol is not None:
            return symbol
        tags_getter = self._tags_getter
        if tags_getter is not None and name.startswith("tags.") and len(name) > 5:
            key = name[5:]

            def get_tag(item: Any) -> Any:
                tags = tags_getter(item)
                return None if tags is None else tags.get(key)

            return Symbol(SymbolType.ANY, get_tag)
        raise filter_error(pos, f"no such symbol: {name}")


@dataclass(frozen=True)
class SortKey:
    name: str
    symbol: Symbol
    ascending: bool = True


@dataclass(frozen=True)
class Query:
    """A compiled query. ``skip``/``limit`` are None when the filter had no such clause;
    ``limit`` is -1 for ``limit none``. ``matches_all`` is set when the predicate is constant true.
    ``expr`` is the filter's syntax tree and ``symbols`` the table it was compiled against (what
    :func:`engine.query.plan.execute_indexed` plans index lookups from)."""

    predicate: Predicate
    sort: tuple[SortKey, ...] = ()
    skip: int | None = None
    limit: int | None = None
    matches_all: bool = False
    expr: ql.Expr | None = None
    symbols: SymbolTable | None = None


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
# the runtime check a tags (ANY) value must pass to be compared with a literal of this kind
_ANY_CHECKS: dict[ValueKind, Callable[[Any], bool]] = {
    ValueKind.STRING: lambda v: isinstance(v, str),
    ValueKind.NUMBER: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    ValueKind.BOOL: lambda v: isinstance(v, bool),
    ValueKind.DATETIME: lambda v: isinstance(v, datetime),
}
_COMPARABLE: dict[SymbolType, tuple[ValueKind, ...]] = {
    SymbolType.STRING: (ValueKind.STRING,),
    SymbolType.NUMBER: (ValueKind.NUMBER,),
    SymbolType.BOOL: (ValueKind.BOOL,),
    SymbolType.DATETIME: (ValueKind.DATETIME,),
    SymbolType.ANY: (ValueKind.STRING, ValueKind.NUMBER, ValueKind.BOOL, ValueKind.DATETIME),
}


def _aware(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def _mismatch(name: str, stype: SymbolType, what: str, pos: Pos) -> InvalidFilterError:
    return filter_error(pos, f"symbol '{name}' of type {stype.value} cannot be used with {what}")


def _guarded(stype: SymbolType, kind: ValueKind, test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """Wrap a value test so that None (and, for ANY, other types) is false."""
    if stype is SymbolType.ANY:
        check = _ANY_CHECKS[kind]
        return lambda v: check(v) and test(v)
    if stype is SymbolType.DATETIME:
        return lambda v: v is not None and test(_aware(v))
    return lambda v: v is not None and test(v)


def _value_test(node: ql.Compare | ql.InList | ql.Between, stype: SymbolType, name: str) -> Predicate:
    """Type-check ``node`` for a value of type ``stype`` and build a test on one value."""
    if isinstance(node, ql.InList):
        kind, values = node.values[0].kind, frozenset(lit.value for lit in node.values)
        if kind not in _COMPARABLE[stype]:
            raise _mismatch(name, stype, f"a {kind.value} list", node.values[0].pos)
        return _guarded(stype, kind, lambda v: v in values)
    if isinstance(node, ql.Between):
        low, high, kind = node.low.value, node.high.value, node.low.kind
        if kind not in _COMPARABLE[stype]:
            raise _mismatch(name, stype, f"{kind.value} bounds", node.low.pos)
        return _guarded(stype, kind, lambda v: low <= v < high)
    lit, op = node.value, node.op
    if lit.kind is ValueKind.NULL:
        return (lambda v: v is None) if op == "=" else (lambda v: v is not None)
    if op in ("contains", "icontains"):
        if stype not in (SymbolType.STRING, SymbolType.NUMBER, SymbolType.ANY):
            raise _mismatch(name, stype, f"'{op}'", lit.pos)
        needle = lit.value if isinstance(lit.value, str) else str(lit.value)
        negated, fold = node.negated, op == "icontains"
        if fold:
            needle = needle.lower()
        if stype is SymbolType.NUMBER:
            test: Callable[[Any], bool] = lambda v: (needle in str(v)) != negated  # noqa: E731
        elif fold:
            test = lambda v: (needle in v.lower()) != negated  # noqa: E731
        else:
            test = lambda v: (needle in v) != negated  # noqa: E731
        return _guarded(stype, ValueKind.STRING, test)
    if lit.kind not in _COMPARABLE[stype]:
        raise _mismatch(name, stype, f"a {lit.kind.value} value", lit.pos)
    if lit.kind is ValueKind.BOOL and op not in ("=", "!="):
        raise _mismatch(name, stype, f"'{op}' on a bool value", lit.pos)
    compare, expected = _ORDER_OPS[op], lit.value
    return _guarded(stype, lit.kind, lambda v: compare(v, expected))


def _set_symbol(table: SymbolTable, name: str, pos: Pos, func: str) -> Symbol:
    symbol = table.resolve(name, pos)
    if not symbol.is_set:
        raise filter_error(pos, f"symbol '{name}' is not a set symbol but is used in {func}()")
    return symbol


def _elements(target: ql.SetExpr, table: SymbolTable, func: str) -> Callable[[Any], Iterable[Any]]:
    """A function giving the elements of a set expression (optionally filtered by a subquery)."""
    symbol = _set_symbol(table, target.name, target.pos, func)
    if isinstance(target, ql.SymbolRef):
        getter = symbol.getter
        return lambda item: getter(item) or ()
    if symbol.related is None:
        raise filter_error(target.pos, f"subqueries are not supported on this list (symbol '{target.name}')")
    sub = target.query
    if sub.sort is not None or sub.skip is not None or sub.limit is not None:
        raise filter_error(target.pos, "sort, skip and limit are not supported in subqueries")
    inner = compile_filter(sub.filter, symbol.related)
    related = symbol.related_getter or symbol.getter
    return lambda item: filter(inner, related(item) or ())


def _count(values: Iterable[Any]) -> int:
    return len(values) if isinstance(values, Sized) else sum(1 for _ in values)


def _is_empty(values: Iterable[Any]) -> bool:
    if isinstance(values, Sized):  # a set read from elsewhere (a policy's members) counts cheaply
        return len(values) == 0
    return next(iter(values), _SENTINEL) is _SENTINEL


_SENTINEL = object()


def _scalar_symbol(table: SymbolTable, ref: ql.SymbolRef) -> Symbol:
    symbol = table.resolve(ref.name, ref.pos)
    if symbol.is_set:
        raise filter_error(
            ref.pos, f"symbol '{ref.name}' is a set symbol but is used in non-set function context"
        )
    return symbol


def _holds_string(node: ql.Compare | ql.InList | ql.Between) -> Callable[[Iterable[Any]], bool] | None:
    """``anyOf(s) = "x"`` / ``anyOf(s) in ["x", ...]`` on a string set as one membership test: the
    same answer as testing each element (None and values of other types equal no string)."""
    if isinstance(node, ql.Compare) and node.op == "=" and node.value.kind is ValueKind.STRING:
        expected = node.value.value
        return lambda values: expected in values
    if isinstance(node, ql.InList) and node.values[0].kind is ValueKind.STRING:
        wanted = frozenset(lit.value for lit in node.values)

        def holds_any(values: Iterable[Any]) -> bool:
            if isinstance(values, Container) and not isinstance(values, (list, tuple)):
                # a set read from elsewhere (a policy's members): a few membership tests
                return any(value in values for value in wanted)
            return not wanted.isdisjoint(values)

        return holds_any
    return None


def _operation(node: ql.Compare | ql.InList | ql.Between, table: SymbolTable) -> Predicate:
    lhs = node.lhs
    if isinstance(lhs, ql.Count):
        elements = _elements(lhs.target, table, "count")
        test = _value_test(node, SymbolType.NUMBER, f"count({lhs.target.name})")
        pred: Predicate = lambda item: test(_count(elements(item)))  # noqa: E731
    elif isinstance(lhs, ql.SetFunction):
        symbol = _set_symbol(table, lhs.name, lhs.pos, lhs.func)
        test, getter = _value_test(node, symbol.type, lhs.name), symbol.getter
        holds = _holds_string(node) if symbol.type is SymbolType.STRING and lhs.func == "anyOf" else None
        if holds is not None:
            pred = lambda item: holds(getter(item) or ())  # noqa: E731
        elif lhs.func == "anyOf":
            pred = lambda item: any(map(test, getter(item) or ()))  # noqa: E731
        else:
            pred = lambda item: all(map(test, getter(item) or ()))  # noqa: E731
    else:
        symbol = _scalar_symbol(table, lhs)
        test, getter = _value_test(node, symbol.type, lhs.name), symbol.getter
        pred = lambda item: test(getter(item))  # noqa: E731
    if isinstance(node, (ql.InList, ql.Between)) and node.negated:
        positive = pred
        return lambda item: not positive(item)
    return pred


def _all_of(parts: list[Predicate]) -> Predicate:
    if len(parts) == 2:
        a, b = parts
        return lambda item: a(item) and b(item)
    return lambda item: all(part(item) for part in parts)


def _any_of(parts: list[Predicate]) -> Predicate:
    if len(parts) == 2:
        a, b = parts
        return lambda item: a(item) or b(item)
    return lambda item: any(part(item) for part in parts)


def compile_filter(expr: ql.Expr | None, table: SymbolTable) -> Predicate:
    """Type-check ``expr`` against ``table`` and return a predicate over items (None = true)."""
    if expr is None:
        return _always
    if isinstance(expr, ql.BoolConst):
        return _always if expr.value else _never
    if isinstance(expr, ql.Not):
        inner = compile_filter(expr.expr, table)
        return lambda item: not inner(item)
    if isinstance(expr, (ql.And, ql.Or)):
        # One flat predicate per chain: a chain of thousands of terms is no deeper than two.
        parts = [compile_filter(e, table) for e in expr.items]
        return _all_of(parts) if isinstance(expr, ql.And) else _any_of(parts)
    if isinstance(expr, ql.BareSymbol):
        symbol = _scalar_symbol(table, expr.ref)
        if symbol.type not in (SymbolType.BOOL, SymbolType.ANY):
            raise _mismatch(expr.ref.name, symbol.type, "no operator (only bool fields can)", expr.ref.pos)
        getter = symbol.getter
        return lambda item: getter(item) is True
    if isinstance(expr, ql.IsEmpty):
        elements = _elements(expr.target, table, "isEmpty")
        return lambda item: _is_empty(elements(item))
    return _operation(expr, table)


def _sort_value(value: Any) -> tuple[int, Any]:
    """A total order over mixed values: None first, then bools, numbers, strings, datetimes."""
    if value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, (int, float)):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    if isinstance(value, datetime):
        return (4, _aware(value))
    return (5, str(value))


def sort_key(getter: Callable[[Any], Any]) -> Callable[[Any], tuple[int, Any]]:
    """The sort key of a field: its value's place in :func:`_sort_value`'s total order."""

    def key(item: Any) -> tuple[int, Any]:
        value = getter(item)
        if value.__class__ is str:  # the common case, without the chain of type tests
            return (3, value)
        return _sort_value(value)

    return key


def sort_in_place(rows: list[Any], sort: Sequence[SortKey]) -> None:
    """Sort ``rows`` by ``sort``: stable, None first when ascending (one pass per key, last first)."""
    for key in reversed(sort):
        rows.sort(key=sort_key(key.symbol.getter), reverse=not key.ascending)


def _sort_symbol(table: SymbolTable, name: str) -> Symbol | None:
    try:
        symbol = table.resolve(name)
    except InvalidFilterError:
        return None
    return None if symbol.is_set else symbol


def parse_sort_param(text: str, table: SymbolTable) -> tuple[SortKey, ...]:
    """Parse the ``sort`` query parameter (``"name asc, createdAt desc"``); InvalidSortError if bad."""
    keys: list[SortKey] = []
    for part in text.split(","):
        words = part.split()
        if not words or len(words) > 2:
            raise InvalidSortError(f"invalid sort clause: '{part.strip()}'")
        direction = words[1].lower() if len(words) == 2 else "asc"
        if direction not in ("asc", "desc"):
            raise InvalidSortError(f"invalid sort direction '{words[1]}' for field '{words[0]}'")
        name = words[0][1:-1] if len(words[0]) > 2 and words[0][0] == words[0][-1] == "'" else words[0]
        symbol = _sort_symbol(table, name)
        if symbol is None:
            raise InvalidSortError(f"invalid sort field: '{name}'")
        keys.append(SortKey(name, symbol, direction == "asc"))
    return tuple(keys)


def compile_query(
    text: str | None,
    symbols: SymbolTable,
    *,
    default_sort: str | None = None,
    sort_param: str | None = None,
) -> Query:
    """Parse and compile a filter. The filter's ``sort by`` wins over ``sort_param``, which wins
    over ``default_sort`` (same syntax as ``sort_param``); with none of them, input order is kept."""
    parsed = parse(text or "")
    predicate = compile_filter(parsed.filter, symbols)
    sort: tuple[SortKey, ...] = ()
    if parsed.sort is not None:
        fields = []
        for field in parsed.sort:
            symbol = _sort_symbol(symbols, field.name)
            if symbol is None:
                raise filter_error(field.pos, f"invalid sort field: {field.name}")
            fields.append(SortKey(field.name, symbol, field.ascending))
        sort = tuple(fields)
    elif sort_param is not None and sort_param.strip():
        sort = parse_sort_param(sort_param, symbols)
    elif default_sort:
        sort = parse_sort_param(default_sort, symbols)
    return Query(predicate, sort, parsed.skip, parsed.limit, predicate is _always, parsed.filter, symbols)


def effective_limit(query_limit: int | None, limit_param: int | None) -> int:
    """The page size: filter clause, else parameter; 0/None/< -1 -> 10, > 500 -> 500, -1 = all."""
    limit = query_limit if query_limit is not None else limit_param
    if limit is None or limit == 0 or limit < -1:
        return LIST_LIMIT_DEFAULT
    return min(limit, LIST_LIMIT_MAX)


def effective_offset(query_skip: int | None, offset_param: int | None) -> int:
    """The offset: filter clause, else parameter, else 0; clamped to ``[0, 100000]``."""
    offset = query_skip if query_skip is not None else offset_param
    return max(0, min(offset or 0, LIST_OFFSET_MAX))


def execute(
    query: Query, items: Iterable[T], *, limit_param: int | None, offset_param: int | None
) -> tuple[list[T], int, int, int]:
    """Filter, sort and page ``items``: ``(page, total_count, effective_limit, effective_offset)``.

    Sorting is stable, None first when ascending; ``effective_limit`` is -1 when unlimited.
    """
    matched = list(items) if query.matches_all else list(filter(query.predicate, items))
    sort_in_place(matched, query.sort)
    limit = effective_limit(query.limit, limit_param)
    offset = effective_offset(query.skip, offset_param)
    page = matched[offset:] if limit == -1 else matched[offset : offset + limit]
    return page, len(matched), limit, offset


def execute_loaded(
    query: Query,
    ids: Sequence[str],
    load: Callable[[Sequence[str]], list[T]],
    *,
    limit_param: int | None,
    offset_param: int | None,
) -> tuple[list[T], int, int, int]:
    """:func:`execute` over the entities ``load`` gives for ``ids``, in that order: a query with
    no filter and no sort (a client paging through its services) loads only its page, not every
    row. ``total_count`` is then ``len(ids)``."""
    if query.matches_all and not query.sort:
        limit = effective_limit(query.limit, limit_param)
        offset = effective_offset(query.skip, offset_param)
        window = ids[offset:] if limit == -1 else ids[offset : offset + limit]
        return load(window), len(ids), limit, offset
    return execute(query, load(ids), limit_param=limit_param, offset_param=offset_param)
