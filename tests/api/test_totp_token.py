"""``POST /current-api-session/totp-token``: a TOTP code becomes a token the controller signs, proving
the code was checked at that moment for this identity and API session.

The app runs on a fixed clock, so codes are computed for the controller's own "now".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import falcon.testing
import pytest

from api.wire import ts
from engine.testing import FixedClock
from pki.totp import totp_code
from tests.api.certs import admin_api, unique
from tests.conftest import CLIENT, MGMT, Api

PASSWORD = "user-password-1"
PATH = "/current-api-session/totp-token"


@pytest.fixture(scope="module")
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin: Api = admin_api(tmp_path_factory.mktemp("totp-token"), pki_template, clock=clock)
    yield admin
    admin.app.ctrl.env.store.close()


class Person:
    """An identity with a password, logged in (a full session), optionally with TOTP MFA."""

    def __init__(self, api: Api, clock: FixedClock) -> None:
        self.api, self.clock = api, clock
        self.username = unique("person")
        self.id = api.create("/identities", {"name": self.username, "isAdmin": False, "type": "User"})
        api.create(
            "/authenticators",
            {"identityId": self.id, "method": "updb", "username": self.username, "password": PASSWORD},
        )
        self.token = api.login(self.username, PASSWORD, base=CLIENT)
        self.secret = ""
        self.recovery_codes: list[str] = []

    def code(self) -> str:
        """A code of a step not used before (the clock moves on a step: a step is accepted once)."""
        self.clock.advance(timedelta(seconds=30))
        return totp_code(self.secret, self.clock.now())

    def start_mfa(self) -> None:
        """An MFA enrollment, not yet verified."""
        assert self.api.post("/current-identity/mfa", token=self.token, base=CLIENT).status_code == 201
        detail = self.api.get("/current-identity/mfa", token=self.token, base=CLIENT).json["data"]
        self.secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
        self.recovery_codes = list(detail["recoveryCodes"])

    def enroll_mfa(self) -> None:
        """A verified MFA enrollment; the current session has passed MFA with it."""
        self.start_mfa()
        verified = self.api.post(
            "/current-identity/mfa/verify", token=self.token, base=CLIENT, json={"code": self.code()}
        )
        assert verified.status_code == 200, verified.text

    def totp_token(self, body: Any, base: str = CLIENT, token: str | None = None) -> falcon.testing.Result:
        return self.api.post(PATH, token=token or self.token, base=base, json=body)


@pytest.fixture
def person(api: Api, clock: FixedClock) -> Person:
    return Person(api, clock)


@pytest.fixture
def enrolled(api: Api, clock: FixedClock) -> Person:
    member = Person(api, clock)
    member.enroll_mfa()
    return member


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


# -- success ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_a_valid_totp_code_gives_a_signed_totp_token(
    api: Api, clock: FixedClock, enrolled: Person, base: str
) -> None:
    session_id = api.get("/current-api-session", token=enrolled.token, base=base).json["data"]["id"]

    result = enrolled.totp_token({"code": enrolled.code()}, base=base)

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert set(data) == {"token", "issuedAt"}
    assert data["issuedAt"] == ts(clock.now())
    claims = api.ctrl.env.tokens.verify(data["token"])
    assert claims["iss"] == f"https://{api.ctrl.settings.advertised_address}"
    assert claims["sub"] == enrolled.id
    assert claims["aud"] == ["openziti"]
    assert claims["iat"] == int(clock.now().timestamp())
    assert claims["z_asid"] == session_id
    assert claims["z_t"] == "t"
    assert "exp" not in claims


def test_each_totp_token_has_its_own_id(enrolled: Person) -> None:
    first = enrolled.totp_token({"code": enrolled.code()}).json["data"]["token"]
    second = enrolled.totp_token({"code": enrolled.code()}).json["data"]["token"]

    tokens = enrolled.api.ctrl.env.tokens
    assert tokens.verify(first)["jti"] != tokens.verify(second)["jti"]


def test_a_session_that_completed_mfa_at_login_gets_a_token(api: Api, enrolled: Person) -> None:
    login = api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": enrolled.username, "password": PASSWORD},
    )
    token = login.json["data"]["token"]
    done = api.post("/authenticate/mfa", token=token, base=CLIENT, json={"code": enrolled.code()})
    assert done.status_code == 200, done.text

    result = enrolled.totp_token({"code": enrolled.code()}, token=token)

    assert result.status_code == 200, result.text


# -- refusals -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["", "000000", "abcdef"])
def test_a_bad_code_is_mfa_invalid_token(enrolled: Person, code: str) -> None:
    if code == "000000" and enrolled.code() == code:
        code = "000001"

    result = enrolled.totp_token({"code": code})

    assert result.status_code == 401, result.text
    assert error(result)["code"] == "MFA_INVALID_TOKEN"


def test_a_recovery_code_does_not_count(enrolled: Person) -> None:
    result = enrolled.totp_token({"code": enrolled.recovery_codes[0]})

    assert result.status_code == 401, result.text
    assert error(result)["code"] == "MFA_INVALID_TOKEN"
    # and it was not used up: it still completes a login
    login = enrolled.api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": enrolled.username, "password": PASSWORD},
    )
    done = enrolled.api.post(
        "/authenticate/mfa",
        token=login.json["data"]["token"],
        base=CLIENT,
        json={"code": enrolled.recovery_codes[0]},
    )
    assert done.status_code == 200, done.text


def test_without_mfa_it_is_mfa_not_enrolled(person: Person) -> None:
    result = person.totp_token({"code": "123456"})

    assert result.status_code == 404, result.text
    assert error(result)["code"] == "MFA_NOT_ENROLLED"


def test_an_unverified_enrollment_is_mfa_not_enrolled(person: Person) -> None:
    person.start_mfa()

    result = person.totp_token({"code": person.code()})

    assert result.status_code == 404, result.text
    assert error(result)["code"] == "MFA_NOT_ENROLLED"


def test_the_code_is_required(enrolled: Person) -> None:
    result = enrolled.totp_token({})

    assert result.status_code == 400, result.text
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "code"


def test_a_session_still_owing_mfa_is_unauthorized(api: Api, enrolled: Person) -> None:
    partial = api.login(enrolled.username, PASSWORD, base=CLIENT)

    result = enrolled.totp_token({"code": enrolled.code()}, token=partial)

    assert result.status_code == 401, result.text
    assert error(result)["code"] == "UNAUTHORIZED"


def test_without_a_session_it_is_unauthorized(api: Api) -> None:
    result = api.client.simulate_post(CLIENT + PATH, json={"code": "123456"})

    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"
