"""``GET /current-api-session/service-updates``: ``lastChangeAt`` moves exactly when the caller's
service list, or a service in it, changes (docs/policy.md §3.3)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

PASSWORD = "device-password-1"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def world(settings: Settings, clock: FixedClock) -> Iterator[Any]:
    app = open_app(settings, clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    yield app
    app.ctrl.env.store.close()


class World:
    """An admin, a device identity logged in by password, and helpers to change things."""

    def __init__(self, app: Any, clock: FixedClock) -> None:
        self.api = Api(app)
        self.api.token = self.api.login(ADMIN_USER, ADMIN_PASSWORD)
        self.clock = clock
        self.device = self.identity("device", ["devices"])
        self.other = self.identity("other", ["others"])
        self.token = self.api.login("device", PASSWORD)

    def identity(self, name: str, attributes: list[str]) -> str:
        identity_id = self.api.create(
            "/identities", {"name": name, "type": "Device", "isAdmin": False, "roleAttributes": attributes}
        )
        self.api.create(
            "/authenticators",
            {"method": "updb", "identityId": identity_id, "username": name, "password": PASSWORD},
        )
        return identity_id

    def last_change(self) -> str:
        result = self.api.get("/current-api-session/service-updates", base=CLIENT, token=self.token)
        assert result.status_code == 200, result.text
        return str(result.json["data"]["lastChangeAt"])

    def tick(self) -> None:
        self.clock.advance(timedelta(seconds=5))

    def policy(
        self, name: str, identity_roles: list[str], service_roles: list[str], type: str = "Dial"
    ) -> str:
        return self.api.create(
            "/service-policies",
            {
                "name": name,
                "type": type,
                "semantic": "AnyOf",
                "identityRoles": identity_roles,
                "serviceRoles": service_roles,
            },
        )


@pytest.fixture
def w(world: Any, clock: FixedClock) -> World:
    return World(world, clock)


def test_a_new_session_reports_when_it_began(w: World, clock: FixedClock) -> None:
    assert w.last_change() == "2026-01-01T12:00:00.000Z"


def test_service_updates_need_a_session(anon: Api) -> None:
    result = anon.get("/current-api-session/service-updates", base=CLIENT)
    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"


def test_it_is_served_unprefixed_for_legacy_sdks(w: World) -> None:
    result = w.api.client.simulate_get(
        "/current-api-session/service-updates", headers={"zt-session": w.token}
    )
    assert result.status_code == 200
    assert "lastChangeAt" in result.json["data"]


def test_gaining_and_losing_a_service_moves_it(w: World) -> None:
    service = w.api.create(
        "/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]}
    )
    before = w.last_change()
    w.tick()
    policy = w.policy("dial-echo", ["#devices"], ["#echo"])
    gained = w.last_change()
    assert gained > before
    w.tick()
    assert w.api.delete(f"/service-policies/{policy}").status_code == 200
    assert w.last_change() > gained
    assert service


def test_a_second_policy_granting_the_same_access_does_not_move_it(w: World) -> None:
    w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]})
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    second = w.policy("dial-echo-again", [f"@{w.device}"], ["#echo"])
    assert w.last_change() == settled
    w.tick()
    assert w.api.delete(f"/service-policies/{second}").status_code == 200
    assert w.last_change() == settled


def test_gaining_bind_on_a_dialable_service_moves_it(w: World) -> None:
    """The service stays listed but its permissions change."""
    w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]})
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    w.policy("bind-echo", ["#devices"], ["#echo"], type="Bind")
    assert w.last_change() > settled


def test_changes_elsewhere_do_not_move_it(w: World) -> None:
    w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]})
    other_service = w.api.create(
        "/services", {"name": "other", "encryptionRequired": True, "roleAttributes": ["other"]}
    )
    w.policy("dial-echo", ["#devices"], ["#echo"])
    w.policy("others-dial-other", ["#others"], ["#other"])
    settled = w.last_change()
    w.tick()
    # another identity's service changes, edge router policies, an unrelated service
    assert w.api.patch(f"/services/{other_service}", json={"maxIdleTimeMillis": 5}).status_code == 200
    w.api.create(
        "/edge-router-policies",
        {"name": "erp", "semantic": "AnyOf", "identityRoles": ["#devices"], "edgeRouterRoles": ["#all"]},
    )
    w.api.create(
        "/service-edge-router-policies",
        {"name": "serp", "semantic": "AnyOf", "serviceRoles": ["#echo"], "edgeRouterRoles": ["#all"]},
    )
    assert w.api.patch(f"/identities/{w.other}", json={"roleAttributes": ["others", "x"]}).status_code == 200
    assert w.api.patch(f"/identities/{w.device}", json={"appData": {"a": "b"}}).status_code == 200
    assert w.last_change() == settled


def test_an_update_of_a_listed_service_moves_it(w: World) -> None:
    service = w.api.create(
        "/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]}
    )
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    assert w.api.patch(f"/services/{service}", json={"maxIdleTimeMillis": 5}).status_code == 200
    assert w.last_change() > settled


def test_a_config_of_a_listed_service_moves_it(w: World) -> None:
    config_type = w.api.get('/config-types?filter=name="intercept.v1"').json["data"][0]["id"]
    config = w.api.create(
        "/configs",
        {
            "name": "echo-intercept",
            "configTypeId": config_type,
            "data": {
                "protocols": ["tcp"],
                "addresses": ["echo.ziti"],
                "portRanges": [{"low": 80, "high": 80}],
            },
        },
    )
    w.api.create(
        "/services",
        {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"], "configs": [config]},
    )
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    body = {
        "data": {"protocols": ["tcp"], "addresses": ["echo2.ziti"], "portRanges": [{"low": 80, "high": 80}]}
    }
    assert w.api.patch(f"/configs/{config}", json=body).status_code == 200
    assert w.last_change() > settled


def test_an_attribute_change_of_the_identity_moves_it_only_when_access_changes(w: World) -> None:
    w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]})
    w.policy("dial-echo", ["#dialers"], ["#echo"])
    settled = w.last_change()
    w.tick()
    assert (
        w.api.patch(f"/identities/{w.device}", json={"roleAttributes": ["devices", "blue"]}).status_code
        == 200
    )
    assert w.last_change() == settled
    assert w.api.patch(f"/identities/{w.device}", json={"roleAttributes": ["dialers"]}).status_code == 200
    assert w.last_change() > settled


def test_a_service_attribute_change_moves_it_for_identities_gaining_it(w: World) -> None:
    service = w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": []})
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    assert w.api.patch(f"/services/{service}", json={"roleAttributes": ["echo"]}).status_code == 200
    assert w.last_change() > settled


def test_deleting_a_listed_service_moves_it(w: World) -> None:
    service = w.api.create(
        "/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]}
    )
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    assert w.api.delete(f"/services/{service}").status_code == 200
    assert w.last_change() > settled


def test_a_posture_check_used_by_a_granting_policy_moves_it(w: World) -> None:
    w.api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]})
    check = w.api.create(
        "/posture-checks",
        {"name": "domain", "typeId": "DOMAIN", "domains": ["corp"], "roleAttributes": ["p"]},
    )
    w.api.create(
        "/service-policies",
        {
            "name": "dial-echo",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#devices"],
            "serviceRoles": ["#echo"],
            "postureCheckRoles": ["#p"],
        },
    )
    settled = w.last_change()
    w.tick()
    assert (
        w.api.patch(
            f"/posture-checks/{check}", json={"typeId": "DOMAIN", "domains": ["corp", "home"]}
        ).status_code
        == 200
    )
    assert w.last_change() > settled


def test_a_service_config_override_of_the_identity_moves_it(w: World) -> None:
    config_type = w.api.get('/config-types?filter=name="intercept.v1"').json["data"][0]["id"]
    data = {"protocols": ["tcp"], "addresses": ["mine.ziti"], "portRanges": [{"low": 80, "high": 80}]}
    config = w.api.create("/configs", {"name": "mine", "configTypeId": config_type, "data": data})
    service = w.api.create(
        "/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["echo"]}
    )
    w.policy("dial-echo", ["#devices"], ["#echo"])
    settled = w.last_change()
    w.tick()
    body = [{"serviceId": service, "configId": config}]
    assert w.api.post(f"/identities/{w.device}/service-configs", json=body).status_code == 200
    moved = w.last_change()
    assert moved > settled
    w.tick()
    # its overriding config changes: the service it sees changes
    data["addresses"] = ["mine2.ziti"]
    assert w.api.patch(f"/configs/{config}", json={"data": data}).status_code == 200
    assert w.last_change() > moved
