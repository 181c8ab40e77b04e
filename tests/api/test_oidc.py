"""The OIDC provider at ``/oidc`` (docs/api.md §16) and bearer access tokens on both APIs.

The flows are OpenZiti v1.6.0's as its quickstart answers them (recorded in docs/api.md §16):
``/authorize`` → login page → ``POST /oidc/login/password`` → ``/authorize/callback`` → the
client's redirect URI with a code → ``/oauth/token``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from engine.testing import FixedClock
from pki.totp import totp_code
from tests.api.certs import admin_api, enroll_ott, split_chain, tls, unique
from tests.api.jwt_helpers import make_cert_signer
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

PASSWORD = "user-password-1"
REDIRECT = "http://127.0.0.1:45678/auth/callback"
FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin: Api = admin_api(tmp_path_factory.mktemp("oidc"), pki_template, clock=clock)
    yield admin
    admin.app.ctrl.env.store.close()


def claims_of(token: str) -> dict[str, Any]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def local(location: str) -> str:
    """The path and query of an absolute ``Location``."""
    parts = urlsplit(location)
    return parts.path + ("?" + parts.query if parts.query else "")


class Flow:
    """One authorization-code flow with PKCE, step by step, as OpenZiti's Go SDK drives it."""

    def __init__(self, api: Api, *, client_id: str = "openziti", redirect: str = REDIRECT) -> None:
        self.api = api
        self.client = api.client
        self.client_id = client_id
        self.redirect = redirect
        self.verifier, self.challenge = pkce()
        self.request_id = ""

    def authorize(self, **extra: str) -> Any:
        params = {
            "client_id": self.client_id,
            "response_type": "code",
            "scope": "openid offline_access",
            "redirect_uri": self.redirect,
            "state": "st-1",
            "code_challenge": self.challenge,
            "code_challenge_method": "S256",
            "method": "password",
            **extra,
        }
        params = {k: v for k, v in params.items() if v != ""}
        return self.client.simulate_get("/oidc/authorize", query_string=urlencode(params))

    def start(self) -> str:
        result = self.authorize()
        assert result.status_code == 302, result.text
        page = self.client.simulate_get(local(result.headers["location"]))
        assert page.status_code == 200
        self.request_id = page.headers["auth-request-id"]
        return self.request_id

    def login(self, username: str, password: str, **extra: Any) -> Any:
        body = {"id": self.request_id, "username": username, "password": password, **extra}
        return self.client.simulate_post("/oidc/login/password", json=body)

    def totp(self, code: str) -> Any:
        return self.client.simulate_post("/oidc/login/totp", json={"id": self.request_id, "code": code})

    def callback(self, location: str) -> str:
        result = self.client.simulate_get(local(location))
        assert result.status_code == 302, result.text
        target = result.headers["location"]
        assert target.startswith(self.redirect + "?")
        query = parse_qs(urlsplit(target).query)
        assert query["state"] == ["st-1"]
        return query["code"][0]

    def code(self, username: str, password: str) -> str:
        self.start()
        result = self.login(username, password)
        assert result.status_code == 302, result.text
        return self.callback(result.headers["location"])

    def exchange(self, code: str, verifier: str | None = None, **extra: str) -> Any:
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect,
            "client_id": self.client_id,
            "code_verifier": self.verifier if verifier is None else verifier,
            **extra,
        }
        return self.client.simulate_post("/oidc/oauth/token", body=urlencode(form), headers=FORM)

    def tokens(self, username: str = ADMIN_USER, password: str = ADMIN_PASSWORD) -> dict[str, Any]:
        result = self.exchange(self.code(username, password))
        assert result.status_code == 200, result.text
        return dict(result.json)


def refresh(api: Api, token: str, client_id: str = "openziti") -> Any:
    form = {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
    return api.client.simulate_post("/oidc/oauth/token", body=urlencode(form), headers=FORM)


def bearer(api: Api, path: str, token: str, *, base: str = CLIENT, method: str = "GET") -> Any:
    return api.client.simulate_request(method, base + path, headers={"Authorization": f"Bearer {token}"})


class User:
    def __init__(self, api: Api, *, admin: bool = False) -> None:
        self.api = api
        self.username = unique("oidc-user")
        self.id = api.create("/identities", {"name": self.username, "isAdmin": admin, "type": "User"})
        api.create(
            "/authenticators",
            {"identityId": self.id, "method": "updb", "username": self.username, "password": PASSWORD},
        )


@pytest.fixture
def user(api: Api) -> User:
    return User(api)


# -- discovery and keys ---------------------------------------------------------------------------
def test_discovery_has_openzitis_26_keys_and_endpoints(api: Api) -> None:
    result = api.client.simulate_get("/oidc/.well-known/openid-configuration")

    assert result.status_code == 200
    doc = result.json
    assert len(doc) == 26
    issuer = "https://127.0.0.1:1280/oidc"
    assert doc["issuer"] == issuer
    assert doc["authorization_endpoint"] == issuer + "/authorize"
    assert doc["token_endpoint"] == issuer + "/oauth/token"
    assert doc["jwks_uri"] == issuer + "/keys"
    assert doc["introspection_endpoint"] == issuer + "/oauth/introspect"
    assert doc["code_challenge_methods_supported"] == ["S256"]


def test_keys_publish_the_signing_key(api: Api) -> None:
    keys = api.client.simulate_get("/oidc/keys").json["keys"]
    tokens = Flow(api).tokens()

    header = jwt.get_unverified_header(tokens["access_token"])
    assert [k["kid"] for k in keys] == [header["kid"]]
    key = jwt.PyJWK(keys[0])
    claims = jwt.decode(
        tokens["access_token"],
        key.key,
        algorithms=[header["alg"]],
        audience="openziti",
        options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},  # the test's clock
    )
    assert claims["z_t"] == "a"


# -- the authorization-code flow ------------------------------------------------------------------
def test_a_pkce_password_flow_answers_as_openziti(api: Api, user: User) -> None:
    flow = Flow(api)
    started = flow.authorize()
    assert started.status_code == 302
    assert started.headers["location"].startswith("/oidc/login/username?authRequestID=")
    page = api.client.simulate_get(started.headers["location"])
    assert page.status_code == 200
    assert page.headers["auth-request-id"]
    flow.request_id = page.headers["auth-request-id"]

    logged_in = flow.login(user.username, PASSWORD, configTypes=["host.v1"], sdkInfo={"type": "probe"})
    assert logged_in.status_code == 302
    assert logged_in.headers["location"].startswith("https://127.0.0.1:1280/oidc/authorize/callback?id=")
    code = flow.callback(logged_in.headers["location"])
    result = flow.exchange(code)

    assert result.status_code == 200, result.text
    body = result.json
    assert set(body) == {"access_token", "token_type", "refresh_token", "expires_in", "id_token", "state"}
    assert body["token_type"] == "Bearer"
    assert body["state"] == "st-1"
    access = claims_of(body["access_token"])
    assert access["aud"] == ["openziti"]
    assert access["iss"] == "https://127.0.0.1:1280/oidc"
    assert access["sub"] == user.id
    assert access["z_t"] == "a"
    assert access["z_aid"] == "openziti"
    assert access["z_ia"] is False
    assert access["scopes"] == ["openid", "offline_access"]
    assert access["z_sdk"] == {"type": "probe"}
    assert access["exp"] - access["iat"] == body["expires_in"]
    session = api.get(f"/api-sessions/{access['z_asid']}")
    assert session.status_code == 200
    assert session.json["data"]["identityId"] == user.id
    assert len(access["z_ct"]) == 1
    refresh_claims = claims_of(body["refresh_token"])
    assert refresh_claims["z_t"] == "r"
    assert refresh_claims["client_id"] == "openziti"
    assert refresh_claims["amr"] == ["password"]
    assert refresh_claims["exp"] - refresh_claims["iat"] == 24 * 3600
    id_claims = claims_of(body["id_token"])
    assert id_claims["name"] == user.username
    assert id_claims["azp"] == "openziti"
    assert {"at_hash", "c_hash", "auth_time"} <= set(id_claims)


def test_the_legacy_native_client_gets_its_own_audience(api: Api) -> None:
    tokens = Flow(api, client_id="native", redirect="http://localhost:5555/auth/callback").tokens()

    assert claims_of(tokens["access_token"])["aud"] == ["native"]
    assert bearer(api, "/current-api-session", tokens["access_token"]).status_code == 200


def test_a_wrong_password_is_openzitis_invalid_auth_and_the_request_can_try_again(
    api: Api, user: User
) -> None:
    flow = Flow(api)
    flow.start()

    wrong = flow.login(user.username, "not-it")
    assert wrong.status_code == 401
    assert wrong.json["error"]["code"] == "INVALID_AUTH"
    right = flow.login(user.username, PASSWORD)
    assert right.status_code == 302


def test_a_form_login_works_as_the_go_sdk_posts_it(api: Api, user: User) -> None:
    flow = Flow(api)
    flow.start()
    form = {
        "id": flow.request_id,
        "username": user.username,
        "password": PASSWORD,
        "configTypes": "host.v1",
        "sdkType": "golang",
        "sdkAppID": "tunnel",
        "envOs": "linux",
    }

    result = api.client.simulate_post("/oidc/login/password", body=urlencode(form), headers=FORM)

    assert result.status_code == 302
    tokens = flow.exchange(flow.callback(result.headers["location"])).json
    access = claims_of(tokens["access_token"])
    assert access["z_sdk"] == {"type": "golang", "appId": "tunnel"}
    assert access["z_env"] == {"os": "linux"}


def test_a_login_body_neither_form_nor_json_is_415(api: Api) -> None:
    result = api.client.simulate_post(
        "/oidc/login/password", body="x", headers={"content-type": "text/plain"}
    )

    assert result.status_code == 415
    assert result.json["code"] == "UNSUPPORTED_MEDIA_TYPE"


# -- refresh --------------------------------------------------------------------------------------
def test_refresh_rotates_and_a_replayed_refresh_token_is_refused(api: Api) -> None:
    tokens = Flow(api).tokens()
    first = tokens["refresh_token"]

    refreshed = refresh(api, first)
    assert refreshed.status_code == 200, refreshed.text
    second = refreshed.json["refresh_token"]
    assert claims_of(second)["jti"] != claims_of(first)["jti"]
    assert claims_of(refreshed.json["access_token"])["z_asid"] == claims_of(tokens["access_token"])["z_asid"]

    replayed = refresh(api, first)
    assert replayed.status_code == 400
    assert replayed.json == {"error": "invalid_grant"}
    assert "access_token" not in replayed.json
    assert refresh(api, second).status_code == 200


def test_refresh_by_another_client_is_refused(api: Api) -> None:
    tokens = Flow(api).tokens()

    assert refresh(api, tokens["refresh_token"], client_id="native").json == {"error": "invalid_grant"}


def test_an_access_token_is_no_refresh_token(api: Api) -> None:
    tokens = Flow(api).tokens()

    assert refresh(api, tokens["access_token"]).json == {"error": "invalid_grant"}


def test_refresh_keeps_working_past_the_access_tokens_expiry(api: Api, clock: FixedClock) -> None:
    tokens = Flow(api).tokens()
    clock.advance(timedelta(seconds=tokens["expires_in"] + 1))

    assert bearer(api, "/current-api-session", tokens["access_token"]).status_code == 401
    refreshed = refresh(api, tokens["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    assert bearer(api, "/current-api-session", refreshed.json["access_token"]).status_code == 200


def test_token_exchange_as_the_go_sdk_refreshes(api: Api) -> None:
    tokens = Flow(api, client_id="native", redirect="http://127.0.0.1:4000/auth/callback").tokens()
    basic = {"Authorization": "Basic " + base64.b64encode(b"native:").decode(), **FORM}

    def exchange(requested: str) -> Any:
        form = {
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": tokens["refresh_token"],
            "subject_token_type": "urn:ietf:params:oauth:token-type:refresh_token",
            "requested_token_type": requested,
        }
        return api.client.simulate_post("/oidc/oauth/token", body=urlencode(form), headers=basic)

    for_refresh = exchange("urn:ietf:params:oauth:token-type:refresh_token")
    for_id = exchange("urn:ietf:params:oauth:token-type:id_token")

    assert for_refresh.status_code == 200, for_refresh.text
    assert set(for_refresh.json) == {
        "access_token",
        "issued_token_type",
        "token_type",
        "expires_in",
        "refresh_token",
    }
    assert bearer(api, "/current-identity", for_refresh.json["access_token"]).status_code == 200
    assert for_id.status_code == 200
    assert for_id.json["token_type"] == "N_A"
    assert claims_of(for_id.json["access_token"])["azp"] == "native"


# -- bearer tokens on both APIs -------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_a_bearer_token_is_the_api_session(api: Api, base: str) -> None:
    tokens = Flow(api).tokens()
    access = tokens["access_token"]

    current = bearer(api, "/current-api-session", access, base=base)

    assert current.status_code == 200, current.text
    assert current.json["data"]["id"] == claims_of(access)["z_asid"]
    assert current.json["data"]["token"] == access
    assert bearer(api, "/current-identity", access, base=base).json["data"]["name"]


def test_a_bearer_token_has_its_identitys_authorization(api: Api, user: User) -> None:
    admin = Flow(api).tokens()["access_token"]
    plain = Flow(api).tokens(user.username, PASSWORD)["access_token"]

    assert bearer(api, "/identities", admin, base=MGMT).status_code == 200
    denied = bearer(api, "/identities", plain, base=MGMT)
    assert denied.status_code == 401
    assert denied.json["error"]["code"] == "UNAUTHORIZED"
    assert bearer(api, "/services", plain).status_code == 200


def test_logging_out_ends_the_tokens(api: Api) -> None:
    tokens = Flow(api).tokens()

    assert bearer(api, "/current-api-session", tokens["access_token"], method="DELETE").status_code == 200
    assert bearer(api, "/current-api-session", tokens["access_token"]).status_code == 401
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}


def test_an_administrator_deleting_the_api_session_stops_refresh_at_once(api: Api) -> None:
    tokens = Flow(api).tokens()
    session_id = claims_of(tokens["access_token"])["z_asid"]

    assert api.delete(f"/api-sessions/{session_id}").status_code == 200

    assert bearer(api, "/current-identity", tokens["access_token"]).status_code == 401
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}


def test_disabling_the_identity_stops_its_tokens(api: Api, user: User) -> None:
    tokens = Flow(api).tokens(user.username, PASSWORD)

    assert api.post(f"/identities/{user.id}/disable", json={"durationMinutes": 0}).status_code == 200

    assert bearer(api, "/current-identity", tokens["access_token"]).status_code == 401
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}


# -- hostile tokens -------------------------------------------------------------------------------
def _resigned(token: str, **changes: Any) -> str:
    """``token``'s claims changed and signed again with a key of our own (same header)."""
    header = jwt.get_unverified_header(token)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode({**claims_of(token), **changes}, key, algorithm="RS256", headers={"kid": header["kid"]})


def _unsigned(token: str) -> str:
    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return b64({"alg": "none", "typ": "JWT"}) + "." + b64(claims_of(token)) + "."


def _with_key(api: Api, token: str, **changes: Any) -> str:
    """``token``'s claims changed, signed with the controller's own key (what only a bug would do)."""
    return str(api.ctrl.env.tokens.sign({**claims_of(token), **changes}))


@pytest.mark.parametrize(
    "case",
    ["other key", "alg none", "wrong audience", "expired", "not yet valid", "refresh token", "id token"],
)
def test_hostile_bearer_tokens_are_refused(api: Api, case: str) -> None:
    tokens = Flow(api).tokens()
    access = tokens["access_token"]
    now = int(api.ctrl.env.clock.now().timestamp())
    forge: dict[str, Callable[[], str]] = {
        "other key": lambda: _resigned(access),
        "alg none": lambda: _unsigned(access),
        "wrong audience": lambda: _with_key(api, access, aud=["someone-else"]),
        "expired": lambda: _with_key(api, access, exp=now - 1),
        "not yet valid": lambda: _with_key(api, access, nbf=now + 3600),
        "refresh token": lambda: tokens["refresh_token"],
        "id token": lambda: tokens["id_token"],
    }
    token = forge[case]()

    for base in (CLIENT, MGMT):
        result = bearer(api, "/current-api-session", token, base=base)
        assert result.status_code == 401, (case, result.text)
        assert result.json["error"]["code"] == "UNAUTHORIZED"


@pytest.mark.parametrize("case", ["other key", "alg none", "expired"])
def test_hostile_refresh_tokens_are_refused(api: Api, case: str) -> None:
    token = Flow(api).tokens()["refresh_token"]
    now = int(api.ctrl.env.clock.now().timestamp())
    forge: dict[str, Callable[[], str]] = {
        "other key": lambda: _resigned(token),
        "alg none": lambda: _unsigned(token),
        "expired": lambda: _with_key(api, token, exp=now - 1),
    }
    forged = forge[case]()

    result = refresh(api, forged)

    assert result.status_code == 400
    assert result.json == {"error": "invalid_grant"}


# -- hostile flows --------------------------------------------------------------------------------
def test_a_replayed_code_is_refused_and_ends_what_it_gave(api: Api) -> None:
    flow = Flow(api)
    code = flow.code(ADMIN_USER, ADMIN_PASSWORD)
    tokens = flow.exchange(code).json

    again = flow.exchange(code)

    assert again.status_code == 400
    assert again.json == {"error": "invalid_grant", "error_description": "invalid code"}
    assert bearer(api, "/current-api-session", tokens["access_token"]).status_code == 401
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}


def test_a_wrong_pkce_verifier_is_refused_and_the_code_still_works(api: Api) -> None:
    flow = Flow(api)
    code = flow.code(ADMIN_USER, ADMIN_PASSWORD)

    wrong = flow.exchange(code, verifier="x" * 50)
    missing = flow.exchange(code, verifier="")

    assert wrong.status_code == 400
    assert wrong.json == {"error": "invalid_grant", "error_description": "invalid code challenge"}
    assert missing.json == {"error": "invalid_request", "error_description": "code_challenge required"}
    assert flow.exchange(code).status_code == 200


def test_a_code_for_another_redirect_uri_or_client_is_refused(api: Api) -> None:
    flow = Flow(api)
    code = flow.code(ADMIN_USER, ADMIN_PASSWORD)

    other_uri = flow.exchange(code, redirect_uri="http://127.0.0.1:1/auth/callback")
    other_client = flow.exchange(code, client_id="native")

    assert other_uri.json["error"] == "invalid_grant"
    assert other_client.json["error"] == "invalid_grant"


@pytest.mark.parametrize(
    "redirect",
    [
        "https://evil.example/auth/callback",
        "http://127.0.0.1:45678/other",
        "http://127.0.0.1:45678/auth/callback?x=1",
        "http://127.0.0.1:0/auth/callback",
        "http://user@127.0.0.1:80/auth/callback",
    ],
)
def test_a_redirect_uri_not_allowed_is_refused_as_text(api: Api, redirect: str) -> None:
    result = Flow(api, redirect=redirect).authorize()

    assert result.status_code == 400
    assert "location" not in result.headers
    assert "redirect_uri" in result.text


def test_an_unknown_client_is_refused(api: Api) -> None:
    result = Flow(api, client_id="nope").authorize()

    assert result.status_code == 400
    assert result.text == "unable to retrieve client by id"


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"code_challenge": "", "code_challenge_method": ""}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"scope": ""}, "invalid_request"),
        ({"response_type": "token"}, "unauthorized_client"),
        ({"prompt": "none"}, "login_required"),
    ],
)
def test_a_bad_authorization_request_goes_back_to_the_client(
    api: Api, extra: dict[str, str], error: str
) -> None:
    result = Flow(api).authorize(**extra)

    assert result.status_code == 302
    target = urlsplit(result.headers["location"])
    assert f"{target.scheme}://{target.netloc}{target.path}" == REDIRECT
    query = parse_qs(target.query)
    assert query["error"] == [error]
    assert "code" not in query


def test_a_disabled_identity_cannot_log_in(api: Api, user: User) -> None:
    assert api.post(f"/identities/{user.id}/disable", json={"durationMinutes": 0}).status_code == 200
    flow = Flow(api)
    flow.start()

    result = flow.login(user.username, PASSWORD)

    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"


def test_lockout_applies_to_oidc_logins(api: Api) -> None:
    policy = api.create(
        "/auth-policies",
        {
            "name": unique("lockout"),
            "primary": {
                "cert": {"allowed": True, "allowExpiredCerts": False},
                "extJwt": {"allowed": False, "allowedSigners": []},
                "updb": {
                    "allowed": True,
                    "lockoutDurationMinutes": 0,
                    "maxAttempts": 2,
                    "minPasswordLength": 5,
                    "requireMixedCase": False,
                    "requireNumberChar": False,
                    "requireSpecialChar": False,
                },
            },
            "secondary": {"requireTotp": False},
        },
    )
    user = User(api)
    assert api.patch(f"/identities/{user.id}", json={"authPolicyId": policy}).status_code == 200
    flow = Flow(api)
    flow.start()

    assert flow.login(user.username, "wrong-1").status_code == 401
    assert flow.login(user.username, "wrong-2").status_code == 401
    locked = flow.login(user.username, PASSWORD)

    assert locked.status_code == 401
    assert api.get(f"/identities/{user.id}").json["data"]["disabled"] is True


def test_an_auth_request_that_is_not_ours_is_refused(api: Api) -> None:
    flow = Flow(api)
    flow.request_id = "not-a-request"

    assert flow.login(ADMIN_USER, ADMIN_PASSWORD).status_code == 401
    callback = api.client.simulate_get("/oidc/authorize/callback", params={"id": "nope"})
    assert callback.status_code == 401


def test_the_callback_before_login_issues_nothing(api: Api) -> None:
    flow = Flow(api)
    flow.start()

    result = api.client.simulate_get("/oidc/authorize/callback", params={"id": flow.request_id})

    assert result.status_code == 401
    assert "location" not in result.headers


def test_an_auth_request_logs_in_once_and_gives_one_code(api: Api) -> None:
    flow = Flow(api)
    flow.start()
    first = flow.login(ADMIN_USER, ADMIN_PASSWORD)
    assert first.status_code == 302

    assert flow.login(ADMIN_USER, ADMIN_PASSWORD).status_code == 401
    flow.callback(first.headers["location"])
    assert api.client.simulate_get(local(first.headers["location"])).status_code == 401


@pytest.mark.parametrize("grant", ["password", "client_credentials", "implicit"])
def test_other_grants_are_unsupported(api: Api, grant: str) -> None:
    form = {"grant_type": grant, "client_id": "openziti", "username": ADMIN_USER, "password": ADMIN_PASSWORD}

    result = api.client.simulate_post("/oidc/oauth/token", body=urlencode(form), headers=FORM)

    assert result.status_code == 400
    assert result.json["error"] == "unsupported_grant_type"


def test_the_token_endpoint_needs_a_known_client(api: Api) -> None:
    form = {"grant_type": "authorization_code", "code": "x"}

    result = api.client.simulate_post("/oidc/oauth/token", body=urlencode(form), headers=FORM)

    assert result.status_code == 401
    assert result.json == {"error": "invalid_client"}


# -- MFA --------------------------------------------------------------------------------------------
def test_the_totp_step_when_mfa_is_owed(api: Api, user: User, clock: FixedClock) -> None:
    token = api.login(user.username, PASSWORD, base=CLIENT)
    assert api.post("/current-identity/mfa", token=token, base=CLIENT).status_code == 201
    detail = api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]
    secret = parse_qs(urlsplit(detail["provisioningUrl"]).query)["secret"][0]
    clock.advance(timedelta(seconds=30))
    verified = api.post(
        "/current-identity/mfa/verify",
        token=token,
        base=CLIENT,
        json={"code": totp_code(secret, clock.now())},
    )
    assert verified.status_code == 200
    flow = Flow(api)
    flow.start()

    owed = flow.login(user.username, PASSWORD)
    assert owed.status_code == 200
    assert owed.headers["totp-required"] == "true"
    assert owed.json["authQueries"] == [
        {
            "typeId": "TOTP",
            "provider": "ziti",
            "httpMethod": "POST",
            "httpUrl": "./oidc/login/totp",
            "format": "numeric",
            "minLength": 6,
            "maxLength": 8,
        }
    ]
    early = api.client.simulate_get("/oidc/authorize/callback", params={"id": flow.request_id})
    assert early.status_code == 401
    clock.advance(timedelta(seconds=30))
    assert flow.totp("000000").status_code == 401
    passed = flow.totp(totp_code(secret, clock.now()))
    assert passed.status_code == 302, passed.text
    tokens = flow.exchange(flow.callback(passed.headers["location"])).json
    assert claims_of(tokens["refresh_token"])["amr"] == ["password", "totp"]
    current = bearer(api, "/current-api-session", tokens["access_token"])
    assert current.json["data"]["isMfaComplete"] is True
    assert bearer(api, "/services", tokens["access_token"]).status_code == 200


# -- userinfo, revocation, end of session -------------------------------------------------------
def test_userinfo_names_the_subject(api: Api, user: User) -> None:
    tokens = Flow(api).tokens(user.username, PASSWORD)

    result = api.client.simulate_get(
        "/oidc/userinfo", headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    anonymous = api.client.simulate_get("/oidc/userinfo")

    assert result.json == {"sub": user.id, "name": user.username, "z_ia": False}
    assert anonymous.status_code == 401
    assert anonymous.json["error"] == "invalid_token"


def test_revoking_a_refresh_token_ends_the_session(api: Api) -> None:
    tokens = Flow(api).tokens()
    form = {"token": tokens["refresh_token"], "client_id": "openziti", "token_type_hint": "refresh_token"}

    result = api.client.simulate_post("/oidc/revoke", body=urlencode(form), headers=FORM)

    assert result.status_code == 200
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}
    assert bearer(api, "/current-identity", tokens["access_token"]).status_code == 401
    garbage = api.client.simulate_post(
        "/oidc/revoke", body=urlencode({"token": "x", "client_id": "openziti"}), headers=FORM
    )
    assert garbage.status_code == 200
    anonymous = api.client.simulate_post("/oidc/revoke", body=urlencode({"token": "x"}), headers=FORM)
    assert anonymous.status_code == 401


def test_end_session_logs_out_and_goes_to_logged_out(api: Api) -> None:
    tokens = Flow(api).tokens()

    result = api.client.simulate_get(
        "/oidc/end_session", params={"id_token_hint": tokens["id_token"], "client_id": "openziti"}
    )

    assert result.status_code == 302
    assert result.headers["location"] == "/oidc/logged-out"
    assert bearer(api, "/current-identity", tokens["access_token"]).status_code == 401
    assert api.client.simulate_get("/oidc/logged-out").text == "signed out successfully"


def test_introspection_and_device_authorization_are_refused_as_openziti_does(api: Api) -> None:
    introspect = api.client.simulate_post("/oidc/oauth/introspect", body="token=x", headers=FORM)
    device = api.client.simulate_post("/oidc/device_authorization", body="client_id=openziti", headers=FORM)

    assert introspect.status_code == 401
    assert introspect.json["error"] == "invalid_client"
    assert device.status_code == 400
    assert device.json["error"] == "unauthorized_client"


def test_oidc_paths_are_not_client_api_aliases(api: Api) -> None:
    assert api.client.simulate_get("/oidc/nothing").status_code == 404


# -- certificate and external JWT logins ----------------------------------------------------------
def test_a_certificate_login_from_the_tls_client_certificate(api: Api) -> None:
    device = enroll_ott(api, unique("oidc-device"))
    flow = Flow(api)
    # no method: the certificate the TLS handshake presented chooses the certificate login
    result = api.client.simulate_get(
        "/oidc/authorize",
        query_string=urlencode(
            {
                "client_id": "openziti",
                "response_type": "code",
                "scope": "openid offline_access",
                "redirect_uri": REDIRECT,
                "state": "st-1",
                "code_challenge": flow.challenge,
                "code_challenge_method": "S256",
            }
        ),
        extras=tls(device.leaf),
    )
    assert result.headers["location"].startswith("/oidc/login/cert?authRequestID=")
    page = api.client.simulate_get(local(result.headers["location"]))
    assert page.text == "please POST to this URL"
    flow.request_id = page.headers["auth-request-id"]

    without = api.client.simulate_post("/oidc/login/cert", json={"id": flow.request_id})
    assert without.status_code == 401
    logged_in = api.client.simulate_post(
        "/oidc/login/cert", json={"id": flow.request_id}, extras=tls(*split_chain(device.chain))
    )

    assert logged_in.status_code == 302, logged_in.text
    tokens = flow.exchange(flow.callback(logged_in.headers["location"])).json
    assert claims_of(tokens["access_token"])["sub"] == device.identity_id
    assert claims_of(tokens["refresh_token"])["amr"] == ["cert"]
    assert bearer(api, "/current-identity", tokens["access_token"]).json["data"]["id"] == device.identity_id


def test_an_external_jwt_login(api: Api, clock: FixedClock) -> None:
    signer = make_cert_signer(api, clock)
    person = api.create("/identities", {"name": unique("person"), "isAdmin": False, "type": "User"})
    flow = Flow(api)
    flow.start()

    refused = api.client.simulate_post(
        "/oidc/login/ext-jwt",
        json={"id": flow.request_id},
        headers={"Authorization": f"Bearer {signer.token('somebody-else')}"},
    )
    logged_in = api.client.simulate_post(
        "/oidc/login/ext-jwt",
        json={"id": flow.request_id},
        headers={"Authorization": f"Bearer {signer.token(person)}"},
    )

    assert refused.status_code == 401
    assert logged_in.status_code == 302, logged_in.text
    tokens = flow.exchange(flow.callback(logged_in.headers["location"])).json
    assert claims_of(tokens["access_token"])["sub"] == person
    assert claims_of(tokens["access_token"])["z_authid"] == f"extJwtId:{signer.id}"
    assert refresh(api, tokens["refresh_token"]).status_code == 200
    assert api.patch(f"/external-jwt-signers/{signer.id}", json={"enabled": False}).status_code == 200
    assert refresh(api, tokens["refresh_token"]).json == {"error": "invalid_grant"}


# -- hostile input: no answer is a 5xx ----------------------------------------------------------------
OIDC_KEYS = [
    "id", "authRequestID", "client_id", "response_type", "scope", "redirect_uri", "state", "nonce",
    "code_challenge", "code_challenge_method", "method", "prompt", "grant_type", "code",
    "code_verifier", "refresh_token", "subject_token", "subject_token_type",
    "requested_token_type", "audience", "token", "token_type_hint", "id_token_hint",
    "post_logout_redirect_uri", "username", "password", "configTypes", "sdkType", "envOs",
]  # fmt: skip
HEADERS = ["", "Bearer ", "Basic ", "Basic bmF0aXZlOg==", "bearer x.y.z", "Bearer e30.e30.", "garbage"]


def test_no_oidc_request_is_answered_5xx(api: Api) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from api.oidc import PATHS
    from tests.conftest import examples

    tokens = Flow(api).tokens()
    flow = Flow(api)
    flow.start()
    known = [*tokens.values(), flow.request_id, "openziti", "native", REDIRECT, "S256", "password"]
    known += [
        "authorization_code",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:token-exchange",
        "urn:ietf:params:oauth:token-type:refresh_token",
        "urn:ietf:params:oauth:token-type:id_token",
    ]
    value = st.one_of(st.sampled_from([str(k) for k in known]), st.text(max_size=80))
    fields = st.dictionaries(st.one_of(st.sampled_from(OIDC_KEYS), st.text(max_size=12)), value, max_size=8)
    bodies = st.one_of(
        fields.map(lambda f: (urlencode(f).encode(), "application/x-www-form-urlencoded")),
        fields.map(lambda f: (json.dumps(f).encode(), "application/json")),
        st.binary(max_size=300).map(lambda b: (b, "application/json")),
        st.binary(max_size=300).map(lambda b: (b, "application/x-www-form-urlencoded")),
        st.binary(max_size=100).map(lambda b: (b, "text/plain")),
        st.just((b"", "")),
    )
    authorization = st.one_of(
        st.sampled_from(HEADERS),
        st.sampled_from([f"Bearer {t}" for t in tokens.values()]),
        st.text(max_size=60).map(lambda t: "Bearer " + t),
    )

    @settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
    @given(
        path=st.sampled_from(PATHS),
        method=st.sampled_from(["GET", "POST"]),
        query=fields,
        body=bodies,
        auth=authorization,
    )
    def answered(path: str, method: str, query: dict[str, str], body: tuple[bytes, str], auth: str) -> None:
        headers = {"content-type": body[1]} if body[1] else {}
        if auth and auth.isascii() and "\n" not in auth and "\r" not in auth:
            headers["Authorization"] = auth
        result = api.client.simulate_request(
            method,
            path,
            query_string=urlencode(query),
            body=body[0] if method == "POST" else None,
            headers=headers,
        )
        assert result.status_code < 500, (path, method, query, body, result.text[:300])

    answered()
