"""Management ``/identities/{id}/service-configs``: per-identity overrides of a service's configs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

INTERCEPT_TYPE = "g7cIWbcGg"
HOST_TYPE = "NH5p4FpGR"
INTERCEPT = {"protocols": ["tcp"], "addresses": ["a.ziti"], "portRanges": [{"low": 80, "high": 80}]}
HOST = {"protocol": "tcp", "address": "localhost", "port": 8080}


@pytest.fixture
def ids(api: Api) -> dict[str, str]:
    """An identity, two services and configs of two types."""

    def intercept(name: str) -> str:
        return api.create("/configs", {"name": name, "configTypeId": INTERCEPT_TYPE, "data": INTERCEPT})

    return {
        "identity": api.create("/identities", {"name": "laptop", "isAdmin": False, "type": "User"}),
        "echo": api.create("/services", {"name": "echo", "encryptionRequired": True}),
        "web": api.create("/services", {"name": "web", "encryptionRequired": True}),
        "i1": intercept("intercept-1"),
        "i2": intercept("intercept-2"),
        "h1": api.create("/configs", {"name": "host-1", "configTypeId": HOST_TYPE, "data": HOST}),
    }


def path(ids: dict[str, str]) -> str:
    return f"/identities/{ids['identity']}/service-configs"


def pair(ids: dict[str, str], service: str, config: str) -> dict[str, str]:
    return {"serviceId": ids[service], "configId": ids[config]}


def pairs(api: Api, ids: dict[str, str]) -> set[tuple[str, str]]:
    result = api.get(path(ids))
    assert result.status_code == 200, result.text
    return {(row["serviceId"], row["configId"]) for row in result.json["data"]}


def test_an_identity_starts_without_overrides(api: Api, ids: dict[str, str]) -> None:
    result = api.get(path(ids))

    assert result.status_code == 200
    assert result.json["data"] == []
    assert result.json["meta"]["pagination"] == {"limit": 0, "offset": 0, "totalCount": 0}


def test_assigned_overrides_are_listed_with_references(api: Api, ids: dict[str, str]) -> None:
    result = api.post(
        path(ids), json=[pair(ids, "echo", "i1"), pair(ids, "echo", "h1"), pair(ids, "web", "i2")]
    )

    assert result.status_code == 200
    assert result.json["data"] == {}
    listed = api.get(path(ids)).json
    assert listed["meta"]["pagination"] == {"limit": 3, "offset": 0, "totalCount": 3}
    by_pair = {(row["serviceId"], row["configId"]): row for row in listed["data"]}
    assert set(by_pair) == {(ids["echo"], ids["i1"]), (ids["echo"], ids["h1"]), (ids["web"], ids["i2"])}
    row = by_pair[(ids["echo"], ids["i1"])]
    assert row["service"] == {
        "_links": {"self": {"href": f"./services/{ids['echo']}"}},
        "entity": "services",
        "id": ids["echo"],
        "name": "echo",
    }
    assert row["config"]["id"] == ids["i1"]
    assert row["config"]["name"] == "intercept-1"
    assert row["config"]["_links"] == {"self": {"href": f"./configs/{ids['i1']}"}}


def test_a_later_config_of_the_same_type_replaces_the_override(api: Api, ids: dict[str, str]) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1")])

    api.post(path(ids), json=[pair(ids, "echo", "i2"), pair(ids, "echo", "h1")])

    assert pairs(api, ids) == {(ids["echo"], ids["i2"]), (ids["echo"], ids["h1"])}


def test_delete_removes_the_override_of_the_config_type(api: Api, ids: dict[str, str]) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1"), pair(ids, "echo", "h1"), pair(ids, "web", "i1")])

    result = api.delete(path(ids), json=[pair(ids, "echo", "i1")])

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert pairs(api, ids) == {(ids["echo"], ids["h1"]), (ids["web"], ids["i1"])}


@pytest.mark.parametrize("body", [None, []])
def test_delete_without_pairs_removes_every_override(api: Api, ids: dict[str, str], body: Any) -> None:
    """As OpenZiti's ``Test_ServiceListWithConfigs``: a DELETE naming no pairs clears them all."""
    api.post(path(ids), json=[pair(ids, "echo", "i1"), pair(ids, "web", "h1")])

    assert api.delete(path(ids), json=body).status_code == 200

    assert pairs(api, ids) == set()


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE"])
def test_an_unknown_identity_is_404(api: Api, ids: dict[str, str], method: str) -> None:
    body = [pair(ids, "echo", "i1")] if method != "GET" else None

    result = api.request(method, "/identities/nope/service-configs", json=body)

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([{"serviceId": "nope", "configId": "i1"}], "serviceId"),
        ([{"serviceId": "echo", "configId": "nope"}], "configId"),
    ],
)
def test_assigning_an_unknown_service_or_config_is_404_and_changes_nothing(
    api: Api, ids: dict[str, str], body: list[dict[str, str]], field: str
) -> None:
    resolved = [{k: ids.get(v, v) for k, v in item.items()} for item in body]

    result = api.post(path(ids), json=[pair(ids, "web", "h1"), *resolved])

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"
    assert result.json["error"]["cause"]["field"] == field
    assert pairs(api, ids) == set()


def test_removing_an_unknown_config_is_404(api: Api, ids: dict[str, str]) -> None:
    result = api.delete(path(ids), json=[{"serviceId": ids["echo"], "configId": "nope"}])

    assert result.status_code == 404
    assert result.json["error"]["cause"]["field"] == "configId"


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        (b"", 400, "COULD_NOT_PARSE_BODY", None),
        (b"[{", 400, "COULD_NOT_PARSE_BODY", None),
        (b'[{"configId": "x"}]', 400, "COULD_NOT_VALIDATE", "serviceId"),
        (b'[{"serviceId": "x"}]', 400, "COULD_NOT_VALIDATE", "configId"),
        (b'[{"serviceId": 1, "configId": "x"}]', 400, "COULD_NOT_VALIDATE", "serviceId"),
        (b'{"serviceId": "x", "configId": "y"}', 400, "COULD_NOT_VALIDATE", None),
    ],
)
def test_invalid_bodies_are_refused(
    api: Api, ids: dict[str, str], body: bytes, status: int, code: str, field: str | None
) -> None:
    result = api.post(path(ids), body=body, headers={"content-type": "application/json"})

    assert result.status_code == status
    error: dict[str, Any] = result.json["error"]
    assert error["code"] == code
    if field is not None:
        assert error["cause"]["field"] == field


def test_deleting_the_service_drops_its_overrides(api: Api, ids: dict[str, str]) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1"), pair(ids, "web", "i2")])

    assert api.delete(f"/services/{ids['echo']}").status_code == 200

    assert pairs(api, ids) == {(ids["web"], ids["i2"])}
    identity = api.ctrl.managers.identities.require(ids["identity"])
    assert set(identity.service_configs) == {ids["web"]}


def test_a_config_in_use_as_an_override_cannot_be_deleted(api: Api, ids: dict[str, str]) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1")])

    result = api.delete(f"/configs/{ids['i1']}")

    assert result.status_code == 409
    assert result.json["error"]["code"] == "CAN_NOT_DELETE_REFERENCED_ENTITY"
    assert ids["identity"] in result.json["error"]["cause"]["reason"]
    assert api.get(f"/configs/{ids['i1']}").status_code == 200
    api.delete(path(ids), json=[pair(ids, "echo", "i1")])
    assert api.delete(f"/configs/{ids['i1']}").status_code == 200


def test_deleting_the_identity_takes_its_overrides(api: Api, ids: dict[str, str]) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1")])

    assert api.delete(f"/identities/{ids['identity']}").status_code == 200

    assert api.delete(f"/configs/{ids['i1']}").status_code == 200


@pytest.mark.durable
def test_overrides_survive_a_restart(app: Any, api: Api, ids: dict[str, str], settings: Any) -> None:
    api.post(path(ids), json=[pair(ids, "echo", "i1")])
    app.ctrl.env.store.close()

    again = Api(open_app(settings, durable=True))
    try:
        again.token = again.login(ADMIN_USER, ADMIN_PASSWORD)
        assert pairs(again, ids) == {(ids["echo"], ids["i1"])}
    finally:
        again.ctrl.env.store.close()


def test_needs_an_admin(anon: Api, ids: dict[str, str]) -> None:
    assert anon.get(path(ids)).status_code == 401
    assert anon.post(path(ids), json=[]).status_code == 401


def test_a_config_targeting_routers_cannot_override_a_service_config(api: Api, ids: dict[str, str]) -> None:
    router_type = api.create("/config-types", {"name": "router-thing", "target": "router"})
    config = api.create("/configs", {"name": "for-routers", "configTypeId": router_type, "data": {}})

    result = api.post(path(ids), json=[{"serviceId": ids["echo"], "configId": config}])

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "configId"
    assert pairs(api, ids) == set()
