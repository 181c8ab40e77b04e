"""The OIDC provider beside OpenZiti v1.6.0's: the same flows, the same answers, or a listed reason.

OpenZiti's ``ziti edge quickstart`` (no router) and ``trellis serve`` each get the same script
(:func:`observe`): discovery, ``/version``, the PKCE password flow step by step as the Go SDK runs
it, the tokens' claims, bearer tokens on both APIs, refresh and its replay, token exchange, and
the hostile cases (replayed code, wrong verifier, redirect URI or client not allowed, a bad
authorization request, forged bearer tokens, other grants). Each step is an observation: statuses,
the shape of redirects, the keys of answers and tokens, and the values that do not depend on the
side (ids, times and signatures are left out). Every difference must be one of :data:`ALLOWED`,
each with its reason (docs/api.md §16.3); the test fails on another difference and on an allowed
one that no longer happens.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.e2e.openziti import OpenZiti
from tests.e2e.server import CLIENT, MGMT, Server
from tests.e2e.ziti_cli import SKIP_ENV

pytestmark = [
    pytest.mark.seconds(40),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(bool(os.environ.get(SKIP_ENV)), reason=f"{SKIP_ENV} is set"),
]

REDIRECT = "http://127.0.0.1:45678/auth/callback"
FORM = {"content-type": "application/x-www-form-urlencoded"}

#: (step, what) -> why Trellis answers otherwise (docs/api.md §16.3).
ALLOWED = {
    (
        "login-wrong-password",
        "content-type",
    ): "a failed login step answers OpenZiti's JSON envelope, not its HTML page",
    (
        "token",
        "expires_in",
    ): "an access token lives half the API session's idle timeout (15 min by default), not 30 min",
    ("token", "access-claims"): "access tokens also carry amr and auth_time",
    ("token", "id-claims"): "id tokens also carry z_asid (end_session ends that session)",
    ("refresh", "access-claims"): "as token",
    ("refresh", "id-claims"): "as token",
    ("refresh", "expires_in"): "as token",
    (
        "refresh-replayed",
        "body",
    ): "invalid_grant; OpenZiti's server_error is an accident of its revocation store",
    ("exchange-refresh", "expires_in"): "as token",
    ("authorize-without-pkce", "error"): "PKCE S256 is required at once; OpenZiti refuses the code later",
    ("authorize-without-pkce", "location"): "as above: back to the client with invalid_request",
    ("userinfo", "body"): "sub, name and z_ia, as OIDC Core §5.3 requires; OpenZiti answers {}",
    ("api-sessions", "listed"): "every OIDC login is an API session; OpenZiti keeps none",
    (
        "code-replayed",
        "first-tokens-after",
    ): "a code presented again ends the session it gave (RFC 6749 §4.1.2)",
}


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(
        b"="
    ).decode()


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def error_of(answer: requests.Response) -> Any:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:80]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return body["error"].get("code")
    return body


Call = Callable[..., requests.Response]


def observe(call: Call, base: str, password: str) -> dict[str, dict[str, Any]]:
    """The script, run against one side (``call(method, path, **kwargs)``; ``base`` its URL)."""
    seen: dict[str, dict[str, Any]] = {}
    doc = call("GET", "/oidc/.well-known/openid-configuration").json()
    issuer = doc["issuer"]
    seen["discovery"] = {
        "keys": sorted(doc),
        "issuer": issuer == base + "/oidc",
        "endpoints": {
            k: v.removeprefix(issuer) for k, v in doc.items() if k.endswith("_endpoint") or k == "jwks_uri"
        },
        "pkce": doc["code_challenge_methods_supported"],
    }
    version = call("GET", "/version").json()["data"]
    seen["version"] = {
        "capabilities": version["capabilities"],
        "oidc": version["apiVersions"]["edge-oidc"]["v1"]["path"],
    }

    def authorize(**extra: str) -> requests.Response:
        verifier, challenge = pkce()
        params = {
            "client_id": "openziti",
            "response_type": "code",
            "scope": "openid offline_access",
            "redirect_uri": REDIRECT,
            "state": "st-1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "method": "password",
            **extra,
        }
        answer = call("GET", "/oidc/authorize", params={k: v for k, v in params.items() if v != ""})
        answer.verifier = verifier  # type: ignore[attr-defined]
        return answer

    def start(client_id: str = "openziti") -> tuple[str, str]:
        answer = authorize(client_id=client_id)
        page = call("GET", answer.headers["location"])
        return page.headers["auth-request-id"], answer.verifier  # type: ignore[attr-defined]

    def code_for(client_id: str = "openziti") -> tuple[str, str]:
        request_id, verifier = start(client_id)
        login = call(
            "POST", "/oidc/login/password", json={"id": request_id, "username": "admin", "password": password}
        )
        back = call("GET", login.headers["location"])
        return parse_qs(urlsplit(back.headers["location"]).query)["code"][0], verifier

    def token(form: dict[str, str], **kwargs: Any) -> requests.Response:
        return call("POST", "/oidc/oauth/token", data=form, **kwargs)

    started = authorize()
    location = started.headers.get("location", "")
    seen["authorize"] = {"status": started.status_code, "location": location.split("=")[0]}
    page = call("GET", location)
    request_id = page.headers.get("auth-request-id", "")
    seen["login-page"] = {"status": page.status_code, "auth-request-id": bool(request_id)}
    wrong = call(
        "POST", "/oidc/login/password", json={"id": request_id, "username": "admin", "password": "nope"}
    )
    seen["login-wrong-password"] = {
        "status": wrong.status_code,
        "content-type": wrong.headers.get("content-type", "").split(";")[0],
    }
    login = call(
        "POST", "/oidc/login/password", json={"id": request_id, "username": "admin", "password": password}
    )
    seen["login"] = {
        "status": login.status_code,
        "location": login.headers.get("location", "").removeprefix(base).split("=")[0],
    }
    back = call("GET", login.headers["location"])
    target = urlsplit(back.headers["location"])
    query = parse_qs(target.query)
    seen["callback"] = {
        "status": back.status_code,
        "to": f"{target.scheme}://{target.netloc}{target.path}",
        "query": sorted(query),
        "state": query.get("state"),
    }
    code = query["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": "openziti",
    }
    wrong_verifier = token({**form, "code_verifier": "x" * 50})
    seen["token-wrong-verifier"] = {"status": wrong_verifier.status_code, "body": wrong_verifier.json()}
    issued = token({**form, "code_verifier": started.verifier})  # type: ignore[attr-defined]
    tokens = issued.json()

    def token_observation(answer: requests.Response) -> dict[str, Any]:
        body = answer.json()
        access = claims(body["access_token"])
        out = {
            "status": answer.status_code,
            "keys": sorted(body),
            "token_type": body.get("token_type"),
            "expires_in": body.get("expires_in", 0) // 60,
            "access-claims": sorted(access),
            "access": {k: access.get(k) for k in ("aud", "z_t", "z_aid", "scopes", "z_ia", "z_cfs", "z_ice")},
            "id-claims": sorted(claims(body["id_token"])) if "id_token" in body else None,
        }
        if "refresh_token" in body:
            refresh = claims(body["refresh_token"])
            out["refresh-claims"] = sorted(refresh)
            out["refresh"] = {k: refresh.get(k) for k in ("aud", "z_t", "amr", "client_id", "scopes")}
            out["refresh-hours"] = (refresh["exp"] - refresh["iat"]) // 3600
        return out

    seen["token"] = token_observation(issued)
    other_code, other_verifier = code_for()
    other_form = {**form, "code": other_code, "code_verifier": other_verifier}
    first = token(other_form).json()
    replayed = token(other_form)
    still = call(
        "GET", CLIENT + "/current-identity", headers={"authorization": f"Bearer {first['access_token']}"}
    )
    seen["code-replayed"] = {
        "status": replayed.status_code,
        "body": replayed.json(),
        "first-tokens-after": still.status_code,
    }

    access = tokens["access_token"]
    for api, path in (("client", CLIENT), ("management", MGMT)):
        current = call("GET", path + "/current-api-session", headers={"authorization": f"Bearer {access}"})
        seen[f"bearer-{api}"] = {
            "status": current.status_code,
            "id-is-z_asid": current.json()["data"]["id"] == claims(access)["z_asid"],
            "token": current.json()["data"]["token"] == access,
        }
    sessions = call("GET", MGMT + "/api-sessions", headers={"authorization": f"Bearer {access}"})
    seen["api-sessions"] = {
        "status": sessions.status_code,
        "listed": any(s["id"] == claims(access)["z_asid"] for s in sessions.json()["data"]),
    }
    for name, forged in (
        ("bearer-tampered", access[:-6] + "AAAAAA"),
        ("bearer-alg-none", "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0." + access.split(".")[1] + "."),
    ):
        answer = call("GET", CLIENT + "/current-api-session", headers={"authorization": f"Bearer {forged}"})
        seen[name] = {"status": answer.status_code, "error": error_of(answer)}
    info = call("GET", "/oidc/userinfo", headers={"authorization": f"Bearer {access}"})
    seen["userinfo"] = {"status": info.status_code, "body": sorted(info.json())}

    refreshed = token(
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "openziti"}
    )
    seen["refresh"] = token_observation(refreshed)
    again = token(
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": "openziti"}
    )
    seen["refresh-replayed"] = {"status": again.status_code, "body": again.json().get("error")}

    native_code, native_verifier = code_for("native")
    native = token(
        {
            "grant_type": "authorization_code",
            "code": native_code,
            "redirect_uri": REDIRECT,
            "client_id": "native",
            "code_verifier": native_verifier,
        }
    ).json()
    for requested in ("refresh_token", "id_token"):
        exchanged = token(
            {
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": native["refresh_token"],
                "subject_token_type": "urn:ietf:params:oauth:token-type:refresh_token",
                "requested_token_type": f"urn:ietf:params:oauth:token-type:{requested}",
            },
            auth=("native", ""),
        )
        body = exchanged.json()
        seen[f"exchange-{requested.split('_')[0]}"] = {
            "status": exchanged.status_code,
            "keys": sorted(body),
            "issued_token_type": body.get("issued_token_type"),
            "token_type": body.get("token_type"),
            "expires_in": body.get("expires_in", 0) // 60,
        }

    for name, extra in (
        ("authorize-redirect-not-allowed", {"redirect_uri": "https://evil.example/auth/callback"}),
        ("authorize-unknown-client", {"client_id": "nope"}),
    ):
        answer = authorize(**extra)
        seen[name] = {
            "status": answer.status_code,
            "content-type": answer.headers.get("content-type", "").split(";")[0],
            "location": "location" in answer.headers,
        }
    for name, extra in (
        ("authorize-no-scope", {"scope": ""}),
        ("authorize-prompt-none", {"prompt": "none"}),
        ("authorize-response-type-token", {"response_type": "token"}),
        ("authorize-without-pkce", {"code_challenge": "", "code_challenge_method": ""}),
    ):
        answer = authorize(**extra)
        target = urlsplit(answer.headers.get("location", ""))
        seen[name] = {
            "status": answer.status_code,
            "location": target.path
            if not target.netloc
            else f"{target.scheme}://{target.netloc}{target.path}",
            "error": parse_qs(target.query).get("error"),
        }
    for name, form_ in (
        (
            "grant-password",
            {"grant_type": "password", "client_id": "openziti", "username": "admin", "password": password},
        ),
        ("no-client", {"grant_type": "authorization_code", "code": "x"}),
        ("bogus-refresh", {"grant_type": "refresh_token", "refresh_token": "bogus", "client_id": "openziti"}),
    ):
        answer = token(form_)
        seen[name] = {"status": answer.status_code, "error": answer.json().get("error")}

    revoked = call("POST", "/oidc/revoke", data={"token": "garbage", "client_id": "openziti"})
    seen["revoke-garbage"] = {"status": revoked.status_code}
    ended = call(
        "GET", "/oidc/end_session", params={"id_token_hint": native["id_token"], "client_id": "native"}
    )
    logged_out = call("GET", "/oidc/logged-out")
    seen["end-session"] = {
        "status": ended.status_code,
        "location": ended.headers.get("location"),
        "logged-out": logged_out.text,
    }
    introspect = call("POST", "/oidc/oauth/introspect", data={"token": access})
    device = call("POST", "/oidc/device_authorization", data={"client_id": "openziti", "scope": "openid"})
    seen["introspect"] = {"status": introspect.status_code}
    seen["device"] = {"status": device.status_code, "error": device.json().get("error")}
    return seen


def caller(side: Any) -> Call:
    http = requests.Session()
    http.trust_env = False
    http.verify = side.ca

    def call(method: str, path: str, **kwargs: Any) -> requests.Response:
        url = path if path.startswith("http") else side.url + path
        kwargs.setdefault("timeout", 30)
        return http.request(method, url, allow_redirects=False, **kwargs)

    return call


def test_the_oidc_provider_answers_as_openziti_v1_6_0_does(tmp_path: Path) -> None:
    with (
        OpenZiti(tmp_path / "openziti", router=False) as oracle,
        Server(tmp_path / "trellis" / "home") as trellis,
    ):
        (tmp_path / "trellis").mkdir(exist_ok=True)
        oracle.start()
        trellis.up()
        theirs = observe(caller(oracle), oracle.url, oracle.password)
        ours = observe(caller(trellis), trellis.url, trellis.password)

    (tmp_path / "oidc-side-by-side.json").write_text(
        json.dumps({"openziti": theirs, "trellis": ours}, indent=1)
    )
    assert ours.keys() == theirs.keys()
    differences = {
        (step, what): (ours[step].get(what), theirs[step].get(what))
        for step in theirs
        for what in sorted(set(theirs[step]) | set(ours[step]))
        if ours[step].get(what) != theirs[step].get(what)
    }
    unexpected = {k: v for k, v in differences.items() if k not in ALLOWED}
    unused = sorted(k for k in ALLOWED if k not in differences)
    assert not unexpected, "differences from OpenZiti (trellis, openziti):\n" + "\n".join(
        f"  {k}: {v}" for k, v in unexpected.items()
    )
    assert not unused, f"allowed differences that no longer happen: {unused}"
