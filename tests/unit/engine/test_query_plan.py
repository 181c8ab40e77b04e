"""The list planner (engine/query/plan.py): which ZitiQL terms an index answers, and that a list
read through a store's indexes gives exactly the page a plain scan gives."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.entities.identities import Identity
from engine.ports import Change, Delete, Put
from engine.query import (
    ScanIndex,
    Symbol,
    SymbolTable,
    SymbolType,
    candidates,
    compile_query,
    execute,
    execute_indexed,
    execute_loaded,
    parse,
)
from engine.query.plan import HEAP_SHARE, ordered_page
from storage.memory import MemoryStore
from tests.conftest import examples

NOW = datetime(2026, 1, 1, tzinfo=UTC)

#: Identity fields as a list's symbols (a subset of the API's, plain getters).
SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, attrgetter("id")),
        "name": Symbol(SymbolType.STRING, attrgetter("name")),
        "externalId": Symbol(SymbolType.STRING, attrgetter("external_id")),
        "type": Symbol(SymbolType.STRING, attrgetter("type_id")),
        "isAdmin": Symbol(SymbolType.BOOL, attrgetter("is_admin")),
        "cost": Symbol(SymbolType.NUMBER, attrgetter("default_hosting_cost")),
        "createdAt": Symbol(SymbolType.DATETIME, attrgetter("created_at")),
        "roleAttributes": Symbol(SymbolType.STRING, attrgetter("role_attributes"), is_set=True),
    },
    tags_getter=attrgetter("tags"),
)
#: The symbols that read an indexed Identity field (what ``api.http.index_fields`` derives).
FIELDS = {"id": "id", "name": "name", "externalId": "external_id", "roleAttributes": "role_attributes"}


def identity(n: int, name: str | None = None, roles: Sequence[str] = (), **fields: Any) -> Identity:
    return Identity(
        id=f"i{n}",
        created_at=fields.pop("created_at", NOW),
        updated_at=NOW,
        name=name if name is not None else f"name-{n}",
        role_attributes=list(roles),
        **fields,
    )


@pytest.fixture
def store() -> MemoryStore:
    out = MemoryStore()
    out.commit(
        [
            Put(identity(1, "alice", ["ops", "dev"], external_id="x-1")),
            Put(identity(2, "bob", ["dev"])),
            Put(identity(3, "carol", ["ops"], is_admin=True)),
            Put(identity(4, "dave")),
        ]
    )
    return out


def plan(store: MemoryStore, text: str) -> set[str] | None:
    found = candidates(parse(text).filter, SYMBOLS, FIELDS, store.list_index(Identity))
    return None if found is None else set(found)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('name = "bob"', {"i2"}),
        ('name = "nobody"', set()),
        ('id = "i3"', {"i3"}),
        ('id in ["i1", "i4", "i9"]', {"i1", "i4"}),
        ('name in ["alice", "carol"]', {"i1", "i3"}),
        ('externalId = "x-1"', {"i1"}),
        ('anyOf(roleAttributes) = "ops"', {"i1", "i3"}),
        ('anyOf(roleAttributes) in ["dev", "none"]', {"i1", "i2"}),
        ('anyOf(roleAttributes) = "ops" and name = "alice"', {"i1"}),
        ('anyOf(roleAttributes) = "ops" and isAdmin = true', {"i1", "i3"}),  # the predicate decides
        ('name = "bob" or anyOf(roleAttributes) = "ops"', {"i1", "i2", "i3"}),
        ('(name = "bob" or name = "dave") and anyOf(roleAttributes) = "dev"', {"i2"}),
        ("false", set()),
        ('false or name = "bob"', {"i2"}),
    ],
)
def test_index_usable_terms_give_candidates(store: MemoryStore, text: str, expected: set[str]) -> None:
    assert plan(store, text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "true",
        "isAdmin = true",
        'name != "bob"',
        'name contains "b"',
        'name icontains "B"',
        "name = null",
        'name > "a"',
        'not (name = "bob")',
        'id not in ["i1"]',
        'allOf(roleAttributes) = "ops"',  # true for an empty set: no index answers it
        'anyOf(roleAttributes) != "ops"',
        'anyOf(roleAttributes) contains "o"',
        'type = "Default"',  # no index on the field
        'tags.team = "red"',
        'name = "bob" or isAdmin = true',  # one term of the "or" needs a scan
        "isEmpty(roleAttributes)",
        "count(roleAttributes) > 1",
    ],
)
def test_other_terms_need_a_scan(store: MemoryStore, text: str) -> None:
    assert plan(store, text) is None


def test_a_symbol_the_fields_do_not_name_is_not_looked_up(store: MemoryStore) -> None:
    index = store.list_index(Identity)

    found = candidates(parse('name = "bob"').filter, SYMBOLS, {"id": "id"}, index)

    assert found is None


def test_a_field_without_an_index_gives_no_candidates(store: MemoryStore) -> None:
    """A symbol mapped to a field the kind does not index: the index says so (None), so scan."""
    index = store.list_index(Identity)

    found = candidates(parse('type = "Default"').filter, SYMBOLS, {"type": "type_id"}, index)

    assert found is None


def test_a_scan_index_answers_every_field_by_scanning() -> None:
    items = [identity(1, "a", ["x"]), identity(2, "b", ["x", "y"])]
    index = ScanIndex(items)

    assert index.equal("type_id", "Default") == {"i1", "i2"}
    assert index.holding("role_attributes", "y") == {"i2"}
    assert index.in_order({"i2", "i1"}) == items


def run_both(
    store: MemoryStore,
    text: str,
    *,
    sort: str | None = None,
    limit: int | None = None,
    offset: int | None = None,
    keep: set[str] | None = None,
) -> tuple[tuple[list[str], int, int, int], tuple[list[str], int, int, int]]:
    """(the plain scan's result, the indexed result), pages as ids."""
    query = compile_query(text, SYMBOLS, sort_param=sort)
    items = store.all(Identity)
    if keep is not None:
        items = [e for e in items if e.id in keep]
    rows, total, lim, off = execute(query, items, limit_param=limit, offset_param=offset)
    fast, fast_total, fast_lim, fast_off = execute_indexed(
        query, store.list_index(Identity), FIELDS, limit_param=limit, offset_param=offset, keep=keep
    )
    return ([e.id for e in rows], total, lim, off), ([e.id for e in fast], fast_total, fast_lim, fast_off)


@pytest.mark.parametrize(
    ("text", "limit", "offset"),
    [
        ('anyOf(roleAttributes) = "r"', 3, 2),
        ('anyOf(roleAttributes) in ["r", "s"]', 5, 0),
        ('anyOf(roleAttributes) = "r" and name = "name-150"', 10, 0),
        ('anyOf(roleAttributes) = "r" or anyOf(roleAttributes) = "s"', 4, 60),
        ('name = "name-7"', 10, 0),
    ],
)
def test_an_exact_plan_orders_only_the_page_and_counts_the_index(text: str, limit: int, offset: int) -> None:
    store = MemoryStore()
    store.commit([Put(identity(n, roles=["r"] if n % 3 else ["s"])) for n in range(200, 0, -1)])
    store.commit([Put(identity(n, roles=["t"])) for n in range(300, 400)])
    store.commit([Delete(Identity, "i150"), Delete(Identity, "i10")])
    store.commit([Put(identity(150, roles=["r"]))])  # created again: at the end of the list
    store.list_index(Identity).in_order({"i1", "i2"})  # positions derived from the previous state
    store.commit([Put(identity(20, roles=["r"])), Delete(Identity, "i21")])

    scan, fast = run_both(store, text, limit=limit, offset=offset)

    assert fast == scan
    assert scan[0]  # a page was found


@pytest.mark.parametrize("others", [0, 30])  # candidates: most of the list, or a few of many
def test_candidates_keep_list_order_not_index_order(others: int) -> None:
    store = MemoryStore()
    store.commit([Put(identity(n, roles=["r"])) for n in (5, 3, 9, 1, 7)])
    store.commit([Put(identity(100 + n)) for n in range(others)])
    store.commit([Put(identity(3, roles=["r", "s"]))])  # an update keeps its place
    store.commit([Delete(Identity, "i9")])
    store.commit([Put(identity(9, roles=["r"]))])  # created again: at the end

    scan, fast = run_both(store, 'anyOf(roleAttributes) = "r"', limit=-1)

    assert fast == scan
    assert fast[0] == ["i5", "i3", "i1", "i7", "i9"]


def test_no_filter_pages_by_slicing_with_the_whole_count(store: MemoryStore) -> None:
    scan, fast = run_both(store, "", limit=2, offset=1)

    assert fast == scan == (["i2", "i3"], 4, 2, 1)


def test_role_ids_narrow_the_collection(store: MemoryStore) -> None:
    scan, fast = run_both(store, 'anyOf(roleAttributes) = "ops"', keep={"i3", "i4"})

    assert fast == scan == (["i3"], 1, 10, 0)


def test_a_heap_page_equals_the_sorted_page_with_ties_in_list_order() -> None:
    rows = [identity(n, default_hosting_cost=n % 3) for n in range(10 * HEAP_SHARE)]
    query = compile_query("", SYMBOLS, sort_param="cost desc")

    page = ordered_page(rows, query.sort, 4, 3)

    assert page == sorted(rows, key=attrgetter("default_hosting_cost"), reverse=True)[3:7]


# -- the property: fast path == scan ---------------------------------------------------------------

ID_POOL = [f"i{n}" for n in range(150)]
ROLES = ["r0", "r1", "r2", "r3"]
PREFIXES = ["a", "b"]
DAYS = [NOW + timedelta(days=d) for d in range(3)]


def random_identity(rng: random.Random, entity_id: str) -> Identity:
    external = rng.choice([None, "x", "y"])
    return Identity(
        id=entity_id,
        created_at=rng.choice(DAYS),
        updated_at=NOW,
        name=f"{rng.choice(PREFIXES)}-{entity_id}",  # unique, as the managers keep it
        external_id=None if external is None else f"{external}-{entity_id}",
        role_attributes=rng.choices(ROLES, k=rng.randint(0, 4)),
        is_admin=rng.random() < 0.3,
        type_id=rng.choice(["Default", "Router"]),
        default_hosting_cost=rng.randint(0, 3),
        tags=rng.choice([{}, {"t": "v"}, {"t": 1}, {"t": None}]),
    )


def history(seed: int) -> list[list[Change]]:
    """A population written in batches: a bulk create, then batches of updates, deletes and
    creations (some ids deleted and created again: they move to the end of the list)."""
    rng = random.Random(seed)
    created = rng.sample(ID_POOL, rng.randint(60, len(ID_POOL)))
    out: list[list[Change]] = [[Put(random_identity(rng, i)) for i in created]]
    for _ in range(rng.randint(0, 5)):
        batch: list[Change] = []
        for entity_id in rng.sample(ID_POOL, rng.randint(1, 40)):
            if rng.random() < 0.25:
                batch.append(Delete(Identity, entity_id))
            else:
                batch.append(Put(random_identity(rng, entity_id)))
        out.append(batch)
    return out


def _quoted(values: Sequence[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


some_ids = st.lists(st.sampled_from(ID_POOL), min_size=1, max_size=4)
some_names = st.lists(
    st.builds(lambda p, i: f"{p}-{i}", st.sampled_from(PREFIXES), st.sampled_from(ID_POOL)),
    min_size=1,
    max_size=4,
)
some_roles = st.lists(st.sampled_from([*ROLES, "r9"]), min_size=1, max_size=3)

indexable = st.one_of(
    st.builds(lambda i: f'id = "{i}"', st.sampled_from(ID_POOL)),
    st.builds(lambda v: f"id in {_quoted(v)}", some_ids),
    st.builds(lambda v: f'name = "{v[0]}"', some_names),
    st.builds(lambda v: f"name in {_quoted(v)}", some_names),
    st.builds(lambda i: f'externalId = "x-{i}"', st.sampled_from(ID_POOL)),
    st.builds(lambda r: f'anyOf(roleAttributes) = "{r}"', st.sampled_from(ROLES)),
    st.builds(lambda v: f"anyOf(roleAttributes) in {_quoted(v)}", some_roles),
)
scanned = st.one_of(
    st.builds(lambda r: f'allOf(roleAttributes) = "{r}"', st.sampled_from(ROLES)),
    st.builds(lambda r: f'anyOf(roleAttributes) != "{r}"', st.sampled_from(ROLES)),
    st.builds(lambda v: f"id not in {_quoted(v)}", some_ids),
    st.builds(lambda v: f"name not in {_quoted(v)}", some_names),
    st.builds(lambda p: f'name contains "{p}-i1"', st.sampled_from(PREFIXES)),
    st.builds(lambda n: f"cost > {n}", st.integers(0, 3)),
    st.sampled_from(
        ["isAdmin = true", "externalId = null", 'type = "Router"', 'tags.t = "v"', "true", "false"]
    ),
)
atoms = st.one_of(indexable, indexable, scanned)
filters = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a} and {b})", inner, inner),
        st.builds(lambda a, b: f"({a} or {b})", inner, inner),
        st.builds(lambda a: f"not ({a})", inner),
        st.builds(lambda a, b, c: f"{a} and {b} and {c}", inner, inner, inner),
    ),
    max_leaves=6,
)
sorts = st.none() | st.sampled_from(
    [
        "name",
        "name desc",
        "cost desc",
        "cost",
        "createdAt, cost",
        "isAdmin desc, cost desc",
        "cost desc, name",
        "externalId",
        "tags.t desc",
    ]
)


@settings(
    max_examples=examples(500),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seed=st.integers(0, 2**32),
    text=filters,
    sort=sorts,
    limit=st.sampled_from([None, 0, 1, 2, 3, 5, 25, -1, -1]),
    offset=st.sampled_from([None, 0, 1, 2, 7, 60]),
    keep=st.one_of(st.none(), st.none(), st.sets(st.sampled_from(ID_POOL), max_size=100)),
)
def test_the_indexed_page_is_the_scanned_page(
    seed: int,
    text: str,
    sort: str | None,
    limit: int | None,
    offset: int | None,
    keep: set[str] | None,
) -> None:
    store = MemoryStore()
    for batch in history(seed):
        store.commit(batch)
        store.list_index(Identity).in_order({"i0"})  # build the lazy caches of each published state

    scan, fast = run_both(store, text, sort=sort, limit=limit, offset=offset, keep=keep)

    assert fast == scan


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(
    size=st.integers(0, 40),
    text=st.sampled_from(
        [None, 'name contains "1"', "cost > 2", "true", "true skip 2 limit 3", "true skip 1"]
    ),
    sort=st.sampled_from([None, "name desc", "cost"]),
    limit=st.sampled_from([None, 0, 1, 5, 25, -1, 600]),
    offset=st.sampled_from([None, 0, 1, 7, 39, 50]),
)
def test_a_loaded_page_is_the_page_of_everything_loaded(
    size: int, text: str | None, sort: str | None, limit: int | None, offset: int | None
) -> None:
    rows = {f"i{n:02d}": identity(n, default_hosting_cost=n % 5) for n in range(size)}
    ids = sorted(rows)
    loaded: list[int] = []

    def load(window: Sequence[str]) -> list[Identity]:
        loaded.append(len(window))
        return [rows[i] for i in window]

    query = compile_query(text, SYMBOLS, sort_param=sort)
    expected = execute(query, [rows[i] for i in ids], limit_param=limit, offset_param=offset)

    assert execute_loaded(query, ids, load, limit_param=limit, offset_param=offset) == expected
    if query.matches_all and not query.sort:
        assert loaded == [len(expected[0])]  # only the page was loaded
    else:
        assert loaded == [len(ids)]


def test_the_first_rows_in_order_leave_out_ids_of_no_row() -> None:
    store = MemoryStore()
    store.commit([Put(identity(n)) for n in range(40, 0, -1)])
    index = store.list_index(Identity)
    ids = {f"i{n}" for n in range(1, 41)} | {"gone-1", "gone-2"}

    assert [e.id for e in index.first_in_order(ids, 3)] == ["i40", "i39", "i38"]
    assert [e.id for e in index.first_in_order(ids - {"gone-1", "gone-2"}, 2)] == ["i40", "i39"]
    assert [e.id for e in index.first_in_order(ids, 100)] == [f"i{n}" for n in range(40, 0, -1)]
