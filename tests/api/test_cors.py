"""CORS: off by default (no header at all); with ``TRELLIS_CORS_ORIGINS`` an allow-list whose
origins are echoed with ``Vary: Origin``, preflights answered, and never ``*`` with credentials."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller.settings import Settings, parse_origins
from engine.managers.bootstrap import create_default_admin
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, MGMT, Api, open_app

CONSOLE = "https://console.example.test"
EVIL = "https://evil.example.test"


@pytest.fixture
def with_origins(settings: Settings) -> Iterator[Callable[..., Api]]:
    """``with_origins(*origins)``: an app of the test's own with that CORS allow-list."""
    apps: list[Any] = []

    def make(*origins: str, **overrides: Any) -> Api:
        app = open_app(
            dataclasses.replace(settings, cors_origins=parse_origins(",".join(origins)), **overrides)
        )
        apps.append(app)
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        return Api(app)

    yield make
    for app in apps:
        app.ctrl.env.store.close()


def cors_headers(result: Any) -> dict[str, str]:
    return {k: v for k, v in result.headers.items() if k.lower().startswith("access-control-")}


def preflight(api: Api, origin: str, path: str = MGMT + "/identities", method: str = "POST") -> Any:
    return api.client.simulate_options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type, zt-session",
        },
    )


def login(api: Api, origin: str) -> Any:
    return api.client.simulate_post(
        MGMT + "/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
        headers={"Origin": origin},
    )


# -- off by default --------------------------------------------------------------------------------
def test_cors_is_off_by_default() -> None:
    assert Settings().cors_origins == ()
    assert Settings.from_env({}).cors_origins == ()


def test_by_default_no_answer_carries_cors_headers(anon: Api) -> None:
    results = [
        anon.client.simulate_get("/version", headers={"Origin": CONSOLE}),
        login(anon, CONSOLE),
        preflight(anon, CONSOLE),
        anon.client.simulate_get(MGMT + "/identities", headers={"Origin": CONSOLE}),  # a 401
    ]

    assert [cors_headers(r) for r in results] == [{}, {}, {}, {}]
    assert results[1].status_code == 200
    assert all("vary" not in r.headers for r in results)


# -- an allow-list ---------------------------------------------------------------------------------
def test_an_allowed_origin_is_echoed_with_vary(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE)

    result = login(api, CONSOLE)

    assert result.status_code == 200
    assert result.headers["access-control-allow-origin"] == CONSOLE
    assert result.headers["access-control-allow-credentials"] == "true"
    assert "Origin" in result.headers["vary"]
    exposed = result.headers["access-control-expose-headers"]
    assert "zt-session" in exposed  # a browser script may read the new token
    assert "retry-after" in exposed


def test_another_origin_gets_no_cors_headers(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE)

    result = login(api, EVIL)

    assert cors_headers(result) == {}
    assert "Origin" in result.headers["vary"]


def test_a_request_without_origin_gets_no_cors_headers(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE)

    result = api.client.simulate_get("/version")

    assert cors_headers(result) == {}
    assert result.headers["vary"] == "Origin"


def test_a_preflight_from_an_allowed_origin_is_answered(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE, "http://localhost:8443")

    result = preflight(api, "http://localhost:8443")

    assert result.status_code == 200
    assert result.headers["access-control-allow-origin"] == "http://localhost:8443"
    assert result.headers["access-control-allow-credentials"] == "true"
    methods = {m.strip() for m in result.headers["access-control-allow-methods"].split(",")}
    assert {"GET", "POST", "PUT", "PATCH", "DELETE"} <= methods
    allowed = {h.strip() for h in result.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "zt-session", "authorization"} <= allowed
    assert result.headers["access-control-max-age"] == "600"


def test_a_preflight_from_another_origin_is_not_allowed(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE)

    result = preflight(api, EVIL)

    assert "access-control-allow-origin" not in result.headers
    assert "access-control-allow-methods" not in result.headers


def test_a_plain_options_request_is_no_preflight(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE)

    result = api.client.simulate_options(MGMT + "/identities", headers={"Origin": CONSOLE})

    assert result.headers["access-control-allow-origin"] == CONSOLE
    assert "access-control-allow-methods" not in result.headers


def test_preflights_spend_no_budget_and_need_no_session(with_origins: Callable[..., Api]) -> None:
    api = with_origins(CONSOLE, rate_auth_per_minute=1, rate_auth_burst=1)
    login(api, CONSOLE)

    results = [preflight(api, CONSOLE, MGMT + "/authenticate") for _ in range(5)]

    assert {r.status_code for r in results} == {200}
    assert login(api, CONSOLE).status_code == 429
    assert login(api, CONSOLE).headers["access-control-allow-origin"] == CONSOLE  # errors too


def test_origins_match_without_case_or_a_trailing_slash(with_origins: Callable[..., Api]) -> None:
    api = with_origins("HTTPS://Console.Example.test/")

    result = login(api, CONSOLE)

    assert result.headers["access-control-allow-origin"] == CONSOLE


def test_a_wildcard_is_answered_as_one_and_never_with_credentials(with_origins: Callable[..., Api]) -> None:
    api = with_origins("*")

    result = login(api, EVIL)
    flight = preflight(api, EVIL)

    assert result.headers["access-control-allow-origin"] == "*"
    assert flight.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-credentials" not in result.headers
    assert "access-control-allow-credentials" not in flight.headers


def test_a_listed_origin_next_to_a_wildcard_keeps_credentials(with_origins: Callable[..., Api]) -> None:
    api = with_origins("*", CONSOLE)

    listed = login(api, CONSOLE)
    other = login(api, EVIL)

    assert (listed.headers["access-control-allow-origin"], other.headers["access-control-allow-origin"]) == (
        CONSOLE,
        "*",
    )
    assert listed.headers["access-control-allow-credentials"] == "true"
    assert "access-control-allow-credentials" not in other.headers
    assert "Origin" in other.headers["vary"]


# -- settings --------------------------------------------------------------------------------------
def test_origins_come_from_the_environment() -> None:
    settings = Settings.from_env({"TRELLIS_CORS_ORIGINS": f" {CONSOLE}/ , http://127.0.0.1:8080,{CONSOLE}"})

    assert settings.cors_origins == (CONSOLE, "http://127.0.0.1:8080")


@pytest.mark.parametrize(
    "value", ["console.example.test", "ftp://console.example.test", "https://", "https://a.test/path"]
)
def test_an_origin_must_be_scheme_host_port(value: str) -> None:
    with pytest.raises(SystemExit, match="TRELLIS_CORS_ORIGINS"):
        Settings.from_env({"TRELLIS_CORS_ORIGINS": value})
