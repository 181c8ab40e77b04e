"""Collection lists read through the store's indexes (issue 9): the same pages, counts and errors
as a plain scan of the collection, for the identity, service and policy lists."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from api.http import DEFERRED_KEY, index_fields
from api.resources import FamilyCollection
from engine.entities.identities import Identity
from engine.entities.services import Service
from engine.query import compile_query, execute
from tests.conftest import Api


def _sentinel_entity(kind: type[Any]) -> Any:
    """An entity whose every field holds a value of its own (set fields: a one-element list)."""
    entity = object.__new__(kind)
    for f in dataclasses.fields(kind):
        object.__setattr__(
            entity, f.name, [f"{f.name}-value"] if f.name in kind.MULTI_INDEXED else f"{f.name}-value"
        )
    return entity


def test_every_symbol_a_list_looks_up_in_an_index_reads_that_field_unchanged(app: Any) -> None:
    tables = [(view.kind, view.symbols, view.kind.ENTITY) for view in app.routes.views.all()]
    tables += [
        (resource.family.manager.kind, resource.family.symbols, template)
        for _, template, resource, _ in app.routes.table
        if isinstance(resource, FamilyCollection)
    ]
    checked = 0
    for kind, symbols, where in tables:
        entity = _sentinel_entity(kind)
        for name, field in index_fields(kind, symbols).items():
            symbol = symbols.resolve(name)
            assert symbol.getter(entity) == getattr(entity, field), (where, name)
            assert symbol.is_set == (field in kind.MULTI_INDEXED), (where, name)
            checked += 1
    assert checked > 40


def _identity(api: Api, name: str, roles: list[str], **extra: Any) -> str:
    return api.create(
        "/identities", {"name": name, "isAdmin": False, "type": "User", "roleAttributes": roles, **extra}
    )


@pytest.fixture
def population(api: Api) -> list[str]:
    """Identities with role attributes, some updated (they keep their place) and some deleted and
    created again (at the end of the list)."""
    created = []
    for n in range(24):
        roles = [r for r, every in (("red", 2), ("blue", 3), ("green", 5)) if n % every == 0]
        created.append(_identity(api, f"user-{n:02d}", roles, externalId=f"ext-{n}" if n % 4 == 0 else None))
    for n in (3, 10):
        assert (
            api.patch(f"/identities/{created[n]}", json={"roleAttributes": ["red", "blue"]}).status_code
            == 200
        )
    for n in (4, 6):
        assert api.delete(f"/identities/{created[n]}").status_code == 200
        _identity(api, f"user-{n:02d}", ["green"])
    return created


def _scan(
    api: Api, kind: type[Any], manager: Any, params: dict[str, Any], keep: set[str] | None = None
) -> Any:
    """What the list answers when it scans the collection, from the same real code."""
    view = api.app.routes.views.of(kind)
    query = compile_query(params.get("filter"), view.symbols, sort_param=params.get("sort"))
    items = [e for e in manager.list() if keep is None or e.id in keep]
    rows, total, limit, offset = execute(
        query, items, limit_param=params.get("limit"), offset_param=params.get("offset")
    )
    return [e.id for e in rows], total, limit, offset


def _listed(api: Api, path: str, params: dict[str, Any]) -> Any:
    result = api.get(path, params={k: str(v) for k, v in params.items()})
    assert result.status_code == 200, result.text
    paging = result.json["meta"]["pagination"]
    limit = -1 if paging["limit"] == 9223372036854775807 else paging["limit"]
    return [row["id"] for row in result.json["data"]], paging["totalCount"], limit, paging["offset"]


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"limit": 5, "offset": 3},
        {"limit": -1},
        {"filter": 'name = "user-07"'},
        {"filter": 'name in ["user-01", "user-04", "nobody"]'},
        {"filter": 'anyOf(roleAttributes) = "red"', "limit": 4, "offset": 2},
        {"filter": 'anyOf(roleAttributes) in ["blue", "green"]', "limit": -1},
        {"filter": 'anyOf(roleAttributes) = "red" and anyOf(roleAttributes) = "blue"'},
        {"filter": 'anyOf(roleAttributes) = "green" or name = "user-01"', "sort": "name desc"},
        {"filter": 'anyOf(roleAttributes) = "blue" and name contains "1"'},
        {"filter": 'externalId = "ext-8"'},
        {"filter": 'not (anyOf(roleAttributes) = "red")', "limit": 3},
        {"filter": 'anyOf(roleAttributes) = "red" sort by name desc skip 1 limit 2'},
        {"sort": "name", "limit": 2},
        {"sort": "createdAt desc", "limit": 3, "offset": 1},
        {"filter": "false"},
    ],
)
def test_identity_lists_give_what_a_scan_gives(
    api: Api, population: list[str], params: dict[str, Any]
) -> None:
    expected = _scan(api, Identity, api.ctrl.managers.identities, params)

    assert _listed(api, "/identities", params) == expected


def test_a_role_filter_narrows_an_indexed_list(api: Api, population: list[str]) -> None:
    params = {"filter": 'anyOf(roleAttributes) = "blue" or name = "user-05"', "limit": -1}
    keep = api.ctrl.managers.access.role_filter(Identity, ["#green"], "AllOf")

    listed = _listed(api, "/identities", {**params, "roleFilter": "#green"})

    assert listed == _scan(api, Identity, api.ctrl.managers.identities, params, keep)
    assert listed[1] > 0


def test_errors_keep_their_order_role_filter_then_filter_then_paging(api: Api) -> None:
    both = api.get("/identities", params={"roleFilter": "green", "filter": "name ="})
    bad_filter = api.get("/identities", params={"filter": "name =", "limit": "x"})
    bad_limit = api.get("/identities", params={"filter": 'name = "a"', "limit": "x"})

    assert both.json["error"]["cause"]["field"] == "roleFilter"
    assert bad_filter.json["error"]["code"] == "INVALID_FILTER"
    assert bad_filter.json["error"]["cause"]["message"].startswith("line 1:6 mismatched input")
    assert bad_limit.json["error"]["code"] == "INVALID_PAGINATION"


def test_service_and_policy_lists_use_their_indexes_too(api: Api) -> None:
    for n in range(6):
        roles = ["web"] if n % 2 else ["db"]
        api.create("/services", {"name": f"svc-{n}", "encryptionRequired": True, "roleAttributes": roles})
    api.create(
        "/service-policies",
        {
            "name": "dial-web",
            "type": "Dial",
            "semantic": "AnyOf",
            "serviceRoles": ["#web"],
            "identityRoles": ["#all"],
        },
    )
    params = {"filter": 'anyOf(roleAttributes) = "web"', "sort": "name desc"}

    services = _listed(api, "/services", params)
    policies = _listed(api, "/service-policies", {"filter": 'name = "dial-web"'})

    assert services == _scan(api, Service, api.ctrl.managers.services, params)
    assert services[1] == 3
    assert policies[1] == 1


@pytest.mark.parametrize(
    ("query", "on_loop"),
    [
        ("", True),  # the first page in list order: only the page is read
        ("limit=100&offset=10000", True),
        ('filter=name="user-03"', True),  # a unique index answers it
        ('filter=anyOf(roleAttributes)="red" and name in ["user-00", "user-02"]', True),
        ('filter=name="user-03" limit 5', True),
        ("limit=101", False),  # a long page to render
        ("limit=-1", False),
        ("offset=10001", False),  # far into the list
        ("sort=name", False),  # a sort reads every row
        ("roleFilter=%23red", False),  # the policy engine's answer, of any size
        ("filter=true sort by name", False),
        ('filter=name contains "user"', False),  # no index: a scan
        ('filter=not anyOf(roleAttributes)="red"', False),
        ("filter=name%3D%22a%22&filter=name%3D%22b%22", False),  # repeated: left to the pool
        ("limit=ten", True),  # refused (INVALID_PAGINATION): cheap
        ('filter=nosuchfield="x"', True),  # refused (INVALID_FILTER): cheap
    ],
)
def test_a_bounded_list_runs_on_the_event_loop_and_any_other_on_the_pool(
    api: Api, population: list[str], query: str, on_loop: bool
) -> None:
    """A management list may run on the server's event loop only when an index answers it in
    bounded time (no sort, a short page near the start, every filter term from an index)."""
    assert api.app.runs_on_loop("GET", "/edge/management/v1/identities", query) is on_loop
    assert api.app.runs_on_loop("POST", "/edge/management/v1/identities", query) is False
    assert api.app.runs_on_loop("GET", "/edge/management/v1/identities/x", query) is True  # an item


def test_a_list_answers_the_same_on_the_event_loop_as_on_the_pool(api: Api, population: list[str]) -> None:
    for params in ({}, {"filter": 'anyOf(roleAttributes)="blue"', "limit": "3", "offset": "2"}):
        pooled = api.get("/identities", params=params)
        looped = api.get("/identities", params=params, extras={DEFERRED_KEY: []})
        assert looped.status_code == pooled.status_code == 200
        assert looped.json["data"] == pooled.json["data"]
        assert looped.json["meta"]["pagination"] == pooled.json["meta"]["pagination"]
