"""The control listener edge routers connect to (``controller.control``): a real listener on a real loop,
routers enrolled through the API connecting over TLS with their certificates, speaking channel v2
(``channel.control`` is the protocol)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from channel import control
from channel.edge import ERROR_CODE, INVALID_SESSION_TEXT
from channel.frames import (
    HEARTBEAT,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    HELLO_VERSION,
    RESULT_SUCCESS,
    Message,
)
from controller.settings import Settings
from tests.api.certs import (
    NetworkCert,
    ThirdPartyCa,
    csr_pem,
    enroll_ott,
    new_key,
    san_csr_pem,
    sha1_fingerprint,
    split_chain,
    tls,
    unique,
)
from tests.api.control_helpers import (
    VERSION,
    WAIT,
    ClientCert,
    Plane,
    RouterCreds,
    RouterLink,
    enrolled_router,
    re_enrolled,
    start_plane,
)
from tests.api.logcapture import capture
from tests.api.session_helpers import (
    client_get,
    dial,
    edge_router_policy,
    service_edge_router_policy,
    service_policy,
)
from tests.conftest import CLIENT, Api


@pytest.fixture
def settings(home: Path) -> Settings:
    """The control listener on a free port of the loopback."""
    return Settings(home=home, bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:0", db_writer="thread")


@pytest.fixture
def plane(api: Api, tmp_path: Path) -> Iterator[Plane]:
    running = start_plane(api, tmp_path)
    yield running
    running.close()


@dataclass
class Person:
    """An identity with a certificate from our CA, logged in with it on the client API."""

    id: str
    name: str
    cert: NetworkCert
    token: str
    api_session_id: str

    @property
    def fingerprint(self) -> str:
        return sha1_fingerprint(self.cert.chain)


def person(api: Api, *attributes: str, **fields: Any) -> Person:
    name = unique("user")
    cert = enroll_ott(api, name, roleAttributes=list(attributes), **fields)
    return Person(cert.identity_id, name, cert, *cert_login(api, cert))


def cert_login(api: Api, cert: NetworkCert) -> tuple[str, str]:
    """A new API session of ``cert``'s identity: (token, id)."""
    result = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(cert.leaf)
    )
    if result.status_code != 200:
        raise RuntimeError(result.text)
    return result.json["data"]["token"], result.json["data"]["id"]


@dataclass
class Network:
    """A router, a person, a service both may use (Dial and Bind), connected and synchronised."""

    router: RouterCreds
    link: RouterLink
    person: Person
    service: str
    role: str
    dial_policy: str


def network(api: Api, plane: Plane, *, encryption: bool = False) -> Network:
    role = unique("r")
    router = enrolled_router(api, role)
    who = person(api, role)
    service = api.create(
        "/services", {"name": unique("svc"), "encryptionRequired": encryption, "roleAttributes": [role]}
    )
    dial_policy = service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    service_policy(api, "Bind", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    link = plane.connect(router)
    link.hello()
    link.full_state()
    return Network(router, link, who, service, role, dial_policy)


def session_token(api: Api, who: Person, service: str, kind: str) -> dict[str, Any]:
    result = dial(api, who.token, service, kind)
    if result.status_code != 201:
        raise RuntimeError(result.text)
    return dict(result.json["data"])


def circuit(who: Person, token: str, **extra: Any) -> Message:
    body = {
        "sessionToken": token,
        "apiSessionId": who.api_session_id,
        "fingerprints": [who.fingerprint],
        "terminatorInstanceId": "",
        "hasPublicKey": False,
        **extra,
    }
    return control.message(control.CREATE_CIRCUIT, body)


def bind(who: Person, token: str, **extra: Any) -> Message:
    body = {
        "sessionToken": token,
        "apiSessionId": who.api_session_id,
        "fingerprints": [who.fingerprint],
        "instanceId": "",
        "cost": 0,
        "precedence": "default",
        "hasPublicKey": False,
        "address": "",
        **extra,
    }
    return control.message(control.CREATE_TERMINATOR, body)


def body(message: Message) -> dict[str, Any]:
    return dict(json.loads(message.body))


def error_of(message: Message) -> tuple[int | None, str]:
    assert message.content_type == control.ERROR, message
    return message.u32(ERROR_CODE), message.body.decode()


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# == connecting ====================================================================================
def test_a_router_that_says_hello_is_online_in_both_apis(api: Api, plane: Plane) -> None:
    role = unique("r")
    router = enrolled_router(api, role)
    who = person(api, role)
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    link = plane.connect(router)

    answer = link.hello(host="er1.example.test")
    state = link.full_state()

    assert answer.content_type == control.RESULT
    assert answer.flag(RESULT_SUCCESS)
    assert body(answer) == {
        "routerId": router.id,
        "routerName": router.name,
        "heartbeatSeconds": control.HEARTBEAT_SECONDS,
        "unknownTerminators": [],
    }
    assert who.api_session_id in {s["id"] for s in state}
    detail = api.get(f"/edge-routers/{router.id}").json["data"]
    assert detail["isOnline"] is True
    assert detail["syncStatus"] == "SYNC_DONE"
    assert detail["hostname"] == "er1.example.test"
    assert detail["supportedProtocols"] == {"tls": "tls://er1.example.test:3022"}
    assert detail["versionInfo"] == {
        "version": "v0.9.1",
        "revision": "deadbeef",
        "buildDate": "2024-05-01",
        "os": "linux",
        "arch": "amd64",
    }
    online = api.get("/edge-routers", params={"filter": f'isOnline = true and id = "{router.id}"'})
    assert [r["id"] for r in online.json["data"]] == [router.id]
    [seen] = client_get(api, "/current-identity/edge-routers", who.token).json["data"]
    assert (seen["id"], seen["isOnline"]) == (router.id, True)
    assert seen["supportedProtocols"] == {"tls": "tls://er1.example.test:3022"}


def test_a_router_that_goes_is_offline_and_keeps_what_it_reported(api: Api, plane: Plane) -> None:
    router = enrolled_router(api)
    link = plane.connect(router)
    link.hello(host="er2.example.test")
    link.full_state()
    observer = plane.connect(enrolled_router(api))
    observer.hello()
    observer.take(control.ROUTER_LINKS)

    plane.loop.call(link.channel.close)
    observer.take(control.ROUTER_LINKS)  # sent once the controller has seen the router go
    detail = api.get(f"/edge-routers/{router.id}").json["data"]

    assert detail["isOnline"] is False
    assert detail["syncStatus"] == "SYNC_DISCONNECTED"
    assert detail["supportedProtocols"] == {"tls": "tls://er2.example.test:3022"}
    assert detail["hostname"] == "er2.example.test"
    offline = api.get("/edge-routers", params={"filter": f'isOnline = false and id = "{router.id}"'})
    assert [r["id"] for r in offline.json["data"]] == [router.id]


@pytest.mark.parametrize("kind", ["third-party", "self-signed", "identity"])
def test_a_certificate_that_is_no_routers_is_refused(api: Api, plane: Plane, kind: str) -> None:
    if kind == "identity":
        cert = enroll_ott(api, unique("device"))
        creds = ClientCert(cert.chain, cert.key)
    else:
        ca = ThirdPartyCa(unique("Rogue CA"))
        creds = ClientCert(*ca.issue("router")) if kind == "third-party" else ClientCert(ca.pem, ca.key)
    link = plane.connect(creds)

    answer = link.hello()

    assert answer.content_type == control.RESULT
    assert not answer.flag(RESULT_SUCCESS)
    assert answer.body  # the reason
    assert link.wait_closed()


def test_a_disabled_router_is_refused(api: Api, plane: Plane) -> None:
    router = enrolled_router(api, disabled=True)
    link = plane.connect(router)

    answer = link.hello()

    assert not answer.flag(RESULT_SUCCESS)
    assert "disabled" in answer.body.decode()
    assert link.wait_closed()
    assert api.get(f"/edge-routers/{router.id}").json["data"]["isOnline"] is False


def test_a_first_message_that_is_not_a_hello_closes_the_connection(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))

    link.send(control.message(control.CREATE_CIRCUIT, {}))

    assert link.wait_closed()


def test_connections_that_never_finish_their_handshake_leave_nothing_behind(api: Api, plane: Plane) -> None:
    """A port scan or a probe closing before TLS is done: asyncio makes the channel at the TCP
    accept but never connects it, so the listener counts connections only once connected."""
    for garbage in (b"", b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05hello"):
        with socket.create_connection(("127.0.0.1", plane.port), timeout=WAIT) as raw:
            if garbage:
                raw.sendall(garbage)
    link = plane.connect(enrolled_router(api))  # connected after them: the listener has seen them
    link.hello()
    server = api.app.control

    assert plane.loop.call(lambda: len(server._connections)) == 1


def test_a_second_connection_replaces_the_first(api: Api, plane: Plane) -> None:
    router = enrolled_router(api)
    first = plane.connect(router)
    first.hello()
    second = plane.connect(router)

    answer = second.hello()

    assert answer.flag(RESULT_SUCCESS)
    assert first.wait_closed()
    assert api.get(f"/edge-routers/{router.id}").json["data"]["isOnline"] is True
    assert second.request(heartbeat(7)).u64(HEARTBEAT_RESPONSE) == 7


def test_routers_learn_of_each_other(api: Api, plane: Plane) -> None:
    one, two = enrolled_router(api), enrolled_router(api)
    first = plane.connect(one)
    first.hello(link_listener="tls://one.example.test:4022")
    assert first.take(control.ROUTER_LINKS) == {"routers": []}
    second = plane.connect(two)

    second.hello(link_listener="tls://two.example.test:4022")

    assert second.take(control.ROUTER_LINKS) == {
        "routers": [
            {
                "id": one.id,
                "name": one.name,
                "linkListener": "tls://one.example.test:4022",
                "fingerprint": one.fingerprint,
            }
        ]
    }
    assert first.take(control.ROUTER_LINKS) == {
        "routers": [
            {
                "id": two.id,
                "name": two.name,
                "linkListener": "tls://two.example.test:4022",
                "fingerprint": two.fingerprint,
            }
        ]
    }
    plane.loop.call(second.channel.abort)
    assert first.take(control.ROUTER_LINKS) == {"routers": []}


# == API sessions ==================================================================================
def mfa_policy(api: Api) -> str:
    """An auth policy that lets certificates log in and then asks for a TOTP code."""
    return api.create(
        "/auth-policies",
        {
            "name": unique("totp"),
            "primary": {
                "cert": {"allowed": True, "allowExpiredCerts": False},
                "extJwt": {"allowed": False, "allowedSigners": []},
                "updb": {
                    "allowed": True,
                    "minPasswordLength": 5,
                    "requireSpecialChar": False,
                    "requireNumberChar": False,
                    "requireMixedCase": False,
                    "maxAttempts": 0,
                    "lockoutDurationMinutes": 0,
                },
            },
            "secondary": {"requireTotp": True, "requireExtJwtSigner": None},
        },
    )


def test_the_full_state_holds_the_fully_authenticated_sessions(api: Api, plane: Plane) -> None:
    who = person(api)
    partial = person(api, authPolicyId=mfa_policy(api))
    assert api.get("/current-api-session", token=partial.token, base=CLIENT).status_code == 200
    link = plane.connect(enrolled_router(api))
    link.hello()

    state = {s["id"]: s for s in link.full_state()}

    assert state[who.api_session_id] == {
        "id": who.api_session_id,
        "tokenHash": token_hash(who.token),
        "identityId": who.id,
        "identityName": who.name,
        "fingerprints": [who.fingerprint],
    }
    assert partial.api_session_id not in state


def test_logins_and_logouts_are_pushed(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()
    link.full_state()

    who = person(api)
    added = link.take(control.API_SESSION_ADDED)
    assert api.delete("/current-api-session", token=who.token, base=CLIENT).status_code == 200
    removed = link.take(control.API_SESSION_REMOVED)

    assert (added["fullState"], added["isLast"]) == (False, True)
    assert [s["id"] for s in added["apiSessions"]] == [who.api_session_id]
    assert added["apiSessions"][0]["tokenHash"] == token_hash(who.token)
    assert removed == {"ids": [who.api_session_id]}


def test_an_mfa_login_is_pushed_only_once_complete_and_never_when_partial(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()
    link.full_state()

    partial = person(api, authPolicyId=mfa_policy(api))
    full = person(api)

    added = link.take(control.API_SESSION_ADDED)  # pushes come in commit order: the partial's first

    assert api.get("/current-api-session", token=partial.token, base=CLIENT).status_code == 200
    assert [s["id"] for s in added["apiSessions"]] == [full.api_session_id]


def test_a_renamed_identity_is_pushed_and_a_disabled_ones_sessions_removed(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()
    who = person(api)
    link.full_state()
    renamed = unique("renamed")

    assert api.patch(f"/identities/{who.id}", json={"name": renamed}).status_code == 200
    added = link.take(control.API_SESSION_ADDED, lambda m: renamed in m.body.decode())
    assert api.post(f"/identities/{who.id}/disable", json={"durationMinutes": 0}).status_code == 200
    removed = link.take(control.API_SESSION_REMOVED)

    assert [(s["id"], s["identityName"]) for s in added["apiSessions"]] == [(who.api_session_id, renamed)]
    assert removed == {"ids": [who.api_session_id]}


def test_sdk_channels_make_an_identity_connected(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    unknown = "no-such-api-session"

    net.link.send(
        control.message(
            control.API_SESSION_CHANNELS, {"opened": [net.person.api_session_id, unknown], "closed": []}
        )
    )
    told = net.link.take(control.API_SESSION_REMOVED)
    connected = api.get(f"/identities/{net.person.id}").json["data"]
    net.link.send(control.message(control.API_SESSION_HEARTBEAT, {"apiSessionIds": [unknown]}))
    told_again = net.link.take(control.API_SESSION_REMOVED)
    gone = api.get(f"/identities/{net.person.id}").json["data"]

    assert told == {"ids": [unknown]}
    assert (connected["hasEdgeRouterConnection"], connected["edgeRouterConnectionStatus"]) == (True, "online")
    assert told_again == {"ids": [unknown]}
    assert (gone["hasEdgeRouterConnection"], gone["edgeRouterConnectionStatus"]) == (False, "offline")


# == Bind and Dial =================================================================================
def test_a_bind_makes_a_terminator_both_apis_list(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    session = session_token(api, net.person, net.service, "Bind")

    answer = net.link.request(bind(net.person, session["token"], cost=9, instanceId="one"))

    assert answer.content_type == control.CREATE_TERMINATOR_REPLY, answer.body
    reply = body(answer)
    assert (reply["sessionId"], reply["serviceId"]) == (session["id"], net.service)
    terminator = api.get(f"/terminators/{reply['terminatorId']}").json["data"]
    assert terminator["binding"] == "edge"
    assert terminator["address"] == terminator["id"]
    assert (terminator["routerId"], terminator["serviceId"]) == (net.router.id, net.service)
    assert (terminator["cost"], terminator["precedence"], terminator["identity"]) == (9, "default", "one")
    listed = client_get(api, f"/services/{net.service}/terminators", net.person.token).json["data"]
    assert [t["id"] for t in listed] == [reply["terminatorId"]]


def test_a_bind_asked_again_with_its_terminator_id_gets_the_same_terminator(api: Api, plane: Plane) -> None:
    """A router chooses the terminator's id, as OpenZiti's do: asked again (the controller that
    committed it went away before answering), the terminator made the first time comes back, and
    no second one is made; an id another Bind holds, or one out of shape, is refused."""
    net = network(api, plane)
    session = session_token(api, net.person, net.service, "Bind")

    first = net.link.request(bind(net.person, session["token"], terminatorId="t-from-router_1"))
    again = net.link.request(bind(net.person, session["token"], terminatorId="t-from-router_1"))

    assert first.content_type == again.content_type == control.CREATE_TERMINATOR_REPLY, again.body
    assert body(first)["terminatorId"] == body(again)["terminatorId"] == "t-from-router_1"
    listed = api.get("/terminators", params={"filter": f'service="{net.service}"'}).json["data"]
    assert [t["id"] for t in listed] == ["t-from-router_1"]
    assert listed[0]["address"] == "t-from-router_1"

    other = person(api, net.role)
    taken = net.link.request(
        bind(other, session_token(api, other, net.service, "Bind")["token"], terminatorId="t-from-router_1")
    )
    bad = net.link.request(bind(net.person, session["token"], terminatorId="no spaces/or slashes"))
    assert error_of(taken)[1].endswith("terminator t-from-router_1 exists")
    assert "terminatorId" in error_of(bad)[1]
    assert len(api.get("/terminators", params={"filter": f'service="{net.service}"'}).json["data"]) == 1


def test_a_dial_reaches_a_terminator_of_the_service(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    hosted = body(
        net.link.request(bind(net.person, session_token(api, net.person, net.service, "Bind")["token"]))
    )
    dialer = person(api, net.role)
    session = session_token(api, dialer, net.service, "Dial")

    answer = net.link.request(circuit(dialer, session["token"]))

    assert answer.content_type == control.CREATE_CIRCUIT_REPLY, answer.body
    reply = body(answer)
    assert reply["sessionId"] == session["id"]
    assert (reply["serviceId"], reply["callerId"]) == (net.service, dialer.name)
    assert reply["terminator"]["id"] == hosted["terminatorId"]
    assert reply["terminator"]["routerId"] == net.router.id
    assert reply["terminator"]["binding"] == "edge"
    assert reply["path"] == [net.router.id]


def test_a_required_terminator_wins_over_a_cheaper_default_one(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    cheap = bind(net.person, session_token(api, net.person, net.service, "Bind")["token"], cost=1)
    net.link.request(cheap)
    other = person(api, net.role)
    required = body(
        net.link.request(
            bind(
                other,
                session_token(api, other, net.service, "Bind")["token"],
                cost=500,
                precedence="required",
            )
        )
    )

    answer = net.link.request(
        circuit(net.person, session_token(api, net.person, net.service, "Dial")["token"])
    )

    assert body(answer)["terminator"]["id"] == required["terminatorId"]


def refused(api: Api, plane: Plane, case: str) -> Message:
    """The answer to a Dial that must be refused for ``case``."""
    net = network(api, plane, encryption=case == "no public key")
    dial_token = session_token(api, net.person, net.service, "Dial")["token"]
    if case == "unknown token":
        return net.link.request(circuit(net.person, "4b1e0c55-0000-4000-8000-000000000000"))
    if case == "a bind session":
        return net.link.request(
            circuit(net.person, session_token(api, net.person, net.service, "Bind")["token"])
        )
    if case == "another router":
        stranger = plane.connect(enrolled_router(api))
        stranger.hello()
        return stranger.request(circuit(net.person, dial_token))
    if case == "another certificate":
        return net.link.request(circuit(net.person, dial_token, fingerprints=["00" * 20]))
    return net.link.request(circuit(net.person, dial_token))  # no terminator; no public key


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("unknown token", 3),
        ("a bind session", 4),
        ("another router", 5),
        ("another certificate", 2),
    ],
)
def test_an_invalid_dial_is_refused_as_an_invalid_session(
    api: Api, plane: Plane, case: str, code: int
) -> None:
    answer = refused(api, plane, case)

    assert error_of(answer) == (code, INVALID_SESSION_TEXT)


def test_a_dial_without_the_key_of_an_encrypted_service_is_refused(api: Api, plane: Plane) -> None:
    answer = refused(api, plane, "no public key")

    code, reason = error_of(answer)
    assert code == 11
    assert "encryption required" in reason


def test_a_dial_to_a_service_nobody_hosts_is_refused(api: Api, plane: Plane) -> None:
    answer = refused(api, plane, "no terminator")

    code, reason = error_of(answer)
    assert code == 8
    assert "has no terminators" in reason


def test_a_bind_with_a_cost_out_of_range_is_refused(api: Api, plane: Plane) -> None:
    net = network(api, plane)

    answer = net.link.request(
        bind(net.person, session_token(api, net.person, net.service, "Bind")["token"], cost=70000)
    )

    assert error_of(answer)[0] == 10


# == ends ==========================================================================================
def test_ending_a_session_removes_its_terminators_and_tells_the_routers(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    session = session_token(api, net.person, net.service, "Bind")
    terminator = body(net.link.request(bind(net.person, session["token"])))["terminatorId"]

    deleted = api.delete(f"/sessions/{session['id']}", token=net.person.token, base=CLIENT)
    told = net.link.take(control.SESSION_REMOVED)

    assert deleted.status_code == 200
    assert told == {"ids": [session["id"]], "tokens": [session["token"]]}
    assert api.get(f"/terminators/{terminator}").status_code == 404


def test_a_policy_deleted_ends_its_sessions_on_the_routers(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    session = session_token(api, net.person, net.service, "Dial")

    assert api.delete(f"/service-policies/{net.dial_policy}").status_code == 200
    told = net.link.take(control.SESSION_REMOVED)

    assert told == {"ids": [session["id"]], "tokens": [session["token"]]}
    answer = net.link.request(circuit(net.person, session["token"]))
    assert error_of(answer) == (3, INVALID_SESSION_TEXT)


def test_removed_terminators_are_deleted(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    terminator = body(
        net.link.request(bind(net.person, session_token(api, net.person, net.service, "Bind")["token"]))
    )["terminatorId"]

    answer = net.link.request(control.message(control.REMOVE_TERMINATORS, {"terminatorIds": [terminator]}))

    assert answer.content_type == control.RESULT
    assert answer.flag(RESULT_SUCCESS)
    assert api.get(f"/terminators/{terminator}").status_code == 404


def test_a_reconnecting_router_reconciles_its_terminators(api: Api, plane: Plane) -> None:
    net = network(api, plane)
    kept = body(
        net.link.request(bind(net.person, session_token(api, net.person, net.service, "Bind")["token"]))
    )
    other = person(api, net.role)
    dropped = body(net.link.request(bind(other, session_token(api, other, net.service, "Bind")["token"])))
    plane.loop.call(net.link.channel.abort)
    again = plane.connect(net.router)

    answer = again.hello(terminators=[kept["terminatorId"], "gone-terminator"])

    assert body(answer)["unknownTerminators"] == ["gone-terminator"]
    assert api.get(f"/terminators/{kept['terminatorId']}").status_code == 200
    assert api.get(f"/terminators/{dropped['terminatorId']}").status_code == 404


def test_a_hello_keeps_the_terminators_made_since_its_router_started(api: Api, plane: Plane) -> None:
    """With several controllers a router's Bind through one may cross its hello to another: the
    hello cannot list that terminator yet. Those made since the router's process started
    (``startedAt``) are kept; older ones it does not list are dropped, as from one controller."""
    net = network(api, plane)
    older = body(
        net.link.request(bind(net.person, session_token(api, net.person, net.service, "Bind")["token"]))
    )
    older_at = api.get(f"/terminators/{older['terminatorId']}").json["data"]["createdAt"]
    started_ms = int(datetime.fromisoformat(older_at.replace("Z", "+00:00")).timestamp() * 1000) + 1
    while time.time() * 1000 < started_ms + 1:  # the next terminator is made after that moment
        time.sleep(0.001)
    other = person(api, net.role)
    crossing = body(net.link.request(bind(other, session_token(api, other, net.service, "Bind")["token"])))
    plane.loop.call(net.link.channel.abort)
    again = plane.connect(net.router)

    answer = again.hello(terminators=[], started_at_ms=started_ms)

    assert answer.flag(RESULT_SUCCESS)
    assert api.get(f"/terminators/{older['terminatorId']}").status_code == 404
    assert api.get(f"/terminators/{crossing['terminatorId']}").status_code == 200


@pytest.mark.parametrize("startedAt", [-1, "yesterday", 2**60])
def test_a_hello_with_a_bad_start_time_is_refused(api: Api, plane: Plane, startedAt: object) -> None:
    router = enrolled_router(api)
    link = plane.connect(router)
    message = control.message(
        control.HELLO,
        {"hostname": "h", "protocols": {}, "linkListener": "", "tunneler": False, "startedAt": startedAt},
    )
    message.set_text(HELLO_VERSION, VERSION)

    answer = link.request(message)

    assert not answer.flag(RESULT_SUCCESS)
    assert b"startedAt" in answer.body


@pytest.mark.parametrize("change", ["disabled", "re-enrolled", "extended", "deleted"])
def test_a_router_that_changes_is_disconnected_at_once(api: Api, plane: Plane, change: str) -> None:
    router = enrolled_router(api)
    link = plane.connect(router)
    link.hello()
    link.full_state()

    if change == "disabled":
        assert api.patch(f"/edge-routers/{router.id}", json={"disabled": True}).status_code == 200
    elif change == "re-enrolled":
        assert api.post(f"/edge-routers/{router.id}/re-enroll").status_code == 200
    elif change == "extended":
        key = new_key()
        extended = api.client.simulate_post(
            CLIENT + "/enroll/extend/router",
            json={
                "serverCertCsr": san_csr_pem(key, router.id, dns=("localhost",)),
                "certCsr": csr_pem(key, router.id),
            },
            extras=tls(*split_chain(router.chain)),
        )
        assert extended.status_code == 200, extended.text
    else:
        assert api.delete(f"/edge-routers/{router.id}").status_code == 200

    assert link.wait_closed()
    if change != "deleted":  # the controller forgot the router as it closed the connection
        assert api.get(f"/edge-routers/{router.id}").json["data"]["isOnline"] is False


def test_a_re_enrolled_routers_old_certificate_is_refused_and_its_new_one_taken(
    api: Api, plane: Plane
) -> None:
    router = enrolled_router(api)
    assert api.post(f"/edge-routers/{router.id}/re-enroll").status_code == 200
    renewed = re_enrolled(api, router)

    old = plane.connect(router).hello()
    new = plane.connect(renewed).hello()

    assert not old.flag(RESULT_SUCCESS)
    assert new.flag(RESULT_SUCCESS)


# == the channel ===================================================================================
def heartbeat(stamp: int) -> Message:
    return Message(HEARTBEAT).set_u64(HEARTBEAT_REQUEST, stamp)


def test_a_heartbeat_is_answered(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()

    answer = link.request(heartbeat(123456789))

    assert answer.content_type == HEARTBEAT
    assert answer.u64(HEARTBEAT_RESPONSE) == 123456789


def test_the_controller_sends_heartbeats_and_drops_a_silent_router(api: Api, plane: Plane) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()
    server = api.app.control

    plane.loop.call(server.beat)
    beat = link.recorder.take(HEARTBEAT)
    server.silent_seconds = -1.0  # whatever the router last said is too long ago
    plane.loop.call(server.beat)

    assert beat.u64(HEARTBEAT_REQUEST) is not None
    assert link.wait_closed()


@pytest.mark.parametrize(
    "message",
    [
        Message(control.CREATE_CIRCUIT, b"not json"),
        Message(control.CREATE_TERMINATOR, b"[1, 2]"),
        control.message(control.CREATE_CIRCUIT, {"sessionToken": 7}),
        control.message(control.REMOVE_TERMINATORS, {"terminatorIds": "all"}),
        Message(31337, b"{}"),
    ],
    ids=["not-json", "not-an-object", "wrong-type", "not-a-list", "unknown-type"],
)
def test_a_malformed_request_is_answered_with_an_error_and_the_connection_goes_on(
    api: Api, plane: Plane, message: Message
) -> None:
    link = plane.connect(enrolled_router(api))
    link.hello()

    answer = link.request(message)

    assert error_of(answer)[0] == 1
    assert link.request(heartbeat(1)).u64(HEARTBEAT_RESPONSE) == 1


def test_an_address_in_use_is_logged_and_the_api_served(api: Api, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        api.app.ctrl.settings = dataclasses.replace(api.app.ctrl.settings, ctrl_bind=f"127.0.0.1:{port}")
        with capture(logging.ERROR) as logged:
            running = start_plane(api, tmp_path)
        try:
            assert f"the control listener cannot listen on 127.0.0.1:{port}" in logged.text
            assert len(logged.lines) == 1
            assert api.app.control is None
            assert api.get("/edge-routers").status_code == 200
        finally:
            running.close()
