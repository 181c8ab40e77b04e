"""``/edge-router-policies``: CRUD, role validation, display, system policies, filters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.entities.policies import EdgeRouterPolicy
from tests.api.policy_helpers import field_error, make_identity, put
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

PATH = "/edge-router-policies"


def body(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "erp-1", "semantic": "AnyOf"}
    out.update(overrides)
    return out


def system_policy(app: Any, router_id: str = "r1") -> str:
    """A system ERP as the policy engine creates it for a tunneler-enabled router."""
    now = datetime.now(UTC)
    policy = EdgeRouterPolicy(
        id=router_id,
        created_at=now,
        updated_at=now,
        name=f"edge-router-{router_id}-system",
        semantic="AnyOf",
        is_system=True,
    )
    return put(app, policy)


def test_crud_round_trip(api: Api) -> None:
    erp = api.create(PATH, body(identityRoles=["#b", "#a"], edgeRouterRoles=["#all"]))

    data = api.get(f"{PATH}/{erp}").json["data"]
    assert data["name"] == "erp-1"
    assert data["semantic"] == "AnyOf"
    assert data["isSystem"] is False
    assert data["identityRoles"] == ["#a", "#b"]
    assert data["edgeRouterRoles"] == ["#all"]
    assert data["edgeRouterRolesDisplay"] == [{"role": "#all", "name": "#all"}]
    assert data["_links"] == {
        "self": {"href": f"./edge-router-policies/{erp}"},
        "edge-routers": {"href": f"./edge-router-policies/{erp}/edge-routers"},
        "identities": {"href": f"./edge-router-policies/{erp}/identities"},
    }

    assert api.put(f"{PATH}/{erp}", json={"name": "n2", "semantic": "AllOf"}).status_code == 200
    data = api.get(f"{PATH}/{erp}").json["data"]
    assert (data["name"], data["semantic"], data["identityRoles"]) == ("n2", "AllOf", [])

    assert api.patch(f"{PATH}/{erp}", json={"edgeRouterRoles": ["#x"]}).status_code == 200
    assert api.get(f"{PATH}/{erp}").json["data"]["edgeRouterRoles"] == ["#x"]

    assert api.delete(f"{PATH}/{erp}").status_code == 200
    assert api.get(f"{PATH}/{erp}").status_code == 404


@pytest.mark.parametrize("field", ["name", "semantic"])
def test_create_and_put_require_name_and_semantic(api: Api, field: str) -> None:
    payload = body()
    del payload[field]
    erp = api.create(PATH, body(name="other"))

    assert field_error(api.post(PATH, json=payload))["field"] == field
    assert field_error(api.put(f"{PATH}/{erp}", json=payload))["field"] == field


def test_is_system_cannot_be_set_through_the_api(api: Api) -> None:
    erp = api.create(PATH, body(isSystem=True))

    assert api.get(f"{PATH}/{erp}").json["data"]["isSystem"] is False


def test_all_must_be_alone(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(edgeRouterRoles=["#all", "#other"])))

    assert cause == {
        "field": "edgeRouterRoles",
        "reason": "if using #all, it should be the only role specified",
        "value": "[#all #other]",
    }


def test_unknown_edge_router_id_names_the_router_store(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(edgeRouterRoles=["@nope"])))

    assert cause == {
        "field": "edgeRouterRoles",
        "reason": "no routers found with the given ids",
        "value": "[nope]",
    }


def test_transit_router_id_is_not_an_edge_router(api: Api) -> None:
    router = api.create("/transit-routers", {"name": "tr"})

    cause = field_error(api.post(PATH, json=body(edgeRouterRoles=[f"@{router}"])))

    assert cause["reason"] == "no routers found with the given ids"


def test_identity_errors_come_before_edge_router_errors(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(identityRoles=["@ghost"], edgeRouterRoles=["@nope"])))

    assert cause == {
        "field": "identityRoles",
        "reason": "no identities found with the given ids",
        "value": "[ghost]",
    }


def test_prefix_error_on_identity_roles(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(identityRoles=["x"])))

    assert cause["field"] == "identityRoles"
    assert cause["value"] == "[x]"


def test_display_names_identities_and_edge_routers(api: Api, app: Any) -> None:
    ident = make_identity(app, "alice")
    router = api.create("/edge-routers", {"name": "er-east"})

    erp = api.create(PATH, body(identityRoles=[f"@{ident}"], edgeRouterRoles=[f"@{router}", "#west"]))
    data = api.get(f"{PATH}/{erp}").json["data"]

    assert data["identityRolesDisplay"] == [{"role": f"@{ident}", "name": "@alice"}]
    assert data["edgeRouterRolesDisplay"] == [
        {"role": "#west", "name": "#west"},
        {"role": f"@{router}", "name": "@er-east"},
    ]


def test_deleting_an_edge_router_drops_its_id(api: Api) -> None:
    router = api.create("/edge-routers", {"name": "er-gone"})
    erp = api.create(PATH, body(edgeRouterRoles=[f"@{router}", "#keep"]))

    assert api.delete(f"/edge-routers/{router}").status_code == 200

    data = api.get(f"{PATH}/{erp}").json["data"]
    assert data["edgeRouterRoles"] == ["#keep"]
    assert data["edgeRouterRolesDisplay"] == [{"role": "#keep", "name": "#keep"}]


# -- system policies ----------------------------------------------------------------------------
def test_system_policy_refuses_update(api: Api, app: Any) -> None:
    erp = system_policy(app)

    for result in (
        api.put(f"{PATH}/{erp}", json=body()),
        api.patch(f"{PATH}/{erp}", json={"name": "x"}),
    ):
        assert result.status_code == 400
        assert result.json["error"]["code"] == "ENTITY_CAN_NOT_BE_UPDATED"
        assert result.json["error"]["message"] == "The entity requested for update can not be updated"
        assert result.json["error"]["cause"] == {
            "code": "UNHANDLED",
            "message": f"cannot update system edgeRouterPolicy in a non-system context (id={erp})",
        }
    assert api.get(f"{PATH}/{erp}").json["data"]["name"] == "edge-router-r1-system"


def test_system_policy_refuses_delete(api: Api, app: Any) -> None:
    erp = system_policy(app)

    result = api.delete(f"{PATH}/{erp}")

    assert result.status_code == 400
    assert result.json["error"]["code"] == "ENTITY_CAN_NOT_BE_DELETED"
    assert result.json["error"]["cause"]["message"] == (
        f"cannot delete system edgeRouterPolicy in a non-system context (id={erp})"
    )
    assert api.get(f"{PATH}/{erp}").status_code == 200


def test_unknown_policy_is_404_before_system_checks(api: Api) -> None:
    assert api.delete(f"{PATH}/missing").status_code == 404
    assert api.patch(f"{PATH}/missing", json={"name": "x"}).status_code == 404


# -- listing ------------------------------------------------------------------------------------
def test_list_filters_on_is_system_and_roles(api: Api, app: Any) -> None:
    system_policy(app, "sys1")
    api.create(PATH, body(name="mine", identityRoles=["#eng"]))

    system = api.get(PATH, params={"filter": "isSystem = true"}).json
    roles = api.get(PATH, params={"filter": 'anyOf(identityRoles) = "#eng"'}).json["data"]

    assert [p["id"] for p in system["data"]] == ["sys1"]
    assert [p["name"] for p in roles] == ["mine"]
    assert system["meta"]["filterableFields"] == sorted(
        [
            "id",
            "name",
            "semantic",
            "identityRoles",
            "edgeRouterRoles",
            "isSystem",
            "createdAt",
            "updatedAt",
            "tags",
        ]
    )


def test_duplicate_name_names_the_store(api: Api) -> None:
    api.create(PATH, body())

    cause = field_error(api.post(PATH, json=body()))

    assert cause["reason"] == "duplicate value 'erp-1' in unique index on edgeRouterPolicies store"


@pytest.mark.durable
def test_survives_a_restart(api: Api, app: Any, settings: Any) -> None:
    erp = api.create(PATH, body(edgeRouterRoles=["#b", "#a"]))
    app.ctrl.env.store.close()

    again = open_app(settings, durable=True)
    try:
        client = Api(again)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        data = client.get(f"{PATH}/{erp}").json["data"]
    finally:
        again.ctrl.env.store.close()

    assert data["edgeRouterRoles"] == ["#a", "#b"]
