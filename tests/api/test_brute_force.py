"""Authentication that cannot be brute-forced (issue 18): no password oracle on a locked or disabled
account, the lockout counting every guess before it is checked (a changed password's current one
too), MFA codes throttled and accepted once whichever operation takes them, and usernames that
can not pass for another's.

The app runs on a fixed clock: lockouts, code windows and waits are moved through by hand.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from api.limits import is_authentication
from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from pki.passwords import ScryptPasswordHasher
from pki.totp import totp_code
from tests.api.certs import unique
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api, open_app

PASSWORD = "good-password-1"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def api(settings: Settings, clock: FixedClock) -> Iterator[Api]:
    app = open_app(settings, clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    admin = Api(app)
    admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
    yield admin
    app.ctrl.env.store.close()


def policy(api: Api, **updb: Any) -> str:
    body = {"name": unique("policy"), "primary": {"updb": updb}, "secondary": {}}
    return api.create("/auth-policies", body)


def person(api: Api, policy_id: str | None = None) -> tuple[str, str, str]:
    """(identity id, username, updb authenticator id)."""
    username = unique("person")
    body: dict[str, Any] = {"name": username, "isAdmin": False, "type": "User"}
    if policy_id is not None:
        body["authPolicyId"] = policy_id
    identity = api.create("/identities", body)
    authenticator = api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": PASSWORD},
    )
    return identity, username, authenticator


def authenticate(api: Api, username: str, password: str) -> Any:
    return api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )


def answer(result: Any) -> tuple[int, dict[str, Any]]:
    """What a refusal tells the caller: its status and error body without the request id."""
    body = dict(result.json["error"])
    body.pop("requestId", None)
    return result.status_code, body


# -- 1. no password oracle --------------------------------------------------------------------------
def test_a_locked_out_identity_answers_the_right_password_as_a_wrong_one(api: Api) -> None:
    identity, username, _ = person(api, policy(api, maxAttempts=3, lockoutDurationMinutes=10))
    for _ in range(3):
        authenticate(api, username, "wrong-password")
    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is True

    wrong = authenticate(api, username, "wrong-password")
    right = authenticate(api, username, PASSWORD)
    unknown = authenticate(api, unique("nobody"), PASSWORD)

    assert answer(right) == answer(wrong) == answer(unknown)
    assert answer(right)[0] == 401
    assert answer(right)[1]["code"] == "INVALID_AUTH"


def test_a_disabled_identity_answers_the_right_password_as_a_wrong_one(api: Api) -> None:
    identity, username, _ = person(api)
    assert api.post(f"/identities/{identity}/disable", json={"durationMinutes": 0}).status_code == 200

    assert answer(authenticate(api, username, PASSWORD)) == answer(authenticate(api, username, "nope-nope"))
    assert answer(authenticate(api, username, PASSWORD))[1]["code"] == "INVALID_AUTH"


def test_guesses_during_a_lockout_are_not_checked_so_the_lockout_decides(api: Api, clock: FixedClock) -> None:
    _, username, _ = person(api, policy(api, maxAttempts=2, lockoutDurationMinutes=10))
    for _ in range(2):
        authenticate(api, username, "wrong-password")
    for _ in range(20):  # wrong guesses while locked: not looked at, nothing learnt, nothing counted
        authenticate(api, username, "wrong-password")

    clock.advance(minutes=11)

    assert authenticate(api, username, PASSWORD).status_code == 200


def test_enabling_an_identity_starts_its_count_again(api: Api) -> None:
    identity, username, _ = person(api, policy(api, maxAttempts=3))
    for _ in range(3):
        authenticate(api, username, "wrong-password")
    assert api.post(f"/identities/{identity}/enable").status_code == 200

    for _ in range(2):
        authenticate(api, username, "wrong-password")

    assert authenticate(api, username, PASSWORD).status_code == 200


# -- 2. concurrent guesses --------------------------------------------------------------------------
def test_parallel_wrong_guesses_get_no_more_than_max_attempts_and_lock_the_identity(
    settings: Settings, clock: FixedClock
) -> None:
    """32 threads guess at once (a real, slow password hash); the right password after them is
    refused and the identity is locked. The server-level twin is tests/e2e/test_brute_force.py."""
    app = open_app(settings, clock=clock, hasher=ScryptPasswordHasher())
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        admin = Api(app)
        admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
        identity, username, _ = person(admin, policy(admin, maxAttempts=3, lockoutDurationMinutes=0))
        start = threading.Barrier(32)
        statuses: list[int] = []

        def guess(n: int) -> None:
            client = Api(app)
            start.wait()
            statuses.append(authenticate(client, username, f"wrong-password-{n}").status_code)

        threads = [threading.Thread(target=guess, args=(n,)) for n in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert statuses == [401] * 32
        right = authenticate(admin, username, PASSWORD)
        assert answer(right)[0] == 401
        assert answer(right)[1]["code"] == "INVALID_AUTH"
        data = admin.get(f"/identities/{identity}").json["data"]
        assert (data["disabled"], data.get("disabledUntil")) == (True, None)
    finally:
        app.ctrl.env.store.close()


# -- 6. the current password of a password change ---------------------------------------------------
def change_password(api: Api, token: str, authenticator: str, current: str, method: str = "PATCH") -> Any:
    body = {"password": "brand-new-password-1", "currentPassword": current}
    if method == "PUT":
        body["username"] = unique("renamed")
    return api.request(
        method, f"/current-identity/authenticators/{authenticator}", token=token, base=CLIENT, json=body
    )


@pytest.mark.parametrize("method", ["PATCH", "PUT"])
def test_wrong_current_passwords_count_towards_the_lockout(api: Api, method: str) -> None:
    identity, username, authenticator = person(api, policy(api, maxAttempts=3))
    token = api.login(username, PASSWORD, base=CLIENT)

    results = [change_password(api, token, authenticator, "not-the-password", method) for _ in range(3)]

    assert [r.status_code for r in results] == [401, 401, 401]
    assert results[0].json["error"]["cause"]["field"] == "currentPassword"
    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is True
    assert authenticate(api, username, PASSWORD).status_code == 401


def test_login_failures_and_current_password_failures_share_one_count(api: Api) -> None:
    identity, username, authenticator = person(api, policy(api, maxAttempts=3))
    token = api.login(username, PASSWORD, base=CLIENT)
    authenticate(api, username, "wrong-password")
    authenticate(api, username, "wrong-password")

    change_password(api, token, authenticator, "not-the-password")

    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is True


def test_a_right_current_password_still_changes_it(api: Api) -> None:
    _, username, authenticator = person(api, policy(api, maxAttempts=3))
    token = api.login(username, PASSWORD, base=CLIENT)

    assert change_password(api, token, authenticator, PASSWORD).status_code == 200
    assert authenticate(api, username, "brand-new-password-1").status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("PATCH", f"{CLIENT}/current-identity/authenticators/abc", True),
        ("PUT", f"{MGMT}/current-identity/authenticators/abc", True),
        ("GET", f"{CLIENT}/current-identity/authenticators/abc", False),
        ("GET", f"{CLIENT}/current-identity/mfa/recovery-codes", True),
        ("POST", f"{CLIENT}/current-identity/mfa/recovery-codes", True),
        ("DELETE", f"{CLIENT}/current-identity/mfa", True),
        ("POST", f"{CLIENT}/current-identity/mfa", False),
        ("GET", f"{CLIENT}/current-identity/mfa", False),
        ("POST", f"{CLIENT}/current-api-session/totp-token", True),
        ("GET", f"{CLIENT}/authenticate", False),
        ("PATCH", f"{MGMT}/authenticators/abc", False),
        ("POST", "/oidc/login/password", True),
        ("POST", "/oidc/login/totp", True),
        ("POST", "/oidc/oauth/token", True),
        ("GET", "/oidc/login/password", False),
        ("GET", "/oidc/authorize", False),
    ],
)
def test_every_operation_that_checks_a_secret_spends_the_authentication_budget(
    method: str, path: str, expected: bool
) -> None:
    assert is_authentication(path, method) is expected


# -- 3, 5, 14. MFA codes ----------------------------------------------------------------------------
class MfaPerson:
    """An identity with a verified TOTP enrollment and a full session."""

    def __init__(self, api: Api, clock: FixedClock) -> None:
        self.api, self.clock = api, clock
        self.id, self.username, _ = person(api)
        self.token = api.login(self.username, PASSWORD, base=CLIENT)
        assert self.call("POST", "/current-identity/mfa").status_code == 201
        detail = self.call("GET", "/current-identity/mfa").json["data"]
        self.secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
        self.recovery_codes = list(detail["recoveryCodes"])
        assert (
            self.call("POST", "/current-identity/mfa/verify", json={"code": self.fresh()}).status_code == 200
        )

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> Any:
        return self.api.request(method, path, token=token or self.token, base=CLIENT, **kwargs)

    def fresh(self) -> str:
        """A code of the next time step (the clock moves on a step)."""
        self.clock.advance(timedelta(seconds=30))
        return totp_code(self.secret, self.clock.now())

    def now(self) -> str:
        return totp_code(self.secret, self.clock.now())


WRONG_CODE_OPERATIONS = [
    ("GET", "/current-identity/mfa/recovery-codes"),
    ("POST", "/current-identity/mfa/recovery-codes"),
    ("DELETE", "/current-identity/mfa"),
    ("POST", "/current-api-session/totp-token"),
    ("POST", "/authenticate/mfa"),
]


@pytest.mark.parametrize(("method", "path"), WRONG_CODE_OPERATIONS)
def test_wrong_codes_are_throttled_on_every_operation_that_takes_one(
    api: Api, clock: FixedClock, method: str, path: str
) -> None:
    user = MfaPerson(api, clock)
    token = user.token if path != "/authenticate/mfa" else api.login(user.username, PASSWORD, base=CLIENT)

    wrong = [user.call(method, path, token=token, json={"code": "000000"}) for _ in range(10)]
    throttled = user.call(method, path, token=token, json={"code": user.now()})

    assert {r.status_code for r in wrong} == {401}
    assert throttled.status_code == 429
    assert throttled.json["error"]["code"] == "SERVER_TOO_MANY_REQUESTS"
    assert int(throttled.headers["retry-after"]) == 30
    clock.advance(timedelta(seconds=31))
    assert user.call(method, path, token=token, json={"code": user.fresh()}).status_code == 200


def test_wrong_codes_add_up_across_operations_and_the_wait_doubles(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    for method, path in WRONG_CODE_OPERATIONS * 2:
        user.call(method, path, json={"code": "000000"})

    first = user.call("GET", "/current-identity/mfa/recovery-codes", json={"code": "000000"})
    assert first.status_code == 429
    clock.advance(timedelta(seconds=31))
    assert (
        user.call("GET", "/current-identity/mfa/recovery-codes", json={"code": "000000"}).status_code == 401
    )
    second = user.call("GET", "/current-identity/mfa/recovery-codes", json={"code": user.now()})

    assert second.status_code == 429
    assert int(second.headers["retry-after"]) == 60


def test_a_right_code_clears_the_count(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    for _ in range(9):
        user.call("POST", "/current-api-session/totp-token", json={"code": "000000"})
    assert (
        user.call("POST", "/current-api-session/totp-token", json={"code": user.fresh()}).status_code == 200
    )

    for _ in range(9):
        assert (
            user.call("POST", "/current-api-session/totp-token", json={"code": "000000"}).status_code == 401
        )

    assert (
        user.call("POST", "/current-api-session/totp-token", json={"code": user.fresh()}).status_code == 200
    )


def test_a_totp_code_is_accepted_once(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    code = user.fresh()

    first = user.call("POST", "/current-api-session/totp-token", json={"code": code})
    again = user.call("POST", "/current-api-session/totp-token", json={"code": code})

    assert first.status_code == 200
    assert again.status_code == 401
    assert again.json["error"]["code"] == "MFA_INVALID_TOKEN"


def test_a_code_used_by_one_session_can_not_complete_another_login(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    code = user.fresh()
    assert user.call("GET", "/current-identity/mfa/recovery-codes", json={"code": code}).status_code == 200
    pending = api.login(user.username, PASSWORD, base=CLIENT)

    replayed = user.call("POST", "/authenticate/mfa", token=pending, json={"code": code})

    assert replayed.status_code == 401
    assert (
        user.call("POST", "/authenticate/mfa", token=pending, json={"code": user.fresh()}).status_code == 200
    )


def test_an_older_step_is_refused_once_a_later_one_was_used(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    clock.advance(timedelta(seconds=60))
    earlier = totp_code(user.secret, clock.now() - timedelta(seconds=30))  # still in the window
    later = user.now()

    assert user.call("POST", "/current-api-session/totp-token", json={"code": later}).status_code == 200
    assert user.call("POST", "/current-api-session/totp-token", json={"code": earlier}).status_code == 401


def test_a_recovery_code_works_while_the_totp_step_is_used(api: Api, clock: FixedClock) -> None:
    user = MfaPerson(api, clock)
    pending = api.login(user.username, PASSWORD, base=CLIENT)

    result = user.call("POST", "/authenticate/mfa", token=pending, json={"code": user.recovery_codes[0]})

    assert result.status_code == 200


def test_completing_mfa_without_an_enrollment_under_require_totp_is_401(api: Api) -> None:
    policy_id = api.create(
        "/auth-policies", {"name": unique("totp"), "primary": {}, "secondary": {"requireTotp": True}}
    )
    _, username, _ = person(api, policy_id)
    token = api.login(username, PASSWORD, base=CLIENT)

    result = api.post("/authenticate/mfa", token=token, base=CLIENT, json={"code": "123456"})

    assert result.status_code == 401
    assert result.json["error"]["code"] == "MFA_NOT_ENROLLED"


# -- 7. usernames that pass for another's -----------------------------------------------------------
@pytest.mark.parametrize(
    "taken", ["Admin", "ADMIN", "admin ", " admin", "\uff41\uff44\uff4d\uff49\uff4e", "ad\u200bmin"]
)
def test_a_non_admin_can_not_rename_itself_to_a_look_alike_of_the_admin(api: Api, taken: str) -> None:
    _, username, authenticator = person(api)
    token = api.login(username, PASSWORD, base=CLIENT)

    result = api.patch(
        f"/current-identity/authenticators/{authenticator}",
        token=token,
        base=CLIENT,
        json={"username": taken, "currentPassword": PASSWORD},
    )

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "username"
    assert authenticate(api, taken, PASSWORD).status_code == 401


def test_an_administrator_can_not_create_a_look_alike_username_either(api: Api) -> None:
    _, username, _ = person(api)
    identity = api.create("/identities", {"name": unique("other"), "isAdmin": False, "type": "User"})

    result = api.post(
        "/authenticators",
        json={"identityId": identity, "method": "updb", "username": username.upper(), "password": PASSWORD},
    )

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "username"


def test_renaming_to_another_case_of_ones_own_name_is_allowed(api: Api) -> None:
    _, username, authenticator = person(api)
    token = api.login(username, PASSWORD, base=CLIENT)

    result = api.patch(
        f"/current-identity/authenticators/{authenticator}",
        token=token,
        base=CLIENT,
        json={"username": username.upper(), "currentPassword": PASSWORD},
    )

    assert result.status_code == 200
    assert authenticate(api, username.upper(), PASSWORD).status_code == 200


def test_a_updb_enrollment_can_not_complete_with_a_look_alike_username(api: Api) -> None:
    identity = api.post(
        "/identities",
        json={"name": unique("enrollee"), "isAdmin": False, "type": "User", "enrollment": {"updb": "ADMIN"}},
    )
    assert identity.status_code == 201, identity.text
    detail = api.get(f"/identities/{identity.json['data']['id']}").json["data"]
    token = detail["enrollment"]["updb"]["token"]

    result = api.client.simulate_post(
        CLIENT + "/enroll/updb", params={"token": token}, json={"password": PASSWORD}
    )

    assert result.status_code == 400, result.text
    assert result.json["error"]["cause"]["field"] == "username"
    assert authenticate(api, "ADMIN", PASSWORD).status_code == 401


def test_the_mfa_throttle_comes_from_the_environment(settings: Settings, clock: FixedClock) -> None:
    loaded = Settings.from_env(
        {
            "TRELLIS_MFA_FREE_FAILURES": "2",
            "TRELLIS_MFA_BACKOFF_SECONDS": "5",
            "TRELLIS_MFA_BACKOFF_MAX_SECONDS": "60",
        }
    )
    assert (loaded.mfa_free_failures, loaded.mfa_backoff, loaded.mfa_backoff_max) == (2, 5.0, 60.0)
    with pytest.raises(SystemExit, match="TRELLIS_MFA_FREE_FAILURES"):
        Settings.from_env({"TRELLIS_MFA_FREE_FAILURES": "many"})

    app = open_app(dataclasses.replace(settings, mfa_free_failures=2, mfa_backoff=5.0), clock=clock)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        admin = Api(app)
        admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
        user = MfaPerson(admin, clock)
        for _ in range(2):
            user.call("POST", "/current-api-session/totp-token", json={"code": "000000"})

        refused = user.call("POST", "/current-api-session/totp-token", json={"code": user.now()})

        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "5"
    finally:
        app.ctrl.env.store.close()
