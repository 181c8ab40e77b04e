"""Every related list (``/<kind>/{id}/<kind>``, the current identity's routers, the client's
service routers and terminators) takes ``limit``, ``offset`` and ``filter`` like every list
(seed 000): a bad page is 400 ``INVALID_PAGINATION``, a bad filter 400 ``INVALID_FILTER``, and
a page, an offset and a filter narrow what is listed.

The client ``/services/{id}/edge-routers`` keeps its ``data.edgeRouters`` shape (seed 000, the
spec's ``serviceEdgeRouters``), pages it, and by default shows the 25 routers a session names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.api.certs import ThirdPartyCa, unique
from tests.api.conftest import shared_admin_api
from tests.api.session_helpers import (
    User,
    client_get,
    dial,
    edge_router,
    edge_router_policy,
    posture_check,
    service,
    service_edge_router_policy,
    service_policy,
    user,
)
from tests.conftest import CLIENT, MGMT, Api

api = shared_admin_api("related-lists")


@dataclass
class Population:
    """Two of everything, linked to one another, so that each related list holds two rows."""

    person: User
    ids: dict[str, str]


@pytest.fixture(scope="module")
def population(api: Api) -> Population:
    role = unique("r")
    person = user(api, role)
    user(api, role)
    ids: dict[str, str] = {"identity": person.id}
    ids["service"] = service(api, role)
    service(api, role)
    ids["edge_router"] = edge_router(api, role)
    edge_router(api, role)
    ids["posture_check"] = posture_check(api, "MFA", role)
    posture_check(api, "MFA", role)
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    ids["service_policy"] = service_policy(api, "Bind", [f"#{role}"], [f"#{role}"], [f"#{role}"], "AnyOf")
    ids["edge_router_policy"] = edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    ids["serp"] = service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    ids["config_type"] = api.create("/config-types", {"name": unique("ct")})
    other_type = api.create("/config-types", {"name": unique("ct")})
    configs = [
        api.create("/configs", {"name": unique("cfg"), "configTypeId": type_id, "data": {}})
        for type_id in (ids["config_type"], ids["config_type"], other_type)
    ]
    ids["config"] = configs[0]
    for type_config in (configs[0], configs[2]):
        api.create("/services", {"name": unique("svc"), "encryptionRequired": True, "configs": [type_config]})
    patched = api.patch(f"/services/{ids['service']}", json={"configs": [configs[0], configs[2]]})
    assert patched.status_code == 200, patched.text
    for address in ("tcp:h:1", "tcp:h:2"):
        body = {"service": ids["service"], "router": ids["edge_router"], "binding": "transport"}
        api.create("/terminators", {**body, "address": address})
    cert_pem = ThirdPartyCa(unique("ca")).issue(unique("device"))[0]
    api.create("/authenticators", {"identityId": person.id, "method": "cert", "certPem": cert_pem})
    ids["enrollee"] = api.create(
        "/identities", {"name": unique("enrollee"), "type": "User", "isAdmin": False}
    )
    expires = "2100-01-01T00:00:00Z"
    api.create("/enrollments", {"identityId": ids["enrollee"], "method": "ott", "expiresAt": expires})
    updb = {"identityId": ids["enrollee"], "method": "updb", "expiresAt": expires, "username": unique("u")}
    api.create("/enrollments", updb)
    return Population(person, ids)


#: (api, path with ``{key}`` for a population id): every related list of both APIs.
RELATED_LISTS: list[tuple[str, str]] = [
    (MGMT, "/services/{service}/configs"),
    (MGMT, "/services/{service}/identities"),
    (MGMT, "/services/{service}/edge-routers"),
    (MGMT, "/services/{service}/service-policies"),
    (MGMT, "/services/{service}/service-edge-router-policies"),
    (MGMT, "/services/{service}/terminators"),
    (MGMT, "/identities/{identity}/services"),
    (MGMT, "/identities/{identity}/edge-routers"),
    (MGMT, "/identities/{identity}/service-policies"),
    (MGMT, "/identities/{identity}/edge-router-policies"),
    (MGMT, "/identities/{identity}/authenticators"),
    (MGMT, "/identities/{enrollee}/enrollments"),
    (MGMT, "/edge-routers/{edge_router}/identities"),
    (MGMT, "/edge-routers/{edge_router}/services"),
    (MGMT, "/edge-routers/{edge_router}/edge-router-policies"),
    (MGMT, "/edge-routers/{edge_router}/service-edge-router-policies"),
    (MGMT, "/service-policies/{service_policy}/identities"),
    (MGMT, "/service-policies/{service_policy}/services"),
    (MGMT, "/service-policies/{service_policy}/posture-checks"),
    (MGMT, "/edge-router-policies/{edge_router_policy}/identities"),
    (MGMT, "/edge-router-policies/{edge_router_policy}/edge-routers"),
    (MGMT, "/service-edge-router-policies/{serp}/services"),
    (MGMT, "/service-edge-router-policies/{serp}/edge-routers"),
    (MGMT, "/config-types/{config_type}/configs"),
    (MGMT, "/configs/{config}/services"),
    (MGMT, "/current-identity/edge-routers"),
    (CLIENT, "/current-identity/edge-routers"),
    (CLIENT, "/services/{service}/terminators"),
    (CLIENT, "/services/{service}/edge-routers"),
]
LIST_IDS = [f"{'client' if base == CLIENT else 'mgmt'}:{path}" for base, path in RELATED_LISTS]


def get(api: Api, population: Population, base: str, path: str, **params: str) -> Any:
    """The list as the person (client API, or the current identity's list) or the admin sees it."""
    url = path.format(**population.ids)
    token = population.person.token if base == CLIENT or url.startswith("/current-identity") else None
    return api.get(url, base=base, token=token, params=params or None)


def rows(result: Any) -> list[dict[str, Any]]:
    """The listed rows (the client service routers' are under ``data.edgeRouters``)."""
    assert result.status_code == 200, result.text
    data = result.json["data"]
    return list(data["edgeRouters"] if isinstance(data, dict) else data)


@pytest.mark.parametrize(("base", "path"), RELATED_LISTS, ids=LIST_IDS)
@pytest.mark.parametrize("name", ["limit", "offset"])
def test_a_bad_page_is_invalid_pagination(
    api: Api, population: Population, base: str, path: str, name: str
) -> None:
    result = get(api, population, base, path, **{name: "notanumber"})

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_PAGINATION"
    assert result.json["error"]["cause"]["field"] == name


@pytest.mark.parametrize(("base", "path"), RELATED_LISTS, ids=LIST_IDS)
def test_a_bad_filter_is_invalid_filter(api: Api, population: Population, base: str, path: str) -> None:
    result = get(api, population, base, path, filter='name = "x" and')

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"


@pytest.mark.parametrize(("base", "path"), RELATED_LISTS, ids=LIST_IDS)
def test_limit_offset_and_filter_take_effect(api: Api, population: Population, base: str, path: str) -> None:
    everything = get(api, population, base, path, limit="500")
    listed = rows(everything)
    assert len(listed) >= 2  # the population gives every list two rows at least
    key = "id" if "id" in listed[0] else "name"

    first_page = get(api, population, base, path, limit="1")
    second_page = get(api, population, base, path, limit="1", offset="1")
    filtered = get(api, population, base, path, filter=f'{key} = "{listed[1][key]}"')

    assert [r[key] for r in rows(first_page)] == [listed[0][key]]
    assert [r[key] for r in rows(second_page)] == [listed[1][key]]
    assert [r[key] for r in rows(filtered)] == [listed[1][key]]
    pagination = second_page.json["meta"]["pagination"]
    assert pagination == {"limit": 1, "offset": 1, "totalCount": len(listed)}
    assert filtered.json["meta"]["pagination"]["totalCount"] == 1
    assert key in everything.json["meta"]["filterableFields"]


# == the client's /services/{id}/edge-routers ======================================================
def test_the_client_service_routers_page_shows_25_by_default(api: Api) -> None:
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    for _ in range(27):
        edge_router(api, role)
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])

    default = client_get(api, f"/services/{svc}/edge-routers", person.token)
    larger = client_get(api, f"/services/{svc}/edge-routers", person.token, params={"limit": "100"})

    assert len(default.json["data"]["edgeRouters"]) == 25
    assert default.json["meta"]["pagination"] == {"limit": 25, "offset": 0, "totalCount": 27}
    assert len(larger.json["data"]["edgeRouters"]) == 27


def test_the_client_service_routers_filter_on_what_they_show(api: Api, population: Population) -> None:
    path = f"/services/{population.ids['service']}/edge-routers"

    shown = client_get(api, path, population.person.token)
    hidden = client_get(api, path, population.person.token, params={"filter": 'roleAttributes = "x"'})

    assert shown.json["meta"]["filterableFields"] == [
        "cost",
        "disabled",
        "hostname",
        "isOnline",
        "name",
        "noTraversal",
    ]
    assert hidden.status_code == 400
    assert hidden.json["error"]["code"] == "INVALID_FILTER"


def test_the_client_service_routers_refuse_a_bad_page_before_the_session_token(
    api: Api, population: Population
) -> None:
    path = f"/services/{population.ids['service']}/edge-routers"
    headers = {"session-token": "not-a-token"}

    bad_page = client_get(api, path, population.person.token, headers=headers, params={"limit": "x"})
    good_page = client_get(api, path, population.person.token, headers=headers, params={"limit": "1"})

    assert bad_page.status_code == 400
    assert bad_page.json["error"]["code"] == "INVALID_PAGINATION"
    assert good_page.status_code == 401


def test_the_client_service_routers_page_with_a_session_token(api: Api, population: Population) -> None:
    service_id = population.ids["service"]
    session_token = dial(api, population.person.token, service_id).json["data"]["token"]

    result = client_get(
        api,
        f"/services/{service_id}/edge-routers",
        population.person.token,
        headers={"session-token": session_token},
        params={"limit": "1", "offset": "1"},
    )

    assert result.status_code == 200, result.text
    assert len(result.json["data"]["edgeRouters"]) == 1
    assert result.json["meta"]["pagination"]["offset"] == 1


@pytest.mark.parametrize("member", ["identities", "services", "posture-checks"])
def test_an_unknown_service_policys_members_are_an_empty_list(api: Api, member: str) -> None:
    """Seed 001 lists no 404 for a service policy's lists; OpenZiti v1.6.0 answers 200 and []."""
    result = api.get(f"/service-policies/no-such-policy/{member}")

    assert result.status_code == 200
    assert result.json["data"] == []


@pytest.mark.parametrize("member", ["identities", "edge-routers"])
def test_an_unknown_edge_router_policys_members_are_not_found(api: Api, member: str) -> None:
    """Seed 001 lists 404 for an edge router policy's lists (OpenZiti answers 200 and [])."""
    result = api.get(f"/edge-router-policies/no-such-policy/{member}")

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"
