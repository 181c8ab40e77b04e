"""``/routers`` and ``/transit-routers``: one resource on both paths, enrollment ``trott``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import jwt
import pytest

from tests.api.policy_helpers import field_error
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

PATHS = ["/routers", "/transit-routers"]


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.parametrize("path", PATHS)
def test_create_links_to_transit_routers(api: Api, path: str) -> None:
    result = api.post(path, json={"name": "r1"})

    assert result.status_code == 201
    new_id = result.json["data"]["id"]
    assert result.json["data"]["_links"] == {"self": {"href": f"./transit-routers/{new_id}"}}


def test_both_paths_serve_the_same_routers(api: Api) -> None:
    rid = api.create("/routers", {"name": "r1"})

    via_routers = api.get(f"/routers/{rid}").json["data"]
    via_transit = api.get(f"/transit-routers/{rid}").json["data"]
    listed = [r["id"] for r in api.get("/transit-routers").json["data"]]

    assert via_routers == via_transit
    assert listed == [rid]


def test_read_renders_router_detail(api: Api, app: Any) -> None:
    rid = api.create(
        "/routers", {"name": "r1", "cost": 4, "noTraversal": True, "disabled": True, "tags": {"a": "b"}}
    )

    data = api.get(f"/routers/{rid}").json["data"]

    assert data["name"] == "r1"
    assert (data["cost"], data["noTraversal"], data["disabled"]) == (4, True, True)
    assert data["tags"] == {"a": "b"}
    assert data["isOnline"] is False
    assert data["isVerified"] is False
    assert data["fingerprint"] is None
    assert data["unverifiedCertPem"] is None
    assert data["unverifiedFingerprint"] is None
    assert data["_links"] == {"self": {"href": f"./transit-routers/{rid}"}}
    expires = parse_ts(data["enrollmentExpiresAt"])
    assert expires - parse_ts(data["enrollmentCreatedAt"]) == app.ctrl.settings.enrollment_duration
    key = app.ctrl.pki.server_cert.public_key()
    claims = jwt.decode(
        data["enrollmentJwt"], key, algorithms=["RS256", "ES256", "ES384", "ES512"], audience=""
    )
    assert claims["em"] == "trott"
    assert claims["sub"] == rid
    assert claims["jti"] == data["enrollmentToken"]
    assert claims["iss"] == app.ctrl.base_url
    assert claims["exp"] == int(expires.timestamp())


@pytest.mark.parametrize("path", PATHS)
def test_update_patch_delete(api: Api, path: str) -> None:
    rid = api.create(path, {"name": "r1", "cost": 9, "tags": {"k": "v"}})

    assert api.patch(f"{path}/{rid}", json={"noTraversal": True}).status_code == 200
    patched = api.get(f"{path}/{rid}").json["data"]
    assert api.put(f"{path}/{rid}", json={"name": "r2"}).status_code == 200
    replaced = api.get(f"{path}/{rid}").json["data"]

    assert (patched["cost"], patched["noTraversal"], patched["tags"]) == (9, True, {"k": "v"})
    assert (replaced["name"], replaced["cost"], replaced["noTraversal"], replaced["tags"]) == (
        "r2",
        0,
        False,
        {},
    )
    assert api.delete(f"{path}/{rid}").status_code == 200
    assert api.get(f"{path}/{rid}").status_code == 404


@pytest.mark.parametrize("cost", [-1, 65536])
def test_cost_bounds(api: Api, cost: int) -> None:
    assert field_error(api.post("/routers", json={"name": "r", "cost": cost}))["field"] == "cost"
    assert api.post("/routers", json={"name": "r", "cost": 65535}).status_code == 201


def test_name_required_and_unique_with_edge_routers(api: Api) -> None:
    api.create("/edge-routers", {"name": "edge"})
    rid = api.create("/routers", {"name": "r"})

    assert field_error(api.post("/routers", json={})) == {
        "field": "name",
        "reason": "name in body is required",
    }
    assert field_error(api.post("/transit-routers", json={"name": "r"}))["reason"] == (
        "duplicate value 'r' in unique index on routers store"
    )
    assert field_error(api.patch(f"/routers/{rid}", json={"name": "edge"}))["reason"] == (
        "duplicate value 'edge' in unique index on routers store"
    )


def test_unknown_id_is_404(api: Api) -> None:
    assert api.get("/routers/nope").status_code == 404
    assert api.delete("/transit-routers/nope").status_code == 404


def test_list_filters_and_pages(api: Api) -> None:
    for i in range(4):
        api.create("/routers", {"name": f"r{i}", "cost": i * 10, "disabled": i == 3})

    result = api.get("/routers", params={"filter": "cost >= 10 and disabled = false", "sort": "name"}).json
    page = api.get("/transit-routers", params={"limit": "2", "offset": "2", "sort": "name"}).json

    assert [r["name"] for r in result["data"]] == ["r1", "r2"]
    assert [r["name"] for r in page["data"]] == ["r2", "r3"]
    assert page["meta"]["pagination"]["totalCount"] == 4
    assert {"id", "name", "cost", "isOnline", "isVerified", "noTraversal", "disabled"} <= set(
        result["meta"]["filterableFields"]
    )


@pytest.mark.durable
def test_survives_a_restart(api: Api, app: Any, settings: Any) -> None:
    rid = api.create("/routers", {"name": "r", "cost": 2})
    before = api.get(f"/routers/{rid}").json["data"]
    app.ctrl.env.store.close()

    again = open_app(settings, durable=True)
    try:
        client = Api(again)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        after = client.get(f"/routers/{rid}").json["data"]
    finally:
        again.ctrl.env.store.close()

    after.pop("enrollmentJwt")
    before.pop("enrollmentJwt")
    assert after == before
