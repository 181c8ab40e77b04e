"""Management ``/config-types``: CRUD, schema checks, built-ins, delete in use, sub-list."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api, open_app

PORT_SCHEMA: dict[str, Any] = {
    "$id": "http://example.test/schemas/port.json",
    "type": "object",
    "additionalProperties": False,
    "required": ["hostname", "port"],
    "properties": {
        "hostname": {"type": "string"},
        "port": {"type": "integer", "minimum": 0, "maximum": 65535},
    },
}


def by_name(api: Api, name: str) -> dict[str, Any]:
    result = api.get("/config-types", params={"filter": f'name = "{name}"'})
    assert result.status_code == 200, result.text
    [item] = result.json["data"]
    return dict(item)


def test_create_and_read_config_type(api: Api) -> None:
    id = api.create("/config-types", {"name": "test.v1", "schema": PORT_SCHEMA, "tags": {"org": "x"}})

    result = api.get(f"/config-types/{id}")

    assert result.status_code == 200
    data = result.json["data"]
    assert data["id"] == id
    assert data["name"] == "test.v1"
    assert data["schema"] == PORT_SCHEMA
    assert data["tags"] == {"org": "x"}
    assert data["target"] == "service"
    assert data["_links"]["self"] == {"href": f"./config-types/{id}"}
    assert data["createdAt"].endswith("Z")


def test_create_answers_201_with_id_and_self_link(api: Api) -> None:
    result = api.post("/config-types", json={"name": "test.v1"})

    assert result.status_code == 201
    id = result.json["data"]["id"]
    assert result.json["data"] == {"_links": {"self": {"href": f"./config-types/{id}"}}, "id": id}


def test_config_type_without_schema_renders_null_schema(api: Api) -> None:
    id = api.create("/config-types", {"name": "schemaless"})

    assert api.get(f"/config-types/{id}").json["data"]["schema"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "all"}, "name"),
        ({"name": "x", "schema": "not-object"}, "schema"),
        ({"name": "x", "schema": {"type": "objectionable"}}, "schema"),
        ({"name": "x", "target": "toaster"}, "target"),
        ({"name": "x", "tags": {"a": {"nested": 1}}}, "tags"),
    ],
)
def test_invalid_create_is_a_field_error(api: Api, body: dict[str, Any], field: str) -> None:
    result = api.post("/config-types", json=body)

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == field


def test_invalid_schema_reason_names_the_problem(api: Api) -> None:
    result = api.post("/config-types", json={"name": "x", "schema": {"type": "objectionable"}})

    assert result.json["error"]["cause"]["reason"].startswith("invalid schema")


def test_duplicate_name_is_a_field_error(api: Api) -> None:
    api.create("/config-types", {"name": "dup"})

    result = api.post("/config-types", json={"name": "dup"})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_router_target_is_kept_and_cannot_change(api: Api) -> None:
    id = api.create("/config-types", {"name": "router-thing", "target": "router"})

    assert (
        api.put(f"/config-types/{id}", json={"name": "router-thing", "target": "service"}).status_code == 200
    )

    assert api.get(f"/config-types/{id}").json["data"]["target"] == "router"


def test_an_unknown_target_names_the_allowed_ones(api: Api) -> None:
    result = api.post("/config-types", json={"name": "x", "target": "toaster"})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["reason"] == "target in body should be one of [service router]"


def test_a_null_target_means_service(api: Api) -> None:
    id = api.create("/config-types", {"name": "null-target", "target": None})

    assert api.get(f"/config-types/{id}").json["data"]["target"] == "service"


def test_patch_cannot_change_the_target(api: Api) -> None:
    id = api.create("/config-types", {"name": "patched-target", "target": "router"})

    result = api.patch(f"/config-types/{id}", json={"target": "service", "tags": {"k": "v"}})

    assert result.status_code == 200
    data = api.get(f"/config-types/{id}").json["data"]
    assert (data["target"], data["tags"]) == ("router", {"k": "v"})


def test_list_filters_on_target(api: Api) -> None:
    api.create("/config-types", {"name": "for-routers", "target": "router"})

    result = api.get("/config-types", params={"filter": 'target = "router"'})

    assert [t["name"] for t in result.json["data"]] == ["for-routers"]


def test_replace_sets_fields_and_clears_omitted_schema(api: Api) -> None:
    id = api.create("/config-types", {"name": "a", "schema": PORT_SCHEMA, "tags": {"k": "1"}})

    result = api.put(f"/config-types/{id}", json={"name": "b"})

    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"/config-types/{id}").json["data"]
    assert (data["name"], data["schema"], data["tags"]) == ("b", None, {})


def test_replace_requires_name(api: Api) -> None:
    id = api.create("/config-types", {"name": "a"})

    result = api.put(f"/config-types/{id}", json={"schema": PORT_SCHEMA})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_patch_changes_only_given_fields(api: Api) -> None:
    id = api.create("/config-types", {"name": "a", "tags": {"k": "1"}})

    assert api.patch(f"/config-types/{id}", json={"schema": PORT_SCHEMA}).status_code == 200

    data = api.get(f"/config-types/{id}").json["data"]
    assert (data["name"], data["schema"], data["tags"]) == ("a", PORT_SCHEMA, {"k": "1"})


def test_patch_with_invalid_schema_changes_nothing(api: Api) -> None:
    id = api.create("/config-types", {"name": "a", "schema": PORT_SCHEMA})

    result = api.patch(f"/config-types/{id}", json={"schema": {"type": 12}})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "schema"
    assert api.get(f"/config-types/{id}").json["data"]["schema"] == PORT_SCHEMA


def test_unknown_id_is_not_found(api: Api) -> None:
    for result in (
        api.get("/config-types/nope"),
        api.put("/config-types/nope", json={"name": "x"}),
        api.patch("/config-types/nope", json={"name": "x"}),
        api.delete("/config-types/nope"),
    ):
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"


def test_an_unknown_types_configs_are_an_empty_list(api: Api) -> None:
    """Seed 001 lists no 404 for a config type's configs; OpenZiti v1.6.0 answers 200 and []."""
    result = api.get("/config-types/nope/configs")

    assert result.status_code == 200
    assert result.json["data"] == []
    assert result.json["meta"]["pagination"]["totalCount"] == 0


def test_delete_removes_the_type(api: Api) -> None:
    id = api.create("/config-types", {"name": "gone"})

    result = api.delete(f"/config-types/{id}")

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/config-types/{id}").status_code == 404


def test_delete_of_type_in_use_is_409_listing_the_configs(api: Api) -> None:
    type_id = api.create("/config-types", {"name": "used"})
    c1 = api.create("/configs", {"name": "c1", "configTypeId": type_id, "data": {}})
    c2 = api.create("/configs", {"name": "c2", "configTypeId": type_id, "data": {}})

    result = api.delete(f"/config-types/{type_id}")

    assert result.status_code == 409
    error = result.json["error"]
    assert error["code"] == "CAN_NOT_DELETE_REFERENCED_ENTITY"
    assert set(error["cause"]["value"].strip("[]").split()) == {c1, c2}
    assert api.get(f"/config-types/{type_id}").status_code == 200


def test_delete_after_configs_removed_succeeds(api: Api) -> None:
    type_id = api.create("/config-types", {"name": "used"})
    config_id = api.create("/configs", {"name": "c1", "configTypeId": type_id, "data": {}})
    api.delete(f"/configs/{config_id}")

    assert api.delete(f"/config-types/{type_id}").status_code == 200


def test_configs_of_a_type_are_listed_and_paged(api: Api) -> None:
    type_id = api.create("/config-types", {"name": "t"})
    other = api.create("/config-types", {"name": "other"})
    ids = {
        api.create("/configs", {"name": f"c{i}", "configTypeId": type_id, "data": {"i": i}}) for i in range(3)
    }
    api.create("/configs", {"name": "elsewhere", "configTypeId": other, "data": {}})

    result = api.get(f"/config-types/{type_id}/configs", params={"limit": 2, "sort": "name asc"})

    assert result.status_code == 200
    assert [c["name"] for c in result.json["data"]] == ["c0", "c1"]
    assert result.json["meta"]["pagination"] == {"limit": 2, "offset": 0, "totalCount": 3}
    full = api.get(f"/config-types/{type_id}/configs").json["data"]
    assert {c["id"] for c in full} == ids
    assert all(c["configTypeId"] == type_id for c in full)


def test_builtin_config_types_exist_with_openziti_ids(api: Api) -> None:
    intercept = by_name(api, "intercept.v1")
    host = by_name(api, "host.v1")

    assert intercept["id"] == "g7cIWbcGg"
    assert host["id"] == "NH5p4FpGR"
    assert set(intercept["schema"]["required"]) == {"protocols", "addresses", "portRanges"}
    for name in (
        "host.v2",
        "ziti-tunneler-client.v1",
        "ziti-tunneler-server.v1",
        "proxy.v1",
        "interfaces.v1",
    ):
        assert by_name(api, name)["target"] == "service"


def test_builtin_intercept_schema_checks_configs(api: Api) -> None:
    good = {
        "protocols": ["tcp"],
        "addresses": ["echo.ziti", "10.0.0.0/8", "*.example.com"],
        "portRanges": [{"low": 80, "high": 443}],
    }
    bad = {"protocols": ["tcp"], "addresses": [], "portRanges": [{"low": 80, "high": 443}]}

    assert (
        api.post("/configs", json={"name": "ok", "configTypeId": "g7cIWbcGg", "data": good}).status_code
        == 201
    )
    result = api.post("/configs", json={"name": "bad", "configTypeId": "g7cIWbcGg", "data": bad})
    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "addresses"


def test_builtin_host_schema_checks_configs(api: Api) -> None:
    good = {"protocol": "tcp", "address": "localhost", "port": 8080}
    forwarding = {
        "forwardProtocol": True,
        "allowedProtocols": ["tcp", "udp"],
        "address": "localhost",
        "port": 22,
    }

    for i, data in enumerate((good, forwarding)):
        body = {"name": f"h{i}", "configTypeId": "NH5p4FpGR", "data": data}
        assert api.post("/configs", json=body).status_code == 201, data
    result = api.post(
        "/configs",
        json={
            "name": "bad",
            "configTypeId": "NH5p4FpGR",
            "data": {"forwardProtocol": True, "address": "x", "port": 1},
        },
    )
    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "(root)"


def test_list_filters_sorts_and_pages(api: Api) -> None:
    for name in ("zz-b", "zz-a", "zz-c"):
        api.create("/config-types", {"name": name, "tags": {"team": "zz"}})

    result = api.get("/config-types", params={"filter": 'name contains "zz-" sort by name desc limit 2'})

    assert [t["name"] for t in result.json["data"]] == ["zz-c", "zz-b"]
    assert result.json["meta"]["pagination"]["totalCount"] == 3
    assert set(result.json["meta"]["filterableFields"]) >= {"id", "name", "createdAt", "updatedAt"}
    tagged = api.get("/config-types", params={"filter": 'tags.team = "zz"'}).json["data"]
    assert len(tagged) == 3


def test_unknown_filter_symbol_is_invalid_filter(api: Api) -> None:
    result = api.get("/config-types", params={"filter": 'color = "red"'})

    assert result.status_code == 400
    assert result.json["error"]["code"] == "INVALID_FILTER"


def test_non_admin_is_unauthorized(anon: Api) -> None:
    result = anon.get("/config-types")

    assert result.status_code == 401


@pytest.mark.durable
def test_deleted_builtin_stays_deleted_after_restart(app: Any, api: Api, settings: Any) -> None:
    assert api.delete("/config-types/proxy.v1").status_code == 200
    app.ctrl.env.store.close()

    again = Api(open_app(settings, durable=True))
    try:
        again.token = again.login("admin", "admin-password-1")
        assert again.get("/config-types/proxy.v1").status_code == 404
        assert again.get("/config-types/g7cIWbcGg").status_code == 200
    finally:
        again.ctrl.env.store.close()
