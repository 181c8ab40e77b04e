"""Edge routers as clients see them: ``/current-identity/edge-routers`` (both APIs) and the client
``/services/{id}/edge-routers`` with its optional ``session-token`` header."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.api.session_helpers import client_get, dial, edge_router, edge_router_policy, service, user, world
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

api = shared_admin_api("client-edge-routers")


def names(api: Api, *router_ids: str) -> list[str]:
    return sorted(api.get(f"/edge-routers/{r}").json["data"]["name"] for r in router_ids)


def current_routers(api: Api, token: str, base: str = CLIENT, **params: Any) -> Any:
    return api.get("/current-identity/edge-routers", token=token, base=base, params=params or None)


# == /current-identity/edge-routers ================================================================
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_an_identity_sees_the_verified_routers_its_policies_give(api: Api, base: str) -> None:
    role = unique("r")
    person = user(api, role)
    given = [edge_router(api, role), edge_router(api, role)]
    edge_router(api, role, verified=False)
    edge_router(api)  # no policy gives it
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])

    result = current_routers(api, person.token, base)

    assert result.status_code == 200
    assert sorted(r["name"] for r in result.json["data"]) == names(api, *given)
    assert result.json["meta"]["pagination"]["totalCount"] == 2


def test_current_identity_routers_carry_entity_and_router_fields(api: Api) -> None:
    role = unique("r")
    person = user(api, role)
    router = edge_router(api, role)
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])

    [item] = current_routers(api, person.token).json["data"]

    host = item["hostname"]
    assert item["id"] == router
    assert item["_links"]["self"]["href"] == f"./edge-routers/{router}"
    assert {"createdAt", "updatedAt", "tags"} <= set(item)
    assert item["supportedProtocols"] == {"tls": f"tls://{host}:3022"}
    assert (item["isOnline"], item["syncStatus"], item["cost"]) == (True, "SYNC_DONE", 7)
    assert (item["noTraversal"], item["disabled"]) == (False, False)
    assert "urls" not in item


def test_an_admin_sees_every_verified_router(api: Api) -> None:
    lonely = edge_router(api)
    unverified = edge_router(api, verified=False)
    admin_token = api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)

    listed = {r["id"] for r in current_routers(api, admin_token, limit="500").json["data"]}

    assert lonely in listed
    assert unverified not in listed


def test_current_identity_routers_page_and_filter(api: Api) -> None:
    role = unique("r")
    person = user(api, role)
    routers = [edge_router(api, role) for _ in range(3)]
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    [wanted] = names(api, routers[1])

    page = current_routers(api, person.token, limit="2", offset="0")
    filtered = current_routers(api, person.token, filter=f'name = "{wanted}"')

    assert len(page.json["data"]) == 2
    assert page.json["meta"]["pagination"] == {"limit": 2, "offset": 0, "totalCount": 3}
    assert [r["name"] for r in filtered.json["data"]] == [wanted]


def test_current_identity_routers_need_an_api_session(api: Api) -> None:
    result = api.client.simulate_get(CLIENT + "/current-identity/edge-routers")

    assert result.status_code == 401


# == /services/{id}/edge-routers ===================================================================
def service_routers(api: Api, token: str, service_id: str, session_token: str | None = None) -> Any:
    headers = {"session-token": session_token} if session_token is not None else None
    return client_get(api, f"/services/{service_id}/edge-routers", token, headers=headers)


def test_a_services_routers_are_those_a_session_would_name(api: Api) -> None:
    w = world(api)
    edge_router(api)  # not linked to either

    result = service_routers(api, w.user.token, w.service)

    assert result.status_code == 200
    [router] = result.json["data"]["edgeRouters"]
    assert [router["name"]] == names(api, w.router)
    assert router["supportedProtocols"]["tls"] == f"tls://{router['hostname']}:3022"
    assert "id" not in router
    assert router == {
        k: v
        for k, v in dial(api, w.user.token, w.service).json["data"]["edgeRouters"][0].items()
        if k != "urls"
    }


def test_a_services_routers_are_capped_at_25(api: Api) -> None:
    w = world(api)
    role = api.get(f"/services/{w.service}").json["data"]["roleAttributes"][0]
    for _ in range(25):
        edge_router(api, role)

    assert len(service_routers(api, w.user.token, w.service).json["data"]["edgeRouters"]) == 25


@pytest.mark.parametrize("hidden", ["unknown", "no-policy"])
def test_a_service_the_identity_cannot_see_is_not_found(api: Api, hidden: str) -> None:
    person = user(api)
    service_id = "no-such-service" if hidden == "unknown" else service(api)

    result = service_routers(api, person.token, service_id)

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


def test_a_valid_session_token_is_accepted(api: Api) -> None:
    w = world(api)
    session_token = dial(api, w.user.token, w.service).json["data"]["token"]

    result = service_routers(api, w.user.token, w.service, session_token)

    assert result.status_code == 200
    assert len(result.json["data"]["edgeRouters"]) == 1


def test_an_unknown_session_token_is_unauthorized(api: Api) -> None:
    w = world(api)

    result = service_routers(api, w.user.token, w.service, "4b1e0c55-0000-4000-8000-000000000000")

    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"


def test_another_api_sessions_session_token_is_unauthorized(api: Api) -> None:
    w = world(api)
    other_login = api.login(w.user.name, "Correct-Horse-42", base=CLIENT)
    foreign = dial(api, other_login, w.service).json["data"]["token"]

    result = service_routers(api, w.user.token, w.service, foreign)

    assert result.status_code == 401


def test_the_session_token_is_checked_before_the_service(api: Api) -> None:
    person = user(api)

    result = service_routers(api, person.token, "no-such-service", "not-a-token")

    assert result.status_code == 401
