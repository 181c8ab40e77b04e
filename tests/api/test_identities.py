"""``/identities``, its sub-resources, ``/identity-types`` and ``/identity-role-attributes``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from controller.settings import Settings
from engine.entities.identities import Identity
from engine.entities.routers import EdgeRouter
from engine.ports import UnitOfWork
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app


def new_identity(api: Api, name: str, **extra: Any) -> str:
    body: dict[str, Any] = {"name": name, "isAdmin": False, "type": "User", **extra}
    return api.create("/identities", body)


def with_password(api: Api, name: str, username: str, password: str, *, admin: bool = False) -> str:
    identity_id = new_identity(api, name, isAdmin=admin)
    api.create(
        "/authenticators",
        {"identityId": identity_id, "method": "updb", "username": username, "password": password},
    )
    return identity_id


def error_of(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def put_router_identity(api: Api, name: str) -> str:
    """A tunneler-enabled edge router and its router identity, as the edge-router manager makes them."""
    env = api.ctrl.env
    now = env.clock.now()
    router_id = str(env.ids.new_id())
    uow = UnitOfWork(env.store)
    uow.put(EdgeRouter(id=router_id, created_at=now, updated_at=now, name=name, is_tunneler_enabled=True))
    uow.put(Identity(id=router_id, created_at=now, updated_at=now, name=name, type_id="Router"))
    env.commit(uow)
    return router_id


# -- create / read ---------------------------------------------------------------------------------
def test_create_answers_201_with_link_and_read_shows_the_identity(api: Api) -> None:
    result = api.post(
        "/identities",
        json={
            "name": "laptop",
            "isAdmin": False,
            "type": "Device",
            "roleAttributes": ["sales", "east"],
            "appData": {"owner": "ann", "nested": {"a": 1}},
            "defaultHostingCost": 12,
            "defaultHostingPrecedence": "required",
            "externalId": "ext-1",
            "tags": {"team": "blue"},
        },
    )
    assert result.status_code == 201
    identity_id = result.json["data"]["id"]
    assert result.json["data"]["_links"] == {"self": {"href": f"./identities/{identity_id}"}}

    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["name"] == "laptop"
    assert data["typeId"] == "Default"
    assert data["type"]["id"] == "Default"
    assert data["type"]["entity"] == "identity-types"
    assert data["isAdmin"] is False
    assert data["isDefaultAdmin"] is False
    assert data["roleAttributes"] == ["east", "sales"]  # stored sorted, as OpenZiti returns them
    assert data["appData"] == {"owner": "ann", "nested": {"a": 1}}
    assert data["defaultHostingCost"] == 12
    assert data["defaultHostingPrecedence"] == "required"
    assert data["externalId"] == "ext-1"
    assert data["authPolicyId"] == "default"
    assert data["authPolicy"]["id"] == "default"
    assert data["tags"] == {"team": "blue"}
    assert data["disabled"] is False
    assert data["enrollment"] == {}
    assert data["authenticators"] == {}
    assert data["_links"]["self"] == {"href": f"./identities/{identity_id}"}


@pytest.mark.parametrize("wire_type", ["User", "Device", "Service", "Default"])
def test_non_router_types_map_to_default(api: Api, wire_type: str) -> None:
    identity_id = new_identity(api, f"t-{wire_type}", type=wire_type)
    assert api.get(f"/identities/{identity_id}").json["data"]["typeId"] == "Default"


def test_router_identities_may_not_be_created(api: Api) -> None:
    result = api.post("/identities", json={"name": "r", "isAdmin": False, "type": "Router"})
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == "typeId"
    assert error_of(result)["cause"]["reason"] == "may not create identities with given typeId"


@pytest.mark.parametrize("missing", ["name", "isAdmin", "type"])
def test_create_requires_name_is_admin_and_type(api: Api, missing: str) -> None:
    body: dict[str, Any] = {"name": "x", "isAdmin": False, "type": "User"}
    del body[missing]
    result = api.post("/identities", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == missing


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"type": "Robot"}, "type"),
        ({"defaultHostingCost": 65536}, "defaultHostingCost"),
        ({"defaultHostingCost": -1}, "defaultHostingCost"),
        ({"defaultHostingPrecedence": "sometimes"}, "defaultHostingPrecedence"),
        ({"roleAttributes": ["#sales"]}, "roleAttributes"),
        ({"roleAttributes": ["@abc"]}, "roleAttributes"),
        ({"authPolicyId": "no-such-policy"}, "authPolicyId"),
        ({"isAdmin": "yes"}, "isAdmin"),
        ({"tags": {"k": [1, 2]}}, "tags"),
    ],
)
def test_create_validates_fields(api: Api, extra: dict[str, Any], field: str) -> None:
    body: dict[str, Any] = {"name": "x", "isAdmin": False, "type": "User", **extra}
    result = api.post("/identities", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"].split(".")[0] == field


def test_service_hosting_maps_must_name_existing_services(api: Api) -> None:
    result = api.post(
        "/identities",
        json={"name": "x", "isAdmin": False, "type": "User", "serviceHostingCosts": {"nope": 3}},
    )
    assert result.status_code == 404
    assert error_of(result)["cause"]["field"] == "serviceHostingCosts"


def test_role_attributes_are_returned_sorted_without_duplicates(api: Api) -> None:
    identity_id = new_identity(api, "sorted", roleAttributes=["west", "East", "east", "west"])

    assert api.get(f"/identities/{identity_id}").json["data"]["roleAttributes"] == ["East", "east", "west"]
    api.patch(f"/identities/{identity_id}", json={"roleAttributes": ["b", "a", "b"]})
    assert api.get(f"/identities/{identity_id}").json["data"]["roleAttributes"] == ["a", "b"]
    replacement = {"name": "sorted", "isAdmin": False, "type": "User", "roleAttributes": ["z", "y"]}
    api.put(f"/identities/{identity_id}", json=replacement)
    assert api.get(f"/identities/{identity_id}").json["data"]["roleAttributes"] == ["y", "z"]


# -- hosting costs and precedences -----------------------------------------------------------------
def new_service(api: Api, name: str) -> str:
    return api.create("/services", {"name": name, "encryptionRequired": True})


def test_hosting_costs_and_precedences_are_stored_and_rendered(api: Api) -> None:
    first, second = new_service(api, "h1"), new_service(api, "h2")

    identity_id = new_identity(
        api,
        "host",
        defaultHostingCost=65535,
        defaultHostingPrecedence="failed",
        serviceHostingCosts={first: 0, second: 65535},
        serviceHostingPrecedences={first: "required", second: "default"},
    )

    data = api.get(f"/identities/{identity_id}").json["data"]
    assert (data["defaultHostingCost"], data["defaultHostingPrecedence"]) == (65535, "failed")
    assert data["serviceHostingCosts"] == {first: 0, second: 65535}
    assert data["serviceHostingPrecedences"] == {first: "required", second: "default"}


def test_hosting_defaults_without_values(api: Api) -> None:
    data = api.get(f"/identities/{new_identity(api, 'plain-host')}").json["data"]

    assert (data["defaultHostingCost"], data["defaultHostingPrecedence"]) == (0, "default")
    assert (data["serviceHostingCosts"], data["serviceHostingPrecedences"]) == ({}, {})


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"serviceHostingCosts": {"SVC": 65536}}, "serviceHostingCosts"),
        ({"serviceHostingCosts": {"SVC": -1}}, "serviceHostingCosts"),
        ({"serviceHostingCosts": {"SVC": "5"}}, "serviceHostingCosts"),
        ({"serviceHostingPrecedences": {"SVC": "sometimes"}}, "serviceHostingPrecedences"),
        ({"defaultHostingCost": "5"}, "defaultHostingCost"),
    ],
)
def test_hosting_values_are_validated(api: Api, extra: dict[str, Any], field: str) -> None:
    service_id = new_service(api, "validated-host")
    body = {k: ({service_id: v["SVC"]} if isinstance(v, dict) else v) for k, v in extra.items()}

    result = api.post("/identities", json={"name": "x", "isAdmin": False, "type": "User", **body})

    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"].split(".")[0] == field


def test_hosting_precedences_must_name_existing_services(api: Api) -> None:
    result = api.post(
        "/identities",
        json={"name": "x", "isAdmin": False, "type": "User", "serviceHostingPrecedences": {"nope": "failed"}},
    )

    assert result.status_code == 404
    assert error_of(result)["code"] == "NOT_FOUND"
    assert error_of(result)["cause"]["field"] == "serviceHostingPrecedences"
    assert error_of(result)["cause"]["value"] == "nope"


def test_patch_replaces_a_hosting_map_whole_and_put_clears_it(api: Api) -> None:
    first, second = new_service(api, "m1"), new_service(api, "m2")
    identity_id = new_identity(api, "maps", serviceHostingCosts={first: 1}, defaultHostingCost=4)

    api.patch(f"/identities/{identity_id}", json={"serviceHostingCosts": {second: 2}})
    patched = api.get(f"/identities/{identity_id}").json["data"]
    api.put(f"/identities/{identity_id}", json={"name": "maps", "isAdmin": False, "type": "User"})
    replaced = api.get(f"/identities/{identity_id}").json["data"]

    assert (patched["serviceHostingCosts"], patched["defaultHostingCost"]) == ({second: 2}, 4)
    assert (replaced["serviceHostingCosts"], replaced["defaultHostingCost"]) == ({}, 0)


def test_deleting_a_service_drops_it_from_hosting_maps(api: Api) -> None:
    gone, kept = new_service(api, "gone"), new_service(api, "kept")
    identity_id = new_identity(
        api,
        "stale",
        serviceHostingCosts={gone: 1, kept: 2},
        serviceHostingPrecedences={gone: "failed"},
    )

    assert api.delete(f"/services/{gone}").status_code == 200

    data = api.get(f"/identities/{identity_id}").json["data"]
    assert (data["serviceHostingCosts"], data["serviceHostingPrecedences"]) == ({kept: 2}, {})
    body = {"name": "stale", "isAdmin": False, "type": "User", "serviceHostingCosts": {kept: 3}}
    assert api.put(f"/identities/{identity_id}", json=body).status_code == 200


def test_duplicate_name_and_external_id_are_refused(api: Api) -> None:
    new_identity(api, "dup", externalId="e-1")
    by_name = api.post("/identities", json={"name": "dup", "isAdmin": False, "type": "User"})
    assert by_name.status_code == 400
    assert error_of(by_name)["cause"]["field"] == "name"
    by_external = api.post(
        "/identities", json={"name": "other", "isAdmin": False, "type": "User", "externalId": "e-1"}
    )
    assert by_external.status_code == 400
    assert error_of(by_external)["cause"]["field"] == "externalId"


def test_create_with_ott_enrollment_exposes_a_jwt_signed_with_the_server_key(api: Api) -> None:
    before = datetime.now(UTC)
    identity_id = new_identity(api, "phone", enrollment={"ott": True})

    ott = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]
    header = jwt.get_unverified_header(ott["jwt"])
    pki = api.ctrl.pki
    assert header["kid"] == pki.jwt_kid()
    assert header["typ"] == "JWT"
    assert header["alg"] == pki.jwt_algorithm()
    claims = jwt.decode(
        ott["jwt"], pki.server_cert.public_key(), algorithms=[header["alg"]], options={"verify_aud": False}
    )
    assert claims["em"] == "ott"
    assert claims["sub"] == identity_id
    assert claims["jti"] == ott["token"]
    assert claims["iss"] == "https://127.0.0.1:1280"
    assert claims["aud"] == [""]
    assert claims["ctrls"] == []
    expected = before + api.ctrl.settings.enrollment_duration
    assert abs(claims["exp"] - expected.timestamp()) < 60
    assert ott["id"]
    assert ott["expiresAt"].endswith("Z")


def test_create_with_updb_enrollment(api: Api) -> None:
    identity_id = new_identity(api, "user-1", enrollment={"updb": "user-1-login"})
    enrollment = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]
    assert set(enrollment) == {"updb"}
    listed = api.get(f"/identities/{identity_id}/enrollments").json["data"]
    assert [(e["method"], e["username"]) for e in listed] == [("updb", "user-1-login")]


def test_create_with_ottca_enrollment_needs_an_existing_ca(api: Api) -> None:
    result = api.post(
        "/identities", json={"name": "x", "isAdmin": False, "type": "User", "enrollment": {"ottca": "nope"}}
    )
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == "enrollment.ottca"
    assert (
        api.get("/identities", params={"filter": 'name = "x"'}).json["meta"]["pagination"]["totalCount"] == 0
    )


# -- replace / patch -------------------------------------------------------------------------------
def test_put_replaces_and_resets_omitted_fields(api: Api) -> None:
    identity_id = new_identity(api, "before", roleAttributes=["a"], tags={"k": "v"}, defaultHostingCost=5)
    result = api.put(f"/identities/{identity_id}", json={"name": "after", "isAdmin": True, "type": "Default"})
    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["name"] == "after"
    assert data["isAdmin"] is True
    assert data["roleAttributes"] == []
    assert data["tags"] == {}
    assert data["defaultHostingCost"] == 0


@pytest.mark.parametrize("missing", ["name", "isAdmin", "type"])
def test_put_requires_name_is_admin_and_type(api: Api, missing: str) -> None:
    identity_id = new_identity(api, "p")
    body: dict[str, Any] = {"name": "p", "isAdmin": False, "type": "User"}
    del body[missing]
    result = api.put(f"/identities/{identity_id}", json=body)
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == missing


def test_patch_changes_only_the_fields_sent(api: Api) -> None:
    identity_id = new_identity(api, "patchy", roleAttributes=["a"], tags={"k": "v"})
    result = api.patch(f"/identities/{identity_id}", json={"roleAttributes": ["b", "c"]})
    assert result.status_code == 200
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["name"] == "patchy"
    assert data["roleAttributes"] == ["b", "c"]
    assert data["tags"] == {"k": "v"}


def test_patch_may_not_turn_an_identity_into_a_router(api: Api) -> None:
    identity_id = new_identity(api, "plain")
    result = api.patch(f"/identities/{identity_id}", json={"type": "Router"})
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == "typeId"


# -- default admin and router identities -----------------------------------------------------------
def test_default_admin_can_not_be_deleted_or_demoted(api: Api) -> None:
    admins = api.get("/identities", params={"filter": "isDefaultAdmin = true"}).json["data"]
    admin_id = admins[0]["id"]

    deleted = api.delete(f"/identities/{admin_id}")
    assert deleted.status_code == 400
    assert error_of(deleted)["code"] == "ENTITY_CAN_NOT_BE_DELETED"

    demoted = api.patch(f"/identities/{admin_id}", json={"isAdmin": False})
    assert demoted.status_code == 400
    assert error_of(demoted)["cause"]["field"] == "isAdmin"
    assert api.get(f"/identities/{admin_id}").json["data"]["isAdmin"] is True


def test_router_identities_keep_name_and_type_but_take_attributes(api: Api) -> None:
    router_id = put_router_identity(api, "er-1")

    renamed = api.patch(f"/identities/{router_id}", json={"name": "other"})
    assert renamed.status_code == 400
    assert error_of(renamed)["cause"]["field"] == "name"

    retyped = api.put(f"/identities/{router_id}", json={"name": "er-1", "isAdmin": False, "type": "Default"})
    assert retyped.status_code == 400
    assert error_of(retyped)["cause"]["field"] == "typeId"

    attributes = api.put(
        f"/identities/{router_id}",
        json={"name": "er-1", "isAdmin": False, "type": "Router", "roleAttributes": ["x"]},
    )
    assert attributes.status_code == 200
    assert api.get(f"/identities/{router_id}").json["data"]["roleAttributes"] == ["x"]

    deleted = api.delete(f"/identities/{router_id}")
    assert deleted.status_code == 400
    assert error_of(deleted)["code"] == "ENTITY_CAN_NOT_BE_DELETED"
    routers = api.get("/identities", params={"filter": 'type = "Router"'}).json["data"]
    assert [r["id"] for r in routers] == [router_id]


# -- delete ----------------------------------------------------------------------------------------
def test_delete_removes_the_identity_its_authenticators_and_enrollments(api: Api) -> None:
    identity_id = with_password(api, "gone", "gone-user", "gone-password")
    api.create(
        "/enrollments",
        {
            "method": "ott",
            "identityId": identity_id,
            "expiresAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        },
    )
    token = api.login("gone-user", "gone-password")

    result = api.delete(f"/identities/{identity_id}")
    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/identities/{identity_id}").status_code == 404
    assert api.get("/authenticators", params={"filter": f'identityId = "{identity_id}"'}).json["data"] == []
    assert api.get("/enrollments", params={"filter": f'identityId = "{identity_id}"'}).json["data"] == []
    assert api.get("/current-identity", token=token).status_code == 401


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/identities/nope"),
        ("PUT", "/identities/nope"),
        ("PATCH", "/identities/nope"),
        ("DELETE", "/identities/nope"),
        ("GET", "/identities/nope/authenticators"),
        ("GET", "/identities/nope/enrollments"),
        ("POST", "/identities/nope/disable"),
        ("POST", "/identities/nope/enable"),
        ("GET", "/identity-types/nope"),
    ],
)
def test_unknown_ids_answer_404(api: Api, method: str, path: str) -> None:
    body = {"name": "x", "isAdmin": False, "type": "User", "durationMinutes": 1}
    result = api.request(method, path, json=body if method in ("PUT", "PATCH", "POST") else None)
    assert result.status_code == 404
    assert error_of(result)["code"] == "NOT_FOUND"


# -- listing ---------------------------------------------------------------------------------------
@pytest.fixture
def population(api: Api) -> dict[str, str]:
    return {
        "ax": new_identity(api, "ax-one", roleAttributes=["a", "b"]),
        "bx": new_identity(api, "bx-two", roleAttributes=["a"]),
        "cy": new_identity(api, "cy-three", roleAttributes=["c"], isAdmin=True),
    }


def names(result: Any) -> list[str]:
    return sorted(i["name"] for i in result.json["data"])


def test_list_filters_with_zitiql(api: Api, population: dict[str, str]) -> None:
    assert names(api.get("/identities", params={"filter": 'name contains "x"'})) == ["ax-one", "bx-two"]
    assert names(api.get("/identities", params={"filter": 'anyOf(roleAttributes) = "a"'})) == [
        "ax-one",
        "bx-two",
    ]
    admins = names(api.get("/identities", params={"filter": "isAdmin = true"}))
    assert admins == ["Default Admin", "cy-three"]
    assert names(api.get("/identities", params={"filter": f'id = "{population["bx"]}"'})) == ["bx-two"]
    assert len(api.get("/identities", params={"filter": 'type = "Default"'}).json["data"]) == 4


def test_list_pages_and_reports_filterable_fields(api: Api, population: dict[str, str]) -> None:
    result = api.get("/identities", params={"limit": 2, "offset": 1, "filter": 'name != "zzz" sort by name'})
    assert result.status_code == 200
    assert [i["name"] for i in result.json["data"]] == ["ax-one", "bx-two"]
    meta = result.json["meta"]
    assert meta["pagination"] == {"limit": 2, "offset": 1, "totalCount": 4}
    for name in (
        "id",
        "name",
        "isAdmin",
        "isDefaultAdmin",
        "roleAttributes",
        "type",
        "createdAt",
        "updatedAt",
    ):
        assert name in meta["filterableFields"]


def test_list_with_bad_filter_is_invalid_filter(api: Api) -> None:
    result = api.get("/identities", params={"filter": "nosuchfield = 1"})
    assert result.status_code == 400
    assert error_of(result)["code"] == "INVALID_FILTER"


def test_role_filter_all_of_any_of_and_ids(api: Api, population: dict[str, str]) -> None:
    def role_filter(roles: list[str], semantic: str | None = None) -> list[str]:
        params: dict[str, Any] = {"roleFilter": roles}
        if semantic:
            params["roleSemantic"] = semantic
        return names(api.get("/identities", params=params))

    assert role_filter(["#a", "#b"]) == ["ax-one"]
    assert role_filter(["#a", "#b"], "AllOf") == ["ax-one"]
    assert role_filter(["#b", "#c"], "AnyOf") == ["ax-one", "cy-three"]
    assert role_filter(["#c", f"@{population['bx']}"]) == ["bx-two", "cy-three"]
    assert role_filter(["@no-such-id"]) == []
    assert api.get("/identities", params={"roleFilter": ["a"]}).status_code == 400
    assert api.get("/identities", params={"roleFilter": ["#a"], "roleSemantic": "Some"}).status_code == 400


def test_role_filter_combines_with_filter(api: Api, population: dict[str, str]) -> None:
    result = api.get("/identities", params={"roleFilter": ["#a"], "filter": 'name contains "bx"'})
    assert names(result) == ["bx-two"]


def test_identity_role_attributes_lists_distinct_values(api: Api, population: dict[str, str]) -> None:
    result = api.get("/identity-role-attributes")
    assert result.status_code == 200
    assert result.json["data"] == ["a", "b", "c"]
    assert result.json["meta"]["pagination"]["totalCount"] == 3
    filtered = api.get("/identity-role-attributes", params={"filter": 'id contains "b"'})
    assert filtered.json["data"] == ["b"]


def test_identity_types(api: Api) -> None:
    listed = api.get("/identity-types")
    assert listed.status_code == 200
    assert [t["id"] for t in listed.json["data"]] == ["Default", "Router"]
    detail = api.get("/identity-types/Router").json["data"]
    assert detail["name"] == "Router"
    assert detail["_links"]["self"] == {"href": "./identity-types/Router"}


def test_sub_lists_are_paged(api: Api) -> None:
    identity_id = with_password(api, "sub", "sub-user", "sub-password")
    result = api.get(f"/identities/{identity_id}/authenticators", params={"limit": 5})
    assert result.status_code == 200
    assert [a["method"] for a in result.json["data"]] == ["updb"]
    assert result.json["meta"]["pagination"]["limit"] == 5
    enrollments = api.get(f"/identities/{identity_id}/enrollments")
    assert enrollments.json["data"] == []
    assert enrollments.json["meta"]["pagination"]["totalCount"] == 0


# -- disable / enable ------------------------------------------------------------------------------
def test_disable_requires_a_non_negative_duration(api: Api) -> None:
    identity_id = new_identity(api, "d")
    missing = api.post(f"/identities/{identity_id}/disable", json={})
    assert missing.status_code == 400
    assert error_of(missing)["cause"]["field"] == "durationMinutes"
    negative = api.post(f"/identities/{identity_id}/disable", json={"durationMinutes": -1})
    assert negative.status_code == 400
    assert error_of(negative)["cause"]["field"] == "durationMinutes"


def test_disable_ends_sessions_and_blocks_login_until_enabled(api: Api) -> None:
    identity_id = with_password(api, "lockme", "lock-user", "lock-password")
    token = api.login("lock-user", "lock-password")
    assert api.get("/current-identity", token=token).status_code == 200

    result = api.post(f"/identities/{identity_id}/disable", json={"durationMinutes": 0})
    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["disabled"] is True
    assert data["disabledAt"] is not None
    assert "disabledUntil" not in data
    assert api.get("/current-identity", token=token).status_code == 401
    login = api.client.simulate_post(
        "/edge/management/v1/authenticate",
        params={"method": "password"},
        json={"username": "lock-user", "password": "lock-password"},
    )
    assert login.status_code == 401
    assert names(api.get("/identities", params={"filter": "disabled = true"})) == ["lockme"]

    assert api.post(f"/identities/{identity_id}/enable").status_code == 200
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["disabled"] is False
    assert "disabledAt" not in data
    assert api.login("lock-user", "lock-password")


def test_disable_for_a_duration_sets_disabled_until(api: Api) -> None:
    identity_id = new_identity(api, "timed")
    api.post(f"/identities/{identity_id}/disable", json={"durationMinutes": 90})
    data = api.get(f"/identities/{identity_id}").json["data"]
    at = datetime.fromisoformat(data["disabledAt"].replace("Z", "+00:00"))
    until = datetime.fromisoformat(data["disabledUntil"].replace("Z", "+00:00"))
    assert until - at == timedelta(minutes=90)
    assert data["disabled"] is True


# -- authorization and persistence -----------------------------------------------------------------
def test_non_admins_get_401_on_management(api: Api) -> None:
    with_password(api, "plain-user", "plain-user", "plain-password")
    token = api.login("plain-user", "plain-password")
    for path in ("/identities", "/identity-types", "/identity-role-attributes"):
        result = api.get(path, token=token)
        assert result.status_code == 401
        assert error_of(result)["code"] == "UNAUTHORIZED"
    assert (
        api.post("/identities", token=token, json={"name": "n", "isAdmin": True, "type": "User"}).status_code
        == 401
    )


def test_anonymous_requests_get_401(anon: Api) -> None:
    assert anon.get("/identities").status_code == 401


@pytest.mark.durable
def test_identities_survive_a_restart(app: Any, settings: Settings) -> None:
    api = Api(app)
    api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
    identity_id = new_identity(api, "durable", roleAttributes=["keep"], enrollment={"ott": True})
    before = api.get(f"/identities/{identity_id}").json["data"]
    app.ctrl.env.store.close()

    reopened = open_app(settings, durable=True)
    try:
        again = Api(reopened)
        again.token = again.login(ADMIN_USER, ADMIN_PASSWORD)
        after = again.get(f"/identities/{identity_id}").json["data"]
        assert after["name"] == "durable"
        assert after["roleAttributes"] == ["keep"]
        assert after["enrollment"]["ott"]["token"] == before["enrollment"]["ott"]["token"]
        assert after["createdAt"] == before["createdAt"]
    finally:
        reopened.ctrl.env.store.close()
