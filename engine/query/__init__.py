"""ZitiQL filtering, sorting and paging for list endpoints (wire-contract §5).

Typical use::

    table = SymbolTable({"name": Symbol(SymbolType.STRING, attrgetter("name"))})
    query = compile_query(filter_text, table, sort_param=sort)
    page, total, limit, offset = execute(query, items, limit_param=limit, offset_param=offset)
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
    parse_sort_param,
)
from engine.query.zitiql import parse

__all__ = [
    "LIST_LIMIT_DEFAULT",
    "LIST_LIMIT_MAX",
    "LIST_OFFSET_MAX",
    "ParsedQuery",
    "Predicate",
    "Query",
    "SortKey",
    "Symbol",
    "SymbolTable",
    "SymbolType",
    "compile_filter",
    "compile_query",
    "effective_limit",
    "effective_offset",
    "execute",
    "parse",
    "parse_sort_param",
]
