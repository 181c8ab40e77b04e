"""A router with no controller to ask (router.offline, docs/dataplane.md §9): the real edge
listener, over the real :class:`~router.controllers.Controllers` and control client, against the
stand-in controller of test_control, over real TLS; test SDKs on real channels. The controller
is then stopped (its listener and connections closed) or made to refuse the router's hellos.

Established connections keep flowing; within the grace, held API sessions open channels and a
Dial the controller granted before is served alone (to a bind or a hosted service on this
router); what cannot be decided, and everything past the grace, is refused with OpenZiti's
answer and no error code. The grace is counted on a clock the test moves, never waited for."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization

from channel import control
from channel.control import (
    API_SESSION_REMOVED,
    CREATE_CIRCUIT,
    CREATE_CIRCUIT_REPLY,
    CREATE_TERMINATOR,
    CREATE_TERMINATOR_REPLY,
    CREATE_TUNNEL_TERMINATOR,
    CREATE_TUNNEL_TERMINATOR_REPLY,
    HOSTED_SERVICES,
    SESSION_REMOVED,
)
from channel.edge import (
    BIND,
    CALLER_ID,
    CONN_ID,
    CONNECT,
    DATA,
    DIAL,
    DIAL_SUCCESS,
    ERROR_CODE,
    PUBLIC_KEY,
    STATE_CLOSED,
    STATE_CONNECTED,
)
from channel.frames import RESULT, Message, result
from router.controllers import Controllers
from router.edge import EdgeListener
from router.hosting import Hosting
from router.offline import NO_CONTROLLER_CIRCUIT, NO_CONTROLLER_TERMINATOR, Offline
from router.ports import ApiSessions, Circuit, Unavailable, token_hash
from tests.router import test_links as linked
from tests.router.helpers import Ca, Pki, Sdk, caller, run_async, until, within
from tests.router.test_control import CIRCUIT_REPLY, Controller, full_state, wire_session
from tests.router.test_controllers import client_for
from tests.router.test_hosting import EchoServer, payload, tcp_host

ROUTER = "r-1"  # the stand-in controller's name for the router (CIRCUIT_REPLY's terminator is on it)
GRACE = 60.0


class Clock:
    """The time :class:`Offline` reads: moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Site:
    """A router (edge listener, :class:`Controllers` over one control client, :class:`Offline`
    on a :class:`Clock`) and its stand-in controller, which pushes the API sessions of ``dialer``
    and ``binder`` after each hello; with ``hosting``, the router hosts what the controller lists
    (``HOSTED_SERVICES``, set in :attr:`controller`'s ``after_hello`` before the block)."""

    def __init__(self, pki: Pki, grace: float = GRACE, *, hosting: bool = False) -> None:
        self.pki = pki
        self.clock = Clock()
        self.offline = Offline(grace, clock=self.clock)
        self.sessions = ApiSessions()
        self.controller = Controller(pki)
        self.controller.after_hello = full_state([wire_session(pki, "dialer"), wire_session(pki, "binder")])
        self.with_hosting = hosting
        self.sdks: list[Sdk] = []
        self._task: asyncio.Future[None] | None = None
        self._down = False

    async def __aenter__(self) -> Site:
        await self.controller.__aenter__()
        self.plane = Controllers(
            [client_for(self.pki, self.controller.address, self.sessions, tunneler=True)]
        )
        self.listener = EdgeListener(
            ssl_context=self.pki.edge_server_context(),
            controller=self.plane,
            api_sessions=self.sessions,
            router_id=ROUTER,
            version="v0.1.0",
            api_session_wait=0.2,
        )
        self.plane.edge = self.listener
        self.listener.offline = self.offline
        self.plane.on_reachable = lambda up: self.offline.reachable() if up else self.offline.unreachable()
        self.hosting: Hosting | None = None
        if self.with_hosting:
            self.hosting = Hosting(self.plane)
            self.listener.hosting = self.hosting
            self.plane.on_hosted_services = self.hosting.update
        await self.listener.start("127.0.0.1", 0)
        self._task = asyncio.ensure_future(self.plane.run())
        await until(
            lambda: self.offline.is_reachable and self.sessions.synced.is_set(), "the router is in sync"
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sdk in self.sdks:
            sdk.channel.close()
        self.plane.stop()
        assert self._task is not None
        await within(self._task)
        if self.hosting is not None:
            await self.hosting.stop()
        await self.listener.stop()
        self.offline.close()
        if not self._down:
            await self.controller.__aexit__()

    async def sdk(self, who: str) -> Sdk:
        """``who``'s SDK, its hello accepted."""
        sdk = await Sdk.connect(self.listener.port, self.pki.sdk_context(who), who)
        self.sdks.append(sdk)
        answer = await sdk.hello(f"tok-{who}")
        assert answer.content_type == RESULT, answer
        return sdk

    async def hello_refused(self, who: str) -> None:
        """``who``'s hello is not answered: its channel is closed."""
        sdk = await Sdk.connect(self.listener.port, self.pki.sdk_context(who), who)
        self.sdks.append(sdk)
        hello = asyncio.ensure_future(sdk.hello(f"tok-{who}"))
        await sdk.closed()
        assert hello.done()
        assert hello.exception() is not None or hello.result().content_type != RESULT

    async def bind(self, binder: Sdk, token: str = "bind-1", conn_id: int = 0) -> None:
        """A bind the controller grants: terminator ``t-1`` of service ``svc-1``."""
        request = binder.edge(BIND, conn_id, token.encode(), caller("binder"))
        answer = asyncio.ensure_future(binder.ask(request))
        asked = await self.controller.next(CREATE_TERMINATOR)
        body = {"terminatorId": "t-1", "sessionId": "s-bind", "serviceId": "svc-1"}
        self.controller.channel.send(control.message(CREATE_TERMINATOR_REPLY, body).reply_to(asked))
        assert (await within(answer)).content_type == STATE_CONNECTED

    async def granted(
        self, dialer: Sdk, token: str, conn_id: int, reply: dict[str, Any]
    ) -> asyncio.Future[Message]:
        """A Connect the controller grants with ``reply``; its answer to come."""
        answer = asyncio.ensure_future(
            dialer.ask(dialer.edge(CONNECT, conn_id, token.encode(), caller("dialer")))
        )
        asked = await self.controller.next(CREATE_CIRCUIT)
        assert json.loads(asked.body)["sessionToken"] == token
        self.controller.channel.send(control.message(CREATE_CIRCUIT_REPLY, reply).reply_to(asked))
        return answer

    async def stop_controller(self) -> None:
        """The controller goes (its listener and connections closed): the router is unreachable."""
        self._down = True
        await self.controller.__aexit__()
        await until(lambda: not self.offline.is_reachable, "the router sees no controller")


async def joined(dialer: Sdk, binder: Sdk, answer: asyncio.Future[Message], new_conn: int) -> Message:
    """The binder is dialed, accepts as ``new_conn``; the Connect's answer."""
    dial = await binder.next()
    assert dial.content_type == DIAL, dial
    success = binder.edge(DIAL_SUCCESS, dial.u32(CONN_ID) or 0, new_conn.to_bytes(4, "little")).reply_to(dial)
    assert (await binder.ask(success)).content_type == STATE_CONNECTED
    connected = await within(answer)
    assert connected.content_type == STATE_CONNECTED, connected
    return dial


async def echo(one: Sdk, one_conn: int, other: Sdk, body: bytes) -> None:
    """``body`` sent by ``one`` on ``one_conn`` arrives at ``other``."""
    one.channel.send(one.edge(DATA, one_conn, body))
    message = await other.next()
    assert message.content_type == DATA, message
    assert message.body == body


async def refused(dialer: Sdk, token: str, conn_id: int) -> Message:
    answer = await dialer.ask(dialer.edge(CONNECT, conn_id, token.encode(), caller("dialer")))
    assert answer.content_type == STATE_CLOSED, answer
    return answer


def circuit_reply(**terminator: str) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(json.dumps(CIRCUIT_REPLY))
    reply["terminator"].update(terminator)
    return reply


# -- established connections ---------------------------------------------------------------------
@run_async
async def test_established_connections_flow_both_ways_with_every_controller_gone(pki: Pki) -> None:
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        await joined(dialer, binder, await site.granted(dialer, "dial-1", 4, CIRCUIT_REPLY), 9)
        await echo(dialer, 4, binder, b"before")

        await site.stop_controller()
        site.clock.now += GRACE * 10  # long past the grace: established connections never end

        for round_ in range(3):
            await echo(dialer, 4, binder, f"dialer {round_}".encode())
            await echo(binder, 9, dialer, f"binder {round_}".encode())
        assert dialer.channel.is_open
        assert binder.channel.is_open
        assert site.listener.binds().keys() == {"t-1"}


# -- within the grace ----------------------------------------------------------------------------
@run_async
async def test_within_the_grace_a_granted_dial_is_served_alone_and_nothing_else(pki: Pki) -> None:
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        await joined(dialer, binder, await site.granted(dialer, "dial-1", 4, CIRCUIT_REPLY), 9)
        [grant] = site.offline.grants()
        assert (grant.token_hash, grant.session_id, grant.api_session_id, grant.service_id) == (
            token_hash("dial-1"),
            "s-1",
            "as-dialer",
            "svc-1",
        )

        await site.stop_controller()
        site.clock.now += GRACE - 1

        # the same session token again: the bind on this router is dialed, as the controller chose
        answer = asyncio.ensure_future(dialer.ask(dialer.edge(CONNECT, 5, b"dial-1", caller("dialer"))))
        dial = await joined(dialer, binder, answer, 10)
        assert dial.text(CALLER_ID) == "dialer"
        assert dial.body == b"bind-1"
        await echo(dialer, 5, binder, b"alone")
        await echo(binder, 10, dialer, b"back")

        # a held API session opens a new channel
        await site.sdk("dialer")

        # what the router cannot decide: a token it was never granted, a grant of another API session
        for sdk, token, conn_id in ((dialer, "dial-new", 6), (binder, "dial-1", 1)):
            answer_closed = await refused(sdk, token, conn_id)
            assert answer_closed.body.decode() == NO_CONTROLLER_CIRCUIT
            assert ERROR_CODE not in answer_closed.headers

        # a Bind needs a controller
        request = binder.edge(BIND, 3, b"bind-2", caller("binder"))
        answer_bind = await binder.ask(request)
        assert answer_bind.content_type == STATE_CLOSED
        assert answer_bind.body.decode() == NO_CONTROLLER_TERMINATOR
        assert ERROR_CODE not in answer_bind.headers


@run_async
async def test_a_grant_made_with_a_public_key_serves_alone_only_dials_with_one(pki: Pki) -> None:
    """The controller knows whether the service requires encryption; the router does not."""
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        key = bytes(32)
        answer = asyncio.ensure_future(
            dialer.ask(dialer.edge(CONNECT, 4, b"dial-1", caller("dialer"), {PUBLIC_KEY: key}))
        )
        asked = await site.controller.next(CREATE_CIRCUIT)
        site.controller.channel.send(control.message(CREATE_CIRCUIT_REPLY, CIRCUIT_REPLY).reply_to(asked))
        await joined(dialer, binder, answer, 9)
        await site.stop_controller()

        assert (await refused(dialer, "dial-1", 5)).body.decode() == NO_CONTROLLER_CIRCUIT
        answer = asyncio.ensure_future(
            dialer.ask(dialer.edge(CONNECT, 6, b"dial-1", caller("dialer"), {PUBLIC_KEY: key}))
        )
        dial = await joined(dialer, binder, answer, 10)
        assert dial.headers[PUBLIC_KEY] == key


@run_async
async def test_within_the_grace_a_service_this_router_hosts_is_served_alone(pki: Pki) -> None:
    async with EchoServer() as server, Site(pki, hosting=True) as site:
        listed = {"id": "svc-1", "name": "echo", "host": tcp_host(server.port)}
        site.controller.channel.send(control.message(HOSTED_SERVICES, {"services": [listed]}))
        asked = await site.controller.next(CREATE_TUNNEL_TERMINATOR)
        reply = control.message(
            CREATE_TUNNEL_TERMINATOR_REPLY, {"terminatorId": "tt-1", "serviceId": "svc-1"}
        )
        site.controller.channel.send(reply.reply_to(asked))
        assert site.hosting is not None
        hosting = site.hosting
        await until(lambda: hosting.terminators() == {"svc-1": "tt-1"}, "the hosted service's terminator")

        dialer = await site.sdk("dialer")
        tunnel = circuit_reply(id="tt-1", binding="tunnel", address="tunnel:svc-1")
        answer = await within(await site.granted(dialer, "dial-1", 4, tunnel))
        assert answer.content_type == STATE_CONNECTED
        await site.stop_controller()

        answer = await dialer.ask(dialer.edge(CONNECT, 5, b"dial-1", caller("dialer")))
        assert answer.content_type == STATE_CONNECTED, answer
        body = payload(5000)
        dialer.channel.send(dialer.edge(DATA, 5, body))
        received = b""
        while len(received) < len(body):
            message = await dialer.next()
            if message.content_type == DATA and message.u32(CONN_ID) == 5:
                received += message.body
        assert received == body
        assert server.connections == 2


# -- past the grace ------------------------------------------------------------------------------
@run_async
async def test_past_the_grace_hellos_and_dials_are_refused_but_connections_flow(pki: Pki) -> None:
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        await joined(dialer, binder, await site.granted(dialer, "dial-1", 4, CIRCUIT_REPLY), 9)
        await site.stop_controller()

        site.clock.now += GRACE
        answer = await refused(dialer, "dial-1", 5)
        assert answer.body.decode() == NO_CONTROLLER_CIRCUIT
        assert ERROR_CODE not in answer.headers
        await site.hello_refused("dialer")

        await echo(dialer, 4, binder, b"still")
        await echo(binder, 9, dialer, b"flowing")


@run_async
async def test_with_no_grace_the_router_decides_nothing_alone(pki: Pki) -> None:
    async with Site(pki, grace=0) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        await joined(dialer, binder, await site.granted(dialer, "dial-1", 4, CIRCUIT_REPLY), 9)
        await site.stop_controller()

        assert (await refused(dialer, "dial-1", 5)).body.decode() == NO_CONTROLLER_CIRCUIT
        await site.hello_refused("binder")
        await echo(dialer, 4, binder, b"but this goes on")


# -- what is forgotten -----------------------------------------------------------------------------
@run_async
async def test_pushed_removals_drop_the_grants_they_name(pki: Pki) -> None:
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        for token, conn_id, session in (("dial-1", 4, "s-1"), ("dial-2", 5, "s-2"), ("dial-3", 6, "s-3")):
            reply = {**CIRCUIT_REPLY, "sessionId": session, "circuitId": f"c-{session}"}
            await joined(dialer, binder, await site.granted(dialer, token, conn_id, reply), 10 + conn_id)
        assert {g.token_hash for g in site.offline.grants()} == {
            token_hash(t) for t in ("dial-1", "dial-2", "dial-3")
        }

        site.controller.channel.send(control.message(SESSION_REMOVED, {"ids": ["s-1"], "tokens": []}))
        site.controller.channel.send(control.message(SESSION_REMOVED, {"ids": [], "tokens": ["dial-2"]}))
        await site.controller.settle()
        assert {g.token_hash for g in site.offline.grants()} == {token_hash("dial-3")}

        site.controller.channel.send(control.message(API_SESSION_REMOVED, {"ids": ["as-dialer"]}))
        await dialer.closed()
        assert site.offline.grants() == []


@run_async
async def test_a_controller_back_after_none_was_forgets_the_grants(pki: Pki) -> None:
    """A removal made while the router heard nothing never reached it: what it learned before
    is not trusted across a time without controllers."""
    async with Site(pki) as site:
        binder, dialer = await site.sdk("binder"), await site.sdk("dialer")
        await site.bind(binder)
        await joined(dialer, binder, await site.granted(dialer, "dial-1", 4, CIRCUIT_REPLY), 9)
        hellos = len(site.controller.hellos)

        welcome = site.controller.hello_answer
        site.controller.hello_answer = _refusal
        site.controller.channel.close()
        await until(lambda: not site.offline.is_reachable, "the router sees no controller")
        assert [g.token_hash for g in site.offline.grants()] == [token_hash("dial-1")]

        site.controller.hello_answer = welcome
        await until(lambda: site.offline.is_reachable, "the controller is back")
        assert len(site.controller.hellos) > hellos
        assert site.offline.grants() == []


def _refusal(hello: Message) -> Message:
    return result(hello, False, "not now")


# -- the model alone -------------------------------------------------------------------------------
def test_grants_are_bounded_and_far_terminators_remembered() -> None:
    offline = Offline(10, max_grants=2)
    circuit = Circuit(**{**_circuit_fields(), "router_id": "r-2", "terminator_id": "t-far"})
    for token in ("a", "b", "c"):
        offline.remember(token, "as-1", circuit, with_key=False, router_id=ROUTER)
    assert [g.token_hash for g in offline.grants()] == [token_hash("b"), token_hash("c")]
    [far] = offline.far_terminators("svc-1")
    assert (far.id, far.router_id) == ("t-far", "r-2")
    local = Circuit(**{**_circuit_fields(), "terminator_id": "t-local"})
    offline.remember("d", "as-1", local, with_key=False, router_id=ROUTER)
    assert [f.id for f in offline.far_terminators("svc-1")] == ["t-far"]
    offline.forget_api_sessions(["as-1"])
    assert offline.grants() == []


def test_the_grace_is_counted_from_the_last_connection_going() -> None:
    clock = Clock()
    offline = Offline(30, clock=clock)
    assert not offline.is_reachable  # a router starts with no controller
    offline.reachable()  # a controller that does not answer is no reason to decide alone
    assert (offline.within_grace(), offline.admits_hellos()) == (False, True)
    clock.now += 1000
    assert (offline.within_grace(), offline.admits_hellos()) == (False, True)  # no clock runs
    offline.unreachable()
    clock.now += 29.9
    assert (offline.within_grace(), offline.admits_hellos()) == (True, True)
    assert offline.absent_for() == pytest.approx(29.9)
    clock.now += 0.1
    assert (offline.within_grace(), offline.admits_hellos()) == (False, False)
    offline.reachable()
    assert (offline.admits_hellos(), offline.absent_for()) == (True, 0)
    with pytest.raises(ValueError, match="cannot be negative"):
        Offline(-1)


def _circuit_fields() -> dict[str, Any]:
    return {
        "session_id": "s-1",
        "service_id": "svc-1",
        "service_name": "echo",
        "caller_id": "dialer",
        "terminator_id": "t-1",
        "router_id": ROUTER,
        "binding": "edge",
        "address": "t-1",
    }


# -- over a link -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def link_network(tmp_path_factory: pytest.TempPathFactory) -> linked.Network:
    parent = tmp_path_factory.mktemp("offline-link-pki")
    ca, other = Ca("Offline Link CA"), Ca("Offline Foreign CA")
    (parent / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    return linked.Network(
        ca_file=parent / "ca.pem",
        dirs={who: linked.router_dir(parent, ca, who) for who in (linked.A, linked.B)},
        foreign_x=linked.router_dir(parent, other, linked.X),
    )


@run_async
async def test_within_the_grace_a_terminator_on_a_linked_router_is_reached_alone(
    pki: Pki, link_network: linked.Network
) -> None:
    """Router A was granted a Dial to a bind on router B; with no controller, A dials B's
    terminator over the link itself (B checks that it still holds it); without the link, it
    cannot decide."""
    async with linked.Pair(pki, link_network) as pair:
        clock = Clock()
        offline = Offline(GRACE, clock=clock)
        offline.reachable()
        pair.a.edge.offline = offline
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await linked.bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=linked.B)
        await linked.connect(dialer, binder, conn_id=3, new_conn=9)
        assert [f.router_id for f in offline.far_terminators("svc-echo")] == [linked.B]

        pair.a.controller.circuits["dial-1"] = Unavailable("no control connection")
        offline.unreachable()
        dial, answer = await linked.connect(dialer, binder, conn_id=4, new_conn=10)
        assert answer.content_type == STATE_CONNECTED
        assert dial.text(CALLER_ID) == "dialer"  # the grant's caller, as the controller named it
        dialer.channel.send(linked.data(dialer, 4, b"over the link, alone"))
        assert await linked.receive(binder, 10, 20) == (b"over the link, alone", False)

        link = pair.a.links.link(linked.B)
        assert link is not None
        pair.a.links.update([])  # B is no longer listed: its link goes
        await until(lambda: pair.a.links.link(linked.B) is None, "the link is gone")
        answer = await refused(dialer, "dial-1", 5)
        assert answer.body.decode() == NO_CONTROLLER_CIRCUIT
        assert ERROR_CODE not in answer.headers
        offline.close()
