"""``/service-edge-router-policies``: CRUD, role validation, display, filters."""

from __future__ import annotations

from typing import Any

import pytest

from engine.entities.services import Service
from tests.api.policy_helpers import field_error, make_service, remove
from tests.conftest import Api

PATH = "/service-edge-router-policies"


def body(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "serp-1", "semantic": "AllOf"}
    out.update(overrides)
    return out


def test_crud_round_trip(api: Api) -> None:
    serp = api.create(PATH, body(serviceRoles=["#web", "#api"], edgeRouterRoles=["#all"], tags={"t": "1"}))

    data = api.get(f"{PATH}/{serp}").json["data"]
    assert data["serviceRoles"] == ["#api", "#web"]
    assert data["serviceRolesDisplay"] == [{"role": "#api", "name": "#api"}, {"role": "#web", "name": "#web"}]
    assert data["edgeRouterRoles"] == ["#all"]
    assert data["tags"] == {"t": "1"}
    assert "isSystem" not in data
    assert data["_links"] == {
        "self": {"href": f"./service-edge-router-policies/{serp}"},
        "edge-routers": {"href": f"./service-edge-router-policies/{serp}/edge-routers"},
        "services": {"href": f"./service-edge-router-policies/{serp}/services"},
    }

    assert api.put(f"{PATH}/{serp}", json={"name": "n", "semantic": "AnyOf"}).status_code == 200
    assert api.get(f"{PATH}/{serp}").json["data"]["serviceRoles"] == []
    assert api.patch(f"{PATH}/{serp}", json={"name": "m"}).status_code == 200
    assert api.get(f"{PATH}/{serp}").json["data"]["name"] == "m"
    assert api.delete(f"{PATH}/{serp}").status_code == 200
    assert api.get(f"{PATH}/{serp}").status_code == 404


@pytest.mark.parametrize("field", ["name", "semantic"])
def test_create_requires_name_and_semantic(api: Api, field: str) -> None:
    payload = body()
    del payload[field]

    assert field_error(api.post(PATH, json=payload)) == {
        "field": field,
        "reason": f"{field} in body is required",
    }


def test_service_syntax_checked_before_edge_router_syntax(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(edgeRouterRoles=["#all", "#x"], serviceRoles=["bad"])))

    assert cause == {
        "field": "serviceRoles",
        "reason": "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)",
        "value": "[bad]",
    }


def test_unknown_ids_are_rejected_services_first(api: Api) -> None:
    both = field_error(api.post(PATH, json=body(serviceRoles=["@s"], edgeRouterRoles=["@e"])))
    routers = field_error(api.post(PATH, json=body(edgeRouterRoles=["@e2", "@e1"])))

    assert both == {"field": "serviceRoles", "reason": "no services found with the given ids", "value": "[s]"}
    assert routers == {
        "field": "edgeRouterRoles",
        "reason": "no routers found with the given ids",
        "value": "[e1 e2]",
    }


def test_display_names_services_and_routers(api: Api, app: Any) -> None:
    service = make_service(app, "db")
    router = api.create("/edge-routers", {"name": "er1"})

    serp = api.create(PATH, body(serviceRoles=[f"@{service}"], edgeRouterRoles=[f"@{router}"]))
    data = api.get(f"{PATH}/{serp}").json["data"]

    assert data["serviceRolesDisplay"] == [{"role": f"@{service}", "name": "@db"}]
    assert data["edgeRouterRolesDisplay"] == [{"role": f"@{router}", "name": "@er1"}]


def test_display_skips_a_dangling_service(api: Api, app: Any) -> None:
    service = make_service(app, "gone")
    serp = api.create(PATH, body(serviceRoles=[f"@{service}", "#x"]))
    remove(app, Service, service)

    data = api.get(f"{PATH}/{serp}").json["data"]

    assert data["serviceRolesDisplay"] == [{"role": "#x", "name": "#x"}]


def test_list_filters_and_pages(api: Api) -> None:
    for i in range(3):
        api.create(PATH, body(name=f"s{i}", edgeRouterRoles=[f"#r{i}"]))

    result = api.get(PATH, params={"filter": 'anyOf(edgeRouterRoles) in ["#r0", "#r2"]', "sort": "name"}).json
    paged = api.get(PATH, params={"limit": "1"}).json

    assert [p["name"] for p in result["data"]] == ["s0", "s2"]
    assert paged["meta"]["pagination"]["totalCount"] == 3
    assert len(paged["data"]) == 1
    assert paged["meta"]["filterableFields"] == sorted(
        [
            "id",
            "name",
            "semantic",
            "serviceRoles",
            "edgeRouterRoles",
            "createdAt",
            "updatedAt",
            "isSystem",
            "tags",
        ]
    )
