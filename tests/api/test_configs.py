"""Management ``/configs``: CRUD, validation against the type's schema, filters, services using it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api

PORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["hostname", "port"],
    "properties": {
        "hostname": {"type": "string"},
        "port": {"type": "integer", "minimum": 0, "maximum": 65535},
        "protocol": {"type": "string", "enum": ["tcp", "udp"]},
    },
}
GOOD = {"hostname": "ssh.example.test", "port": 22}


@pytest.fixture
def port_type(api: Api) -> str:
    return api.create("/config-types", {"name": "port.v1", "schema": PORT_SCHEMA})


@pytest.fixture
def free_type(api: Api) -> str:
    return api.create("/config-types", {"name": "free.v1"})


def test_create_and_read_config(api: Api, port_type: str) -> None:
    id = api.create(
        "/configs", {"name": "ssh", "configTypeId": port_type, "data": GOOD, "tags": {"org": "na"}}
    )

    result = api.get(f"/configs/{id}")

    assert result.status_code == 200
    data = result.json["data"]
    assert data["name"] == "ssh"
    assert data["data"] == GOOD
    assert data["configTypeId"] == port_type
    assert data["configType"] == {
        "_links": {"self": {"href": f"./config-types/{port_type}"}},
        "entity": "config-types",
        "id": port_type,
        "name": "port.v1",
    }
    assert data["tags"] == {"org": "na"}
    assert data["_links"]["self"] == {"href": f"./configs/{id}"}


def test_nested_free_form_data_round_trips(api: Api, free_type: str) -> None:
    payload = {
        "port": 22,
        "enabled": True,
        "nested": {"count": 123.32, "weird name ?": {"x": None, "l": [1, "a"]}},
    }
    id = api.create("/configs", {"name": "n", "configTypeId": free_type, "data": payload})

    assert api.get(f"/configs/{id}").json["data"]["data"] == payload


def test_whole_floats_are_stored_as_integers(api: Api, port_type: str) -> None:
    id = api.create(
        "/configs", {"name": "f", "configTypeId": port_type, "data": {"hostname": "h", "port": 22.0}}
    )

    port = api.get(f"/configs/{id}").json["data"]["data"]["port"]

    assert port == 22
    assert isinstance(port, int)


def test_config_type_may_be_named(api: Api, port_type: str) -> None:
    id = api.create("/configs", {"name": "by-name", "configTypeId": "port.v1", "data": GOOD})

    assert api.get(f"/configs/{id}").json["data"]["configTypeId"] == port_type


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"configTypeId": "T", "data": GOOD}, "name"),
        ({"name": "", "configTypeId": "T", "data": GOOD}, "name"),
        ({"name": "x", "data": GOOD}, "configTypeId"),
        ({"name": "x", "configTypeId": "T"}, "data"),
        ({"name": "x", "configTypeId": "T", "data": None}, "data"),
        ({"name": "x", "configTypeId": "T", "data": [1]}, "data"),
        ({"name": "x", "configTypeId": "", "data": GOOD}, "type"),
        ({"name": "x", "configTypeId": "no-such-type", "data": GOOD}, "type"),
    ],
)
def test_invalid_create_is_a_field_error(api: Api, port_type: str, body: dict[str, Any], field: str) -> None:
    if body.get("configTypeId") == "T":
        body = {**body, "configTypeId": port_type}

    result = api.post("/configs", json=body)

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == field


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"port": 22}, "(root)", "(root) is invalid: (root): hostname is required"),
        (
            {**GOOD, "port": "22"},
            "port",
            "port is invalid: port: Invalid type. Expected: integer, given: string",
        ),
        ({**GOOD, "port": 70000}, "port", "port is invalid: port: Must be less than or equal to 65535"),
        (
            {**GOOD, "extra": 1},
            "(root)",
            "(root) is invalid: (root): Additional property extra is not allowed",
        ),
        (
            {**GOOD, "protocol": "icmp"},
            "protocol",
            'protocol is invalid: protocol: protocol must be one of the following: "tcp", "udp"',
        ),
    ],
)
def test_data_failing_the_schema_is_a_field_error(
    api: Api, port_type: str, data: dict[str, Any], field: str, reason: str
) -> None:
    result = api.post("/configs", json={"name": "bad", "configTypeId": port_type, "data": data})

    assert result.status_code == 400
    cause = result.json["error"]["cause"]
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert (cause["field"], cause["reason"]) == (field, reason)


def test_schema_failure_value_is_the_failing_part(api: Api, port_type: str) -> None:
    result = api.post("/configs", json={"name": "bad", "configTypeId": port_type, "data": {"port": 22}})

    assert result.json["error"]["cause"]["value"] == "map[port:22]"


def test_replace_sets_name_data_and_tags_but_never_the_type(api: Api, port_type: str, free_type: str) -> None:
    id = api.create("/configs", {"name": "a", "configTypeId": port_type, "data": GOOD, "tags": {"k": "v"}})

    new_data = {"hostname": "other", "port": 80}
    result = api.put(f"/configs/{id}", json={"name": "b", "configTypeId": free_type, "data": new_data})

    assert result.status_code == 200
    data = api.get(f"/configs/{id}").json["data"]
    assert (data["name"], data["data"], data["tags"], data["configTypeId"]) == ("b", new_data, {}, port_type)


def test_replace_validates_data_against_the_schema(api: Api, port_type: str) -> None:
    id = api.create("/configs", {"name": "a", "configTypeId": port_type, "data": GOOD})

    result = api.put(f"/configs/{id}", json={"name": "a", "data": {"snafu": False}})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "(root)"
    assert api.get(f"/configs/{id}").json["data"]["data"] == GOOD


@pytest.mark.parametrize(("body", "field"), [({"data": GOOD}, "name"), ({"name": "a"}, "data")])
def test_replace_requires_name_and_data(api: Api, port_type: str, body: dict[str, Any], field: str) -> None:
    id = api.create("/configs", {"name": "a", "configTypeId": port_type, "data": GOOD})

    result = api.put(f"/configs/{id}", json=body)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == field


def test_patch_changes_only_given_fields(api: Api, free_type: str) -> None:
    id = api.create(
        "/configs", {"name": "a", "configTypeId": free_type, "data": {"x": 1}, "tags": {"k": "v"}}
    )

    assert api.patch(f"/configs/{id}", json={"name": "b"}).status_code == 200
    data = api.get(f"/configs/{id}").json["data"]
    assert (data["name"], data["data"], data["tags"]) == ("b", {"x": 1}, {"k": "v"})

    assert api.patch(f"/configs/{id}", json={"data": {"y": 2}, "tags": {"t": "u"}}).status_code == 200
    data = api.get(f"/configs/{id}").json["data"]
    assert (data["name"], data["data"], data["tags"]) == ("b", {"y": 2}, {"t": "u"})


def test_patch_data_is_checked_against_the_schema(api: Api, port_type: str) -> None:
    id = api.create("/configs", {"name": "a", "configTypeId": port_type, "data": GOOD})

    result = api.patch(f"/configs/{id}", json={"data": {"hostname": 5, "port": 1}})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "hostname"


def test_duplicate_name_is_a_field_error(api: Api, free_type: str) -> None:
    api.create("/configs", {"name": "dup", "configTypeId": free_type, "data": {}})

    result = api.post("/configs", json={"name": "dup", "configTypeId": free_type, "data": {}})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_unknown_id_is_not_found(api: Api) -> None:
    for result in (
        api.get("/configs/nope"),
        api.put("/configs/nope", json={"name": "x", "data": {}}),
        api.patch("/configs/nope", json={"name": "x"}),
        api.delete("/configs/nope"),
        api.get("/configs/nope/services"),
    ):
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"


def test_delete_removes_the_config_from_services(api: Api, free_type: str) -> None:
    config_id = api.create("/configs", {"name": "c", "configTypeId": free_type, "data": {}})
    service_id = api.create("/services", {"name": "s", "encryptionRequired": True, "configs": [config_id]})

    result = api.delete(f"/configs/{config_id}")

    assert result.status_code == 200
    assert api.get(f"/configs/{config_id}").status_code == 404
    assert api.get(f"/services/{service_id}").json["data"]["configs"] == []


def test_services_using_a_config_are_listed(api: Api, free_type: str) -> None:
    config_id = api.create("/configs", {"name": "c", "configTypeId": free_type, "data": {}})
    s1 = api.create("/services", {"name": "s1", "encryptionRequired": True, "configs": [config_id]})
    api.create("/services", {"name": "s2", "encryptionRequired": True})

    result = api.get(f"/configs/{config_id}/services")

    assert result.status_code == 200
    assert [s["id"] for s in result.json["data"]] == [s1]


def test_list_filters_by_type_name_and_tags(api: Api, port_type: str, free_type: str) -> None:
    a = api.create(
        "/configs", {"name": "a", "configTypeId": port_type, "data": GOOD, "tags": {"env": "prod"}}
    )
    b = api.create("/configs", {"name": "b", "configTypeId": free_type, "data": {}})

    def ids(filter: str) -> list[str]:
        result = api.get("/configs", params={"filter": filter})
        assert result.status_code == 200, result.text
        return [c["id"] for c in result.json["data"]]

    assert ids(f'type = "{port_type}"') == [a]
    assert ids(f'configTypeId = "{free_type}"') == [b]
    assert ids('configType = "port.v1"') == [a]
    assert ids('tags.env = "prod"') == [a]
    assert ids('name in ["a", "b"] sort by name desc') == [b, a]


def test_list_pages(api: Api, free_type: str) -> None:
    for i in range(5):
        api.create("/configs", {"name": f"c{i}", "configTypeId": free_type, "data": {}})

    result = api.get("/configs", params={"limit": 2, "offset": 2, "sort": "name asc"})

    assert [c["name"] for c in result.json["data"]] == ["c2", "c3"]
    assert result.json["meta"]["pagination"] == {"limit": 2, "offset": 2, "totalCount": 5}
    assert set(result.json["meta"]["filterableFields"]) >= {"id", "name", "type", "createdAt", "updatedAt"}


def test_non_admin_is_unauthorized(anon: Api) -> None:
    assert anon.get("/configs").status_code == 401
