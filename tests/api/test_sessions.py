"""Dial and Bind sessions: client ``/sessions`` (create, list, read, delete), management
``/sessions``, and the sessions' lifetime (API session, service, access)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from api.http import DEFERRED_KEY
from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.api.policy_helpers import field_error
from tests.api.session_helpers import (
    client_delete,
    client_get,
    dial,
    edge_router,
    edge_router_policy,
    service,
    service_edge_router_policy,
    service_policy,
    user,
    world,
)
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

api = shared_admin_api("sessions")


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


# == create ========================================================================================
def test_a_dial_session_names_the_shared_routers_and_the_granting_policy(api: Api) -> None:
    w = world(api)

    result = dial(api, w.user.token, w.service)

    assert result.status_code == 201, result.text
    data = result.json["data"]
    uuid.UUID(data["token"])
    assert data["type"] == "Dial"
    assert data["identityId"] == w.user.id
    assert data["serviceId"] == w.service
    assert data["service"]["id"] == w.service
    assert data["service"]["entity"] == "services"
    assert data["apiSession"]["entity"] == "api-sessions"
    assert data["apiSessionId"] == data["apiSession"]["id"]
    assert data["_links"]["self"]["href"] == f"./sessions/{data['id']}"
    assert "servicePolicies" not in data  # the create answer is a sessionDetail, as OpenZiti's
    read = api.get(f"/sessions/{data['id']}").json["data"]
    assert [p["id"] for p in read["servicePolicies"]] == [w.dial_policy]
    [router] = data["edgeRouters"]
    host = router["hostname"]
    assert router["supportedProtocols"] == {"tls": f"tls://{host}:3022"}
    assert router["urls"] == router["supportedProtocols"]
    assert router["isOnline"] is True
    assert router["syncStatus"] == "SYNC_DONE"
    assert router["cost"] == 7
    assert router["noTraversal"] is False
    assert router["disabled"] is False
    assert router["name"] == host.removesuffix(".example.test")


def test_the_type_defaults_to_dial(api: Api) -> None:
    w = world(api)

    result = dial(api, w.user.token, w.service, session_type=None)

    assert result.status_code == 201, result.text
    assert result.json["data"]["type"] == "Dial"


def test_a_bind_session_needs_bind(api: Api) -> None:
    w = world(api, bind=True)

    result = dial(api, w.user.token, w.service, "Bind")

    assert result.status_code == 201, result.text
    assert result.json["data"]["type"] == "Bind"


def test_the_same_api_session_type_and_service_share_one_session(api: Api) -> None:
    w = world(api, bind=True)

    first = dial(api, w.user.token, w.service).json["data"]
    again = dial(api, w.user.token, w.service).json["data"]
    bind = dial(api, w.user.token, w.service, "Bind").json["data"]

    assert (again["id"], again["token"]) == (first["id"], first["token"])
    assert bind["id"] != first["id"]


def test_opening_a_session_on_the_servers_event_loop_hands_its_write_over(api: Api) -> None:
    """Client ``POST /sessions`` may run on the server's event loop (``runs_on_loop``): the app
    answers without waiting for the write, which it hands to the server in ``trellis.deferred``
    (the server answers once it is durable). A management create stays on a pool thread."""
    w = world(api)
    assert api.app.runs_on_loop("POST", CLIENT + "/sessions")
    assert api.app.runs_on_loop("POST", CLIENT + "/sessions/")  # as Falcon routes it
    assert api.app.runs_on_loop("GET", CLIENT + "/services")
    assert not api.app.runs_on_loop("DELETE", CLIENT + "/sessions/x")
    assert not api.app.runs_on_loop("POST", MGMT + "/identities")
    assert not api.app.runs_on_loop("GET", MGMT + "/identities", "sort=name")  # a sort: the pool
    assert not api.app.runs_on_loop("GET", "/no/such/route")

    def open_on_loop(into: list[Any]) -> Any:
        body = {"serviceId": w.service, "type": "Dial"}
        return api.post("/sessions", token=w.user.token, base=CLIENT, json=body, extras={DEFERRED_KEY: into})

    deferred: list[Any] = []
    opened = open_on_loop(deferred)
    assert opened.status_code == 201, opened.text
    assert len(deferred) == 1
    done = threading.Event()
    deferred[0].when_done(done.set)
    assert done.wait(10)
    assert deferred[0].error is None
    session_id = opened.json["data"]["id"]
    assert client_get(api, f"/sessions/{session_id}", w.user.token).status_code == 200
    again: list[Any] = []  # the same (API session, type, service): the one session, no write
    assert open_on_loop(again).json["data"]["id"] == session_id
    assert again == []


def test_another_api_session_gets_its_own_session(api: Api) -> None:
    w = world(api)
    second_login = api.login(w.user.name, "Correct-Horse-42", base=CLIENT)

    first = dial(api, w.user.token, w.service).json["data"]
    other = dial(api, second_login, w.service).json["data"]

    assert other["id"] != first["id"]
    assert other["apiSessionId"] != first["apiSessionId"]


@pytest.mark.parametrize("service_id", ["no-such-service", None])
def test_an_unknown_service_is_not_found(api: Api, service_id: str | None) -> None:
    person = user(api)

    result = api.post("/sessions", token=person.token, base=CLIENT, json={"serviceId": service_id})

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


def test_a_service_without_dial_or_bind_is_not_found(api: Api) -> None:
    w = world(api)
    hidden = service(api)

    result = dial(api, w.user.token, hidden)

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


def test_a_type_not_held_is_refused_on_service_id(api: Api) -> None:
    w = world(api)

    result = dial(api, w.user.token, w.service, "Bind")

    cause = field_error(result)
    assert cause["field"] == "ServiceId"
    assert cause["reason"] == "service not found"
    assert cause["value"] == w.service


def test_an_unknown_type_is_refused(api: Api) -> None:
    w = world(api)

    result = dial(api, w.user.token, w.service, "Connect")

    cause = field_error(result)
    assert cause["field"] == "type"
    assert "Dial Bind Invalid" in cause["reason"]


def test_invalid_is_not_a_session_type(api: Api) -> None:
    w = world(api)

    result = dial(api, w.user.token, w.service, "Invalid")

    cause = field_error(result)
    assert cause["field"] == "type"
    assert cause["value"] == "Invalid"


@pytest.mark.parametrize("links", ["none", "identity-only", "service-only", "different-routers"])
def test_no_shared_edge_router(api: Api, links: str) -> None:
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    mine, theirs = edge_router(api, f"{role}-a"), edge_router(api, f"{role}-b")
    if links in ("identity-only", "different-routers"):
        edge_router_policy(api, [f"#{role}"], [f"@{mine}"])
    if links == "service-only":
        service_edge_router_policy(api, [f"#{role}"], [f"@{mine}"])
    if links == "different-routers":
        service_edge_router_policy(api, [f"#{role}"], [f"@{theirs}"])

    result = dial(api, person.token, svc)

    assert result.status_code == 400
    assert error(result)["code"] == "NO_EDGE_ROUTERS_AVAILABLE"
    assert error(result)["message"] == (
        "No edge routers are assigned and online to handle the requested connection"
    )


def test_an_unverified_router_counts_and_is_listed_offline(api: Api) -> None:
    """OpenZiti 1.x counts every router the policies give for a session to be made, and names
    each, online or not (an unverified router never is online)."""
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    edge_router(api, role, verified=False)
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])

    result = dial(api, person.token, svc)

    assert result.status_code == 201, result.text
    [listed] = result.json["data"]["edgeRouters"]
    assert listed["isOnline"] is False
    assert listed["syncStatus"] == "SYNC_UNKNOWN"
    assert listed["urls"] == listed["supportedProtocols"]


def test_a_session_names_offline_routers_after_the_online_ones(api: Api) -> None:
    w = world(api)
    role = api.get(f"/services/{w.service}").json["data"]["roleAttributes"][0]
    offline = edge_router(api, role, online=False)
    offline_name = api.get(f"/edge-routers/{offline}").json["data"]["name"]

    result = dial(api, w.user.token, w.service)

    assert result.status_code == 201, result.text
    listed = [(r["name"], r["isOnline"]) for r in result.json["data"]["edgeRouters"]]
    assert listed == [
        (api.get(f"/edge-routers/{w.router}").json["data"]["name"], True),
        (offline_name, False),
    ]


def test_online_routers_come_first_among_the_25(api: Api) -> None:
    w = world(api)
    role = api.get(f"/services/{w.service}").json["data"]["roleAttributes"][0]
    for _ in range(30):
        edge_router(api, role, online=False)

    result = dial(api, w.user.token, w.service)

    assert result.status_code == 201, result.text
    listed = result.json["data"]["edgeRouters"]
    assert len(listed) == 25
    assert [r["isOnline"] for r in listed] == [True] + [False] * 24


def test_a_session_names_at_most_25_routers(api: Api) -> None:
    w = world(api)
    role = api.get(f"/services/{w.service}").json["data"]["roleAttributes"][0]
    for _ in range(26):
        edge_router(api, role)

    result = dial(api, w.user.token, w.service)

    assert result.status_code == 201, result.text
    assert len(result.json["data"]["edgeRouters"]) == 25


def test_creating_a_session_needs_an_api_session(api: Api) -> None:
    w = world(api)

    result = api.client.simulate_post(CLIENT + "/sessions", json={"serviceId": w.service})

    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


# == list, read, delete (client) ===================================================================
def test_the_list_holds_the_sessions_of_the_callers_api_session(api: Api) -> None:
    w = world(api, bind=True)
    other_login = api.login(w.user.name, "Correct-Horse-42", base=CLIENT)
    dialed = dial(api, w.user.token, w.service).json["data"]["id"]
    bound = dial(api, w.user.token, w.service, "Bind").json["data"]["id"]
    dial(api, other_login, w.service)

    result = client_get(api, "/sessions", w.user.token)
    bind_only = client_get(api, "/sessions", w.user.token, params={"filter": 'type = "Bind"'})

    assert result.status_code == 200
    assert sorted(s["id"] for s in result.json["data"]) == sorted([dialed, bound])
    assert result.json["meta"]["pagination"]["totalCount"] == 2
    assert "apiSession" in result.json["meta"]["filterableFields"]
    assert [s["id"] for s in bind_only.json["data"]] == [bound]
    assert all(s["edgeRouters"] for s in result.json["data"])


def test_reading_the_callers_session(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]

    result = client_get(api, f"/sessions/{created['id']}", w.user.token)

    assert result.status_code == 200
    assert result.json["data"]["token"] == created["token"]
    assert result.json["data"]["edgeRouters"] == created["edgeRouters"]


def test_another_identitys_session_is_not_found(api: Api) -> None:
    w = world(api)
    stranger = user(api)
    created = dial(api, w.user.token, w.service).json["data"]["id"]

    read = client_get(api, f"/sessions/{created}", stranger.token)
    deleted = client_delete(api, f"/sessions/{created}", stranger.token)

    assert read.status_code == 404
    assert deleted.status_code == 404
    assert error(read)["code"] == "NOT_FOUND"
    assert api.get(f"/sessions/{created}").status_code == 200


def test_an_admin_reads_any_session_on_the_client_api(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]["id"]
    admin_token = api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)

    result = client_get(api, f"/sessions/{created}", admin_token)

    assert result.status_code == 200


def test_an_unknown_session_is_not_found(api: Api) -> None:
    person = user(api)

    assert client_get(api, "/sessions/nope", person.token).status_code == 404
    assert client_delete(api, "/sessions/nope", person.token).status_code == 404


def test_deleting_the_callers_session(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]

    result = client_delete(api, f"/sessions/{created['id']}", w.user.token)

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert client_get(api, f"/sessions/{created['id']}", w.user.token).status_code == 404
    assert dial(api, w.user.token, w.service).json["data"]["token"] != created["token"]


# == lifetime ======================================================================================
def test_sessions_end_with_their_api_session(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]["id"]

    assert api.delete("/current-api-session", token=w.user.token, base=CLIENT).status_code == 200

    assert api.get(f"/sessions/{created}").status_code == 404


def test_sessions_end_when_an_admin_deletes_the_api_session(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]

    assert api.delete(f"/api-sessions/{created['apiSessionId']}").status_code == 200

    assert api.get(f"/sessions/{created['id']}").status_code == 404


def test_sessions_end_with_their_service(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]["id"]

    assert api.delete(f"/services/{w.service}").status_code == 200

    assert api.get(f"/sessions/{created}").status_code == 404


def test_losing_dial_ends_dial_sessions_only(api: Api) -> None:
    w = world(api, bind=True)
    dialed = dial(api, w.user.token, w.service).json["data"]["id"]
    bound = dial(api, w.user.token, w.service, "Bind").json["data"]["id"]

    assert api.delete(f"/service-policies/{w.dial_policy}").status_code == 200

    assert api.get(f"/sessions/{dialed}").status_code == 404
    assert api.get(f"/sessions/{bound}").status_code == 200


def test_a_remaining_policy_keeps_the_session(api: Api) -> None:
    w = world(api)
    service_policy(api, "Dial", [f"@{w.user.id}"], [f"@{w.service}"])
    created = dial(api, w.user.token, w.service).json["data"]["id"]

    assert api.delete(f"/service-policies/{w.dial_policy}").status_code == 200

    assert api.get(f"/sessions/{created}").status_code == 200


def test_an_admins_sessions_survive_losing_access(api: Api) -> None:
    w = world(api)
    admin = user(api, admin=True)
    grant = service_policy(api, "Dial", [f"@{admin.id}"], [f"@{w.service}"])
    edge_router_policy(api, [f"@{admin.id}"], [f"@{w.router}"])
    created = dial(api, admin.token, w.service).json["data"]["id"]

    assert api.delete(f"/service-policies/{grant}").status_code == 200

    assert api.get(f"/sessions/{created}").status_code == 200


# == management ====================================================================================
def test_management_lists_reads_and_deletes_any_session(api: Api) -> None:
    w = world(api, bind=True)
    dialed = dial(api, w.user.token, w.service).json["data"]
    bound = dial(api, w.user.token, w.service, "Bind").json["data"]["id"]

    listed = api.get("/sessions", params={"filter": f'service = "{w.service}"'})
    by_type = api.get("/sessions", params={"filter": f'service = "{w.service}" and type = "Bind"'})
    read = api.get(f"/sessions/{dialed['id']}")
    deleted = api.delete(f"/sessions/{dialed['id']}")

    assert listed.status_code == 200
    assert sorted(s["id"] for s in listed.json["data"]) == sorted([dialed["id"], bound])
    assert {"apiSession", "service", "identity", "type", "token"} <= set(
        listed.json["meta"]["filterableFields"]
    )
    assert [s["id"] for s in by_type.json["data"]] == [bound]
    assert read.status_code == 200
    assert read.json["data"]["token"] == dialed["token"]
    assert read.json["data"]["servicePolicies"][0]["id"] == w.dial_policy
    assert deleted.status_code == 200
    assert api.get(f"/sessions/{dialed['id']}").status_code == 404
    assert client_get(api, f"/sessions/{dialed['id']}", w.user.token).status_code == 404


def test_the_route_path_of_a_session_is_empty(api: Api) -> None:
    w = world(api)
    created = dial(api, w.user.token, w.service).json["data"]

    result = api.get(created["_links"]["route-path"]["href"].replace(".", "", 1))

    assert result.status_code == 200
    assert result.json["data"] == {"routePath": []}


def test_management_sessions_are_for_admins(api: Api) -> None:
    person = user(api)

    result = api.get("/sessions", token=person.token)

    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_management_unknown_session(api: Api) -> None:
    assert api.get("/sessions/nope").status_code == 404
    assert api.delete("/sessions/nope").status_code == 404
