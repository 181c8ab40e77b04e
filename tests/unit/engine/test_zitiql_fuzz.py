"""Hostile ZitiQL (issue 8): any filter, sort or paging input compiles and runs or is refused
with InvalidFilterError / InvalidSortError (a 400), never another exception. Nesting is bounded
(:data:`engine.query.zitiql.MAX_NESTING`) so that no filter can exhaust Python's stack, and long
``and``/``or`` chains evaluate flat. Inputs are size-bounded and runs derandomized; there is no
timing assertion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidFilterError, InvalidSortError
from engine.query import (
    Query,
    Symbol,
    SymbolTable,
    SymbolType,
    compile_query,
    execute,
    parse,
    parse_sort_param,
)
from engine.query.zitiql import MAX_NESTING
from tests.conftest import examples

FUZZ = settings(
    max_examples=examples(300),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Row:
    name: str | None
    age: int | None = None
    admin: bool | None = None
    created: datetime | None = None
    roles: list[str] = field(default_factory=list)
    friends: list[Row] = field(default_factory=list)
    tags: dict[str, Any] = field(default_factory=dict)


TABLE = SymbolTable(
    {
        "name": Symbol(SymbolType.STRING, attrgetter("name")),
        "age": Symbol(SymbolType.NUMBER, attrgetter("age")),
        "admin": Symbol(SymbolType.BOOL, attrgetter("admin")),
        "created": Symbol(SymbolType.DATETIME, attrgetter("created")),
        "roles": Symbol(SymbolType.STRING, attrgetter("roles"), is_set=True),
    },
    tags_getter=attrgetter("tags"),
)
# "friends" relates the table to itself, so that subqueries nest without end.
TABLE._symbols["friends"] = Symbol(
    SymbolType.STRING,
    lambda r: [f.name for f in r.friends],
    is_set=True,
    related=TABLE,
    related_getter=attrgetter("friends"),
)

ROWS = [
    Row("ann", 31, True, datetime(2024, 1, 1, tzinfo=UTC), ["a", "b"], tags={"t": "x", "n": 2**70}),
    Row(None, None, None, None),
    Row("bob", -5, False, datetime(9999, 12, 31, tzinfo=UTC), ["b"], tags={"t": True, "f": 1.5}),
]
ROWS[0].friends = [ROWS[1], ROWS[2]]
ROWS[2].friends = [ROWS[0]]

WORDS = [
    "name", "age", "admin", "created", "roles", "friends", "tags.t", "tags.n", "tags.f", "'name'",
    "=", "!=", "<", "<=", ">", ">=", "(", ")", "[", "]", ",",
    "and", "or", "not", "in", "between", "contains", "icontains", "true", "false", "null",
    "sort", "by", "asc", "desc", "skip", "limit", "none", "where", "from",
    "anyOf", "allOf", "count", "isEmpty",
    '"ann"', '"b"', '""', '"\\n"', "0", "-1", "31", "1.5", "1e308", "-1e999", str(2**70),
    "datetime(2024-01-01T00:00:00Z)", "datetime(9999-12-31T23:59:59-23:59)",
    "datetime(0001-01-01T00:00:00+23:59)", "datetime(2024-02-30T00:00:00Z)",
]  # fmt: skip


def run(text: str, *, sort: str | None = None, limit: int | None = None, offset: int | None = None) -> Any:
    """The page for ``text``, or None when it is refused as a bad filter or sort."""
    try:
        query = compile_query(text, TABLE, sort_param=sort)
    except (InvalidFilterError, InvalidSortError):
        return None
    assert isinstance(query, Query)
    return execute(query, ROWS, limit_param=limit, offset_param=offset)


@FUZZ
@given(text=st.text(max_size=400))
def test_any_text_is_a_query_or_an_invalid_filter(text: str) -> None:
    run(text)


@FUZZ
@given(words=st.lists(st.sampled_from(WORDS), max_size=40), spaced=st.booleans())
def test_any_sequence_of_zitiql_words_runs_or_is_an_invalid_filter(words: list[str], spaced: bool) -> None:
    text = (" " if spaced else "").join(words)

    result = run(text)

    assert result is None or result[1] <= len(ROWS)


atoms = st.sampled_from(
    [
        'name = "ann"',
        "age > 3",
        "admin",
        "created < datetime(2030-01-01T00:00:00Z)",
        'anyOf(roles) in ["a", "c"]',
        "tags.n > 1",
        'tags.t = "x"',
        "count(roles) between 1 and 3",
        'isEmpty(from friends where name contains "o")',
    ]
)
trees = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from([" and ", " or "]), inner).map("".join),
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"not {e}"),
        inner.map(lambda e: f"not isEmpty(from friends where {e})"),
    ),
    max_leaves=30,
)


@FUZZ
@given(text=trees, sort=st.sampled_from([None, "name desc", "age, created desc", "roles", "bogus up", ","]))
def test_well_formed_filters_always_run(text: str, sort: str | None) -> None:
    result = run(text, sort=sort)

    if sort in (None, "name desc", "age, created desc"):
        assert result is not None, text


#: Openers of nesting: (text, nesting levels it opens, text closing it).
OPENERS = [
    ("(", 1, ")"),
    ("not ", 1, ""),
    ("isEmpty(from friends where ", 1, ")"),
    ("not isEmpty(from friends where (", 3, "))"),
]


@FUZZ
@given(depth=st.integers(min_value=0, max_value=3 * MAX_NESTING), opener=st.sampled_from(OPENERS))
def test_nesting_is_bounded_with_an_invalid_filter(depth: int, opener: tuple[str, int, str]) -> None:
    start, levels, end = opener
    text = start * depth + 'name = "ann"' + end * depth

    result = run(text)

    assert (result is not None) == (depth * levels <= MAX_NESTING), text


@pytest.mark.parametrize("joiner", [" and ", " or "])
def test_a_chain_of_thousands_of_terms_evaluates_flat(joiner: str) -> None:
    text = joiner.join(['name = "zed"'] * 5000)

    rows, total, _, _ = run(text)

    assert (rows, total) == ([], 0)


@pytest.mark.parametrize(
    "text",
    [
        "age = " + "9" * 5000,
        "age = -" + "9" * 5000,
        "limit " + "9" * 5000,
        "created > datetime(" + "2" * 5000 + "-01-01T00:00:00Z)",
    ],
)
def test_literals_too_long_for_python_are_invalid_filters(text: str) -> None:
    with pytest.raises(InvalidFilterError) as raised:
        compile_query(text, TABLE)

    assert len(str(raised.value)) < 200


@FUZZ
@given(text=st.text(max_size=200))
def test_any_sort_parameter_is_keys_or_an_invalid_sort(text: str) -> None:
    try:
        keys = parse_sort_param(text, TABLE)
    except InvalidSortError:
        return
    assert all(key.name for key in keys)


@FUZZ
@given(
    limit=st.one_of(st.none(), st.integers(min_value=-(2**80), max_value=2**80)),
    offset=st.one_of(st.none(), st.integers(min_value=-(2**80), max_value=2**80)),
    skip=st.one_of(st.just(""), st.integers(min_value=0, max_value=2**80).map(lambda n: f" skip {n}")),
)
def test_any_paging_numbers_page_within_bounds(limit: int | None, offset: int | None, skip: str) -> None:
    rows, total, effective_limit, effective_offset = run("true" + skip, limit=limit, offset=offset)

    assert total == len(ROWS)
    assert effective_limit == -1 or 0 < effective_limit <= 500
    assert 0 <= effective_offset <= 100_000
    assert len(rows) <= len(ROWS)


def test_parse_of_a_nested_filter_names_the_limit() -> None:
    with pytest.raises(InvalidFilterError, match=f"nested more than {MAX_NESTING} levels"):
        parse("(" * (MAX_NESTING + 1) + "true" + ")" * (MAX_NESTING + 1))
