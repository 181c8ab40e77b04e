"""Bad input never gets a 500: every registered operation answered with garbage bodies and ids."""

from __future__ import annotations

import re
from typing import Any

import pytest

from api.resources import has_responder
from tests.conftest import Api

BODIES: list[Any] = [
    b"",
    b"{",
    b"[]",
    b'"text"',
    b"null",
    b"12",
    b'{"name": 5}',
    b'{"name": null, "tags": {"a": [1]}}',
    b'{"name": "x", "semantic": "Nope", "type": "Other", "roleAttributes": "notalist"}',
    b'{"name": "x", "identityRoles": [5], "primary": [], "secondary": "s", "certPem": 7}',
    b'{"name": "\\u0000", "expiresAt": "yesterday", "method": "ott", "identityId": "nope"}',
    b'{"username": [], "password": {}, "configTypes": "all"}',
]
VERBS = ("post", "put", "patch")


def _operations(api: Api) -> list[tuple[str, str, str]]:
    out = []
    for route_api, template, resource, suffix in api.app.routes.table:
        for verb in ("get", "post", "put", "patch", "delete"):
            name = f"on_{verb}" if suffix is None else f"on_{verb}_{suffix}"
            if has_responder(resource, name):
                out.append((route_api, template, verb))
    return out


def _assert_clean(result: Any, what: str) -> None:
    assert result.status_code < 500, f"{what}: {result.status_code} {result.text}"
    if result.status_code >= 400:
        assert result.json["error"]["code"], what


@pytest.mark.durable  # every operation: POST /database/snapshot copies a database file
def test_garbage_bodies_and_unknown_ids_never_fail_with_500(api: Api) -> None:
    for route_api, template, verb in _operations(api):
        base = "/edge/management/v1" if route_api == "management" else "/edge/client/v1"
        path = re.sub(r"{\w+}", "does-not-exist", template)
        if template == "/current-api-session" and verb == "delete":
            continue  # would log the test out
        bodies = BODIES if verb in VERBS else [None]
        for body in bodies:
            kwargs: dict[str, Any] = {"headers": {"content-type": "application/json"}}
            if body is not None:
                kwargs["body"] = body
            result = api.request(verb.upper(), path, base=base, **kwargs)
            _assert_clean(result, f"{verb.upper()} {base}{path} {body!r}")


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "-5", "offset": "-1"},
        {"limit": "100000", "offset": "999999999"},
        {"filter": "name = "},
        {"filter": 'name = "x" sort by nope'},
        {"sort": "nope desc"},
        {"sort": "name sideways"},
        {"filter": "anyOf(name) = 1"},
        {"filter": "\u0000"},
        {"roleFilter": "noprefix"},
        {"roleSemantic": "Sometimes"},
    ],
)
def test_bad_list_parameters_are_client_errors(api: Api, params: dict[str, str]) -> None:
    for template in ("/identities", "/services", "/edge-routers", "/service-policies", "/posture-checks"):
        result = api.get(template, params=params)
        _assert_clean(result, f"GET {template} {params}")
