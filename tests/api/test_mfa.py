"""TOTP MFA end to end (seed 000's MFA state table): enroll, verify, log in with a second factor,
recovery codes, disable, the QR code, an administrator's removal and auth policies requiring TOTP.

The app runs on a fixed clock, so codes are computed for the controller's own "now".
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from engine.testing import FixedClock
from pki.totp import totp_code
from tests.api.certs import admin_api, unique
from tests.conftest import CLIENT, MGMT, Api

PASSWORD = "user-password-1"
TOTP_QUERY = {
    "typeId": "MFA",
    "provider": "ziti",
    "httpMethod": "POST",
    "httpUrl": "./authenticate/mfa",
    "format": "alphaNumeric",
    "minLength": 4,
    "maxLength": 6,
}


@pytest.fixture(scope="module")
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin: Api = admin_api(tmp_path_factory.mktemp("mfa"), pki_template, clock=clock)
    yield admin
    admin.app.ctrl.env.store.close()


class User:
    """An identity with a username and password, and helpers to act as it."""

    def __init__(self, api: Api, clock: FixedClock, *, policy: str | None = None) -> None:
        self.api, self.clock = api, clock
        self.username = unique("user")
        body: dict[str, Any] = {"name": self.username, "isAdmin": False, "type": "User"}
        if policy is not None:
            body["authPolicyId"] = policy
        self.id = api.create("/identities", body)
        api.create(
            "/authenticators",
            {"identityId": self.id, "method": "updb", "username": self.username, "password": PASSWORD},
        )
        self.secret = ""

    def authenticate(self, base: str = CLIENT) -> Any:
        return self.api.client.simulate_post(
            base + "/authenticate",
            params={"method": "password"},
            json={"username": self.username, "password": PASSWORD},
        )

    def login(self, base: str = CLIENT) -> str:
        result = self.authenticate(base)
        assert result.status_code == 200, result.text
        return str(result.json["data"]["token"])

    def code(self, seconds: int = 0) -> str:
        """A code of a time step not used before: the clock moves on a step first (a TOTP step is
        accepted once, RFC 6238 §5.2)."""
        self.clock.advance(timedelta(seconds=30))
        return totp_code(self.secret, self.clock.now() + timedelta(seconds=seconds))

    def start_enrollment(self, token: str, base: str = CLIENT) -> dict[str, Any]:
        assert self.api.post("/current-identity/mfa", token=token, base=base).status_code == 201
        detail = dict(self.api.get("/current-identity/mfa", token=token, base=base).json["data"])
        self.secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
        return detail

    def enroll(self, token: str, base: str = CLIENT) -> list[str]:
        """A verified enrollment; returns its recovery codes."""
        detail = self.start_enrollment(token, base)
        verified = self.api.post(
            "/current-identity/mfa/verify", token=token, base=base, json={"code": self.code()}
        )
        assert verified.status_code == 200, verified.text
        return list(detail["recoveryCodes"])

    def complete(self, token: str, code: str, base: str = CLIENT) -> Any:
        return self.api.post("/authenticate/mfa", token=token, base=base, json={"code": code})


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


@pytest.fixture
def user(api: Api, clock: FixedClock) -> User:
    return User(api, clock)


# -- enrollment -----------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_initiate_answers_201_and_status_shows_the_secret_and_recovery_codes(
    api: Api, user: User, base: str
) -> None:
    token = user.login(base)

    created = api.post("/current-identity/mfa", token=token, base=base)

    assert created.status_code == 201
    assert created.json["data"]["_links"]["self"]["href"] == "./current-identity/mfa"
    detail = api.get("/current-identity/mfa", token=token, base=base).json["data"]
    assert detail["id"] == created.json["data"]["id"]
    assert detail["isVerified"] is False
    url = urlparse(detail["provisioningUrl"])
    assert (url.scheme, url.netloc, url.path) == ("otpauth", "totp", f"/openziti.io:{user.username}")
    assert len(parse_qs(url.query)["secret"][0]) == 16
    assert len(detail["recoveryCodes"]) == 20
    assert {"verify", "qr"} <= set(detail["_links"])


def test_status_without_an_enrollment_is_404(api: Api, user: User) -> None:
    result = api.get("/current-identity/mfa", token=user.login(), base=CLIENT)

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


@pytest.mark.parametrize("verified", [False, True])
def test_initiating_again_is_409_mfa_exists(api: Api, user: User, verified: bool) -> None:
    token = user.login()
    if verified:
        user.enroll(token)
    else:
        user.start_enrollment(token)

    result = api.post("/current-identity/mfa", token=token, base=CLIENT)

    assert result.status_code == 409
    assert error(result)["code"] == "MFA_EXISTS"


def test_verify_with_a_valid_code_enrolls(api: Api, user: User) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": user.code()})

    assert result.status_code == 200
    assert result.json["data"] == {}
    detail = api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]
    assert detail["isVerified"] is True
    assert "provisioningUrl" not in detail
    assert "recoveryCodes" not in detail
    assert "recovery-codes" in detail["_links"]
    assert api.get(f"/identities/{user.id}").json["data"]["isMfaEnabled"] is True


@pytest.mark.parametrize("code", ["000000", "abc", "recovery"])
def test_verify_with_a_bad_code_is_401_mfa_invalid_token(api: Api, user: User, code: str) -> None:
    token = user.login()
    detail = user.start_enrollment(token)
    if code == "recovery":  # recovery codes do not verify an enrollment
        code = detail["recoveryCodes"][0]

    result = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": code})

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_INVALID_TOKEN"
    assert api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]["isVerified"] is False
    assert api.get(f"/identities/{user.id}").json["data"]["isMfaEnabled"] is False


def test_a_code_from_minutes_ago_does_not_verify(api: Api, user: User) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.post(
        "/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": user.code(-300)}
    )

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_INVALID_TOKEN"


@pytest.mark.parametrize("state", ["none", "verified"])
def test_verify_without_a_pending_enrollment_is_404(api: Api, user: User, state: str) -> None:
    token = user.login()
    if state == "verified":
        user.enroll(token)

    result = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": "123456"})

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


def test_verify_requires_a_code(api: Api, user: User) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={})

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "code"


# -- logging in with MFA --------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_login_with_verified_mfa_owes_a_totp_code(api: Api, user: User, base: str) -> None:
    user.enroll(user.login())

    result = user.authenticate(base)

    assert result.status_code == 200
    data = result.json["data"]
    assert (data["isMfaRequired"], data["isMfaComplete"]) == (True, False)
    assert data["authQueries"] == [TOTP_QUERY]
    token = data["token"]
    denied = api.get("/current-identity", token=token, base=base)
    assert denied.status_code == 401
    assert error(denied)["code"] == "UNAUTHORIZED"
    current = api.get("/current-api-session", token=token, base=base).json["data"]
    assert current["authQueries"] == [TOTP_QUERY]


@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_a_totp_code_completes_the_login(api: Api, user: User, base: str) -> None:
    user.enroll(user.login())
    token = user.login(base)

    result = user.complete(token, user.code(), base)

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get("/current-identity", token=token, base=base).status_code == 200
    current = api.get("/current-api-session", token=token, base=base).json["data"]
    assert (current["isMfaRequired"], current["isMfaComplete"]) == (True, True)
    assert current["authQueries"] == []
    session = api.ctrl.api_sessions.get(current["id"])
    assert session.mfa_completed_at == api.ctrl.env.clock.now()


def test_a_bad_code_does_not_complete_the_login(api: Api, user: User) -> None:
    user.enroll(user.login())
    token = user.login()

    result = user.complete(token, "000000")

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_INVALID_TOKEN"
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 401


def test_a_recovery_code_completes_a_login_once(api: Api, user: User) -> None:
    codes = user.enroll(user.login())
    first, second = user.login(), user.login()

    assert user.complete(first, codes[0]).status_code == 200
    reused = user.complete(second, codes[0])

    assert reused.status_code == 401
    assert error(reused)["code"] == "MFA_INVALID_TOKEN"
    listed = api.get(
        "/current-identity/mfa/recovery-codes",
        token=first,
        base=CLIENT,
        headers={"mfa-validation-code": user.code()},
    ).json["data"]["recoveryCodes"]
    assert listed == codes[1:]


def test_unprefixed_paths_reach_the_client_api(api: Api, user: User) -> None:
    user.enroll(user.login())
    token = user.login()

    result = api.client.simulate_post(
        "/authenticate/mfa", headers={"zt-session": token}, json={"code": user.code()}
    )

    assert result.status_code == 200
    assert api.client.simulate_get("/current-identity", headers={"zt-session": token}).status_code == 200


def test_complete_mfa_without_an_enrollment_is_401_mfa_not_enrolled(api: Api, user: User) -> None:
    """Seed 000 lists 401 and 429 only for completing MFA (OpenZiti: 409)."""
    result = user.complete(user.login(), "123456")

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_NOT_ENROLLED"


def test_a_partial_session_reaches_only_its_session_and_the_mfa_operations(api: Api, user: User) -> None:
    user.enroll(user.login())
    token = user.login()

    def status(method: str, path: str, **kwargs: Any) -> int:
        return int(api.request(method, path, token=token, base=CLIENT, **kwargs).status_code)

    assert status("GET", "/current-api-session") == 200
    assert status("GET", "/current-identity/mfa") == 200
    assert status("GET", "/current-identity") == 401
    assert status("GET", "/current-identity/authenticators") == 401
    assert status("GET", "/current-api-session/certificates") == 401
    assert status("DELETE", "/current-identity/mfa", headers={"mfa-validation-code": user.code()}) == 401
    assert status("GET", "/current-identity/mfa/recovery-codes") == 401
    assert api.get("/identities", token=token).status_code == 401
    assert status("DELETE", "/current-api-session") == 200
    assert status("GET", "/current-api-session") == 401


def test_an_enrollment_that_is_not_verified_asks_nothing_at_login(api: Api, user: User) -> None:
    user.start_enrollment(user.login())

    data = user.authenticate().json["data"]

    assert (data["isMfaRequired"], data["authQueries"]) == (False, [])


# -- disabling ------------------------------------------------------------------------------------
def test_an_unverified_enrollment_is_removed_with_an_empty_code(api: Api, user: User) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.delete(
        "/current-identity/mfa", token=token, base=CLIENT, headers={"mfa-validation-code": ""}
    )

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get("/current-identity/mfa", token=token, base=CLIENT).status_code == 404


@pytest.mark.parametrize("how", ["header", "body", "recovery"])
def test_a_verified_enrollment_is_removed_with_a_valid_code(api: Api, user: User, how: str) -> None:
    codes = user.enroll(user.login())
    token = user.login()
    assert user.complete(token, user.code()).status_code == 200
    kwargs: dict[str, Any] = {
        "header": {"headers": {"mfa-validation-code": user.code()}},
        "body": {"json": {"code": user.code()}},
        "recovery": {"json": {"code": codes[3]}},
    }[how]

    result = api.delete("/current-identity/mfa", token=token, base=CLIENT, **kwargs)

    assert result.status_code == 200
    assert api.get("/current-identity/mfa", token=token, base=CLIENT).status_code == 404
    assert api.get(f"/identities/{user.id}").json["data"]["isMfaEnabled"] is False
    assert user.authenticate().json["data"]["isMfaRequired"] is False


@pytest.mark.parametrize("code", [None, "", "000000"])
def test_a_verified_enrollment_is_kept_without_a_valid_code(api: Api, user: User, code: str | None) -> None:
    user.enroll(user.login())
    token = user.login()
    assert user.complete(token, user.code()).status_code == 200
    headers = {} if code is None else {"mfa-validation-code": code}

    result = api.delete("/current-identity/mfa", token=token, base=CLIENT, headers=headers)

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_INVALID_TOKEN"
    assert api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]["isVerified"] is True


def test_removing_an_absent_enrollment_is_404(api: Api, user: User) -> None:
    result = api.delete("/current-identity/mfa", token=user.login(), base=CLIENT)

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


# -- recovery codes -------------------------------------------------------------------------------
def _full_session(user: User) -> tuple[str, list[str]]:
    codes = user.enroll(user.login())
    token = user.login()
    assert user.complete(token, user.code()).status_code == 200
    return token, codes


@pytest.mark.parametrize("how", ["header", "body"])
def test_recovery_codes_are_shown_for_a_valid_totp_code(api: Api, user: User, how: str) -> None:
    token, codes = _full_session(user)
    kwargs: dict[str, Any] = (
        {"headers": {"mfa-validation-code": user.code()}}
        if how == "header"
        else {"json": {"code": user.code()}}
    )

    result = api.get("/current-identity/mfa/recovery-codes", token=token, base=CLIENT, **kwargs)

    assert result.status_code == 200
    assert result.json["data"]["recoveryCodes"] == codes
    assert result.json["data"]["_links"]["self"]["href"] == "./current-identity/mfa"


@pytest.mark.parametrize("code", [None, "000000", "recovery"])
def test_recovery_codes_need_a_valid_totp_code(api: Api, user: User, code: str | None) -> None:
    token, codes = _full_session(user)
    if code == "recovery":
        code = codes[0]
    headers = {} if code is None else {"mfa-validation-code": code}

    result = api.get("/current-identity/mfa/recovery-codes", token=token, base=CLIENT, headers=headers)

    assert result.status_code == 401
    assert error(result)["code"] == "MFA_INVALID_TOKEN"


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_recovery_codes_of_an_unverified_enrollment_are_404(api: Api, user: User, method: str) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.request(
        method, "/current-identity/mfa/recovery-codes", token=token, base=CLIENT, json={"code": user.code()}
    )

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


def test_regenerating_replaces_every_recovery_code_and_answers_under_error(api: Api, user: User) -> None:
    token, codes = _full_session(user)

    result = api.post(
        "/current-identity/mfa/recovery-codes", token=token, base=CLIENT, json={"code": user.code()}
    )

    assert result.status_code == 200
    assert "data" not in result.json
    renewed = result.json["error"]["recoveryCodes"]
    assert len(renewed) == 20
    assert set(renewed).isdisjoint(codes)
    old = user.complete(user.login(), codes[1])
    assert old.status_code == 401
    assert user.complete(user.login(), renewed[0]).status_code == 200


def test_regenerating_takes_a_recovery_code_and_uses_it_up(api: Api, user: User) -> None:
    token, codes = _full_session(user)

    result = api.post(
        "/current-identity/mfa/recovery-codes", token=token, base=CLIENT, json={"code": codes[5]}
    )

    assert result.status_code == 200
    assert codes[5] not in result.json["error"]["recoveryCodes"]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [({}, 400, "COULD_NOT_VALIDATE"), ({"code": "000000"}, 401, "MFA_INVALID_TOKEN")],
)
def test_regenerating_needs_a_valid_code(
    api: Api, user: User, body: dict[str, Any], status: int, code: str
) -> None:
    token, codes = _full_session(user)

    result = api.post("/current-identity/mfa/recovery-codes", token=token, base=CLIENT, json=body)

    assert result.status_code == status
    assert error(result)["code"] == code
    listed = api.get(
        "/current-identity/mfa/recovery-codes",
        token=token,
        base=CLIENT,
        headers={"mfa-validation-code": user.code()},
    )
    assert listed.json["data"]["recoveryCodes"] == codes


# -- QR code --------------------------------------------------------------------------------------
def test_qr_code_is_a_png_until_verification(api: Api, user: User) -> None:
    token = user.login()
    user.start_enrollment(token)

    result = api.get("/current-identity/mfa/qr-code", token=token, base=CLIENT)

    assert result.status_code == 200
    assert result.headers["content-type"] == "image/png"
    assert result.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert (
        api.post(
            "/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": user.code()}
        ).status_code
        == 200
    )
    assert api.get("/current-identity/mfa/qr-code", token=token, base=CLIENT).status_code == 404


def test_qr_code_without_an_enrollment_is_404(api: Api, user: User) -> None:
    result = api.get("/current-identity/mfa/qr-code", token=user.login(), base=CLIENT)

    assert result.status_code == 404


# -- administrator ---------------------------------------------------------------------------------
def test_an_admin_removes_an_identitys_mfa(api: Api, user: User) -> None:
    user.enroll(user.login())

    result = api.delete(f"/identities/{user.id}/mfa")

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/identities/{user.id}").json["data"]["isMfaEnabled"] is False
    data = user.authenticate().json["data"]
    assert (data["isMfaRequired"], data["authQueries"]) == (False, [])
    assert api.get("/current-identity/mfa", token=data["token"], base=CLIENT).status_code == 404


def test_removing_mfa_of_an_identity_without_any_is_200(api: Api, user: User) -> None:
    assert api.delete(f"/identities/{user.id}/mfa").status_code == 200


def test_removing_mfa_of_an_unknown_identity_is_404(api: Api) -> None:
    result = api.delete("/identities/no-such-identity/mfa")

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


def test_only_admins_remove_mfa(api: Api, user: User) -> None:
    other = User(api, user.clock)
    result = api.delete(f"/identities/{other.id}/mfa", token=user.login(MGMT))

    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_deleting_an_identity_deletes_its_mfa(api: Api, user: User) -> None:
    user.enroll(user.login())

    assert api.delete(f"/identities/{user.id}").status_code == 200

    assert api.ctrl.managers.mfa.of_identity(user.id) is None


# -- auth policies requiring TOTP ------------------------------------------------------------------
@pytest.fixture
def totp_policy(api: Api) -> str:
    return api.create(
        "/auth-policies",
        {"name": unique("totp"), "primary": {}, "secondary": {"requireTotp": True}},
    )


def test_require_totp_without_an_enrollment_lets_the_identity_enroll(
    api: Api, clock: FixedClock, totp_policy: str
) -> None:
    user = User(api, clock, policy=totp_policy)

    login = user.authenticate().json["data"]

    assert (login["isMfaRequired"], login["isMfaComplete"]) == (True, False)
    assert login["authQueries"] == [TOTP_QUERY]
    token = login["token"]
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 401
    not_enrolled = user.complete(token, "123456")
    assert (not_enrolled.status_code, error(not_enrolled)["code"]) == (401, "MFA_NOT_ENROLLED")
    user.start_enrollment(token)
    assert api.get("/current-identity/mfa/qr-code", token=token, base=CLIENT).status_code == 200
    verified = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": user.code()})
    assert verified.status_code == 200
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 200
    current = api.get("/current-api-session", token=token, base=CLIENT).json["data"]
    assert (current["isMfaComplete"], current["authQueries"]) == (True, [])


def test_require_totp_with_an_enrollment_owes_a_code(api: Api, clock: FixedClock, totp_policy: str) -> None:
    user = User(api, clock, policy=totp_policy)
    first = user.login()
    user.enroll(first)
    assert api.get("/current-identity", token=first, base=CLIENT).status_code == 200

    token = user.login()

    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 401
    assert user.complete(token, user.code()).status_code == 200
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 200


def test_requiring_totp_later_holds_back_existing_sessions(api: Api, clock: FixedClock) -> None:
    policy = api.create("/auth-policies", {"name": unique("later"), "primary": {}, "secondary": {}})
    user = User(api, clock, policy=policy)
    token = user.login()
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 200

    assert api.patch(f"/auth-policies/{policy}", json={"secondary": {"requireTotp": True}}).status_code == 200

    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 401
    assert api.get("/current-api-session", token=token, base=CLIENT).json["data"]["authQueries"] == [
        TOTP_QUERY
    ]
