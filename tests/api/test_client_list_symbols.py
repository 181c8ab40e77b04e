"""Issue 18, finding 8: a client-API list filters and sorts only on fields its rendering shows.

A filter on a hidden field answers whether a guess about its value is right, so a caller could
read it one character at a time (``address contains "a"``...). Hidden fields are unknown symbols:
400 ``INVALID_FILTER`` (``INVALID_SORT_IDENTIFIER`` for a sort), as any unknown field.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from api.schemas.authenticators import render_authenticator
from engine.entities.identities import Authenticator
from tests.api.certs import csr_pem, unique
from tests.api.conftest import shared_admin_api
from tests.api.session_helpers import World, client_get, client_post, dial, world
from tests.conftest import CLIENT, Api

api = shared_admin_api("client-list-symbols")

#: Store names of symbols that stand for a differently named field of the rendering.
ALIASES = {
    "instanceId": "identity",
    "updbUsername": "username",
    "certFingerprint": "fingerprint",
    "connected": "isOnline",
    "online": "isOnline",
}
#: OpenZiti's symbols that a client list offers though its entries do not show them, because
#: their value is known to the caller anyway (each checked below).
KNOWN = {
    "isSystem": "false on every kind a client lists (only edge router policies are system ones)",
    "apiSession": "the caller's own API session, whose id /current-api-session shows",
    "sourceCtrl": "\"\" or the controller's id, which the client's /controllers shows",
}


@dataclasses.dataclass
class Setup:
    world: World
    terminator: str


@pytest.fixture(scope="module")
def setup(api: Api) -> Setup:
    w = world(api)
    terminator = api.create(
        "/terminators",
        {
            "service": w.service,
            "router": w.router,
            "binding": "transport",
            "address": "tcp:secret-host.internal:8443",
            "identity": "inst-1",
            "cost": 7,
        },
    )
    assert dial(api, w.user.token, w.service).status_code == 201
    cert = client_post(api, "/current-api-session/certificates", w.user.token, json={"csr": csr_pem()})
    assert cert.status_code == 201, cert.text
    api.create(
        "/external-jwt-signers",
        {
            "name": unique("idp"),
            "issuer": f"https://{unique('idp')}.example.com",
            "audience": "ziti",
            "enabled": True,
            "jwksEndpoint": "https://idp.example.com/jwks",
        },
    )
    return Setup(w, terminator)


def shown(field: str, items: list[dict[str, Any]]) -> bool:
    """Whether some item shows ``field`` (``service`` as ``serviceId``, ``service.name`` inside
    ``service``, a store alias under its wire name)."""
    if field in KNOWN:
        return True
    name = ALIASES.get(field, field)
    for item in items:
        if name in item or f"{name}Id" in item:
            return True
        head, _, rest = name.partition(".")
        if rest and isinstance(item.get(head), dict) and rest in item[head]:
            return True
    return False


def listed(api: Api, setup: Setup, path: str) -> Any:
    result = client_get(api, path.format(service=setup.world.service), setup.world.user.token)
    assert result.status_code == 200, result.text
    assert result.json["data"], f"{path}: nothing listed to compare with"
    return result.json


@pytest.mark.parametrize(
    "path",
    [
        "/services",
        "/services/{service}/terminators",
        "/sessions",
        "/current-identity/edge-routers",
        "/current-api-session/certificates",
        "/external-jwt-signers",
        "/controllers",
    ],
)
def test_every_filterable_field_of_a_client_list_is_shown(api: Api, setup: Setup, path: str) -> None:
    body = listed(api, setup, path)

    hidden = [f for f in body["meta"]["filterableFields"] if not shown(f, body["data"])]

    assert hidden == []


@pytest.mark.parametrize(
    "path",
    [
        "/services",
        "/services/{service}/terminators",
        "/sessions",
        "/current-identity/edge-routers",
        "/current-api-session/certificates",
        "/external-jwt-signers",
        "/controllers",
        "/current-identity/authenticators",
    ],
)
def test_is_system_tells_a_client_nothing(api: Api, setup: Setup, path: str) -> None:
    every = listed(api, setup, path)["meta"]["pagination"]["totalCount"]

    system = listed_with(api, setup, path, "isSystem = true")
    other = listed_with(api, setup, path, "isSystem = false")

    assert "isSystem" in system["meta"]["filterableFields"]
    assert (system["meta"]["pagination"]["totalCount"], other["meta"]["pagination"]["totalCount"]) == (
        0,
        every,
    )


def test_the_certificates_api_session_is_the_callers_own(api: Api, setup: Setup) -> None:
    path = "/current-api-session/certificates"
    own = client_get(api, "/current-api-session", setup.world.user.token).json["data"]["id"]
    every = [c["id"] for c in listed(api, setup, path)["data"]]

    mine = listed_with(api, setup, path, f'apiSession = "{own}"')
    other = listed_with(api, setup, path, f'apiSession != "{own}"')

    assert [c["id"] for c in mine["data"]] == every
    assert other["data"] == []


def test_a_client_terminators_source_ctrl_is_empty_or_the_listed_controller(api: Api, setup: Setup) -> None:
    controller = listed(api, setup, "/controllers")["data"][0]["id"]
    path = "/services/{service}/terminators"

    empty = listed_with(api, setup, path, 'sourceCtrl = ""')
    other = listed_with(api, setup, path, f'sourceCtrl != "" and sourceCtrl != "{controller}"')

    assert [t["id"] for t in empty["data"]] == [setup.terminator]  # an administrator made it
    assert other["data"] == []


def listed_with(api: Api, setup: Setup, path: str, expression: str) -> Any:
    result = client_get(
        api, path.format(service=setup.world.service), setup.world.user.token, params={"filter": expression}
    )
    assert result.status_code == 200, result.text
    return result.json


def test_every_filterable_field_of_the_own_authenticators_is_shown(api: Api, setup: Setup) -> None:
    """Both forms of an authenticator: the caller's own updb one, and a certificate one."""
    body = listed(api, setup, "/current-identity/authenticators")
    now = datetime.now(UTC)
    cert = Authenticator(
        id="cert",
        created_at=now,
        updated_at=now,
        identity_id=setup.world.user.id,
        method="cert",
        cert_pem="PEM",
        fingerprint="ab",
    )
    forms = [*body["data"], render_authenticator(api.app.ctrl, cert)]

    assert [f for f in body["meta"]["filterableFields"] if not shown(f, forms)] == []


# == terminators ===================================================================================
def terminators(api: Api, setup: Setup, **params: str) -> Any:
    path = f"/services/{setup.world.service}/terminators"
    return api.get(path, token=setup.world.user.token, base=CLIENT, params=params)


@pytest.mark.parametrize(
    "expression",
    [
        'address = "tcp:secret-host.internal:8443"',
        'address contains "s"',
        'binding = "transport"',
        "cost = 7",
        'precedence = "default"',
        'hostId = ""',
        'router.name contains "e"',
    ],
)
def test_client_terminators_refuse_a_filter_on_a_hidden_field(
    api: Api, setup: Setup, expression: str
) -> None:
    result = terminators(api, setup, filter=expression)

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"


def test_client_terminators_refuse_a_sort_on_a_hidden_field(api: Api, setup: Setup) -> None:
    result = terminators(api, setup, sort="address asc")

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_SORT_IDENTIFIER"


def test_client_terminators_refuse_a_hidden_field_in_the_filters_sort_clause(api: Api, setup: Setup) -> None:
    result = terminators(api, setup, filter="true sort by address")

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"


@pytest.mark.parametrize(
    "expression",
    [
        'identity = "inst-1"',
        'instanceId = "inst-1"',
        'service = "{service}"',
        'service.name != ""',
        'router = "{router}"',
        'id = "{terminator}"',
        "createdAt > datetime(2000-01-01T00:00:00Z) sort by updatedAt desc",
    ],
)
def test_client_terminators_filter_on_shown_fields(api: Api, setup: Setup, expression: str) -> None:
    w = setup.world
    text = expression.format(service=w.service, router=w.router, terminator=setup.terminator)

    result = terminators(api, setup, filter=text)

    assert result.status_code == 200, result.text
    assert [t["id"] for t in result.json["data"]] == [setup.terminator]


def test_client_terminators_advertise_only_shown_fields(api: Api, setup: Setup) -> None:
    fields = terminators(api, setup).json["meta"]["filterableFields"]

    assert fields == sorted(
        [
            "createdAt",
            "id",
            "identity",
            "instanceId",
            "isSystem",
            "router",
            "service",
            "service.name",
            "sourceCtrl",
            "tags",
            "updatedAt",
        ]
    )


def test_the_management_terminator_list_still_filters_on_every_field(api: Api, setup: Setup) -> None:
    result = api.get(
        f"/services/{setup.world.service}/terminators",
        params={"filter": 'address = "tcp:secret-host.internal:8443" and cost = 7'},
    )

    assert result.status_code == 200, result.text
    assert [t["id"] for t in result.json["data"]] == [setup.terminator]


# == current-identity edge routers ===================================================================
@pytest.mark.parametrize("expression", ['anyOf(roleAttributes) = "x"', "isVerified = true"])
def test_own_edge_routers_refuse_a_filter_on_a_hidden_field(api: Api, setup: Setup, expression: str) -> None:
    result = client_get(
        api, "/current-identity/edge-routers", setup.world.user.token, params={"filter": expression}
    )

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"


def test_own_edge_routers_filter_on_shown_fields(api: Api, setup: Setup) -> None:
    router = api.get(f"/edge-routers/{setup.world.router}").json["data"]

    result = client_get(
        api,
        "/current-identity/edge-routers",
        setup.world.user.token,
        params={"filter": f'name = "{router["name"]}" and hostname = "{router["hostname"]}"'},
    )

    assert result.status_code == 200, result.text
    assert [r["id"] for r in result.json["data"]] == [setup.world.router]
