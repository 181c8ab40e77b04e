"""Several routers on the control listener (``controller.control``): a Dial on one router for a terminator
bound on another is answered with the path from the one to the other while that router is online,
and the routers are told of each other (``ROUTER_LINKS``) as they come and go. Real listener, real
loop, routers enrolled through the API connecting over TLS with their certificates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from channel import control
from channel.frames import Message
from controller.settings import Settings
from tests.api.certs import unique
from tests.api.control_helpers import Plane, RouterCreds, RouterLink, enrolled_router, start_plane
from tests.api.session_helpers import edge_router_policy, service_edge_router_policy, service_policy
from tests.api.test_control_plane import Person, bind, body, circuit, error_of, person, session_token
from tests.conftest import Api


@pytest.fixture
def settings(home: Path) -> Settings:
    """The control listener on a free port of the loopback."""
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


@pytest.fixture
def plane(api: Api, tmp_path: Path) -> Iterator[Plane]:
    running = start_plane(api, tmp_path)
    yield running
    running.close()


def listing(*routers: tuple[RouterCreds, str]) -> dict[str, Any]:
    """A ``ROUTER_LINKS`` body naming ``routers`` (with their link listeners), sorted by id."""
    entries = [
        {"id": r.id, "name": r.name, "linkListener": where, "fingerprint": r.fingerprint}
        for r, where in routers
    ]
    return {"routers": sorted(entries, key=lambda e: e["id"])}


def sorted_links(message_body: dict[str, Any]) -> dict[str, Any]:
    return {"routers": sorted(message_body["routers"], key=lambda e: e["id"])}


def links_of(link: RouterLink, expected: dict[str, Any]) -> dict[str, Any]:
    """The first ``ROUTER_LINKS`` ``link`` was sent that lists what ``expected`` does (others,
    sent while routers came and went, are left; none in time fails the test)."""

    def matches(message: Message) -> bool:
        return sorted_links(json.loads(message.body)) == expected

    return sorted_links(link.take(control.ROUTER_LINKS, matches))


def online(
    plane: Plane, creds: RouterCreds, listener: str, terminators: list[str] | None = None
) -> RouterLink:
    """``creds``' router connected, its hello answered and its API-session state received."""
    link = plane.connect(creds)
    link.hello(link_listener=listener, terminators=terminators)
    link.full_state()
    return link


def two_routers(api: Api) -> tuple[RouterCreds, RouterCreds, Person, str]:
    """Routers one and two, a person and a service the person may Dial and Bind on both."""
    role = unique("r")
    one, two = enrolled_router(api, role), enrolled_router(api, role)
    who = person(api, role)
    service = api.create(
        "/services", {"name": unique("svc"), "encryptionRequired": False, "roleAttributes": [role]}
    )
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    service_policy(api, "Bind", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    return one, two, who, service


def test_a_dial_reaches_a_terminator_on_another_router_only_while_it_is_online(
    api: Api, plane: Plane
) -> None:
    one, two, who, service = two_routers(api)
    first = online(plane, one, "tls://one.example.test:4022")
    second = online(plane, two, "tls://two.example.test:4022")
    hosted = body(second.request(bind(who, session_token(api, who, service, "Bind")["token"])))
    dial_token = session_token(api, who, service, "Dial")["token"]

    reply = body(first.request(circuit(who, dial_token)))

    assert reply["terminator"]["id"] == hosted["terminatorId"]
    assert reply["terminator"]["routerId"] == two.id
    assert reply["path"] == [one.id, two.id]
    assert reply["callerId"] == who.name

    plane.loop.call(second.channel.close)
    links_of(first, listing())  # the controller has seen router two go

    code, reason = error_of(first.request(circuit(who, dial_token)))
    assert code == 8
    assert "no terminator on an online router" in reason

    again = online(plane, two, "tls://two.example.test:4023", terminators=[hosted["terminatorId"]])
    links_of(first, listing((two, "tls://two.example.test:4023")))

    reply = body(first.request(circuit(who, dial_token)))
    assert reply["path"] == [one.id, two.id]
    assert body(again.request(circuit(who, dial_token)))["path"] == [two.id]  # on its own router


def test_the_routers_are_told_of_each_other_as_they_come_and_go(api: Api, plane: Plane) -> None:
    one, two, three = enrolled_router(api), enrolled_router(api), enrolled_router(api)
    first = online(plane, one, "tls://one.example.test:4022")
    links_of(first, listing())

    second = online(plane, two, "tls://two.example.test:4022")
    links_of(second, listing((one, "tls://one.example.test:4022")))
    links_of(first, listing((two, "tls://two.example.test:4022")))

    third = online(plane, three, "")  # takes no links: listed with ""
    links_of(third, listing((one, "tls://one.example.test:4022"), (two, "tls://two.example.test:4022")))
    links_of(first, listing((two, "tls://two.example.test:4022"), (three, "")))
    links_of(second, listing((one, "tls://one.example.test:4022"), (three, "")))

    plane.loop.call(second.channel.abort)
    links_of(first, listing((three, "")))
    links_of(third, listing((one, "tls://one.example.test:4022")))

    online(plane, two, "tls://two.example.test:5022")  # back, listening elsewhere
    links_of(first, listing((two, "tls://two.example.test:5022"), (three, "")))
    links_of(third, listing((one, "tls://one.example.test:4022"), (two, "tls://two.example.test:5022")))

    assert api.delete(f"/edge-routers/{three.id}").status_code == 200  # its connection closes
    links_of(first, listing((two, "tls://two.example.test:5022")))
