"""Auth policies enforced: allowed primary methods, the updb lockout, password rules on every
password set, disable and enable, sessions ended by a password change, no echoed passwords."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import unique
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api, open_app

PASSWORD = "good-password-1"
STRONG = "Strong-Password-12"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def api(settings: Settings, clock: FixedClock) -> Iterator[Api]:
    """A logged-in admin over an app of the test's own on a fixed clock."""
    app = open_app(settings, clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    admin = Api(app)
    admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
    yield admin
    app.ctrl.env.store.close()


def policy(api: Api, *, updb: dict[str, Any] | None = None, **primary: Any) -> str:
    body = {"name": unique("policy"), "primary": {"updb": updb or {}, **primary}, "secondary": {}}
    return api.create("/auth-policies", body)


def person(api: Api, policy_id: str | None = None, password: str = PASSWORD) -> tuple[str, str, str]:
    """(identity id, username, updb authenticator id)."""
    username = unique("person")
    body: dict[str, Any] = {"name": username, "isAdmin": False, "type": "User"}
    if policy_id is not None:
        body["authPolicyId"] = policy_id
    identity = api.create("/identities", body)
    authenticator = api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": password},
    )
    return identity, username, authenticator


def authenticate(api: Api, username: str, password: str, base: str = CLIENT) -> Any:
    return api.client.simulate_post(
        base + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


# -- allowed primary methods ---------------------------------------------------------------------
def test_a_policy_without_updb_refuses_password_logins(api: Api) -> None:
    _, username, _ = person(api, policy(api, updb={"allowed": False}))

    result = authenticate(api, username, PASSWORD)

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


# -- lockout --------------------------------------------------------------------------------------
def test_max_attempts_failures_lock_the_identity_out(api: Api) -> None:
    identity, username, _ = person(api, policy(api, updb={"maxAttempts": 3, "lockoutDurationMinutes": 0}))
    earlier = authenticate(api, username, PASSWORD).json["data"]["token"]

    for _ in range(3):
        assert error(authenticate(api, username, "wrong-password"))["code"] == "INVALID_AUTH"
    result = authenticate(api, username, PASSWORD)

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"  # as a wrong password: no oracle
    data = api.get(f"/identities/{identity}").json["data"]
    assert data["disabled"] is True
    assert "disabledUntil" not in data  # null: left out, as Go's omitempty
    assert api.get("/current-api-session", token=earlier, base=CLIENT).status_code == 401
    assert api.post(f"/identities/{identity}/enable").status_code == 200
    assert authenticate(api, username, PASSWORD).status_code == 200


def test_ten_wrong_passwords_then_the_right_one_is_refused(api: Api) -> None:
    _, username, _ = person(api, policy(api, updb={"maxAttempts": 3}))

    for _ in range(10):
        authenticate(api, username, "wrong-password")

    assert authenticate(api, username, PASSWORD).status_code == 401


def test_a_lockout_with_a_duration_ends_by_itself(api: Api, clock: FixedClock) -> None:
    identity, username, _ = person(api, policy(api, updb={"maxAttempts": 2, "lockoutDurationMinutes": 10}))

    for _ in range(2):
        authenticate(api, username, "wrong-password")

    data = api.get(f"/identities/{identity}").json["data"]
    assert data["disabledUntil"] is not None
    assert authenticate(api, username, PASSWORD).status_code == 401
    clock.advance(minutes=11)
    assert authenticate(api, username, PASSWORD).status_code == 200


def test_one_failure_short_of_max_attempts_leaves_the_identity_enabled(api: Api) -> None:
    identity, username, _ = person(api, policy(api, updb={"maxAttempts": 3}))

    for _ in range(2):
        authenticate(api, username, "wrong-password")

    assert authenticate(api, username, PASSWORD).status_code == 200
    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is False


def test_a_successful_login_resets_the_count(api: Api) -> None:
    _, username, _ = person(api, policy(api, updb={"maxAttempts": 3}))

    for _ in range(2):
        authenticate(api, username, "wrong-password")
    assert authenticate(api, username, PASSWORD).status_code == 200
    for _ in range(2):
        authenticate(api, username, "wrong-password")

    assert authenticate(api, username, PASSWORD).status_code == 200


def test_max_attempts_zero_never_locks(api: Api) -> None:
    _, username, _ = person(api, policy(api, updb={"maxAttempts": 0}))

    for _ in range(10):
        authenticate(api, username, "wrong-password")

    assert authenticate(api, username, PASSWORD).status_code == 200


def test_the_default_admin_is_never_locked_out(api: Api) -> None:
    assert (
        api.patch("/auth-policies/default", json={"primary": {"updb": {"maxAttempts": 2}}}).status_code == 200
    )

    for _ in range(5):
        authenticate(api, ADMIN_USER, "wrong-password")

    assert authenticate(api, ADMIN_USER, ADMIN_PASSWORD).status_code == 200


# -- password rules -------------------------------------------------------------------------------
RULES = {
    "minPasswordLength": 12,
    "requireMixedCase": True,
    "requireNumberChar": True,
    "requireSpecialChar": True,
}


@pytest.mark.parametrize(
    ("password", "reason"),
    [
        ("aaaaa", "at least 12"),
        ("abcdefgh-1234", "upper and lower case"),
        ("Abcdefgh-jklm", "number"),
        ("Abcdefgh1234x", "special character"),
    ],
)
def test_authenticator_create_applies_the_identitys_password_rules(
    api: Api, password: str, reason: str
) -> None:
    identity = api.create(
        "/identities",
        {"name": unique("p"), "isAdmin": False, "type": "User", "authPolicyId": policy(api, updb=RULES)},
    )

    result = api.post(
        "/authenticators",
        json={"identityId": identity, "method": "updb", "username": unique("u"), "password": password},
    )

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "password"
    assert reason in error(result)["cause"]["reason"]
    assert "value" not in error(result)["cause"]
    assert password not in result.text


def test_a_password_that_meets_the_rules_is_accepted(api: Api) -> None:
    _, username, _ = person(api, policy(api, updb=RULES), password=STRONG)

    assert authenticate(api, username, STRONG).status_code == 200


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_authenticator_updates_apply_the_password_rules(api: Api, method: str) -> None:
    _, username, authenticator = person(api, policy(api, updb=RULES), password=STRONG)

    result = api.request(
        method, f"/authenticators/{authenticator}", json={"username": username, "password": "aaaaa"}
    )

    assert result.status_code == 400
    assert error(result)["cause"]["field"] == "password"
    assert "value" not in error(result)["cause"]
    assert authenticate(api, username, STRONG).status_code == 200


# -- password changes end sessions ----------------------------------------------------------------
def test_an_admins_password_change_ends_the_identitys_sessions(api: Api) -> None:
    _, username, authenticator = person(api)
    tokens = [authenticate(api, username, PASSWORD).json["data"]["token"] for _ in range(2)]

    result = api.patch(f"/authenticators/{authenticator}", json={"password": "another-password-2"})

    assert result.status_code == 200
    assert [api.get("/current-api-session", token=t, base=CLIENT).status_code for t in tokens] == [401, 401]
    assert api.get("/current-api-session").status_code == 200


def test_an_admin_changing_only_tags_keeps_the_sessions(api: Api) -> None:
    _, username, authenticator = person(api)
    token = authenticate(api, username, PASSWORD).json["data"]["token"]

    api.patch(f"/authenticators/{authenticator}", json={"tags": {"k": "v"}})

    assert api.get("/current-api-session", token=token, base=CLIENT).status_code == 200


# -- disable / enable -----------------------------------------------------------------------------
def test_the_default_admin_can_not_be_disabled(api: Api) -> None:
    admin = api.get("/current-identity").json["data"]["id"]

    result = api.post(f"/identities/{admin}/disable", json={"durationMinutes": 0})

    assert result.status_code == 400
    assert error(result)["code"] == "ENTITY_CAN_NOT_BE_UPDATED"
    assert "default admin" in error(result)["cause"]["reason"]
    assert api.get(f"/identities/{admin}").json["data"]["disabled"] is False
    assert authenticate(api, ADMIN_USER, ADMIN_PASSWORD).status_code == 200


def test_a_disabled_identitys_sessions_end_at_once(api: Api) -> None:
    identity, username, _ = person(api)
    token = authenticate(api, username, PASSWORD).json["data"]["token"]

    assert api.post(f"/identities/{identity}/disable", json={"durationMinutes": 5}).status_code == 200

    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 401


def test_a_timed_disable_ends_by_itself(api: Api, clock: FixedClock) -> None:
    identity, username, _ = person(api)
    api.post(f"/identities/{identity}/disable", json={"durationMinutes": 5})

    assert authenticate(api, username, PASSWORD).status_code == 401
    clock.advance(minutes=6)
    assert authenticate(api, username, PASSWORD).status_code == 200
    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is False


# -- passwords are never echoed -------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
@pytest.mark.parametrize("password", ["four", "p" * 101, 12345])
def test_a_refused_password_is_never_echoed(api: Api, base: str, password: Any) -> None:
    result = api.client.simulate_post(
        base + "/authenticate",
        params={"method": "password"},
        json={"username": "someone", "password": password},
    )

    assert result.status_code == 400
    assert error(result)["cause"]["field"] == "password"
    assert "value" not in error(result)["cause"]
    assert str(password) not in result.text


def test_a_refused_authenticator_password_is_never_echoed(api: Api) -> None:
    identity = api.create("/identities", {"name": unique("p"), "isAdmin": False, "type": "User"})

    result = api.post(
        "/authenticators",
        json={"identityId": identity, "method": "updb", "username": unique("u"), "password": "xyz"},
    )

    assert result.status_code == 400
    assert "value" not in error(result)["cause"]
    assert "xyz" not in result.text
