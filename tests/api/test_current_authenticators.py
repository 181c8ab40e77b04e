"""``PUT``/``PATCH /current-identity/authenticators/{id}``: an identity changes its own username and
password, proving the current one (seed 000: 200 ``{}``; 400, 401, 404)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.certs import ThirdPartyCa, unique
from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, MGMT, Api

api = shared_admin_api("current-authenticators")

PASSWORD = "first-password-1"
NEW_PASSWORD = "second-password-2"


class Person:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.username = unique("person")
        self.id = api.create("/identities", {"name": self.username, "isAdmin": False, "type": "User"})
        self.authenticator = api.create(
            "/authenticators",
            {"identityId": self.id, "method": "updb", "username": self.username, "password": PASSWORD},
        )

    def authenticate(self, username: str | None = None, password: str = PASSWORD, base: str = CLIENT) -> Any:
        return self.api.client.simulate_post(
            base + "/authenticate",
            params={"method": "password"},
            json={"username": username or self.username, "password": password},
        )

    def login(self, base: str = CLIENT) -> str:
        result = self.authenticate(base=base)
        assert result.status_code == 200, result.text
        return str(result.json["data"]["token"])


@pytest.fixture
def person(api: Api) -> Person:
    return Person(api)


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_put_replaces_username_and_password(api: Api, person: Person, base: str) -> None:
    token = person.login(base)
    new_name = unique("renamed")

    result = api.put(
        f"/current-identity/authenticators/{person.authenticator}",
        token=token,
        base=base,
        json={"username": new_name, "password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert person.authenticate(new_name, NEW_PASSWORD).status_code == 200
    assert person.authenticate(person.username, PASSWORD).status_code == 401
    listed = api.get("/current-identity/authenticators", token=token, base=base).json["data"]
    assert [a["username"] for a in listed] == [new_name]


@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_patch_changes_only_what_is_sent(api: Api, person: Person, base: str) -> None:
    token = person.login(base)

    result = api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token=token,
        base=base,
        json={"password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 200
    assert person.authenticate(person.username, NEW_PASSWORD).status_code == 200
    assert person.authenticate(person.username, PASSWORD).status_code == 401


def test_a_new_password_ends_the_other_sessions_but_keeps_the_callers(api: Api, person: Person) -> None:
    mine, other = person.login(), person.login()

    result = api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token=mine,
        base=CLIENT,
        json={"password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 200
    assert api.get("/current-api-session", token=mine, base=CLIENT).status_code == 200
    assert api.get("/current-api-session", token=other, base=CLIENT).status_code == 401


def test_a_new_username_alone_keeps_the_other_sessions(api: Api, person: Person) -> None:
    mine, other = person.login(), person.login()

    api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token=mine,
        base=CLIENT,
        json={"username": unique("renamed"), "currentPassword": PASSWORD},
    )

    assert api.get("/current-api-session", token=other, base=CLIENT).status_code == 200


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_a_wrong_current_password_is_401_and_changes_nothing(api: Api, person: Person, method: str) -> None:
    token = person.login()

    result = api.request(
        method,
        f"/current-identity/authenticators/{person.authenticator}",
        token=token,
        base=CLIENT,
        json={"username": person.username, "password": NEW_PASSWORD, "currentPassword": "not-the-password"},
    )

    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"
    assert error(result)["cause"]["field"] == "currentPassword"
    assert "value" not in error(result)["cause"]
    assert "not-the-password" not in result.text
    assert person.authenticate().status_code == 200


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
def test_someone_elses_authenticator_is_404(api: Api, person: Person, method: str) -> None:
    other = Person(api)

    result = api.request(
        method,
        f"/current-identity/authenticators/{other.authenticator}",
        token=person.login(),
        base=CLIENT,
        json={"username": other.username, "password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"
    assert other.authenticate().status_code == 200


def test_unknown_authenticator_is_404(api: Api, person: Person) -> None:
    result = api.patch(
        "/current-identity/authenticators/nope",
        token=person.login(),
        base=CLIENT,
        json={"password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 404


def test_a_certificate_authenticator_has_no_password_to_change(api: Api, person: Person) -> None:
    cert_pem, _ = ThirdPartyCa("Current Authenticators CA").issue("device")
    cert = api.create("/authenticators", {"identityId": person.id, "method": "cert", "certPem": cert_pem})

    result = api.patch(
        f"/current-identity/authenticators/{cert}",
        token=person.login(),
        base=CLIENT,
        json={"password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 409
    assert error(result)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("PUT", {"username": "u-name", "password": NEW_PASSWORD}, "currentPassword"),
        ("PATCH", {"password": NEW_PASSWORD}, "currentPassword"),
        ("PUT", {"password": NEW_PASSWORD, "currentPassword": PASSWORD}, "username"),
        ("PUT", {"username": "u-name", "currentPassword": PASSWORD}, "password"),
        ("PATCH", {"password": "four", "currentPassword": PASSWORD}, "password"),
        ("PATCH", {"username": "abc", "currentPassword": PASSWORD}, "username"),
        ("PATCH", {"password": NEW_PASSWORD, "currentPassword": "four"}, "currentPassword"),
    ],
)
def test_bodies_are_validated(
    api: Api, person: Person, method: str, body: dict[str, Any], field: str
) -> None:
    result = api.request(
        method,
        f"/current-identity/authenticators/{person.authenticator}",
        token=person.login(),
        base=CLIENT,
        json=body,
    )

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == field
    if "assword" in field:
        assert "value" not in error(result)["cause"]


def test_the_new_password_must_satisfy_the_auth_policy(api: Api) -> None:
    policy = api.create(
        "/auth-policies",
        {"name": unique("strict"), "primary": {"updb": {"minPasswordLength": 12}}, "secondary": {}},
    )
    person = Person(api)
    assert api.patch(f"/identities/{person.id}", json={"authPolicyId": policy}).status_code == 200

    result = api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token=person.login(),
        base=CLIENT,
        json={"password": "short-pass", "currentPassword": PASSWORD},
    )

    assert result.status_code == 400
    assert error(result)["cause"]["field"] == "password"
    assert "value" not in error(result)["cause"]
    assert person.authenticate().status_code == 200


def test_a_taken_username_is_refused(api: Api, person: Person) -> None:
    other = Person(api)

    result = api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token=person.login(),
        base=CLIENT,
        json={"username": other.username, "currentPassword": PASSWORD},
    )

    assert result.status_code == 400
    assert error(result)["cause"]["field"] == "username"


def test_anonymous_callers_get_401(api: Api, person: Person) -> None:
    result = api.patch(
        f"/current-identity/authenticators/{person.authenticator}",
        token="",
        base=CLIENT,
        json={"password": NEW_PASSWORD, "currentPassword": PASSWORD},
    )

    assert result.status_code == 401
