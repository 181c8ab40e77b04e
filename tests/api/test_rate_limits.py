"""Per-client request budgets: 429 ``SERVER_TOO_MANY_REQUESTS`` with ``Retry-After`` on
authentication (per address) and on writes (per API session, else per address); refused requests
do nothing; the auth-policy lockout holds under a 1,000-attempt brute force."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.limits import RateLimiter, is_authentication
from controller.settings import Settings
from engine.entities.identities import ApiSession
from tests.api.certs import unique
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

PASSWORD = "good-password-1"
TOO_MANY = (
    "Too many requests to alter state have been issued. Please slow your request rate or try again later."
)


class Seconds:
    """A monotonic clock for a limiter that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def login(api: Api, username: str, password: str, *, base: str = CLIENT, address: str = "192.0.2.1") -> Any:
    return api.client.simulate_post(
        base + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
        remote_addr=address,
    )


def assert_too_many(result: Any) -> int:
    """Asserts the 429 envelope; returns ``Retry-After``."""
    assert result.status_code == 429, result.text
    error = result.json["error"]
    assert error["code"] == "SERVER_TOO_MANY_REQUESTS"
    assert error["message"] == TOO_MANY
    assert error["requestId"]
    assert "cause" not in error
    assert result.json["meta"] == {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}
    retry_after = result.headers["retry-after"]
    assert retry_after.isdigit()
    return int(retry_after)


def person(api: Api, *, max_attempts: int) -> tuple[str, str]:
    """(identity id, username) of a user whose auth policy locks it out after ``max_attempts``."""
    policy_id = api.create(
        "/auth-policies",
        {
            "name": unique("policy"),
            "primary": {"updb": {"maxAttempts": max_attempts, "lockoutDurationMinutes": 0}},
            "secondary": {},
        },
    )
    username = unique("person")
    identity = api.create(
        "/identities", {"name": username, "isAdmin": False, "type": "User", "authPolicyId": policy_id}
    )
    api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": PASSWORD},
    )
    return identity, username


# -- authentication --------------------------------------------------------------------------------
def test_logins_past_the_budget_are_429_with_retry_after(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=1, rate_auth_burst=3)

    attempts = [login(api, ADMIN_USER, "wrong-password").status_code for _ in range(3)]
    refused = login(api, ADMIN_USER, "wrong-password")

    assert attempts == [401, 401, 401]
    assert 1 <= assert_too_many(refused) <= 60


def test_a_refused_login_never_reaches_the_credentials(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=1, rate_auth_burst=1)
    login(api, ADMIN_USER, "wrong-password")
    sessions = api.ctrl.env.store.count(ApiSession)

    result = login(api, ADMIN_USER, ADMIN_PASSWORD)

    assert_too_many(result)
    assert "zt-session" not in result.headers
    assert api.ctrl.env.store.count(ApiSession) == sessions


def test_the_auth_budget_is_per_client_address(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=1, rate_auth_burst=1)
    login(api, ADMIN_USER, "wrong-password", address="192.0.2.1")

    refused = login(api, ADMIN_USER, ADMIN_PASSWORD, address="192.0.2.1")
    other = login(api, ADMIN_USER, ADMIN_PASSWORD, address="192.0.2.2")

    assert refused.status_code == 429
    assert other.status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        f"{CLIENT}/authenticate",
        f"{MGMT}/authenticate",
        f"{CLIENT}/authenticate/mfa",
        f"{MGMT}/authenticate/mfa",
        f"{CLIENT}/enroll/ott",
        f"{CLIENT}/enroll/updb",
        f"{CLIENT}/enroll",
        f"{CLIENT}/current-identity/mfa/verify",
        "/authenticate",  # the client API's unprefixed alias
        "/edge/v1/authenticate",
    ],
)
def test_authentication_and_enrollment_share_one_budget_per_address(
    make_api: Callable[..., Api], path: str
) -> None:
    api = make_api(rate_auth_per_minute=1, rate_auth_burst=1)

    first = api.client.simulate_post(path, params={"method": "password"}, json={}, remote_addr="192.0.2.9")
    second = api.client.simulate_post(path, params={"method": "password"}, json={}, remote_addr="192.0.2.9")

    assert first.status_code != 429
    assert_too_many(second)


def test_reads_are_never_budgeted(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=1, rate_auth_burst=1, rate_write_per_minute=1, rate_write_burst=1)

    statuses = {api.get("/services").status_code for _ in range(20)}
    jwks = {api.client.simulate_get(CLIENT + "/enroll/jwks").status_code for _ in range(3)}

    assert statuses == {200}
    assert 429 not in jwks


def test_the_budget_refills_at_its_rate(make_api: Callable[..., Api]) -> None:
    api = make_api()
    seconds = Seconds()
    api.app.limits.auth = RateLimiter(60, 1, seconds)  # one a second, one at once
    login(api, ADMIN_USER, ADMIN_PASSWORD)

    refused = login(api, ADMIN_USER, ADMIN_PASSWORD)
    seconds.now += 1
    again = login(api, ADMIN_USER, ADMIN_PASSWORD)

    assert assert_too_many(refused) == 1
    assert again.status_code == 200


def test_zero_per_minute_turns_the_auth_budget_off(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=0, rate_auth_burst=1)

    statuses = {login(api, ADMIN_USER, "wrong-password").status_code for _ in range(30)}

    assert statuses == {401}


# -- writes ----------------------------------------------------------------------------------------
def service_body() -> dict[str, Any]:
    return {"name": unique("svc"), "encryptionRequired": True}


def create_service(api: Api, token: str | None = None, address: str = "127.0.0.1") -> Any:
    return api.post("/services", json=service_body(), token=token, remote_addr=address)


def test_writes_past_the_budget_are_429_per_api_session(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_write_per_minute=1, rate_write_burst=2)
    other = api.login(ADMIN_USER, ADMIN_PASSWORD)

    allowed = [create_service(api).status_code for _ in range(2)]
    refused = create_service(api)
    elsewhere = create_service(api, token=other)

    assert allowed == [201, 201]
    assert 1 <= assert_too_many(refused) <= 60
    assert elsewhere.status_code == 201
    assert api.get("/services").json["meta"]["pagination"]["totalCount"] == 3


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_every_write_method_spends_the_write_budget(make_api: Callable[..., Api], method: str) -> None:
    api = make_api(rate_write_per_minute=1, rate_write_burst=1)
    service_id = api.create("/services", service_body())

    result = api.request(method, f"/services/{service_id}", json=service_body())

    assert_too_many(result)
    assert api.get(f"/services/{service_id}").status_code == 200


def test_writes_without_a_session_are_budgeted_per_address(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_write_per_minute=1, rate_write_burst=2)

    first = [create_service(api, token="", address="192.0.2.5").status_code for _ in range(2)]
    refused = create_service(api, token="", address="192.0.2.5")
    elsewhere = create_service(api, token="", address="192.0.2.6")

    assert first == [401, 401]
    assert_too_many(refused)
    assert elsewhere.status_code == 401


# -- lockout under brute force ---------------------------------------------------------------------
def test_lockout_holds_after_1000_wrong_passwords(make_api: Callable[..., Api]) -> None:
    api = make_api(rate_auth_per_minute=1_000_000, rate_auth_burst=1_000_000)
    identity, username = person(api, max_attempts=3)

    statuses = [login(api, username, "wrong-password").status_code for _ in range(1000)]
    result = login(api, username, PASSWORD)

    assert set(statuses) == {401}
    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"  # as a wrong password: no oracle
    assert "zt-session" not in result.headers
    assert api.get(f"/identities/{identity}").json["data"]["disabled"] is True


def test_refused_attempts_count_towards_no_lockout(make_api: Callable[..., Api]) -> None:
    api = make_api()
    _, username = person(api, max_attempts=3)
    seconds = Seconds()
    api.app.limits.auth = RateLimiter(1, 2, seconds)
    wrong = [login(api, username, "wrong-password").status_code for _ in range(2)]
    refused = {login(api, username, "wrong-password").status_code for _ in range(20)}

    seconds.now += 60
    result = login(api, username, PASSWORD)

    assert (wrong, refused) == ([401, 401], {429})
    assert result.status_code == 200  # two counted failures of three: not locked


# -- the limiter itself ----------------------------------------------------------------------------
def test_a_limiter_forgets_the_least_recent_client_past_its_cap() -> None:
    seconds = Seconds()
    limiter = RateLimiter(1, 1, seconds, max_clients=2)
    limiter.take("a")
    limiter.take("b")

    limiter.take("c")

    assert len(limiter) == 2
    assert limiter.take("a") is None  # a new, full bucket
    assert limiter.take("c") is not None


def test_prune_drops_only_refilled_clients() -> None:
    seconds = Seconds()
    limiter = RateLimiter(60, 2, seconds)
    limiter.take("idle")
    seconds.now += 1
    limiter.take("busy")

    dropped = limiter.prune()

    assert (dropped, len(limiter)) == (1, 1)
    assert limiter.take("busy") is None
    assert limiter.take("busy") is not None


def test_a_clock_going_backwards_refills_nothing() -> None:
    seconds = Seconds()
    limiter = RateLimiter(60, 1, seconds)
    limiter.take("a")

    seconds.now -= 100

    assert limiter.take("a") == 1


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (f"{CLIENT}/authenticate", True),
        (f"{MGMT}/authenticate/mfa", True),
        (f"{CLIENT}/enroll/ottca", True),
        (f"{CLIENT}/current-identity/mfa/verify", True),
        (f"{MGMT}/authenticators", False),
        (f"{MGMT}/enrollments", False),
        (f"{CLIENT}/current-identity/mfa", False),
        ("/version", False),
    ],
)
def test_which_paths_are_authentication(path: str, expected: bool) -> None:
    assert is_authentication(path) is expected


# -- settings --------------------------------------------------------------------------------------
def test_budgets_come_from_the_environment() -> None:
    settings = Settings.from_env(
        {
            "TRELLIS_RATE_AUTH_PER_MINUTE": "30",
            "TRELLIS_RATE_AUTH_BURST": "5",
            "TRELLIS_RATE_WRITE_PER_MINUTE": "0",
            "TRELLIS_RATE_WRITE_BURST": "7",
        }
    )

    assert (settings.rate_auth_per_minute, settings.rate_auth_burst) == (30, 5)
    assert (settings.rate_write_per_minute, settings.rate_write_burst) == (0, 7)


def test_default_budgets_are_generous() -> None:
    settings = Settings.from_env({})

    assert (settings.rate_auth_per_minute, settings.rate_auth_burst) == (600, 600)
    assert (settings.rate_write_per_minute, settings.rate_write_burst) == (30000, 5000)


@pytest.mark.parametrize("value", ["-1", "ten", "1.5", "9" * 20])
def test_a_budget_must_be_a_whole_number(value: str) -> None:
    with pytest.raises(SystemExit, match="TRELLIS_RATE_AUTH_PER_MINUTE"):
        Settings.from_env({"TRELLIS_RATE_AUTH_PER_MINUTE": value})


# -- shared by several processes (a RateBoard's rounds) --------------------------------------------
def test_a_limiter_alone_counts_nothing_unless_shared() -> None:
    limiter = RateLimiter(60, 2, Seconds())
    limiter.take("a")

    assert limiter.spent() == {}


def test_a_shared_limiter_says_what_it_admitted_once() -> None:
    limiter = RateLimiter(60, 3, Seconds())
    limiter.share()
    for key in ("a", "a", "b"):
        assert limiter.take(key) is None

    assert limiter.spent() == {"a": 2, "b": 1}
    assert limiter.spent() == {}


def test_what_others_admitted_is_taken_off_and_a_debt_is_refilled_first() -> None:
    seconds = Seconds()
    limiter = RateLimiter(60, 4, seconds)  # one a second
    limiter.share()
    limiter.absorb({"a": 6}, 2)  # known only from another process: 4 - 6 = a debt of 2

    refused = limiter.take("a")
    seconds.now += 3  # the debt and one more
    admitted = limiter.take("a")

    assert refused == 3
    assert admitted is None


def test_a_process_admits_its_share_of_what_is_left_per_round() -> None:
    seconds = Seconds()
    limiter = RateLimiter(1, 10, seconds)
    limiter.share()
    limiter.absorb({}, 2)  # two processes: at most half of what is left per round here

    first = [limiter.take("a") for _ in range(6)]
    limiter.absorb({"a": 5}, 2)  # the other process spent its half meanwhile
    second = [limiter.take("a") for _ in range(2)]

    assert first == [None] * 5 + [1]  # Retry-After 1: the next round gives a share again
    assert second == [60, 60]  # nothing left: a whole budget's wait at one a minute


def test_one_request_is_admitted_per_round_while_one_is_left() -> None:
    limiter = RateLimiter(1, 3, Seconds())
    limiter.share()
    limiter.absorb({"a": 1}, 4)  # two left, four processes: a share under one request

    assert [limiter.take("a") for _ in range(2)] == [None, 1]


def test_a_store_only_one_process_opens_keeps_its_budgets_to_itself(make_api: Callable[..., Api]) -> None:
    limits = make_api().app.limits

    assert (limits.auth.shared, limits.writes.shared) == (False, False)
