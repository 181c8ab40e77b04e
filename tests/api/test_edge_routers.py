"""``/edge-routers``: CRUD, enrollment JWT, re-enroll, cost bounds, roleFilter, role attributes."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import jwt
import pytest

from controller.settings import Settings
from engine.entities.routers import EdgeRouter
from engine.managers.bootstrap import create_default_admin
from tests.api.policy_helpers import field_error, put
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

PATH = "/edge-routers"


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def decode(app: Any, token: str) -> dict[str, Any]:
    """The JWT's claims, verified with the controller's TLS server certificate's public key."""
    key = app.ctrl.pki.server_cert.public_key()
    claims: dict[str, Any] = jwt.decode(
        token, key, algorithms=["RS256", "ES256", "ES384", "ES512"], options={"verify_aud": False}
    )
    return claims


def test_create_returns_201_with_self_link(api: Api) -> None:
    result = api.post(PATH, json={"name": "er1"})

    assert result.status_code == 201
    new_id = result.json["data"]["id"]
    assert result.json["data"] == {"_links": {"self": {"href": f"./edge-routers/{new_id}"}}, "id": new_id}


def test_read_renders_edge_router_detail(api: Api) -> None:
    er = api.create(
        PATH,
        {
            "name": "er1",
            "appData": {"site": "east"},
            "cost": 7,
            "disabled": True,
            "isTunnelerEnabled": True,
            "noTraversal": True,
            "roleAttributes": ["west", "east"],
            "tags": {"t": "x"},
        },
    )

    data = api.get(f"{PATH}/{er}").json["data"]

    assert data["name"] == "er1"
    assert data["appData"] == {"site": "east"}
    assert (data["cost"], data["disabled"], data["noTraversal"]) == (7, True, True)
    assert data["isTunnelerEnabled"] is True
    assert data["roleAttributes"] == ["east", "west"]  # stored sorted, as OpenZiti returns them
    assert data["tags"] == {"t": "x"}
    assert data["isVerified"] is False
    assert data["isOnline"] is False
    assert data["fingerprint"] == ""  # OpenZiti writes "" until enrolled
    assert data["certPem"] is None
    assert data["hostname"] == ""
    assert data["supportedProtocols"] == {}
    assert data["syncStatus"] == "SYNC_UNKNOWN"
    assert data["unverifiedCertPem"] is None
    assert data["unverifiedFingerprint"] is None
    assert set(data["versionInfo"]) == {"arch", "buildDate", "os", "revision", "version"}
    assert data["_links"] == {
        "self": {"href": f"./edge-routers/{er}"},
        "edge-router-policies": {"href": f"./edge-routers/{er}/edge-router-policies"},
    }


def test_defaults_when_only_a_name_is_given(api: Api) -> None:
    er = api.create(PATH, {"name": "bare"})

    data = api.get(f"{PATH}/{er}").json["data"]

    assert (data["cost"], data["disabled"], data["noTraversal"], data["isTunnelerEnabled"]) == (
        0,
        False,
        False,
        False,
    )
    assert data["roleAttributes"] == []
    assert data["appData"] == {}
    assert data["tags"] == {}
    assert "ctrlChanListeners" not in data  # empty: left out, as Go's omitempty


def test_create_gives_an_enrollment(api: Api, app: Any) -> None:
    er = api.create(PATH, {"name": "er1"})

    data = api.get(f"{PATH}/{er}").json["data"]

    created = parse_ts(data["enrollmentCreatedAt"])
    expires = parse_ts(data["enrollmentExpiresAt"])
    assert expires - created == app.ctrl.settings.enrollment_duration
    assert len(data["enrollmentToken"]) == 36
    claims = decode(app, data["enrollmentJwt"])
    assert claims["em"] == "erott"
    assert claims["sub"] == er
    assert claims["jti"] == data["enrollmentToken"]
    assert claims["iss"] == app.ctrl.base_url
    assert claims["aud"] == [""]
    assert claims["ctrls"] == ["tls:127.0.0.1:6262"]  # where the router is to connect
    assert claims["exp"] == int(expires.timestamp())
    header = jwt.get_unverified_header(data["enrollmentJwt"])
    assert header["kid"] == app.ctrl.pki.jwt_kid()


def test_enrollment_jwt_is_signed_once_and_stored(api: Api, app: Any) -> None:
    er = api.create(PATH, {"name": "er1"})

    first = api.get(f"{PATH}/{er}").json["data"]["enrollmentJwt"]
    second = api.get(f"{PATH}/{er}").json["data"]["enrollmentJwt"]

    assert first == second == app.ctrl.env.store.get(EdgeRouter, er).enrollment_jwt


def test_verified_router_shows_no_enrollment(api: Api, app: Any) -> None:
    er = api.create(PATH, {"name": "er1"})
    router = app.ctrl.env.store.get(EdgeRouter, er)
    put(app, dataclasses.replace(router, is_verified=True, fingerprint="ab12"))

    data = api.get(f"{PATH}/{er}").json["data"]

    assert data["isVerified"] is True
    assert data["fingerprint"] == "ab12"
    for field in ("enrollmentJwt", "enrollmentToken", "enrollmentCreatedAt", "enrollmentExpiresAt"):
        assert field not in data


def test_re_enroll_issues_a_new_token_and_clears_the_certificate(api: Api, app: Any) -> None:
    er = api.create(PATH, {"name": "er1", "roleAttributes": ["a"]})
    router = app.ctrl.env.store.get(EdgeRouter, er)
    put(app, dataclasses.replace(router, is_verified=True, fingerprint="ab12", cert_pem="PEM"))

    result = api.post(f"{PATH}/{er}/re-enroll")

    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"{PATH}/{er}").json["data"]
    assert data["isVerified"] is False
    assert data["fingerprint"] == ""  # OpenZiti writes "" until enrolled
    assert data["certPem"] is None
    assert data["enrollmentToken"] not in (None, router.enrollment_token)
    assert decode(app, data["enrollmentJwt"])["jti"] == data["enrollmentToken"]
    assert data["roleAttributes"] == ["a"]


def test_re_enroll_of_unknown_router_is_404(api: Api) -> None:
    assert api.post(f"{PATH}/nope/re-enroll").status_code == 404


@pytest.mark.parametrize("cost", [0, 65535])
def test_cost_bounds_are_inclusive(api: Api, cost: int) -> None:
    er = api.create(PATH, {"name": "er", "cost": cost})

    assert api.get(f"{PATH}/{er}").json["data"]["cost"] == cost


@pytest.mark.parametrize(
    ("cost", "reason"),
    [
        (65536, "cost in body should be less than or equal to 65535"),
        (-1, "cost in body should be greater than or equal to 0"),
    ],
)
def test_cost_out_of_bounds_is_rejected(api: Api, cost: int, reason: str) -> None:
    er = api.create(PATH, {"name": "ok"})

    for result in (
        api.post(PATH, json={"name": "er", "cost": cost}),
        api.put(f"{PATH}/{er}", json={"name": "ok", "cost": cost}),
        api.patch(f"{PATH}/{er}", json={"cost": cost}),
    ):
        cause = field_error(result)
        assert cause["field"] == "cost"
        assert cause["reason"] == reason
        assert cause["value"] == str(cost)


def test_name_is_required(api: Api) -> None:
    er = api.create(PATH, {"name": "ok"})

    assert field_error(api.post(PATH, json={"cost": 1})) == {
        "field": "name",
        "reason": "name in body is required",
    }
    assert field_error(api.put(f"{PATH}/{er}", json={"cost": 1}))["field"] == "name"


def test_role_attributes_may_not_look_like_roles(api: Api) -> None:
    hashed = field_error(api.post(PATH, json={"name": "er", "roleAttributes": ["ok", "#bad"]}))
    at = field_error(api.post(PATH, json={"name": "er", "roleAttributes": ["@bad"]}))

    assert hashed == {
        "field": "roleAttributes",
        "reason": "role attributes may not be prefixed with #",
        "value": "#bad",
    }
    assert at["reason"] == "role attributes may not be prefixed with @"


def test_put_resets_and_patch_keeps(api: Api) -> None:
    er = api.create(PATH, {"name": "er", "cost": 5, "roleAttributes": ["a"], "isTunnelerEnabled": True})

    api.patch(f"{PATH}/{er}", json={"cost": 9})
    patched = api.get(f"{PATH}/{er}").json["data"]
    api.put(f"{PATH}/{er}", json={"name": "er2"})
    replaced = api.get(f"{PATH}/{er}").json["data"]

    assert (patched["cost"], patched["roleAttributes"], patched["isTunnelerEnabled"]) == (9, ["a"], True)
    assert (replaced["name"], replaced["cost"], replaced["roleAttributes"]) == ("er2", 0, [])
    assert replaced["isTunnelerEnabled"] is False
    assert replaced["enrollmentToken"] == patched["enrollmentToken"]


def test_ctrl_chan_listeners_are_set_on_create_and_read(api: Api) -> None:
    listeners = {"tls:1.2.3.4:6262": ["group1"], "tls:5.6.7.8:6262": []}

    er = api.create(PATH, {"name": "listening", "ctrlChanListeners": listeners})

    assert api.get(f"{PATH}/{er}").json["data"]["ctrlChanListeners"] == listeners


def test_ctrl_chan_listeners_are_patched_replaced_and_cleared(api: Api) -> None:
    er = api.create(PATH, {"name": "ccl", "ctrlChanListeners": {"tls:1.2.3.4:6262": []}})
    more = {"tls:10.0.0.1:6262": ["west"], "tls:10.0.0.2:6262": []}

    api.patch(f"{PATH}/{er}", json={"ctrlChanListeners": more})
    after_patch = api.get(f"{PATH}/{er}").json["data"]["ctrlChanListeners"]
    api.patch(f"{PATH}/{er}", json={"cost": 4})
    after_other_patch = api.get(f"{PATH}/{er}").json["data"]["ctrlChanListeners"]
    api.patch(f"{PATH}/{er}", json={"ctrlChanListeners": {}})
    after_clear = api.get(f"{PATH}/{er}").json["data"].get("ctrlChanListeners", {})
    api.patch(f"{PATH}/{er}", json={"ctrlChanListeners": more})
    api.put(f"{PATH}/{er}", json={"name": "ccl"})
    after_put = api.get(f"{PATH}/{er}").json["data"].get("ctrlChanListeners", {})

    assert after_patch == more
    assert after_other_patch == more
    assert after_clear == {}
    assert after_put == {}


def test_ctrl_chan_listener_groups_must_be_strings(api: Api) -> None:
    cause = field_error(api.post(PATH, json={"name": "bad", "ctrlChanListeners": {"tls:a:1": [1]}}))

    assert cause["field"].startswith("ctrlChanListeners")


def test_transit_routers_carry_ctrl_chan_listeners_too(api: Api) -> None:
    listeners = {"tls:1.2.3.4:6262": ["g"]}

    tr = api.create("/transit-routers", {"name": "transit-ccl", "ctrlChanListeners": listeners})

    assert api.get(f"/transit-routers/{tr}").json["data"]["ctrlChanListeners"] == listeners
    assert api.get(f"/routers/{tr}").json["data"]["ctrlChanListeners"] == listeners


def test_role_attributes_are_returned_sorted_without_duplicates(api: Api) -> None:
    er = api.create(PATH, {"name": "sorted", "roleAttributes": ["west", "east", "west", "Central"]})

    assert api.get(f"{PATH}/{er}").json["data"]["roleAttributes"] == ["Central", "east", "west"]


def test_update_cannot_touch_enrollment_fields(api: Api) -> None:
    er = api.create(PATH, {"name": "er"})
    before = api.get(f"{PATH}/{er}").json["data"]

    api.patch(f"{PATH}/{er}", json={"isVerified": True, "fingerprint": "x", "enrollmentToken": "y"})

    after = api.get(f"{PATH}/{er}").json["data"]
    assert after["isVerified"] is False
    assert after["fingerprint"] == ""
    assert after["enrollmentToken"] == before["enrollmentToken"]


def test_delete_and_404(api: Api) -> None:
    er = api.create(PATH, {"name": "er"})

    assert api.delete(f"{PATH}/{er}").status_code == 200
    assert api.get(f"{PATH}/{er}").status_code == 404
    assert api.delete(f"{PATH}/{er}").status_code == 404


def test_names_are_unique_across_edge_and_transit_routers(api: Api) -> None:
    api.create(PATH, {"name": "shared"})
    api.create("/transit-routers", {"name": "transit"})

    same_kind = field_error(api.post(PATH, json={"name": "shared"}))
    other_kind = field_error(api.post(PATH, json={"name": "transit"}))
    from_transit = field_error(api.post("/routers", json={"name": "shared"}))

    for cause in (same_kind, other_kind, from_transit):
        assert cause["field"] == "name"
    assert same_kind["reason"] == "duplicate value 'shared' in unique index on routers store"
    assert other_kind["reason"] == "duplicate value 'transit' in unique index on routers store"


def test_rename_to_own_name_is_fine(api: Api) -> None:
    er = api.create(PATH, {"name": "er"})

    assert api.put(f"{PATH}/{er}", json={"name": "er", "cost": 3}).status_code == 200


# -- listing ------------------------------------------------------------------------------------
def test_list_filters_and_pages(api: Api) -> None:
    api.create(PATH, {"name": "a", "cost": 10, "roleAttributes": ["east"], "isTunnelerEnabled": True})
    api.create(PATH, {"name": "b", "cost": 20, "roleAttributes": ["west"], "disabled": True})
    api.create(PATH, {"name": "c", "cost": 30, "roleAttributes": ["east", "west"], "noTraversal": True})

    def names(params: dict[str, str]) -> list[str]:
        return [r["name"] for r in api.get(PATH, params=params | {"sort": "name"}).json["data"]]

    assert names({"filter": "cost > 15"}) == ["b", "c"]
    assert names({"filter": 'anyOf(roleAttributes) = "east"'}) == ["a", "c"]
    assert names({"filter": "isTunnelerEnabled = true"}) == ["a"]
    assert names({"filter": "disabled = true"}) == ["b"]
    assert names({"filter": "noTraversal = true"}) == ["c"]
    assert names({"filter": "isVerified = false and isOnline = false"}) == ["a", "b", "c"]
    page = api.get(PATH, params={"limit": "1", "offset": "2", "sort": "name"}).json
    assert [r["name"] for r in page["data"]] == ["c"]
    assert page["meta"]["pagination"] == {"limit": 1, "offset": 2, "totalCount": 3}
    assert {"id", "name", "roleAttributes", "isOnline", "isVerified", "isTunnelerEnabled", "cost"} <= set(
        page["meta"]["filterableFields"]
    )


def test_role_filter(api: Api) -> None:
    a = api.create(PATH, {"name": "a", "roleAttributes": ["east"]})
    api.create(PATH, {"name": "b", "roleAttributes": ["west"]})
    c = api.create(PATH, {"name": "c", "roleAttributes": ["east", "west"]})

    def ids(params: Any) -> set[str]:
        return {r["id"] for r in api.get(PATH, params=params).json["data"]}

    assert ids({"roleFilter": ["#east", "#west"]}) == {c}
    assert len(ids({"roleFilter": ["#east", "#west"], "roleSemantic": "AnyOf"})) == 3
    assert ids({"roleFilter": [f"@{a}", "@missing"]}) == {a}


def test_role_attributes_listing(api: Api) -> None:
    er = api.create(PATH, {"name": "a", "roleAttributes": ["sales", "eng"]})
    api.create(PATH, {"name": "b", "roleAttributes": ["eng", "ops"]})

    listed = api.get("/edge-router-role-attributes").json
    filtered = api.get("/edge-router-role-attributes", params={"filter": 'id contains "s"'}).json["data"]
    api.patch(f"{PATH}/{er}", json={"roleAttributes": ["eng"]})
    after = api.get("/edge-router-role-attributes").json["data"]

    assert listed["data"] == ["eng", "ops", "sales"]
    assert listed["meta"]["pagination"]["totalCount"] == 3
    assert filtered == ["ops", "sales"]
    assert after == ["eng", "ops"]


@pytest.mark.durable
def test_survives_a_restart(api: Api, app: Any, settings: Any) -> None:
    er = api.create(PATH, {"name": "er", "roleAttributes": ["x"], "cost": 3})
    before = api.get(f"{PATH}/{er}").json["data"]
    app.ctrl.env.store.close()

    again = open_app(settings, durable=True)
    try:
        client = Api(again)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        after = client.get(f"{PATH}/{er}").json["data"]
    finally:
        again.ctrl.env.store.close()

    for field in ("name", "roleAttributes", "cost", "enrollmentToken", "enrollmentExpiresAt", "createdAt"):
        assert after[field] == before[field]


def test_enrollment_duration_comes_from_settings(home: Any) -> None:
    settings = dataclasses.replace(Settings(home=home), enrollment_duration=timedelta(minutes=7))
    app = open_app(settings)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        client = Api(app)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        data = client.get(f"{PATH}/{client.create(PATH, {'name': 'er'})}").json["data"]
    finally:
        app.ctrl.env.store.close()

    assert parse_ts(data["enrollmentExpiresAt"]) - parse_ts(data["enrollmentCreatedAt"]) == timedelta(
        minutes=7
    )
