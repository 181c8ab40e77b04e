"""``/enrollments``: create, read, list, delete and refresh identity enrollments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest

from engine.entities.identities import Enrollment
from engine.entities.trust import Ca
from engine.ports import UnitOfWork
from tests.conftest import Api


def new_identity(api: Api, name: str) -> str:
    return api.create("/identities", {"name": name, "isAdmin": False, "type": "User"})


def later(**delta: int) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def body_for(identity_id: str, method: str = "ott", **extra: Any) -> dict[str, Any]:
    return {"method": method, "identityId": identity_id, "expiresAt": later(hours=2), **extra}


def error_of(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def put_ca(api: Api, name: str) -> str:
    env = api.ctrl.env
    now = env.clock.now()
    ca = Ca(
        id=env.ids.new_id(),
        created_at=now,
        updated_at=now,
        name=name,
        cert_pem="-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        fingerprint=f"fp-{name}",
        verification_token=env.ids.new_token(),
        is_verified=True,
        is_ott_ca_enrollment_enabled=True,
    )
    uow = UnitOfWork(env.store)
    uow.put(ca)
    env.commit(uow)
    return ca.id


# -- create / read ---------------------------------------------------------------------------------
def test_create_ott_and_read_the_detail(api: Api) -> None:
    identity_id = new_identity(api, "ann")
    expires = later(hours=3)
    result = api.post("/enrollments", json={"method": "ott", "identityId": identity_id, "expiresAt": expires})
    assert result.status_code == 201
    enrollment_id = result.json["data"]["id"]
    assert result.json["data"]["_links"] == {"self": {"href": f"./enrollments/{enrollment_id}"}}

    data = api.get(f"/enrollments/{enrollment_id}").json["data"]
    assert {
        "_links",
        "ca",
        "caId",
        "createdAt",
        "expiresAt",
        "id",
        "identity",
        "identityId",
        "jwt",
        "method",
        "token",
        "updatedAt",
        "username",
        "tags",
        "edgeRouter",
        "transitRouter",
    } <= set(data)
    assert data["method"] == "ott"
    assert data["expiresAt"] == expires
    assert data["identityId"] == identity_id
    assert data["identity"] == {
        "_links": {"self": {"href": f"./identities/{identity_id}"}},
        "id": identity_id,
        "name": "ann",
        "urlName": "identities",
    }
    assert data["ca"] is None
    assert data["edgeRouter"] is None
    assert data["transitRouter"] is None
    claims = jwt.decode(
        data["jwt"],
        api.ctrl.pki.server_cert.public_key(),
        algorithms=["RS256", "ES256", "ES384", "ES512"],
        options={"verify_aud": False},
    )
    assert claims["jti"] == data["token"]
    assert claims["sub"] == identity_id
    assert claims["em"] == "ott"
    assert claims["exp"] == int(datetime.fromisoformat(expires.replace("Z", "+00:00")).timestamp())
    assert api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["id"] == enrollment_id


def test_create_updb_needs_a_username(api: Api) -> None:
    identity_id = new_identity(api, "bob")
    missing = api.post("/enrollments", json=body_for(identity_id, "updb"))
    assert missing.status_code == 400
    assert error_of(missing)["cause"]["field"] == "username"
    enrollment_id = api.create("/enrollments", body_for(identity_id, "updb", username="bob-login"))
    assert api.get(f"/enrollments/{enrollment_id}").json["data"]["username"] == "bob-login"


def test_create_ottca_needs_an_existing_ca(api: Api) -> None:
    identity_id = new_identity(api, "carl")
    missing = api.post("/enrollments", json=body_for(identity_id, "ottca"))
    assert missing.status_code == 400
    assert error_of(missing)["cause"]["field"] == "caId"
    unknown = api.post("/enrollments", json=body_for(identity_id, "ottca", caId="nope"))
    assert unknown.status_code == 400
    assert error_of(unknown)["cause"]["field"] == "caId"

    ca_id = put_ca(api, "third-party")
    enrollment_id = api.create("/enrollments", body_for(identity_id, "ottca", caId=ca_id))
    data = api.get(f"/enrollments/{enrollment_id}").json["data"]
    assert data["caId"] == ca_id
    assert data["ca"]["id"] == ca_id
    assert data["ca"]["name"] == "third-party"
    summary = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ottca"]
    assert summary["caId"] == ca_id


@pytest.mark.parametrize("missing", ["method", "identityId", "expiresAt"])
def test_create_requires_method_identity_and_expiry(api: Api, missing: str) -> None:
    body = body_for(new_identity(api, "x"))
    del body[missing]
    result = api.post("/enrollments", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == missing


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"method": "erott"}, "method"),
        ({"identityId": "no-such-identity"}, "identityId"),
        ({"expiresAt": "yesterday"}, "expiresAt"),
        ({"expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
    ],
)
def test_create_validates_fields(api: Api, changes: dict[str, Any], field: str) -> None:
    body = body_for(new_identity(api, "v"))
    body.update(changes)
    result = api.post("/enrollments", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == field


def test_a_second_enrollment_of_the_same_method_is_a_conflict(api: Api) -> None:
    identity_id = new_identity(api, "dup")
    api.create("/enrollments", body_for(identity_id))
    result = api.post("/enrollments", json=body_for(identity_id))
    assert result.status_code == 409
    assert error_of(result)["code"] == "ENROLLMENT_EXISTS"
    assert (
        api.post("/enrollments", json=body_for(identity_id, "updb", username="dup-login")).status_code == 201
    )


# -- refresh ---------------------------------------------------------------------------------------
def test_refresh_issues_a_new_token_and_expiry(api: Api) -> None:
    identity_id = new_identity(api, "eve")
    enrollment_id = api.create("/enrollments", body_for(identity_id))
    before = api.get(f"/enrollments/{enrollment_id}").json["data"]
    expires = later(days=2)

    result = api.post(f"/enrollments/{enrollment_id}/refresh", json={"expiresAt": expires})
    assert result.status_code == 200
    assert result.json["data"] == {
        "_links": {"self": {"href": f"./enrollments/{enrollment_id}"}},
        "id": enrollment_id,
    }
    after = api.get(f"/enrollments/{enrollment_id}").json["data"]
    assert after["token"] != before["token"]
    assert after["expiresAt"] == expires
    assert after["jwt"] != before["jwt"]
    assert jwt.decode(after["jwt"], options={"verify_signature": False})["jti"] == after["token"]


def test_refresh_validates_and_404s(api: Api) -> None:
    enrollment_id = api.create("/enrollments", body_for(new_identity(api, "fay")))
    past = api.post(f"/enrollments/{enrollment_id}/refresh", json={"expiresAt": "2001-01-01T00:00:00Z"})
    assert past.status_code == 400
    assert error_of(past)["cause"]["field"] == "expiresAt"
    missing = api.post(f"/enrollments/{enrollment_id}/refresh", json={})
    assert missing.status_code == 400
    assert error_of(missing)["cause"]["field"] == "expiresAt"
    unknown = api.post("/enrollments/nope/refresh", json={"expiresAt": later(hours=1)})
    assert unknown.status_code == 404


# -- delete, lists, 404s, authorization --------------------------------------------------------------
def test_delete_and_no_replace(api: Api) -> None:
    enrollment_id = api.create("/enrollments", body_for(new_identity(api, "gus")))
    assert api.put(f"/enrollments/{enrollment_id}", json={"expiresAt": later(hours=1)}).status_code == 405
    result = api.delete(f"/enrollments/{enrollment_id}")
    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/enrollments/{enrollment_id}").status_code == 404
    assert api.delete(f"/enrollments/{enrollment_id}").status_code == 404


def test_list_filters(api: Api) -> None:
    hal = new_identity(api, "hal")
    api.create("/enrollments", body_for(hal))
    api.create("/enrollments", body_for(hal, "updb", username="hal-login"))
    api.create("/enrollments", body_for(new_identity(api, "ivy")))

    all_of_them = api.get("/enrollments")
    assert all_of_them.json["meta"]["pagination"]["totalCount"] == 3
    updb = api.get("/enrollments", params={"filter": 'method = "updb"'}).json["data"]
    assert [e["username"] for e in updb] == ["hal-login"]
    of_hal = api.get("/enrollments", params={"filter": f'identityId = "{hal}"'}).json["data"]
    assert sorted(e["method"] for e in of_hal) == ["ott", "updb"]
    sub = api.get(f"/identities/{hal}/enrollments", params={"filter": 'method = "ott"'}).json["data"]
    assert [e["method"] for e in sub] == ["ott"]


def test_jwt_is_signed_once_and_stored_with_the_enrollment(api: Api) -> None:
    enrollment_id = api.create("/enrollments", body_for(new_identity(api, "signed-once")))
    first = api.get(f"/enrollments/{enrollment_id}").json["data"]["jwt"]
    assert first == api.get(f"/enrollments/{enrollment_id}").json["data"]["jwt"]
    assert first == api.ctrl.env.store.get(Enrollment, enrollment_id).jwt


def test_non_admins_get_401(api: Api) -> None:
    identity_id = new_identity(api, "jay")
    api.create(
        "/authenticators",
        {"identityId": identity_id, "method": "updb", "username": "jay-login", "password": "jay-secret"},
    )
    token = api.login("jay-login", "jay-secret")
    assert api.get("/enrollments", token=token).status_code == 401
    assert api.post("/enrollments", token=token, json=body_for(identity_id)).status_code == 401
