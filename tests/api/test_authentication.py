"""Password authentication, API sessions and the caller's own session and identity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.managers.identities import IdentityManager
from engine.testing import FixedClock
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api, open_app


def _auth(anon: Api, body: dict[str, Any], base: str = MGMT, method: str = "password") -> Any:
    return anon.client.simulate_post(base + "/authenticate", params={"method": method}, json=body)


@pytest.mark.parametrize("base", [MGMT, CLIENT])
def test_password_login_returns_token_in_body_and_header(anon: Api, base: str) -> None:
    result = _auth(anon, {"username": ADMIN_USER, "password": ADMIN_PASSWORD}, base)
    assert result.status_code == 200
    data = result.json["data"]
    assert result.headers["zt-session"] == data["token"]
    assert len(data["token"]) == 36  # a UUIDv4, not the session id
    assert data["id"] != data["token"]
    assert data["identity"]["name"] == "Default Admin"
    assert data["expirationSeconds"] > 1700
    assert data["isMfaRequired"] is False
    assert data["authQueries"] == []


def test_wrong_password_is_invalid_auth(anon: Api) -> None:
    result = _auth(anon, {"username": ADMIN_USER, "password": "wrong-password"})
    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"


def test_unknown_user_is_invalid_auth(anon: Api) -> None:
    result = _auth(anon, {"username": "nobody", "password": "whatever"})
    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "abc", "password": "long-enough"}, "username"),
        ({"username": "x" * 101, "password": "long-enough"}, "username"),
        ({"username": "admin", "password": "four"}, "password"),
        ({"username": "admin", "password": "p" * 101}, "password"),
        ({"username": 5, "password": "long-enough"}, "username"),
    ],
)
def test_credential_bounds_are_validated(anon: Api, body: dict[str, Any], field: str) -> None:
    result = _auth(anon, body)
    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == field


def test_missing_method_and_unknown_method_are_rejected(anon: Api) -> None:
    missing = anon.client.simulate_post(MGMT + "/authenticate", json={})
    assert missing.status_code == 400
    unknown = _auth(anon, {}, method="magic")
    assert unknown.status_code == 400
    assert unknown.json["error"]["code"] == "INVALID_AUTH_METHOD"


def test_management_requires_a_session(anon: Api) -> None:
    result = anon.get("/api-sessions")
    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert 'error="missing"' in result.headers["www-authenticate"]


def test_bad_token_is_unauthorized_with_invalid_challenge(anon: Api) -> None:
    result = anon.get("/api-sessions", token="00000000-0000-4000-8000-000000000000")
    assert result.status_code == 401
    assert 'error="invalid"' in result.headers["www-authenticate"]


def test_non_admin_is_refused_on_management_but_served_on_client(api: Api) -> None:
    IdentityManager(api.ctrl.env).create_with_password({"name": "alice"}, "alice", "alice-password")
    token = api.login("alice", "alice-password", base=CLIENT)
    refused = api.get("/api-sessions", token=token)
    assert refused.status_code == 401
    assert refused.json["error"]["code"] == "UNAUTHORIZED"
    me = api.get("/current-identity", token=token, base=CLIENT)
    assert me.status_code == 200
    assert me.json["data"]["name"] == "alice"
    assert me.json["data"]["isAdmin"] is False


def test_current_api_session_and_identity(api: Api) -> None:
    session = api.get("/current-api-session").json["data"]
    assert session["token"] == api.token
    assert "expiresAt" in session
    identity = api.get("/current-identity").json["data"]
    assert identity["isDefaultAdmin"] is True
    assert identity["authenticators"]["updb"]["username"] == ADMIN_USER


def test_authenticated_responses_carry_expiry_headers(api: Api) -> None:
    result = api.get("/current-api-session")
    assert int(result.headers["expiration-seconds"]) > 1700
    assert result.headers["expires-at"].endswith("Z")


def test_logout_invalidates_the_token(api: Api) -> None:
    assert api.delete("/current-api-session").status_code == 200
    assert api.get("/current-api-session").status_code == 401


def test_admin_lists_reads_and_deletes_api_sessions(api: Api) -> None:
    other = api.login(ADMIN_USER, ADMIN_PASSWORD)
    listed = api.get("/api-sessions").json
    assert listed["meta"]["pagination"]["totalCount"] == 2
    assert all("token" not in s for s in listed["data"])  # a token is a live credential: never listed
    other_id = api.get("/current-api-session", token=other).json["data"]["id"]
    target = next(s for s in listed["data"] if s["id"] == other_id)
    assert api.get(f"/api-sessions/{target['id']}").json["data"]["identityId"] == target["identityId"]
    assert "token" not in api.get(f"/api-sessions/{target['id']}").json["data"]
    assert api.delete(f"/api-sessions/{target['id']}").status_code == 200
    assert api.get("/current-api-session", token=other).status_code == 401
    assert api.get(f"/api-sessions/{target['id']}").status_code == 404


def test_the_caller_still_sees_its_own_token(api: Api) -> None:
    current = api.get("/current-api-session").json["data"]
    assert current["token"] == api.token
    assert current["expirationSeconds"] > 0


def test_sessions_slide_and_expire(settings: Settings) -> None:
    clock = FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    app = open_app(settings, clock=clock)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        for _ in range(3):  # activity every 20 minutes keeps a 30-minute session alive
            clock.advance(timedelta(minutes=20))
            assert api.get("/current-api-session", token=token).status_code == 200
        clock.advance(timedelta(minutes=31))
        expired = api.get("/current-api-session", token=token)
        assert expired.status_code == 401
        assert api.ctrl.api_sessions.active() == []
    finally:
        app.ctrl.env.store.close()


@pytest.mark.durable
def test_sessions_survive_a_restart(settings: Settings) -> None:
    first = open_app(settings, durable=True)
    create_default_admin(first.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    token = Api(first).login(ADMIN_USER, ADMIN_PASSWORD)
    first.ctrl.env.store.close()
    second = open_app(settings, durable=True)
    try:
        assert Api(second).get("/current-api-session", token=token).status_code == 200
    finally:
        second.ctrl.env.store.close()


def test_disabled_identity_cannot_log_in(api: Api) -> None:
    import dataclasses

    from engine.entities.identities import Identity
    from engine.ports import UnitOfWork

    manager = IdentityManager(api.ctrl.env)
    bob = manager.create_with_password({"name": "bob"}, "bobby", "bob-password")
    uow = UnitOfWork(api.ctrl.env.store)
    uow.put(dataclasses.replace(bob, disabled=True))
    api.ctrl.env.commit(uow)
    result = api.client.simulate_post(
        MGMT + "/authenticate",
        params={"method": "password"},
        json={"username": "bobby", "password": "bob-password"},
    )
    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"
    assert isinstance(api.ctrl.env.store.get(Identity, bob.id), Identity)


def test_no_listing_or_detail_of_api_sessions_carries_a_token(api: Api) -> None:
    tokens = {api.token, api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)}
    listed = api.get("/api-sessions").json["data"]
    details = [api.get(f"/api-sessions/{s['id']}").json["data"] for s in listed]
    for document in [*listed, *details]:
        assert not {"token", "tokenHash", "token_hash"} & set(document)
        assert not any(token and token in str(document) for token in tokens)
    assert "token" not in api.get(f"/identities/{listed[0]['identityId']}").json["data"]


@pytest.mark.parametrize("base", [MGMT, CLIENT])
def test_current_api_session_carries_only_the_callers_own_token(api: Api, base: str) -> None:
    other = api.login(ADMIN_USER, ADMIN_PASSWORD, base=base)
    mine = api.get("/current-api-session", token=other, base=base).json["data"]
    assert mine["token"] == other
    assert api.token not in str(mine)


@pytest.mark.parametrize("base", [MGMT, CLIENT])
def test_a_refused_password_is_never_echoed(anon: Api, base: str) -> None:
    result = _auth(anon, {"username": ADMIN_USER, "password": "abc"}, base)
    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "password"
    assert "abc" not in result.text


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        (["all"], ["all"]),
        (["host.v1", "all"], ["all"]),
        (["intercept.v1", "host.v1"], ["intercept.v1", "host.v1"]),
        (["unknown-type"], []),
        ([], []),
    ],
)
def test_config_types_are_kept_as_openziti_keeps_them(anon: Api, asked: list[str], kept: list[str]) -> None:
    """``all`` stays ``["all"]``; names become ids, unknown types are dropped (OpenZiti's
    ``mapConfigTypeNamesToIds``)."""
    ids = {t.name: t.id for t in anon.app.ctrl.managers.config_types.list()}
    expected = [ids.get(name, name) for name in kept]

    result = _auth(anon, {"username": ADMIN_USER, "password": ADMIN_PASSWORD, "configTypes": asked})

    assert result.status_code == 200
    assert result.json["data"]["configTypes"] == expected
    token = result.json["data"]["token"]
    assert anon.get("/current-api-session", token=token).json["data"]["configTypes"] == expected
