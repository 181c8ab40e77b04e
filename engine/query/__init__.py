"""ZitiQL filtering, sorting and paging for list endpoints (docs/api.md §5).

Typical use::

    table = SymbolTable({"name": Symbol(SymbolType.STRING, attrgetter("name"))})
    query = compile_query(filter_text, table, sort_param=sort)
    page, total, limit, offset = execute(query, items, limit_param=limit, offset_param=offset)

Over a store kind's whole collection, :func:`execute_indexed` gives the same page from the
collection's :class:`ListIndex` (see :mod:`engine.query.plan`).
"""

from engine.query.ast import ParsedQuery
from engine.query.evaluate import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_MAX,
    LIST_OFFSET_MAX,
    Predicate,
    Query,
    SortKey,
    Symbol,
    SymbolTable,
    SymbolType,
    compile_filter,
    compile_query,
    effective_limit,
    effective_offset,
    execute,
    execute_loaded,
    parse_sort_param,
)
from engine.query.plan import ListIndex, ScanIndex, candidates, execute_indexed, plan
from engine.query.zitiql import parse

__all__ = [
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "LIST_OFFSET_MAX",
    "ListIndex",
    "ParsedQuery",
    "Predicate",
    "Query",
    "ScanIndex",
    "SortKey",
    "Symbol",
    "SymbolTable",
    "SymbolType",
    "candidates",
    "compile_filter",
    "compile_query",
    "effective_limit",
    "effective_offset",
    "execute",
    "execute_indexed",
    "execute_loaded",
    "parse",
    "parse_sort_param",
    "plan",
]
