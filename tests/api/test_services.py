"""Management ``/services``: CRUD, configs, role filters, config maps, role attributes, restart."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engine.entities.policies import ServicePolicy
from engine.ports import UnitOfWork
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

INTERCEPT = {"protocols": ["tcp"], "addresses": ["echo.ziti"], "portRanges": [{"low": 80, "high": 80}]}
HOST = {"protocol": "tcp", "address": "localhost", "port": 8080}


def service(api: Api, name: str, **fields: Any) -> str:
    return api.create("/services", {"name": name, "encryptionRequired": True, **fields})


@pytest.fixture
def intercept(api: Api) -> str:
    return api.create("/configs", {"name": "echo-intercept", "configTypeId": "g7cIWbcGg", "data": INTERCEPT})


@pytest.fixture
def host(api: Api) -> str:
    return api.create("/configs", {"name": "echo-host", "configTypeId": "NH5p4FpGR", "data": HOST})


def test_create_and_read_service(api: Api) -> None:
    id = service(api, "echo", roleAttributes=["web", "east"], maxIdleTimeMillis=5000, tags={"o": "x"})

    result = api.get(f"/services/{id}")

    assert result.status_code == 200
    data = result.json["data"]
    assert data["id"] == id
    assert data["name"] == "echo"
    assert data["encryptionRequired"] is True
    assert data["roleAttributes"] == ["east", "web"]  # stored sorted, as OpenZiti returns them
    assert data["maxIdleTimeMillis"] == 5000
    assert data["terminatorStrategy"] == "smartrouting"
    assert data["configs"] == []
    assert data["config"] == {}
    assert data["permissions"] == ["Invalid"]  # the admin is in no service policy
    assert data["postureQueries"] == []
    assert data["tags"] == {"o": "x"}
    assert data["_links"] == {
        "self": {"href": f"./services/{id}"},
        "configs": {"href": f"./services/{id}/configs"},
        "service-edge-router-policies": {"href": f"./services/{id}/service-edge-router-policies"},
        "service-policies": {"href": f"./services/{id}/service-policies"},
        "terminators": {"href": f"./services/{id}/terminators"},
    }


def test_create_answers_201_with_id_and_link(api: Api) -> None:
    result = api.post("/services", json={"name": "s", "encryptionRequired": False})

    assert result.status_code == 201
    id = result.json["data"]["id"]
    assert result.json["data"] == {"_links": {"self": {"href": f"./services/{id}"}}, "id": id}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"encryptionRequired": True}, "name"),
        ({"name": "", "encryptionRequired": True}, "name"),
        ({"name": "s"}, "encryptionRequired"),
        ({"name": "s", "encryptionRequired": "yes"}, "encryptionRequired"),
        ({"name": "s", "encryptionRequired": True, "roleAttributes": ["#bad"]}, "roleAttributes"),
        ({"name": "s", "encryptionRequired": True, "roleAttributes": ["@bad"]}, "roleAttributes"),
        ({"name": "s", "encryptionRequired": True, "configs": ["no-such-config"]}, "configs"),
        ({"name": "s", "encryptionRequired": True, "maxIdleTimeMillis": "1"}, "maxIdleTimeMillis"),
    ],
)
def test_invalid_create_is_a_field_error(api: Api, body: dict[str, Any], field: str) -> None:
    result = api.post("/services", json=body)

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == field


def test_configs_may_be_given_by_name_and_are_stored_as_ids(api: Api, intercept: str, host: str) -> None:
    id = service(api, "echo", configs=["echo-intercept", host])

    assert api.get(f"/services/{id}").json["data"]["configs"] == [intercept, host]


def test_two_configs_of_one_type_are_refused(api: Api, intercept: str) -> None:
    other = api.create("/configs", {"name": "other", "configTypeId": "g7cIWbcGg", "data": INTERCEPT})

    result = api.post(
        "/services", json={"name": "s", "encryptionRequired": True, "configs": [intercept, other]}
    )

    assert result.status_code == 400
    cause = result.json["error"]["cause"]
    assert cause["field"] == "configs"
    assert (
        "duplicate configs named echo-intercept and other found for config type intercept.v1"
        in cause["reason"]
    )


def test_a_config_whose_type_targets_routers_is_refused(api: Api, intercept: str) -> None:
    router_type = api.create("/config-types", {"name": "router.thing.v1", "target": "router"})
    router_config = api.create("/configs", {"name": "rc", "configTypeId": router_type, "data": {}})

    result = api.post(
        "/services", json={"name": "s", "encryptionRequired": True, "configs": [intercept, router_config]}
    )

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    cause = result.json["error"]["cause"]
    assert cause["field"] == "configs"
    assert cause["reason"] == "config rc has config type router.thing.v1 which does not target services"
    assert cause["value"] == f"[{intercept} {router_config}]"


def test_patch_with_a_router_targeted_config_changes_nothing(api: Api, intercept: str) -> None:
    id = service(api, "keep", configs=[intercept])
    router_type = api.create("/config-types", {"name": "router.other.v1", "target": "router"})
    router_config = api.create("/configs", {"name": "rc2", "configTypeId": router_type, "data": {}})

    result = api.patch(f"/services/{id}", json={"configs": [router_config]})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "configs"
    assert api.get(f"/services/{id}").json["data"]["configs"] == [intercept]


def test_role_attributes_are_returned_sorted_without_duplicates(api: Api) -> None:
    id = service(api, "sorted", roleAttributes=["zeta", "Alpha", "beta", "zeta", "alpha"])

    assert api.get(f"/services/{id}").json["data"]["roleAttributes"] == ["Alpha", "alpha", "beta", "zeta"]
    api.patch(f"/services/{id}", json={"roleAttributes": ["y", "x"]})
    assert api.get(f"/services/{id}").json["data"]["roleAttributes"] == ["x", "y"]


def test_duplicate_name_is_a_field_error(api: Api) -> None:
    service(api, "dup")

    result = api.post("/services", json={"name": "dup", "encryptionRequired": True})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_replace_sets_fields_resets_omitted_ones_and_keeps_encryption(api: Api, intercept: str) -> None:
    id = service(
        api,
        "a",
        roleAttributes=["r"],
        configs=[intercept],
        terminatorStrategy="weighted",
        maxIdleTimeMillis=10,
        tags={"k": "v"},
    )

    result = api.put(f"/services/{id}", json={"name": "b", "encryptionRequired": False})

    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"/services/{id}").json["data"]
    assert data["name"] == "b"
    assert data["encryptionRequired"] is True
    assert (data["roleAttributes"], data["configs"], data["tags"]) == ([], [], {})
    assert (data["terminatorStrategy"], data["maxIdleTimeMillis"]) == ("smartrouting", 0)


def test_replace_requires_name(api: Api) -> None:
    id = service(api, "a")

    result = api.put(f"/services/{id}", json={"encryptionRequired": True})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_patch_changes_only_given_fields_and_keeps_encryption(api: Api, intercept: str, host: str) -> None:
    id = service(api, "a", roleAttributes=["r"], configs=[intercept], tags={"k": "v"})

    result = api.patch(f"/services/{id}", json={"configs": [intercept, host], "encryptionRequired": False})

    assert result.status_code == 200
    data = api.get(f"/services/{id}").json["data"]
    assert data["configs"] == [intercept, host]
    assert data["encryptionRequired"] is True
    assert (data["name"], data["roleAttributes"], data["tags"]) == ("a", ["r"], {"k": "v"})


def test_patch_with_unknown_config_changes_nothing(api: Api, intercept: str) -> None:
    id = service(api, "a", configs=[intercept])

    result = api.patch(f"/services/{id}", json={"configs": ["missing"]})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "configs"
    assert api.get(f"/services/{id}").json["data"]["configs"] == [intercept]


def test_unknown_id_is_not_found(api: Api) -> None:
    for result in (
        api.get("/services/nope"),
        api.put("/services/nope", json={"name": "x"}),
        api.patch("/services/nope", json={"name": "x"}),
        api.delete("/services/nope"),
        api.get("/services/nope/configs"),
    ):
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"


def test_delete_drops_the_service_from_policies(app: Any, api: Api) -> None:
    id = service(api, "doomed")
    env = app.ctrl.env
    now = datetime.now(UTC)
    uow = UnitOfWork(env.store)
    uow.put(
        ServicePolicy(
            id="sp1",
            created_at=now,
            updated_at=now,
            name="p",
            service_roles=[f"@{id}", "#web"],
            identity_roles=["#all"],
        )
    )
    env.commit(uow)

    result = api.delete(f"/services/{id}")

    assert result.status_code == 200
    assert api.get(f"/services/{id}").status_code == 404
    policy = env.store.get(ServicePolicy, "sp1")
    assert policy is not None
    assert policy.service_roles == ["#web"]


def test_service_configs_are_listed_as_config_details(api: Api, intercept: str, host: str) -> None:
    id = service(api, "echo", configs=[intercept, host])

    result = api.get(f"/services/{id}/configs")

    assert result.status_code == 200
    rows = result.json["data"]
    assert {r["id"] for r in rows} == {intercept, host}
    by_id = {r["id"]: r for r in rows}
    assert by_id[intercept]["configType"]["name"] == "intercept.v1"
    assert by_id[host]["data"] == HOST
    assert result.json["meta"]["pagination"]["totalCount"] == 2


def test_config_map_holds_requested_types_by_name(api: Api, intercept: str, host: str) -> None:
    id = service(api, "echo", configs=[intercept, host])

    def config_map(types: str | None) -> dict[str, Any]:
        params = {"filter": 'name = "echo"'}
        if types is not None:
            params["configTypes"] = types
        [row] = api.get("/services", params=params).json["data"]
        return dict(row["config"])

    assert config_map(None) == {}
    assert config_map("intercept.v1") == {"intercept.v1": INTERCEPT}
    assert config_map("NH5p4FpGR,intercept.v1") == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert config_map("all") == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert config_map("unknown-type") == {}
    assert api.get(f"/services/{id}").json["data"]["config"] == {}


def test_config_map_follows_the_session_config_types(api: Api, intercept: str) -> None:
    id = service(api, "echo", configs=[intercept])
    result = api.client.simulate_post(
        "/edge/management/v1/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD, "configTypes": ["intercept.v1"]},
    )
    token = result.json["data"]["token"]

    detail = api.get(f"/services/{id}", token=token).json["data"]

    assert detail["config"] == {"intercept.v1": INTERCEPT}


def test_role_filter_selects_by_attributes_and_ids(api: Api) -> None:
    a = service(api, "a", roleAttributes=["web", "east"])
    b = service(api, "b", roleAttributes=["web"])
    c = service(api, "c", roleAttributes=["db"])

    def names(**params: Any) -> list[str]:
        result = api.get("/services", params={**params, "sort": "name asc"})
        assert result.status_code == 200, result.text
        return [s["name"] for s in result.json["data"]]

    assert names(roleFilter=["#web", "#east"]) == ["a"]
    assert names(roleFilter=["#web", "#east"], roleSemantic="AnyOf") == ["a", "b"]
    assert names(roleFilter=["#db", f"@{b}"]) == ["b", "c"]
    assert names(roleFilter=["#web"], filter='name != "a"') == ["b"]
    assert {a, b, c}
    bad = api.get("/services", params={"roleFilter": "web"})
    assert bad.status_code == 400


def test_list_filters_sorts_and_pages(api: Api, intercept: str) -> None:
    for i in range(4):
        service(api, f"svc-{i}", roleAttributes=[f"r{i}"], terminatorStrategy="weighted" if i % 2 else "")
    with_config = service(api, "svc-cfg", configs=[intercept])
    api.post("/services", json={"name": "plain", "encryptionRequired": False})

    def names(filter: str) -> list[str]:
        result = api.get("/services", params={"filter": filter})
        assert result.status_code == 200, result.text
        return [s["name"] for s in result.json["data"]]

    assert names('terminatorStrategy = "weighted" sort by name') == ["svc-1", "svc-3"]
    assert names('anyOf(roleAttributes) = "r2"') == ["svc-2"]
    assert names(f'anyOf(configs) = "{intercept}"') == ["svc-cfg"]
    assert names("encryptionRequired = false") == ["plain"]
    assert names('name contains "svc-" sort by name desc limit 2') == ["svc-cfg", "svc-3"]
    page = api.get("/services", params={"limit": 2, "offset": 4, "sort": "name"}).json
    assert page["meta"]["pagination"] == {"limit": 2, "offset": 4, "totalCount": 6}
    assert set(page["meta"]["filterableFields"]) >= {
        "id",
        "name",
        "roleAttributes",
        "configs",
        "terminatorStrategy",
        "encryptionRequired",
        "createdAt",
        "updatedAt",
    }
    assert with_config


def test_role_attributes_in_use_are_listed(api: Api) -> None:
    service(api, "a", roleAttributes=["web", "east"])
    service(api, "b", roleAttributes=["web", "db"])

    result = api.get("/service-role-attributes")

    assert result.status_code == 200
    assert result.json["data"] == ["db", "east", "web"]
    filtered = api.get("/service-role-attributes", params={"filter": 'id contains "e"'}).json["data"]
    assert filtered == ["east", "web"]


def test_non_admin_is_unauthorized(anon: Api) -> None:
    assert anon.get("/services").status_code == 401
    assert anon.get("/service-role-attributes").status_code == 401


@pytest.mark.durable
def test_service_with_configs_survives_a_restart(app: Any, api: Api, settings: Any, intercept: str) -> None:
    id = service(api, "durable", configs=[intercept], roleAttributes=["web"], maxIdleTimeMillis=7)
    before = api.get(f"/services/{id}", params={}).json["data"]
    app.ctrl.env.store.close()

    again = Api(open_app(settings, durable=True))
    try:
        again.token = again.login(ADMIN_USER, ADMIN_PASSWORD)
        after = again.get(f"/services/{id}").json["data"]
        listed = again.get("/services", params={"configTypes": "intercept.v1"}).json["data"]
    finally:
        again.ctrl.env.store.close()

    assert after == before
    assert after["configs"] == [intercept]
    [row] = [s for s in listed if s["id"] == id]
    assert row["config"] == {"intercept.v1": INTERCEPT}


def test_role_attributes_are_listed_whole_unless_a_limit_is_asked(api: Api) -> None:
    """OpenZiti pages role-attribute lists only when asked (its default limit: the largest int64)."""
    attributes = [f"many-{i:02d}" for i in range(14)]
    api.create(
        "/services", {"name": "many-attributes", "encryptionRequired": True, "roleAttributes": attributes}
    )

    whole = api.get("/service-role-attributes", params={"filter": 'id contains "many-"'})
    paged = api.get("/service-role-attributes", params={"filter": 'id contains "many-"', "limit": "5"})

    assert whole.json["data"] == attributes
    assert whole.json["meta"]["pagination"]["limit"] == 9223372036854775807
    assert paged.json["data"] == attributes[:5]
    assert paged.json["meta"]["pagination"]["totalCount"] == 14
