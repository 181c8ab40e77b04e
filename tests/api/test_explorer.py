"""The explorer page's static serving (docs/analysis.md §14): content types, the
Content-Security-Policy, caching, 404s, no path traversal, and no data without a login."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from api.explorer import CONTENT_SECURITY_POLICY, EXPLORER_BASE
from tests.api.session_helpers import user
from tests.conftest import Api

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "api" / "explorer_static"


@pytest.mark.parametrize(
    ("path", "content_type", "file"),
    [
        ("", "text/html; charset=utf-8", "index.html"),
        ("/", "text/html; charset=utf-8", "index.html"),
        ("/index.html", "text/html; charset=utf-8", "index.html"),
        ("/explorer.js", "text/javascript; charset=utf-8", "explorer.js"),
        ("/explorer.css", "text/css; charset=utf-8", "explorer.css"),
        ("/icon.svg", "image/svg+xml", "icon.svg"),
    ],
)
def test_files_are_served_with_their_type_and_headers(
    anon: Api, path: str, content_type: str, file: str
) -> None:
    result = anon.client.simulate_get(EXPLORER_BASE + path)
    assert result.status_code == 200
    assert result.headers["content-type"] == content_type
    assert result.content == (STATIC / file).read_bytes()
    assert result.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'self'" in CONTENT_SECURITY_POLICY
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert result.headers["x-content-type-options"] == "nosniff"
    assert result.headers["x-frame-options"] == "DENY"
    assert result.headers["cache-control"] == "no-cache"
    assert result.headers["etag"].startswith('"')


def test_an_unchanged_file_is_304_and_head_has_no_body(anon: Api) -> None:
    first = anon.client.simulate_get(EXPLORER_BASE + "/explorer.js")
    again = anon.client.simulate_get(
        EXPLORER_BASE + "/explorer.js", headers={"If-None-Match": first.headers["etag"]}
    )
    assert again.status_code == 304
    assert again.content == b""
    other = anon.client.simulate_get(EXPLORER_BASE + "/explorer.js", headers={"If-None-Match": '"other"'})
    assert other.status_code == 200
    head = anon.client.simulate_head(EXPLORER_BASE + "/explorer.css")
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["content-length"]) == len((STATIC / "explorer.css").read_bytes())


def test_the_page_has_no_inline_script_or_style_and_loads_nothing_from_elsewhere(anon: Api) -> None:
    html = anon.client.simulate_get(EXPLORER_BASE).text
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, tag
    assert [body.strip() for body in re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.S)] == [""]
    assert "<style" not in html
    assert " style=" not in html
    assert re.search(r"\son[a-z]+=", html) is None  # no inline event handlers
    everything = html + (STATIC / "explorer.js").read_text() + (STATIC / "explorer.css").read_text()
    assert "http://" not in everything
    assert "https://" not in everything
    assert "innerHTML" not in everything
    assert "eval(" not in everything


@pytest.mark.parametrize(
    "path",
    [
        "/missing.js",
        "/..%2f..%2fpyproject.toml",
        "/..%2fexplorer.py",
        "/%2e%2e/explorer.py",
        "/%2e%2e%2f%2e%2e%2fpyproject.toml",
        "/.%2e/explorer.py",
        "/explorer_static/index.html",
        "/.%2fexplorer.js",
        "/explorer.js%00.html",
        "/__init__.py",
        "/explorer.js/x",
    ],
)
def test_unknown_names_and_traversal_are_404(anon: Api, path: str) -> None:
    result = anon.client.simulate_get(EXPLORER_BASE + path)
    assert result.status_code == 404, (path, result.status_code, result.text[:200])
    assert b"[build-system]" not in result.content
    assert b"import" not in result.content


def test_the_page_is_public_and_the_data_needs_a_login(anon: Api, api: Api) -> None:
    assert anon.client.simulate_get(EXPLORER_BASE).status_code == 200
    for path in (
        "/edge/management/v1/services?limit=25",
        "/edge/management/v1/identities?filter=name%20contains%20%22a%22",
        "/analysis/v1/findings",
        "/analysis/v1/revision",
    ):
        refused = anon.client.simulate_get(path)
        assert refused.status_code == 401, path
        assert api.client.simulate_get(path, headers={"zt-session": api.token or ""}).status_code == 200, path
    what_if = anon.client.simulate_post("/analysis/v1/what-if", json={"items": []})
    assert what_if.status_code == 401


def test_a_non_admin_session_gets_no_analysis_data(api: Api) -> None:
    """The page logs in, then reads ``/analysis/v1/revision``: a non-admin's session is refused
    there (the page then logs it out and says only an administrator may use it)."""
    viewer = user(api)
    refused = api.client.simulate_get("/analysis/v1/revision", headers={"zt-session": viewer.token})
    assert refused.status_code == 401
    findings = api.client.simulate_get("/analysis/v1/findings", headers={"zt-session": viewer.token})
    assert findings.status_code == 401
