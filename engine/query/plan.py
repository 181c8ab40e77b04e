"""Lists over a whole indexed collection: the ZitiQL terms an index answers, and paging without a scan.

:func:`execute` (``evaluate.py``) runs a query's predicate over every item. When the items are a
store kind's whole collection, :func:`execute_indexed` asks the collection's :class:`ListIndex`
first:

* **Planning** (:func:`candidates`) reads the compiled query's syntax tree for terms an index can
  answer exactly: ``f = "x"`` and ``f in ["x", ...]`` on a string field with an equality index
  (``id``, unique and indexed fields), and ``anyOf(s) = "x"`` / ``anyOf(s) in [...]`` on a string
  set with a membership index. A top-level ``and`` narrows to the intersection of its indexable
  terms (the others are left to the predicate), an ``or`` whose every term is indexable takes the
  union, ``false`` matches nothing; anything else (``not``, ``!=``, ``allOf``, ``contains``,
  ranges, ``null``, tags, subqueries) gives no candidates, and the collection is scanned.
* The candidates are a superset of the matches: the full predicate still decides, over the
  candidates in list order, so the page is exactly what the scan gives. When every term of the
  filter was answered by an index (:func:`plan` says the candidates are *exact*) and there is no
  sort, the predicate is not run again and only the page's first rows are put in list order
  (:meth:`ListIndex.first_in_order`, a heap): ``anyOf(roleAttributes) = "x"`` over 100,000
  members orders 10 of them, and ``totalCount`` is the candidates' count.
* A filter that matches everything, in list order, reads only the page from the collection (its
  ``totalCount`` is the collection's size). A sort in one direction for a small page takes the
  page with :func:`heapq.nsmallest` / :func:`heapq.nlargest`, documented as equal to the first
  items of a stable sort.

Which symbol reads which indexed field is the caller's knowledge (``fields``: symbol name ->
field name); the planner only uses a symbol that ``fields`` names.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from engine.query import ast as ql
from engine.query.ast import ValueKind
from engine.query.evaluate import (
    Query,
    SortKey,
    SymbolTable,
    SymbolType,
    effective_limit,
    effective_offset,
    sort_in_place,
    sort_key,
)

T = TypeVar("T")
#: Wraps the iteration of a scan (the request's deadline checks); the identity by default.
Guard = Callable[[Iterable[Any]], Iterable[Any]]

#: A sort for a page takes the heap path when the page's end is at most this share of the matches.
HEAP_SHARE = 8


class ListIndex(Protocol[T]):
    """One kind's whole collection as its list reads it, with the lookups its indexes offer.

    Ids returned by a lookup may be shared with the index: callers never change them.
    """

    def __len__(self) -> int:
        """How many items the collection holds."""
        ...

    def items(self) -> Collection[T]:
        """Every item, iterated in list order (what a scan reads)."""
        ...

    def page(self, start: int, stop: int | None) -> list[T]:
        """The items ``[start:stop]`` of the list (``stop`` None: to the end)."""
        ...

    def equal(self, field: str, value: Any) -> Collection[str] | None:
        """Ids of the items whose ``field`` equals ``value`` (hashable), or None when the field has
        no equality index (``id`` always has)."""
        ...

    def holding(self, field: str, value: Any) -> Collection[str] | None:
        """Ids of the items whose collection ``field`` holds ``value`` (hashable), or None when the
        field has no membership index."""
        ...

    def in_order(self, ids: Collection[str]) -> list[T]:
        """The items of ``ids``, in list order; ids of no item are left out."""
        ...

    def first_in_order(self, ids: Collection[str], count: int) -> list[T]:
        """``in_order(ids)[:count]``, without ordering all of ``ids`` when ``count`` is small."""
        ...


class ScanIndex:
    """A :class:`ListIndex` over a plain sequence of objects: every field "indexed" by a scan.

    For collections with no indexes of their own (a store's writers' view): correct, not fast.
    """

    def __init__(self, items: Sequence[Any]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> Sequence[Any]:
        return self._items

    def page(self, start: int, stop: int | None) -> list[Any]:
        return list(self._items[start:stop])

    def equal(self, field: str, value: Any) -> Collection[str] | None:
        return {item.id for item in self._items if getattr(item, field) == value}

    def holding(self, field: str, value: Any) -> Collection[str] | None:
        return {item.id for item in self._items if value in (getattr(item, field) or ())}

    def in_order(self, ids: Collection[str]) -> list[Any]:
        return [item for item in self._items if item.id in ids]

    def first_in_order(self, ids: Collection[str], count: int) -> list[Any]:
        return self.in_order(ids)[:count]


def _string_values(node: ql.Compare | ql.InList) -> list[str] | None:
    """The string literals a positive ``=`` / ``in`` compares with, else None."""
    if isinstance(node, ql.InList):
        if node.negated or node.values[0].kind is not ValueKind.STRING:
            return None
        return [lit.value for lit in node.values if isinstance(lit.value, str)]
    if node.op != "=" or node.value.kind is not ValueKind.STRING or not isinstance(node.value.value, str):
        return None
    return [node.value.value]


def _lookup(
    node: ql.Compare | ql.InList, symbols: SymbolTable, fields: Mapping[str, str], index: ListIndex[Any]
) -> Collection[str] | None:
    """The ids an index gives for one operation, or None when none answers it exactly."""
    values = _string_values(node)
    if values is None:
        return None
    lhs = node.lhs
    if isinstance(lhs, ql.SymbolRef):
        name, want_set = lhs.name, False
    elif isinstance(lhs, ql.SetFunction) and lhs.func == "anyOf":
        name, want_set = lhs.name, True
    else:
        return None
    field = fields.get(name)
    if field is None:
        return None
    symbol = symbols.resolve(name)
    if symbol.is_set is not want_set or symbol.type is not SymbolType.STRING:
        return None
    lookup = index.holding if want_set else index.equal
    found: list[Collection[str]] = []
    for value in dict.fromkeys(values):
        ids = lookup(field, value)
        if ids is None:
            return None
        found.append(ids)
    if len(found) == 1:
        return found[0]
    return set().union(*found)


def candidates(
    expr: ql.Expr | None, symbols: SymbolTable, fields: Mapping[str, str], index: ListIndex[Any]
) -> Collection[str] | None:
    """Ids that include every item ``expr`` matches, from ``index``; None when it cannot tell
    (the collection must be scanned). The result may be the index's own: never change it."""
    return plan(expr, symbols, fields, index)[0]


def plan(
    expr: ql.Expr | None, symbols: SymbolTable, fields: Mapping[str, str], index: ListIndex[Any]
) -> tuple[Collection[str] | None, bool]:
    """:func:`candidates`, and whether they are exactly the matches (every term of ``expr`` was
    answered by an index: the predicate need not look at them again)."""
    if isinstance(expr, ql.BoolConst):
        return (None, False) if expr.value else (frozenset(), True)
    if isinstance(expr, (ql.Compare, ql.InList)):
        found = _lookup(expr, symbols, fields, index)
        return found, found is not None
    if isinstance(expr, ql.And):
        planned = [plan(e, symbols, fields, index) for e in expr.items]
        parts = [ids for ids, _ in planned if ids is not None]
        exact = all(is_exact for _, is_exact in planned)
        if not parts:
            return None, False
        if len(parts) == 1:
            return parts[0], exact
        parts.sort(key=len)
        narrowed = set(parts[0])
        for part in parts[1:]:
            narrowed.intersection_update(part)
        return narrowed, exact
    if isinstance(expr, ql.Or):
        union: set[str] = set()
        every = True
        for item in expr.items:
            found, is_exact = plan(item, symbols, fields, index)
            if found is None:
                return None, False
            every = every and is_exact
            union.update(found)
        return union, every
    return None, False


def _one_direction(sort: tuple[SortKey, ...]) -> bool:
    return all(key.ascending == sort[0].ascending for key in sort)


def _composite_key(sort: tuple[SortKey, ...]) -> Callable[[Any], Any]:
    if len(sort) == 1:
        return sort_key(sort[0].symbol.getter)
    keys = [sort_key(key.symbol.getter) for key in sort]
    return lambda item: tuple(key(item) for key in keys)


def ordered_page(matched: Collection[T], sort: tuple[SortKey, ...], limit: int, offset: int) -> list[T]:
    """``matched`` sorted by ``sort`` (stable, as :func:`execute`), then the page ``[offset:][:limit]``
    (``limit`` -1: to the end). ``matched`` itself is never reordered."""
    if sort and limit != -1 and (offset + limit) * HEAP_SHARE <= len(matched) and _one_direction(sort):
        # documented: nsmallest(n, it, key) == sorted(it, key=key)[:n], nlargest(...) ==
        # sorted(it, key=key, reverse=True)[:n]; one composite key == successive stable sorts
        take = heapq.nsmallest if sort[0].ascending else heapq.nlargest
        return take(offset + limit, matched, key=_composite_key(sort))[offset:]
    rows = list(matched) if sort or not isinstance(matched, list) else matched
    sort_in_place(rows, sort)
    return rows[offset:] if limit == -1 else rows[offset : offset + limit]


def execute_indexed(
    query: Query,
    index: ListIndex[T],
    fields: Mapping[str, str],
    *,
    limit_param: int | None,
    offset_param: int | None,
    keep: Collection[str] | None = None,
    guard: Guard | None = None,
) -> tuple[list[T], int, int, int]:
    """:func:`execute` over ``index``'s whole collection (narrowed to the ids in ``keep``, when
    given), with the same result: ``(page, total_count, effective_limit, effective_offset)``."""
    limit = effective_limit(query.limit, limit_param)
    offset = effective_offset(query.skip, offset_param)
    ids: Collection[str] | None = None
    exact = query.matches_all
    if not query.matches_all and query.symbols is not None:
        ids, exact = plan(query.expr, query.symbols, fields, index)
    if keep is not None:
        ids = keep if ids is None else _intersection(ids, keep)
    if ids is None and query.matches_all and not query.sort:
        # the whole collection in list order: only the page is read
        return index.page(offset, None if limit == -1 else offset + limit), len(index), limit, offset
    if ids is not None and exact and keep is None and not query.sort and limit != -1:
        # the index's ids are exactly the matches (each an item's): only the page is ordered
        return index.first_in_order(ids, offset + limit)[offset:], len(ids), limit, offset
    source: Collection[T] = index.items() if ids is None else index.in_order(ids)
    if query.matches_all:
        matched = source
    else:
        scan: Iterable[T] = source if guard is None else guard(source)
        matched = list(filter(query.predicate, scan))
    return ordered_page(matched, query.sort, limit, offset), len(matched), limit, offset


def _intersection(a: Collection[str], b: Collection[str]) -> set[str]:
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return {i for i in small if i in large}
