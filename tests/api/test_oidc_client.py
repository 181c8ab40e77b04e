"""A standard OIDC client library against the ``/oidc`` provider: authlib's OAuth 2.0 client
(discovery, the authorization URL with PKCE S256 and a nonce, the code exchange, refresh, a
bearer request) and joserfc (the id token checked against the published keys, OIDC Core §3.1.3.7).

authlib speaks HTTP through ``requests``: :class:`FalconAdapter` hands its requests to the app
(no network), so the library sees the provider's real answers, redirects included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.integrations.base_client import OAuthError  # type: ignore[import-untyped]
from authlib.integrations.requests_client import OAuth2Session  # type: ignore[import-untyped]
from falcon.testing import TestClient
from joserfc import jwt
from joserfc.jwk import KeySet
from requests.structures import CaseInsensitiveDict

from tests.api.certs import admin_api
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api

ISSUER = "https://127.0.0.1:1280/oidc"
REDIRECT = "http://127.0.0.1:38111/auth/callback"


class FalconAdapter(requests.adapters.BaseAdapter):
    """``requests`` transport to a Falcon app (its ``TestClient``); redirects are not followed."""

    def __init__(self, client: TestClient) -> None:
        super().__init__()
        self.client = client

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        parts = urlsplit(request.url or "")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        result = self.client.simulate_request(
            request.method or "GET",
            parts.path,
            query_string=parts.query or None,
            headers=dict(request.headers),
            body=body or None,
        )
        response = requests.Response()
        response.status_code = result.status_code
        response.headers = CaseInsensitiveDict(result.headers)
        response._content = result.content
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path) -> Iterator[Api]:
    admin: Api = admin_api(tmp_path_factory.mktemp("oidc-client"), pki_template)  # the real clock
    yield admin
    admin.app.ctrl.env.store.close()


def session_for(api: Api) -> OAuth2Session:
    client = OAuth2Session(
        client_id="openziti",
        scope="openid offline_access",
        redirect_uri=REDIRECT,
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
    )
    client.mount("https://127.0.0.1:1280", FalconAdapter(api.client))
    return client


def log_in(client: OAuth2Session, url: str) -> str:
    """What a user agent does between the authorization URL and the redirect back: the login."""
    started = client.get(url, allow_redirects=False, withhold_token=True)
    assert started.status_code == 302, started.text
    page = client.get(
        "https://127.0.0.1:1280" + started.headers["location"], allow_redirects=False, withhold_token=True
    )
    request_id = page.headers["auth-request-id"]
    login = client.post(
        "https://127.0.0.1:1280/oidc/login/password",
        json={"id": request_id, "username": ADMIN_USER, "password": ADMIN_PASSWORD},
        allow_redirects=False,
        withhold_token=True,
    )
    assert login.status_code == 302, login.text
    back = client.get(login.headers["location"], allow_redirects=False, withhold_token=True)
    assert back.status_code == 302, back.text
    return str(back.headers["location"])


def check_id_token(token: str, keys: Mapping[str, Any], **expected: Any) -> dict[str, Any]:
    decoded = jwt.decode(token, KeySet.import_key_set(dict(keys)))  # type: ignore[arg-type]
    options: dict[str, Any] = {
        "iss": {"essential": True, "value": ISSUER},
        "aud": {"essential": True, "value": "openziti"},
        "sub": {"essential": True},
        "exp": {"essential": True},
        "iat": {"essential": True},
        **{name: {"essential": True, "value": value} for name, value in expected.items()},
    }
    registry = jwt.JWTClaimsRegistry(**options)
    registry.validate(decoded.claims)
    return dict(decoded.claims)


def test_authlib_discovers_logs_in_with_pkce_and_refreshes(api: Api) -> None:
    client = session_for(api)
    meta = client.get(ISSUER + "/.well-known/openid-configuration", withhold_token=True).json()
    assert meta["issuer"] == ISSUER
    assert "S256" in meta["code_challenge_methods_supported"]
    keys = client.get(meta["jwks_uri"], withhold_token=True).json()

    verifier = generate_token(48)
    nonce = generate_token(16)
    url, state = client.create_authorization_url(
        meta["authorization_endpoint"], code_verifier=verifier, nonce=nonce, method="password"
    )
    redirected = log_in(client, url)
    token = client.fetch_token(
        meta["token_endpoint"], authorization_response=redirected, code_verifier=verifier, state=state
    )

    claims = check_id_token(token["id_token"], keys, nonce=nonce, azp="openziti")
    identity = client.get("https://127.0.0.1:1280/edge/client/v1/current-identity")
    assert identity.status_code == 200, identity.text
    assert identity.json()["data"]["id"] == claims["sub"]

    old_refresh = token["refresh_token"]
    renewed = client.refresh_token(meta["token_endpoint"], refresh_token=old_refresh)
    assert renewed["access_token"] != token["access_token"]
    assert renewed["refresh_token"] != old_refresh
    check_id_token(renewed["id_token"], keys)
    assert client.get("https://127.0.0.1:1280/edge/management/v1/current-api-session").status_code == 200

    with pytest.raises(OAuthError, match="invalid_grant"):
        session_for(api).refresh_token(meta["token_endpoint"], refresh_token=old_refresh)
