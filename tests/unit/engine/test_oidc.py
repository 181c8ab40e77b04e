"""The pure parts of the OIDC provider (``engine/managers/oidc.py``): redirect URI matching, PKCE
S256 and the id token's half hashes."""

from __future__ import annotations

import base64
import hashlib

import pytest

from engine.managers.oidc import POST_LOGOUT_URIS, REDIRECT_URIS, _half_hash, redirect_allowed, s256


@pytest.mark.parametrize(
    "uri",
    [
        "openziti://auth/callback",
        "http://127.0.0.1:1/auth/callback",
        "https://127.0.0.1:65535/auth/callback",
        "http://localhost:45678/auth/callback",
        "https://localhost:8443/auth/callback",
    ],
)
def test_openzitis_redirect_uris_are_allowed(uri: str) -> None:
    assert redirect_allowed(uri)


@pytest.mark.parametrize(
    "uri",
    [
        "",
        "http://127.0.0.1/auth/callback",  # no port: `*` is a port
        "http://127.0.0.1:0/auth/callback",
        "http://127.0.0.1:65536/auth/callback",
        "http://127.0.0.1:80x/auth/callback",
        "http://127.0.0.1:80/auth/callback/",
        "http://127.0.0.1:80/auth/callback?next=https://evil.example",
        "http://127.0.0.1:80/auth/callback#x",
        "http://evil@127.0.0.1:80/auth/callback",
        "http://127.0.0.2:80/auth/callback",
        "http://localhost.evil.example:80/auth/callback",
        "ftp://127.0.0.1:80/auth/callback",
        "openziti://auth/callback/x",
        "http://127.0.0.1:*/auth/callback",
        "http://127.0.0.1:80/auth/logout",
    ],
)
def test_anything_else_is_not(uri: str) -> None:
    assert not redirect_allowed(uri)


def test_post_logout_uris_are_the_logout_paths() -> None:
    assert redirect_allowed("http://127.0.0.1:9000/auth/logout", POST_LOGOUT_URIS)
    assert not redirect_allowed("http://127.0.0.1:9000/auth/callback", POST_LOGOUT_URIS)
    assert len(POST_LOGOUT_URIS) == len(REDIRECT_URIS)


def test_s256_is_rfc_7636s_example() -> None:
    # RFC 7636 Appendix B
    assert (
        s256("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )


@pytest.mark.parametrize(("alg", "name"), [("RS256", "sha256"), ("ES384", "sha384"), ("ES512", "sha512")])
def test_half_hashes_follow_the_signing_algorithm(alg: str, name: str) -> None:
    digest = hashlib.new(name, b"token").digest()
    expected = base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode()

    assert _half_hash("token", alg) == expected
