"""``/fabric/v1`` (``api.fabric``): routers, links, circuits, services and terminators in OpenZiti's
fabric shapes, to an administrator's ``zt-session``, filtered and paged as every list; links and
circuits as routers report them over real control connections (a real listener on a real loop,
routers enrolled through the API, TLS with their certificates); and what is not served, explained."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from channel import control
from channel.frames import HEARTBEAT, HEARTBEAT_REQUEST, Message
from controller.settings import Settings
from tests.api.certs import unique
from tests.api.control_helpers import VERSION, Plane, RouterCreds, RouterLink, enrolled_router, start_plane
from tests.api.logcapture import capture
from tests.api.session_helpers import edge_router_policy, service_edge_router_policy, service_policy
from tests.api.test_control_plane import Person, bind, body, circuit, person, session_token
from tests.conftest import Api

FABRIC = "/fabric/v1"


@pytest.fixture
def settings(home: Path) -> Settings:
    """The control listener on a free port of the loopback."""
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


@pytest.fixture
def plane(api: Api, tmp_path: Path) -> Iterator[Plane]:
    running = start_plane(api, tmp_path)
    yield running
    running.close()


def fabric(api: Api, method: str, path: str, **kwargs: Any) -> Any:
    return api.request(method, path, base=FABRIC, **kwargs)


def listed(api: Api, path: str, **params: str) -> dict[str, Any]:
    result = fabric(api, "GET", path, params=params)
    assert result.status_code == 200, result.text
    return dict(result.json)


def item(api: Api, path: str) -> dict[str, Any]:
    result = fabric(api, "GET", path)
    assert result.status_code == 200, result.text
    return dict(result.json["data"])


def online(
    plane: Plane, creds: RouterCreds, listener: str = "", circuits: list[str] | None = None
) -> RouterLink:
    """``creds``' router connected, its hello answered and its API-session state received."""
    link = plane.connect(creds)
    link.hello(link_listener=listener, circuits=circuits)
    link.full_state()
    return link


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition``: a router's disconnect is handled on the control loop, not awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.05)


def settle(link: RouterLink) -> None:
    """A heartbeat answered: the controller has handled what the router sent before it."""
    link.request(Message(HEARTBEAT).set_u64(HEARTBEAT_REQUEST, 1))


def report_links(link: RouterLink, *links: dict[str, Any]) -> None:
    link.send(control.message(control.LINKS, {"links": list(links)}))
    settle(link)


def end_circuits(link: RouterLink, *ids: str) -> None:
    link.send(control.message(control.CIRCUITS_ENDED, {"circuitIds": list(ids)}))
    settle(link)


def ref(entity: str, id: str, name: str, *subs: str) -> dict[str, Any]:
    links = {"self": {"href": f"./{entity}/{id}"}}
    links.update({sub: {"href": f"./{entity}/{id}/{sub}"} for sub in subs})
    return {"_links": links, "entity": entity, "id": id, "name": name}


def router_ref(creds: RouterCreds) -> dict[str, Any]:
    return ref("routers", creds.id, creds.name, "terminators")


# == routers =======================================================================================
def test_routers_are_every_router_connected_or_not_in_the_fabric_shape(api: Api, plane: Plane) -> None:
    creds = enrolled_router(api, cost=7)
    transit = api.create("/transit-routers", {"name": unique("tr")})
    link = online(plane, creds, "tls://er.example.test:4022")

    shown = item(api, f"/routers/{creds.id}")
    assert shown["_links"] == {
        "self": {"href": f"./routers/{creds.id}"},
        "terminators": {"href": f"./routers/{creds.id}/terminators"},
    }
    assert {k: shown[k] for k in ("id", "name", "connected", "cost", "noTraversal", "disabled")} == {
        "id": creds.id,
        "name": creds.name,
        "connected": True,
        "cost": 7,
        "noTraversal": False,
        "disabled": False,
    }
    assert shown["fingerprint"] == creds.fingerprint
    assert shown["listenerAddresses"] == [{"address": "tls:er.example.test:4022", "protocol": "tls"}]
    version, revision, build_date, os_name, arch = VERSION.split("|")
    assert shown["versionInfo"] == {
        "version": version,
        "revision": revision,
        "buildDate": build_date,
        "os": os_name,
        "arch": arch,
    }
    for key in ("createdAt", "updatedAt", "tags"):
        assert key in shown

    other = item(api, f"/routers/{transit}")
    assert other["connected"] is False
    assert other["listenerAddresses"] is None
    assert "versionInfo" not in other  # as OpenZiti omits it for a router that is not connected

    plane.loop.call(link.channel.close)
    assert link.wait_closed()

    def connected() -> bool:
        return bool(item(api, f"/routers/{creds.id}")["connected"])

    wait_until(lambda: not connected(), "the router shows as disconnected")
    gone = item(api, f"/routers/{creds.id}")
    assert gone["listenerAddresses"] is None
    assert "versionInfo" not in gone


def test_the_router_list_filters_and_pages(api: Api, plane: Plane) -> None:
    creds = [enrolled_router(api) for _ in range(3)]
    online(plane, creds[1])

    everything = listed(api, "/routers", limit="-1")
    assert {c.id for c in creds} <= {r["id"] for r in everything["data"]}

    up = listed(api, "/routers", filter="connected = true")
    assert [r["id"] for r in up["data"]] == [creds[1].id]

    page = listed(api, "/routers", filter="true limit 2")
    assert len(page["data"]) == 2
    assert page["meta"]["pagination"] == {
        "limit": 2,
        "offset": 0,
        "totalCount": everything["meta"]["pagination"]["totalCount"],
    }
    assert "connected" in page["meta"]["filterableFields"]

    named = listed(api, "/routers", filter=f'name = "{creds[2].name}"')
    assert [r["id"] for r in named["data"]] == [creds[2].id]

    bad = fabric(api, "GET", "/routers", params={"filter": "nosuchfield = 1"})
    assert bad.status_code == 400
    assert bad.json["error"]["code"] == "INVALID_FILTER"


# == links =========================================================================================
def two_online(api: Api, plane: Plane) -> tuple[RouterCreds, RouterCreds, RouterLink, RouterLink]:
    one, two = sorted((enrolled_router(api), enrolled_router(api)), key=lambda r: r.id)
    first = online(plane, one, "tls://one.example.test:4022")
    second = online(plane, two, "tls://two.example.test:4022")
    return one, two, first, second


def test_a_link_both_routers_report_is_listed_once_from_its_dialer(api: Api, plane: Plane) -> None:
    one, two, first, second = two_online(api, plane)
    report_links(first, {"id": "link-ab", "routerId": two.id, "dialed": True, "protocol": "tls"})
    report_links(second, {"id": "link-ab", "routerId": one.id, "dialed": False, "protocol": "tls"})

    links = listed(api, "/links")
    assert links["data"] == [
        {
            "cost": 1,
            "destLatency": 0,
            "destRouter": router_ref(two),
            "down": False,
            "id": "link-ab",
            "iteration": 1,
            "protocol": "tls",
            "sourceLatency": 0,
            "sourceRouter": router_ref(one),
            "state": "Connected",
            "staticCost": 1,
        }
    ]
    assert links["meta"]["pagination"]["totalCount"] == 1
    assert item(api, "/links/link-ab")["sourceRouter"]["id"] == one.id
    by_dest = listed(api, "/links", filter=f'destRouter = "{two.id}"')
    assert [k["id"] for k in by_dest["data"]] == ["link-ab"]
    assert listed(api, "/links", filter=f'destRouter = "{one.id}"')["data"] == []


def test_a_link_only_the_listener_reports_is_listed_with_its_dialer_as_source(api: Api, plane: Plane) -> None:
    one, two, _, second = two_online(api, plane)
    report_links(second, {"id": "link-x", "routerId": one.id, "dialed": False})

    [shown] = listed(api, "/links")["data"]
    assert (shown["sourceRouter"]["id"], shown["destRouter"]["id"]) == (one.id, two.id)


def test_links_go_when_the_router_reports_them_gone_or_disconnects(api: Api, plane: Plane) -> None:
    one, two, first, second = two_online(api, plane)
    report_links(first, {"id": "l1", "routerId": two.id, "dialed": True})
    assert [k["id"] for k in listed(api, "/links")["data"]] == ["l1"]

    report_links(first)  # the whole set: none now
    assert listed(api, "/links")["data"] == []
    missing = fabric(api, "GET", "/links/l1")
    assert missing.status_code == 404
    assert missing.json["error"]["code"] == "NOT_FOUND"

    report_links(first, {"id": "l2", "routerId": two.id, "dialed": True})
    report_links(second, {"id": "l2", "routerId": one.id, "dialed": False})
    assert [k["id"] for k in listed(api, "/links")["data"]] == ["l2"]
    plane.loop.call(second.channel.close)  # one end offline: the link is no more
    wait_until(lambda: not listed(api, "/links")["data"], "the link goes with its router")


def test_a_bad_links_report_is_ignored(api: Api, plane: Plane) -> None:
    _, two, first, _ = two_online(api, plane)
    report_links(first, {"id": "ok", "routerId": two.id, "dialed": True})
    first.send(control.message(control.LINKS, {"links": [{"id": 5}]}))
    settle(first)
    assert [k["id"] for k in listed(api, "/links")["data"]] == ["ok"]


# == circuits ======================================================================================
def hosted_network(api: Api) -> tuple[RouterCreds, RouterCreds, Person, str]:
    """Routers one and two, a person who may Dial and Bind a service on both."""
    role = unique("r")
    one, two = sorted((enrolled_router(api, role), enrolled_router(api, role)), key=lambda r: r.id)
    who = person(api, role)
    service = api.create(
        "/services", {"name": unique("svc"), "encryptionRequired": False, "roleAttributes": [role]}
    )
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    service_policy(api, "Bind", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    return one, two, who, service


def test_a_granted_dial_is_a_circuit_until_its_router_reports_it_ended(api: Api, plane: Plane) -> None:
    one, two, who, service = hosted_network(api)
    first = online(plane, one, "tls://one.example.test:4022")
    second = online(plane, two, "tls://two.example.test:4022")
    report_links(first, {"id": "link-12", "routerId": two.id, "dialed": True})
    hosted = body(second.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    dial_session = session_token(api, who, service, "Dial")

    reply = body(first.request(circuit(who, dial_session["token"])))

    circuit_id = reply["circuitId"]
    assert circuit_id
    shown = item(api, f"/circuits/{circuit_id}")
    service_name = api.get(f"/services/{service}").json["data"]["name"]
    assert shown["id"] == circuit_id
    assert shown["clientId"] == dial_session["id"]
    assert shown["service"] == ref("services", service, service_name, "terminators")
    assert shown["terminator"] == ref("terminators", hosted["terminatorId"], hosted["terminatorId"])
    assert shown["path"] == {
        "nodes": [router_ref(one), router_ref(two)],
        "links": [ref("links", "link-12", "link-12")],
    }
    assert shown["tags"] == {"serviceId": service, "clientId": who.id, "hostId": hosted["sessionId"]}
    assert shown["createdAt"] == shown["updatedAt"]
    assert shown["_links"]["self"] == {"href": f"./circuits/{circuit_id}"}

    by_service = listed(api, "/circuits", filter=f'service = "{service}"')
    assert [c["id"] for c in by_service["data"]] == [circuit_id]

    end_circuits(second, circuit_id)  # not the router that opened it: ignored
    assert item(api, f"/circuits/{circuit_id}")["id"] == circuit_id
    end_circuits(first, circuit_id)
    assert fabric(api, "GET", f"/circuits/{circuit_id}").status_code == 404
    assert listed(api, "/circuits", filter=f'service = "{service}"')["data"] == []


def test_a_circuit_on_its_own_router_has_one_node_and_no_link(api: Api, plane: Plane) -> None:
    one, _, who, service = hosted_network(api)
    first = online(plane, one)
    body(first.request(bind(who, session_token(api, who, service, "Bind")["token"])))

    reply = body(first.request(circuit(who, session_token(api, who, service, "Dial")["token"])))

    assert item(api, f"/circuits/{reply['circuitId']}")["path"] == {"nodes": [router_ref(one)], "links": []}


def test_a_hello_keeps_only_the_circuits_the_router_still_holds(api: Api, plane: Plane) -> None:
    one, _, who, service = hosted_network(api)
    first = online(plane, one)
    body(first.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    kept, lost = (
        body(first.request(circuit(who, session_token(api, who, service, "Dial")["token"])))["circuitId"]
        for _ in range(2)
    )

    plane.loop.call(first.channel.close)  # the circuits outlive the control connection ...
    assert first.wait_closed()
    assert fabric(api, "GET", f"/circuits/{kept}").status_code == 200
    online(plane, one, circuits=[kept, "not-a-circuit-of-ours"])  # ... until the router says hello

    assert fabric(api, "GET", f"/circuits/{kept}").status_code == 200
    assert fabric(api, "GET", f"/circuits/{lost}").status_code == 404


def test_deleting_a_circuit_asks_its_router_to_close_it(api: Api, plane: Plane) -> None:
    one, _, who, service = hosted_network(api)
    first = online(plane, one)
    body(first.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    circuit_id = body(first.request(circuit(who, session_token(api, who, service, "Dial")["token"])))[
        "circuitId"
    ]

    with capture() as logs:
        result = fabric(api, "DELETE", f"/circuits/{circuit_id}", json={"immediate": True})

    assert result.status_code == 200, result.text
    [logged] = logs.events("admin.write")
    assert (logged["action"], logged["kind"], logged["id"]) == ("delete", "circuits", circuit_id)
    assert result.json["data"] == {}
    told = first.take(control.CLOSE_CIRCUITS)
    assert told["circuitIds"] == [circuit_id]
    assert "deleted" in told["reason"]
    assert fabric(api, "GET", f"/circuits/{circuit_id}").status_code == 404
    again = fabric(api, "DELETE", f"/circuits/{circuit_id}")
    assert again.status_code == 404
    assert again.json["error"]["code"] == "NOT_FOUND"


def test_a_circuit_delete_takes_no_body_too_and_refuses_a_bad_one(api: Api, plane: Plane) -> None:
    one, _, who, service = hosted_network(api)
    first = online(plane, one)
    body(first.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    ids = [
        body(first.request(circuit(who, session_token(api, who, service, "Dial")["token"])))["circuitId"]
        for _ in range(2)
    ]

    bad = fabric(api, "DELETE", f"/circuits/{ids[0]}", json={"immediate": "soon"})
    assert bad.status_code == 400
    assert bad.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert fabric(api, "DELETE", f"/circuits/{ids[0]}").status_code == 200
    assert fabric(api, "DELETE", f"/circuits/{ids[1]}", json={}).status_code == 200


# == services and terminators ======================================================================
def test_services_and_terminators_in_the_fabric_shape(api: Api, plane: Plane) -> None:
    one, _, who, service = hosted_network(api)
    first = online(plane, one)
    hosted = body(first.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    name = api.get(f"/services/{service}").json["data"]["name"]

    shown = item(api, f"/services/{service}")
    assert shown["_links"] == {
        "self": {"href": f"./services/{service}"},
        "terminators": {"href": f"./services/{service}/terminators"},
    }
    assert (shown["id"], shown["name"], shown["terminatorStrategy"]) == (service, name, "smartrouting")
    assert [s["id"] for s in listed(api, "/services", filter=f'name = "{name}"')["data"]] == [service]

    [terminator] = listed(api, f"/services/{service}/terminators")["data"]
    assert terminator == item(api, f"/terminators/{hosted['terminatorId']}")
    assert terminator["service"] == ref("services", service, name, "terminators")
    assert terminator["router"] == router_ref(one)
    assert (terminator["serviceId"], terminator["routerId"]) == (service, one.id)
    assert terminator["binding"] == "edge"
    assert terminator["hostId"] == hosted["sessionId"]
    assert (terminator["cost"], terminator["precedence"], terminator["dynamicCost"]) == (0, "default", 0)
    assert terminator["instanceId"] == ""
    assert "address" in terminator

    mine = listed(api, f"/routers/{one.id}/terminators")["data"]
    assert [t["id"] for t in mine] == [hosted["terminatorId"]]
    by_router = listed(api, "/terminators", filter=f'router = "{one.id}"')["data"]
    assert [t["id"] for t in by_router] == [hosted["terminatorId"]]
    assert fabric(api, "GET", "/routers/nope/terminators").status_code == 404
    assert fabric(api, "GET", "/services/nope/terminators").status_code == 404


# == who may, and what is not served ===============================================================
def test_the_fabric_api_is_for_administrators(api: Api) -> None:
    assert fabric(api, "GET", "/routers", token="").status_code == 401
    regular = person(api)
    result = fabric(api, "GET", "/circuits", token=regular.token)
    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"


@pytest.mark.parametrize(
    ("method", "path", "allow", "says"),
    [
        ("POST", "/routers", "GET", "/edge-routers"),
        ("PATCH", "/routers/x", "GET", "/edge-routers"),
        ("DELETE", "/services/x", "GET", "/services"),
        ("PUT", "/terminators/x", "GET", "/terminators"),
        ("PATCH", "/links/x", "GET", "no link cost"),
        ("DELETE", "/links/x", "GET", "does not delete links"),
        ("POST", "/circuits", "GET", "may only delete"),
        ("PATCH", "/circuits/x", "GET, DELETE", "may only delete"),
    ],
)
def test_writes_trellis_does_not_serve_are_explained(
    api: Api, method: str, path: str, allow: str, says: str
) -> None:
    result = fabric(api, method, path, json={})
    assert result.status_code == 405
    assert result.headers["allow"] == allow
    error = result.json["error"]
    assert error["code"] == "METHOD_NOT_ALLOWED"
    assert says in error["cause"]["message"]


@pytest.mark.parametrize(
    ("method", "path", "says"),
    [
        ("POST", "/inspections", "no inspections"),
        ("POST", "/database/snapshot", "/edge/management/v1/database"),
        ("GET", "/cluster/list-members", "no cluster"),
        ("GET", "/routers/x/links", "reads of routers, links, circuits"),
        ("GET", "", "reads of routers"),
    ],
)
def test_paths_trellis_does_not_serve_are_explained(api: Api, method: str, path: str, says: str) -> None:
    result = fabric(api, method, path, token="")
    assert result.status_code == 404
    error = result.json["error"]
    assert error["code"] == "NOT_FOUND"
    assert says in error["cause"]["message"]
    assert f"{method} /fabric/v1{path}" in error["cause"]["message"]


def test_the_fabric_api_is_described(api: Api) -> None:
    spec = api.client.simulate_get(FABRIC + "/swagger.json").json
    assert spec["basePath"] == FABRIC
    assert set(spec["paths"]["/circuits/{id}"]) == {"get", "delete"}
    assert set(spec["paths"]["/routers"]) == {"get"}  # the refusals are no operations
    assert "/inspections" not in spec["paths"]
    version = api.client.simulate_get("/version").json["data"]
    assert version["apiVersions"]["fabric"]["v1"]["path"] == FABRIC
