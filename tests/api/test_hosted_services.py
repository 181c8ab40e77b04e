"""Router-hosted services on the control connection: what a tunneler-enabled router is told it
hosts (``HOSTED_SERVICES``) and the ``tunnel`` terminators it makes for them
(``CREATE_TUNNEL_TERMINATOR``), against the app's real control listener (``controller.control``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from channel import control
from channel.edge import ERROR_CODE
from channel.frames import HELLO_VERSION, RESULT_SUCCESS, Message
from controller.settings import Settings
from tests.api.certs import enroll_ott, sha1_fingerprint, tls, unique
from tests.api.control_helpers import VERSION, Plane, RouterCreds, RouterLink, enrolled_router, start_plane
from tests.api.session_helpers import (
    client_get,
    dial,
    edge_router_policy,
    service_edge_router_policy,
    service_policy,
)
from tests.conftest import CLIENT, Api

HOST_V1 = "NH5p4FpGR"
ECHO_HOST = {"protocol": "tcp", "address": "127.0.0.1", "port": 7007}


@pytest.fixture
def settings(home: Path) -> Settings:
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


@pytest.fixture
def plane(api: Api, tmp_path: Path) -> Iterator[Plane]:
    running = start_plane(api, tmp_path)
    yield running
    running.close()


def hello(link: RouterLink, *, tunneler: bool = True, terminators: list[str] | None = None) -> Message:
    message = control.message(
        control.HELLO,
        {
            "hostname": "er.example.test",
            "protocols": {"tls": "tls://er.example.test:3022"},
            "linkListener": "",
            "tunneler": tunneler,
            "terminators": terminators or [],
        },
    )
    message.set_text(HELLO_VERSION, VERSION)
    return link.request(message)


def tunneler(api: Api, plane: Plane, *attributes: str) -> tuple[RouterCreds, RouterLink]:
    """A tunneler-enabled router, connected, its hello accepted."""
    router = enrolled_router(api, *attributes, isTunnelerEnabled=True)
    link = plane.connect(router)
    assert hello(link).flag(RESULT_SUCCESS)
    return router, link


def host_config(api: Api, data: dict[str, Any] | None = None) -> str:
    return api.create(
        "/configs", {"name": unique("host"), "configTypeId": HOST_V1, "data": data or ECHO_HOST}
    )


def hosted_service(
    api: Api, *attributes: str, data: dict[str, Any] | None = None, encrypted: bool = False
) -> str:
    return api.create(
        "/services",
        {
            "name": unique("svc"),
            "encryptionRequired": encrypted,
            "roleAttributes": list(attributes),
            "configs": [host_config(api, data)],
        },
    )


def services(
    link: RouterLink, where: Callable[[list[dict[str, Any]]], bool] = lambda s: True
) -> list[dict[str, Any]]:
    """The services of the next ``HOSTED_SERVICES`` whose list matches ``where``."""
    message = link.take(control.HOSTED_SERVICES, lambda m: where(json.loads(m.body)["services"]))
    return list(message["services"])


def ids(listed: list[dict[str, Any]]) -> list[str]:
    return [s["id"] for s in listed]


def tunnel_terminator(service_id: str, **extra: Any) -> Message:
    return control.message(control.CREATE_TUNNEL_TERMINATOR, {"serviceId": service_id, **extra})


def body(message: Message) -> dict[str, Any]:
    return dict(json.loads(message.body))


def error_of(message: Message) -> tuple[int | None, str]:
    assert message.content_type == control.ERROR, message
    return message.u32(ERROR_CODE), message.body.decode()


# == what a router is told ==========================================================================
def test_a_tunneler_router_is_told_the_services_its_identity_may_bind_with_a_host_config(
    api: Api, plane: Plane
) -> None:
    router = enrolled_router(api, isTunnelerEnabled=True)
    hosted = hosted_service(api, data={**ECHO_HOST, "listenOptions": {"connectTimeoutSeconds": 2}})
    not_bound = hosted_service(api)
    no_config = api.create("/services", {"name": unique("svc"), "encryptionRequired": False})
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{hosted}", f"@{no_config}"])
    service_policy(api, "Dial", [f"@{router.id}"], [f"@{not_bound}"])
    link = plane.connect(router)

    assert hello(link).flag(RESULT_SUCCESS)
    listed = services(link)

    name = api.get(f"/services/{hosted}").json["data"]["name"]
    assert listed == [
        {
            "id": hosted,
            "name": name,
            "encryptionRequired": False,
            "host": {**ECHO_HOST, "listenOptions": {"connectTimeoutSeconds": 2}},
            "cost": 0,
            "precedence": "default",
            "instanceId": "",
        }
    ]


def test_a_router_that_is_not_tunneler_enabled_is_told_it_hosts_nothing(api: Api, plane: Plane) -> None:
    router = enrolled_router(api)
    service_policy(api, "Bind", ["#all"], [f"@{hosted_service(api)}"])
    link = plane.connect(router)

    assert hello(link).flag(RESULT_SUCCESS)

    assert services(link) == []


def test_the_list_follows_policies_configs_and_overrides(api: Api, plane: Plane) -> None:
    role = unique("hosted")
    first = hosted_service(api, role)
    second = hosted_service(api, role, encrypted=True)
    router, link = tunneler(api, plane)
    assert services(link) == []

    policy = service_policy(api, "Bind", [f"@{router.id}"], [f"#{role}"])
    both = services(link, lambda s: len(s) == 2)
    config = api.get(f"/services/{first}").json["data"]["configs"][0]
    moved = {**ECHO_HOST, "port": 8008}
    assert api.patch(f"/configs/{config}", json={"data": moved}).status_code == 200
    changed = services(link, lambda s: any(e["id"] == first and e["host"]["port"] == 8008 for e in s))
    override = host_config(api, {**ECHO_HOST, "address": "override.example.test"})
    assigned = api.post(
        f"/identities/{router.id}/service-configs", json=[{"serviceId": second, "configId": override}]
    )
    assert assigned.status_code == 200, assigned.text
    overridden = services(link, lambda s: any(e["host"]["address"] == "override.example.test" for e in s))
    assert api.delete(f"/service-policies/{policy}").status_code == 200
    emptied = services(link, lambda s: s == [])

    assert sorted(ids(both)) == sorted([first, second])
    assert {e["id"]: e["encryptionRequired"] for e in both} == {first: False, second: True}
    assert {e["id"]: e["host"]["port"] for e in changed} == {first: 8008, second: 7007}
    assert {e["id"]: e["host"]["address"] for e in overridden} == {
        first: "127.0.0.1",
        second: "override.example.test",
    }
    assert emptied == []


def test_the_router_identitys_attributes_and_the_tunneler_flag_count(api: Api, plane: Plane) -> None:
    role = unique("hosts")
    service = hosted_service(api)
    service_policy(api, "Bind", [f"#{role}"], [f"@{service}"])
    router, link = tunneler(api, plane)
    assert services(link) == []

    assert api.patch(f"/identities/{router.id}", json={"roleAttributes": [role]}).status_code == 200
    gained = services(link, lambda s: s != [])
    assert api.patch(f"/edge-routers/{router.id}", json={"isTunnelerEnabled": False}).status_code == 200
    lost = services(link, lambda s: s == [])

    assert ids(gained) == [service]
    assert lost == []


def test_cost_and_precedence_come_from_listen_options_or_the_identitys_hosting_entries(
    api: Api, plane: Plane
) -> None:
    options = {"cost": 7, "precedence": "required", "bindUsingEdgeIdentity": True}
    service = hosted_service(api, data={**ECHO_HOST, "listenOptions": options})
    router, link = tunneler(api, plane)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    [from_options] = services(link, lambda s: s != [])

    patched = api.patch(
        f"/identities/{router.id}",
        json={"serviceHostingCosts": {service: 300}, "serviceHostingPrecedences": {service: "failed"}},
    )
    assert patched.status_code == 200, patched.text
    [from_identity] = services(link, lambda s: s != [] and s[0]["cost"] == 300)

    assert (from_options["cost"], from_options["precedence"]) == (7, "required")
    assert from_options["instanceId"] == router.name
    assert (from_identity["cost"], from_identity["precedence"]) == (300, "failed")


# == tunnel terminators ============================================================================
def test_a_tunnel_terminator_is_listed_by_both_apis_and_asked_for_again_is_the_same(
    api: Api, plane: Plane
) -> None:
    role = unique("r")
    service = hosted_service(api, role, data={**ECHO_HOST, "listenOptions": {"cost": 12}})
    router, link = tunneler(api, plane, role)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    services(link, lambda s: s != [])

    answer = link.request(tunnel_terminator(service))
    made = body(answer)
    terminator = api.get(f"/terminators/{made['terminatorId']}").json["data"]
    again = link.request(tunnel_terminator(service, cost=40, precedence="required"))

    assert answer.content_type == control.CREATE_TUNNEL_TERMINATOR_REPLY, answer.body
    assert made["serviceId"] == service
    assert (terminator["binding"], terminator["address"]) == ("tunnel", f"tunnel:{service}")
    assert (terminator["routerId"], terminator["serviceId"]) == (router.id, service)
    assert body(again)["terminatorId"] == made["terminatorId"]
    updated = api.get(f"/terminators/{made['terminatorId']}").json["data"]
    assert (terminator["cost"], updated["cost"], updated["precedence"]) == (12, 40, "required")
    user = enroll_ott(api, unique("dialer"), roleAttributes=[role])
    token = cert_login(api, user)[0]
    service_policy(api, "Dial", [f"#{role}"], [f"@{service}"])
    listed = client_get(api, f"/services/{service}/terminators", token).json["data"]
    assert [t["id"] for t in listed] == [made["terminatorId"]]


def cert_login(api: Api, cert: Any) -> tuple[str, str]:
    result = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(cert.leaf)
    )
    assert result.status_code == 200, result.text
    return result.json["data"]["token"], result.json["data"]["id"]


def test_a_dial_reaches_the_tunnel_terminator(api: Api, plane: Plane) -> None:
    role = unique("r")
    service = hosted_service(api, role)
    router, link = tunneler(api, plane, role)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    made = body(link.request(tunnel_terminator(service)))
    user = enroll_ott(api, unique("dialer"), roleAttributes=[role])
    token, api_session_id = cert_login(api, user)
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    session = dial(api, token, service, "Dial").json["data"]
    request = control.message(
        control.CREATE_CIRCUIT,
        {
            "sessionToken": session["token"],
            "apiSessionId": api_session_id,
            "fingerprints": [sha1_fingerprint(user.chain)],
            "terminatorInstanceId": "",
            "hasPublicKey": False,
        },
    )

    answer = link.request(request)

    assert answer.content_type == control.CREATE_CIRCUIT_REPLY, answer.body
    assert body(answer)["terminator"] == {
        "id": made["terminatorId"],
        "routerId": router.id,
        "binding": "tunnel",
        "address": f"tunnel:{service}",
        "instanceId": "",
    }


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("not tunneler-enabled", 7),
        ("no bind", 6),
        ("no host config", 6),
        ("unknown service", 6),
        ("cost out of range", 10),
        ("bad precedence", 9),
    ],
)
def test_a_tunnel_terminator_that_may_not_be_is_refused(api: Api, plane: Plane, case: str, code: int) -> None:
    router = enrolled_router(api, isTunnelerEnabled=case != "not tunneler-enabled")
    link = plane.connect(router)
    assert hello(link).flag(RESULT_SUCCESS)
    service = (
        api.create("/services", {"name": unique("svc"), "encryptionRequired": False})
        if case == "no host config"
        else hosted_service(api)
    )
    if case == "not tunneler-enabled":  # it has no router identity: any identity may bind
        service_policy(api, "Bind", ["#all"], [f"@{service}"])
    elif case != "no bind":
        service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    extra: dict[str, Any] = {}
    if case == "cost out of range":
        extra["cost"] = 70000
    elif case == "bad precedence":
        extra["precedence"] = "sometimes"
    elif case == "unknown service":
        service = "no-such-service"

    answer = link.request(tunnel_terminator(service, **extra))

    assert error_of(answer)[0] == code
    assert not [t for t in api.get("/terminators").json["data"] if t["routerId"] == router.id]


def test_a_malformed_tunnel_terminator_request_is_an_error(api: Api, plane: Plane) -> None:
    _, link = tunneler(api, plane)

    answer = link.request(control.message(control.CREATE_TUNNEL_TERMINATOR, {"serviceId": 5}))

    assert error_of(answer)[0] == 1


def test_a_reconnecting_router_keeps_the_tunnel_terminators_it_lists_and_loses_the_others(
    api: Api, plane: Plane
) -> None:
    router, link = tunneler(api, plane)
    kept_service, dropped_service = hosted_service(api), hosted_service(api)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{kept_service}", f"@{dropped_service}"])
    kept = body(link.request(tunnel_terminator(kept_service)))["terminatorId"]
    dropped = body(link.request(tunnel_terminator(dropped_service)))["terminatorId"]
    plane.loop.call(link.channel.abort)
    again = plane.connect(router)

    answer = hello(again, terminators=[kept])

    assert body(answer)["unknownTerminators"] == []
    assert api.get(f"/terminators/{kept}").status_code == 200
    assert api.get(f"/terminators/{dropped}").status_code == 404
    assert sorted(ids(services(again))) == sorted([kept_service, dropped_service])


def test_a_router_removes_its_tunnel_terminator(api: Api, plane: Plane) -> None:
    router, link = tunneler(api, plane)
    service = hosted_service(api)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    made = body(link.request(tunnel_terminator(service)))["terminatorId"]

    answer = link.request(control.message(control.REMOVE_TERMINATORS, {"terminatorIds": [made]}))

    assert answer.flag(RESULT_SUCCESS)
    assert api.get(f"/terminators/{made}").status_code == 404


def test_another_instance_id_replaces_the_tunnel_terminator(api: Api, plane: Plane) -> None:
    router, link = tunneler(api, plane)
    service = hosted_service(api)
    service_policy(api, "Bind", [f"@{router.id}"], [f"@{service}"])
    first = body(link.request(tunnel_terminator(service, instanceId="one")))["terminatorId"]

    second = body(link.request(tunnel_terminator(service, instanceId="two")))["terminatorId"]

    assert second != first
    assert api.get(f"/terminators/{first}").status_code == 404
    assert api.get(f"/terminators/{second}").json["data"]["identity"] == "two"
