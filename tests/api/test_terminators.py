"""Terminators: management CRUD on ``/terminators``, ``/services/{id}/terminators`` on both APIs,
and their deletion with their service or router."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, Api

api = shared_admin_api("terminators")


# -- builders ------------------------------------------------------------------------------------
def new_service(api: Api) -> str:
    return api.create("/services", {"name": unique("svc"), "encryptionRequired": True})


def new_edge_router(api: Api) -> str:
    return api.create("/edge-routers", {"name": unique("er")})


def new_transit_router(api: Api) -> str:
    return api.create("/transit-routers", {"name": unique("tr")})


def new_terminator(api: Api, service_id: str, router_id: str, **extra: Any) -> str:
    body = {"service": service_id, "router": router_id, "binding": "transport", "address": "tcp:h:80"}
    return api.create("/terminators", {**body, **extra})


def client_login(api: Api, identity_id: str) -> str:
    username = unique("user")
    body = {"identityId": identity_id, "method": "updb", "username": username, "password": "secret-pass-1"}
    api.create("/authenticators", body)
    return api.login(username, "secret-pass-1", base=CLIENT)


def new_identity(api: Api) -> str:
    return api.create("/identities", {"name": unique("id"), "isAdmin": False, "type": "User"})


def grant(api: Api, identity_id: str, service_id: str, policy_type: str) -> None:
    api.create(
        "/service-policies",
        {
            "name": unique("sp"),
            "type": policy_type,
            "semantic": "AnyOf",
            "identityRoles": [f"@{identity_id}"],
            "serviceRoles": [f"@{service_id}"],
        },
    )


def cause_of(result: Any) -> dict[str, Any]:
    return dict(result.json["error"]["cause"])


# -- create / read -------------------------------------------------------------------------------
def test_create_answers_201_and_read_shows_the_detail(api: Api) -> None:
    service_id = new_service(api)
    router_id = new_edge_router(api)

    result = api.post(
        "/terminators",
        json={
            "service": service_id,
            "router": router_id,
            "binding": "transport",
            "address": "tcp:10.0.0.1:80",
            "cost": 12,
            "precedence": "required",
            "identity": "host-a",
            "identitySecret": "c2VjcmV0",
            "tags": {"team": "blue"},
        },
    )

    assert result.status_code == 201
    id = result.json["data"]["id"]
    assert result.json["data"] == {"_links": {"self": {"href": f"./terminators/{id}"}}, "id": id}
    data = api.get(f"/terminators/{id}").json["data"]
    router_name = api.get(f"/edge-routers/{router_id}").json["data"]["name"]
    service_name = api.get(f"/services/{service_id}").json["data"]["name"]
    assert data["serviceId"] == service_id
    assert data["service"] == {
        "_links": {"self": {"href": f"./services/{service_id}"}},
        "entity": "services",
        "id": service_id,
        "name": service_name,
    }
    assert data["routerId"] == router_id
    assert data["router"] == {
        "_links": {"self": {"href": f"./transit-routers/{router_id}"}},
        "entity": "transit-routers",
        "id": router_id,
        "name": router_name,
    }
    assert data["binding"] == "transport"
    assert data["address"] == "tcp:10.0.0.1:80"
    assert data["cost"] == 12
    assert data["dynamicCost"] == 0
    assert data["precedence"] == "required"
    assert data["identity"] == "host-a"
    assert "identitySecret" not in data
    assert data["tags"] == {"team": "blue"}
    assert data["_links"]["self"] == {"href": f"./terminators/{id}"}


def test_defaults_are_cost_0_precedence_default_and_no_identity(api: Api) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api))

    data = api.get(f"/terminators/{id}").json["data"]

    assert data["cost"] == 0
    assert data["precedence"] == "default"
    assert data["identity"] == ""
    assert data["tags"] == {}


def test_a_transit_router_may_carry_a_terminator(api: Api) -> None:
    router_id = new_transit_router(api)

    id = new_terminator(api, new_service(api), router_id)

    data = api.get(f"/terminators/{id}").json["data"]
    assert data["routerId"] == router_id
    assert data["router"]["entity"] == "transit-routers"


@pytest.mark.parametrize(
    ("address", "binding"), [("tcp:h:80", "transport"), ("udp:h:53", "udp"), ("hosted:x", "transport")]
)
def test_an_empty_binding_is_derived_from_the_address(api: Api, address: str, binding: str) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api), binding="", address=address)

    assert api.get(f"/terminators/{id}").json["data"]["binding"] == binding


@pytest.mark.parametrize("missing", ["service", "router", "binding", "address"])
def test_create_requires_service_router_binding_and_address(api: Api, missing: str) -> None:
    body = {"service": "s", "router": "r", "binding": "transport", "address": "tcp:h:80"}
    del body[missing]

    result = api.post("/terminators", json=body)

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert cause_of(result)["field"] == missing


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cost": 65536}, "cost"),
        ({"cost": -1}, "cost"),
        ({"precedence": "sometimes"}, "precedence"),
        ({"identitySecret": "not base64!"}, "identitySecret"),
        ({"address": ""}, "address"),
        ({"tags": {"k": [1]}}, "tags"),
    ],
)
def test_create_validates_fields(api: Api, extra: dict[str, Any], field: str) -> None:
    body = {"service": new_service(api), "router": new_edge_router(api), "binding": "b", "address": "a"}

    result = api.post("/terminators", json={**body, **extra})

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert cause_of(result)["field"].split(".")[0] == field


def test_cost_65535_is_the_largest_accepted(api: Api) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api), cost=65535)

    assert api.get(f"/terminators/{id}").json["data"]["cost"] == 65535


@pytest.mark.parametrize("field", ["service", "router"])
def test_service_and_router_must_exist(api: Api, field: str) -> None:
    body = {"service": new_service(api), "router": new_edge_router(api), "binding": "b", "address": "a"}
    body[field] = "no-such-id"

    result = api.post("/terminators", json=body)

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"
    assert cause_of(result)["field"] == field
    assert cause_of(result)["value"] == "no-such-id"


def test_read_of_unknown_terminator_is_404(api: Api) -> None:
    result = api.get("/terminators/no-such-id")

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


def test_terminators_need_an_admin(api: Api) -> None:
    token = client_login(api, new_identity(api))

    result = api.get("/terminators", token=token)

    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"


# -- replace / patch / delete ----------------------------------------------------------------------
def test_put_replaces_and_resets_omitted_fields_but_keeps_the_service(api: Api) -> None:
    service_id = new_service(api)
    id = new_terminator(api, service_id, new_edge_router(api), cost=9, precedence="failed", tags={"a": "b"})
    other_router = new_transit_router(api)

    result = api.put(
        f"/terminators/{id}",
        json={"service": new_service(api), "router": other_router, "binding": "udp", "address": "udp:h:53"},
    )

    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"/terminators/{id}").json["data"]
    assert data["serviceId"] == service_id
    assert data["routerId"] == other_router
    assert data["binding"] == "udp"
    assert data["address"] == "udp:h:53"
    assert data["cost"] == 0
    assert data["precedence"] == "default"
    assert data["tags"] == {}


def test_put_requires_the_router_to_exist(api: Api) -> None:
    service_id = new_service(api)
    id = new_terminator(api, service_id, new_edge_router(api))

    result = api.put(
        f"/terminators/{id}",
        json={"service": service_id, "router": "gone", "binding": "transport", "address": "tcp:h:1"},
    )

    assert result.status_code == 404
    assert cause_of(result)["field"] == "router"


def test_patch_changes_only_the_fields_sent(api: Api) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api), cost=3, tags={"k": "v"})

    result = api.patch(f"/terminators/{id}", json={"precedence": "failed", "address": "tcp:other:1"})

    assert result.status_code == 200
    data = api.get(f"/terminators/{id}").json["data"]
    assert data["precedence"] == "failed"
    assert data["address"] == "tcp:other:1"
    assert data["cost"] == 3
    assert data["binding"] == "transport"
    assert data["tags"] == {"k": "v"}


def test_patch_validates_cost(api: Api) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api))

    result = api.patch(f"/terminators/{id}", json={"cost": 70000})

    assert result.status_code == 400
    assert cause_of(result)["field"] == "cost"


def test_delete_removes_the_terminator(api: Api) -> None:
    id = new_terminator(api, new_service(api), new_edge_router(api))

    result = api.delete(f"/terminators/{id}")

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/terminators/{id}").status_code == 404


# -- lists -----------------------------------------------------------------------------------------
def test_list_filters_on_terminator_fields(api: Api) -> None:
    service_id = new_service(api)
    router_id = new_edge_router(api)
    wanted = new_terminator(api, service_id, router_id, binding="edge", cost=7)
    new_terminator(api, service_id, router_id, binding="transport")

    result = api.get("/terminators", params={"filter": f'service = "{service_id}" and binding = "edge"'})

    assert result.status_code == 200
    assert [t["id"] for t in result.json["data"]] == [wanted]
    assert result.json["meta"]["pagination"]["totalCount"] == 1
    by_cost = api.get("/terminators", params={"filter": f'router = "{router_id}" and cost = 7'})
    assert [t["id"] for t in by_cost.json["data"]] == [wanted]


def test_list_filters_on_the_service_name(api: Api) -> None:
    service_id = new_service(api)
    id = new_terminator(api, service_id, new_edge_router(api))
    name = api.get(f"/services/{service_id}").json["data"]["name"]

    result = api.get("/terminators", params={"filter": f'service.name = "{name}"'})

    assert [t["id"] for t in result.json["data"]] == [id]


def test_management_lists_the_terminators_of_a_service(api: Api) -> None:
    service_id = new_service(api)
    router_id = new_edge_router(api)
    first = new_terminator(api, service_id, router_id)
    second = new_terminator(api, service_id, router_id, address="tcp:h:81")
    new_terminator(api, new_service(api), router_id)

    result = api.get(f"/services/{service_id}/terminators")

    assert result.status_code == 200
    assert sorted(t["id"] for t in result.json["data"]) == sorted([first, second])
    assert result.json["data"][0]["router"]["entity"] == "transit-routers"
    assert result.json["meta"]["pagination"]["totalCount"] == 2


def test_management_service_terminators_of_unknown_service_is_404(api: Api) -> None:
    result = api.get("/services/no-such-service/terminators")

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize("policy_type", ["Dial", "Bind"])
def test_client_lists_terminators_of_a_service_it_may_use(api: Api, policy_type: str) -> None:
    identity_id = new_identity(api)
    service_id = new_service(api)
    router_id = new_edge_router(api)
    id = new_terminator(api, service_id, router_id, identity="inst-1")
    grant(api, identity_id, service_id, policy_type)
    token = client_login(api, identity_id)

    result = api.get(f"/services/{service_id}/terminators", token=token, base=CLIENT)

    assert result.status_code == 200
    [item] = result.json["data"]
    assert set(item) == {
        "_links",
        "id",
        "createdAt",
        "updatedAt",
        "tags",
        "identity",
        "routerId",
        "service",
        "serviceId",
    }
    assert item["id"] == id
    assert item["identity"] == "inst-1"
    assert item["routerId"] == router_id
    assert item["serviceId"] == service_id
    assert item["service"]["id"] == service_id


def test_client_service_terminators_need_a_permission_on_the_service(api: Api) -> None:
    service_id = new_service(api)
    new_terminator(api, service_id, new_edge_router(api))
    token = client_login(api, new_identity(api))

    result = api.get(f"/services/{service_id}/terminators", token=token, base=CLIENT)

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


def test_client_service_terminators_need_a_session(api: Api) -> None:
    result = api.get(f"/services/{new_service(api)}/terminators", token="", base=CLIENT)

    assert result.status_code == 401


# -- cascades --------------------------------------------------------------------------------------
def test_deleting_a_service_deletes_its_terminators(api: Api) -> None:
    service_id = new_service(api)
    router_id = new_edge_router(api)
    gone = new_terminator(api, service_id, router_id)
    kept = new_terminator(api, new_service(api), router_id)

    assert api.delete(f"/services/{service_id}").status_code == 200

    assert api.get(f"/terminators/{gone}").status_code == 404
    assert api.get(f"/terminators/{kept}").status_code == 200


@pytest.mark.parametrize("path", ["/edge-routers", "/transit-routers"])
def test_deleting_a_router_deletes_its_terminators(api: Api, path: str) -> None:
    router_id = new_edge_router(api) if path == "/edge-routers" else new_transit_router(api)
    service_id = new_service(api)
    gone = new_terminator(api, service_id, router_id)
    kept = new_terminator(api, service_id, new_edge_router(api))

    assert api.delete(f"{path}/{router_id}").status_code == 200

    assert api.get(f"/terminators/{gone}").status_code == 404
    assert [t["id"] for t in api.get(f"/services/{service_id}/terminators").json["data"]] == [kept]
