"""The router's control connection (router.control) against a stand-in controller: a channel v2
server over mutual TLS in the test that plays the controller's part of a few messages."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from channel import control
from channel.connection import Channel
from channel.control import (
    API_SESSION_ADDED,
    API_SESSION_CHANNELS,
    API_SESSION_HEARTBEAT,
    API_SESSION_REMOVED,
    API_SESSION_UPDATED,
    CIRCUITS_ENDED,
    CLOSE_CIRCUITS,
    CREATE_CIRCUIT,
    CREATE_CIRCUIT_REPLY,
    CREATE_TERMINATOR,
    CREATE_TERMINATOR_REPLY,
    LINKS,
    REMOVE_TERMINATORS,
    ROUTER_LINKS,
    SESSION_REMOVED,
)
from channel.edge import BIND, ERROR_CODE, STATE_CLOSED, STATE_CONNECTED
from channel.frames import (
    HEARTBEAT,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    HELLO,
    HELLO_VERSION,
    RESULT,
    Message,
    result,
)
from router.control import STARTED_AT_MS, ControlClient, RouterLink, client_context, parse_address
from router.edge import EdgeListener, fingerprint
from router.ports import (
    ApiSession,
    ApiSessions,
    Circuit,
    Refused,
    Terminator,
    Unavailable,
    token_hash,
    version_text,
)
from tests.router.helpers import Pki, Sdk, caller, run_async, until, within

#: A controller's answer to a CreateCircuit, as the stand-ins give it.
CIRCUIT_REPLY = {
    "circuitId": "c-1",
    "sessionId": "s-1",
    "serviceId": "svc-1",
    "serviceName": "echo",
    "callerId": "dialer",
    "terminator": {
        "id": "t-1",
        "routerId": "r-1",
        "binding": "edge",
        "address": "hosted:x",
        "instanceId": "",
    },
    "path": ["r-1"],
}


def wire_session(pki: Pki, who: str) -> dict[str, Any]:
    return {
        "id": f"as-{who}",
        "tokenHash": token_hash(f"tok-{who}"),
        "identityId": f"id-{who}",
        "identityName": who,
        "fingerprints": [pki.identities[who].fingerprint.upper()],
    }


def full_state(*chunks: list[dict[str, Any]]) -> list[Message]:
    return [
        control.message(
            API_SESSION_ADDED, {"fullState": True, "isLast": i == len(chunks) - 1, "apiSessions": chunk}
        )
        for i, chunk in enumerate(chunks)
    ]


class Controller:
    """The controller's part: answers hellos (``hello_answer``), then sends ``after_hello``;
    everything else the router sends is queued in :attr:`received`."""

    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.hellos: list[Message] = []
        self.channels: list[Channel] = []
        self.received: asyncio.Queue[Message] = asyncio.Queue()
        self.hello_answer: Callable[[Message], Message] = lambda hello: self.welcome(hello)
        self.after_hello: list[Message] = []
        self.answer_heartbeats = True
        self._skipped: list[Message] = []
        self._server: asyncio.Server | None = None

    @staticmethod
    def welcome(hello: Message, **extra: Any) -> Message:
        body = {
            "routerId": "r-1",
            "routerName": "router-one",
            "heartbeatSeconds": 10,
            "unknownTerminators": [],
        }
        body.update(extra)
        answer = result(hello)
        answer.body = json.dumps(body).encode()
        return answer

    async def __aenter__(self) -> Controller:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Channel(self, name="controller"), "127.0.0.1", 0, ssl=self.pki.controller_server_context()
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for channel in self.channels:
            channel.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def address(self) -> str:
        assert self._server is not None
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    @property
    def channel(self) -> Channel:
        return self.channels[-1]

    def on_message(self, channel: Channel, message: Message) -> None:
        if message.content_type == HELLO:
            self.channels.append(channel)
            self.hellos.append(message)
            answer = self.hello_answer(message)
            channel.send(answer)
            if answer.flag(2):
                for push in self.after_hello:
                    channel.send(Message(push.content_type, push.body, dict(push.headers)))
            else:
                channel.close()
        elif message.content_type == HEARTBEAT and self.answer_heartbeats:
            echo = Message(HEARTBEAT)
            echo.headers[HEARTBEAT_RESPONSE] = message.headers[HEARTBEAT_REQUEST]
            channel.send(echo.reply_to(message))
            self.received.put_nowait(message)
        else:
            self.received.put_nowait(message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        pass

    async def next(self, content_type: int) -> Message:
        """The next message of ``content_type`` the router sent (others stay for their turn)."""
        for i, message in enumerate(self._skipped):
            if message.content_type == content_type:
                return self._skipped.pop(i)
        while True:
            message = await within(self.received.get())
            if message.content_type == content_type:
                return message
            self._skipped.append(message)

    async def settle(self) -> Message:
        """A heartbeat asked of the router and its answer: what was sent before has been handled."""
        probe = Message(HEARTBEAT).set_u64(HEARTBEAT_REQUEST, 77)
        return await self.channel.request(probe, 30)


class Edge:
    """The edge side as the control client sees it, recording what it is told."""

    def __init__(
        self,
        terminators: list[str] | None = None,
        api_sessions: list[str] | None = None,
        circuits: list[str] | None = None,
    ) -> None:
        self.terminators = terminators or []
        self.active = api_sessions or []
        self.circuits = circuits or []
        self.closed: list[list[str]] = []
        self.ended: list[tuple[list[str], list[str]]] = []
        self.dropped: list[list[str]] = []
        self.circuits_closed: list[tuple[list[str], str]] = []

    def end_sessions(self, session_ids: Any, tokens: Any) -> None:
        self.ended.append((list(session_ids), list(tokens)))

    def close_api_sessions(self, api_session_ids: Any) -> None:
        self.closed.append(list(api_session_ids))

    def terminator_ids(self) -> list[str]:
        return list(self.terminators)

    def drop_terminators(self, terminator_ids: Any) -> None:
        self.dropped.append(list(terminator_ids))

    def api_session_ids(self) -> list[str]:
        return list(self.active)

    def circuit_ids(self) -> list[str]:
        return list(self.circuits)

    def close_circuits(self, circuit_ids: Any, reason: str) -> None:
        self.circuits_closed.append((list(circuit_ids), reason))


class Running:
    """A :class:`ControlClient` running against ``controller`` until the block ends."""

    def __init__(self, pki: Pki, controller: Controller, edge: Any = None, **options: Any) -> None:
        options.setdefault("backoff_first", 0.01)
        options.setdefault("backoff_max", 0.05)
        self.client = ControlClient(
            address=options.pop("address", controller.address),
            ssl_context=client_context(
                pki.router_client.cert_file, pki.router_client.key_file, pki.network_ca_file
            ),
            hostname="router.example",
            protocols={"tls": "tls://127.0.0.1:3022"},
            version="v0.1.0",
            api_sessions=options.pop("api_sessions") if "api_sessions" in options else ApiSessions(),
            edge=edge,
            **options,
        )
        self._task: asyncio.Future[None] | None = None

    async def __aenter__(self) -> ControlClient:
        self._task = asyncio.ensure_future(self.client.run())
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        self.client.stop()
        assert self._task is not None
        await within(self._task)


# -- hello and the full state ----------------------------------------------------------------------
@run_async
async def test_the_hello_says_who_the_router_is_and_a_full_state_replaces_the_api_sessions(pki: Pki) -> None:
    sessions = ApiSessions()
    sessions.put(ApiSession.from_wire({**wire_session(pki, "stranger"), "id": "as-old"}))
    edge = Edge(terminators=["t-1", "t-2"], circuits=["c-1"])
    async with Controller(pki) as controller:
        controller.hello_answer = lambda hello: Controller.welcome(hello, unknownTerminators=["t-2"])
        controller.after_hello = full_state([wire_session(pki, "dialer")], [wire_session(pki, "binder")])
        async with Running(pki, controller, edge, api_sessions=sessions) as client:
            await within(sessions.synced.wait())

            hello = controller.hellos[0]
            version = hello.text(HELLO_VERSION)
            assert version is not None
            assert version.startswith("v0.1.0|")
            assert version.count("|") == 4
            assert json.loads(hello.body) == {
                "hostname": "router.example",
                "protocols": {"tls": "tls://127.0.0.1:3022"},
                "linkListener": "",
                "tunneler": False,
                "terminators": ["t-1", "t-2"],
                "circuits": ["c-1"],
                "startedAt": STARTED_AT_MS,  # when this process started: no later than now
            }
            assert 0 < STARTED_AT_MS <= time.time() * 1000
            assert controller.channel.peer_chain[0] == pki.router_client.der  # mutual TLS
            assert (client.router_id, client.router_name) == ("r-1", "router-one")
            assert client.connected.is_set()

            assert sorted(sessions.ids()) == ["as-binder", "as-dialer"]
            found = sessions.by_token("tok-dialer")
            assert found is not None
            assert found.fingerprints == {pki.identities["dialer"].fingerprint}
            assert edge.closed == [["as-old"]]
            assert edge.dropped == [["t-2"]]


@run_async
async def test_an_empty_full_state_still_syncs(pki: Pki) -> None:
    sessions = ApiSessions()
    async with Controller(pki) as controller:
        controller.after_hello = full_state([])
        async with Running(pki, controller, Edge(), api_sessions=sessions):
            await within(sessions.synced.wait())
            assert len(sessions) == 0


# -- pushes ----------------------------------------------------------------------------------------
@run_async
async def test_pushes_change_the_api_sessions_and_reach_the_edge(pki: Pki) -> None:
    sessions = ApiSessions()
    edge = Edge()
    async with Controller(pki) as controller:
        controller.after_hello = full_state([wire_session(pki, "dialer")])
        async with Running(pki, controller, edge, api_sessions=sessions) as client:
            await within(sessions.synced.wait())
            send = controller.channel.send

            send(
                control.message(
                    API_SESSION_ADDED, {"fullState": False, "apiSessions": [wire_session(pki, "binder")]}
                )
            )
            moved = {**wire_session(pki, "dialer"), "fingerprints": [pki.identities["stranger"].fingerprint]}
            send(control.message(API_SESSION_UPDATED, {"apiSessions": [moved]}))
            send(control.message(API_SESSION_ADDED, {"apiSessions": [{"id": "broken"}]}))  # skipped
            send(Message(API_SESSION_REMOVED, b"not json"))  # ignored
            send(control.message(SESSION_REMOVED, {"ids": ["s-1"], "tokens": ["tok-s-2"]}))
            send(
                control.message(
                    ROUTER_LINKS, {"routers": [{"id": "r-2", "name": "two", "linkListener": "tls://b:1"}]}
                )
            )
            await controller.settle()

            assert sorted(sessions.ids()) == ["as-binder", "as-dialer"]
            dialer = sessions.by_id("as-dialer")
            assert dialer is not None
            assert dialer.fingerprints == {pki.identities["stranger"].fingerprint}
            assert edge.ended == [(["s-1"], ["tok-s-2"])]
            assert client.router_links == [RouterLink(id="r-2", name="two", link_listener="tls://b:1")]
            assert edge.closed == []

            send(control.message(API_SESSION_REMOVED, {"ids": ["as-binder"]}))
            await controller.settle()
            assert sessions.ids() == ["as-dialer"]
            assert sessions.by_token("tok-binder") is None
            assert edge.closed == [["as-binder"]]


@run_async
async def test_a_heartbeat_is_answered_with_the_same_value(pki: Pki) -> None:
    async with Controller(pki) as controller, Running(pki, controller, Edge()) as client:
        await within(client.connected.wait())
        probe = Message(HEARTBEAT)
        probe.headers[HEARTBEAT_REQUEST] = b"\x01\x02\x03\x04\x05\x06\x07\x08"
        answer = await controller.channel.request(probe, 30)
        assert answer.content_type == HEARTBEAT
        assert answer.headers[HEARTBEAT_RESPONSE] == b"\x01\x02\x03\x04\x05\x06\x07\x08"


@run_async
async def test_the_router_sends_heartbeats_and_activity_reports(pki: Pki) -> None:
    edge = Edge(api_sessions=["as-dialer", "as-binder"])
    async with (
        Controller(pki) as controller,
        Running(pki, controller, edge, heartbeat_seconds=0.05, activity_seconds=0.05),
    ):
        controller.hello_answer = lambda hello: Controller.welcome(hello, heartbeatSeconds=0.05)
        beat = await controller.next(HEARTBEAT)
        assert len(beat.headers[HEARTBEAT_REQUEST]) == 8
        report = await controller.next(API_SESSION_HEARTBEAT)
        assert json.loads(report.body) == {"apiSessionIds": ["as-dialer", "as-binder"]}


@run_async
async def test_the_whole_set_is_reported_once_connected_and_changes_as_they_come(pki: Pki) -> None:
    edge = Edge(api_sessions=["as-dialer"])
    async with Controller(pki) as controller, Running(pki, controller, edge) as client:
        report = await controller.next(API_SESSION_HEARTBEAT)
        assert json.loads(report.body) == {"apiSessionIds": ["as-dialer"]}

        client.api_session_channels(["as-binder"], ["as-dialer"])

        notice = await controller.next(API_SESSION_CHANNELS)
        assert json.loads(notice.body) == {"opened": ["as-binder"], "closed": ["as-dialer"]}


@run_async
async def test_links_are_reported_after_every_hello_and_as_they_change(pki: Pki) -> None:
    up = [{"id": "l-1", "routerId": "r-2", "dialed": True, "protocol": "tls"}]
    async with Controller(pki) as controller, Running(pki, controller, Edge()) as client:
        first = await controller.next(LINKS)
        assert json.loads(first.body) == {"links": []}

        client.links_changed(up)

        assert json.loads((await controller.next(LINKS)).body) == {"links": up}
        controller.channel.close()
        await until(lambda: client.sessions == 2, "a second hello")
        assert json.loads((await controller.next(LINKS)).body) == {"links": up}


@run_async
async def test_ended_circuits_are_told_and_circuits_closed_as_asked(pki: Pki) -> None:
    edge = Edge()
    async with Controller(pki) as controller, Running(pki, controller, edge) as client:
        await within(client.connected.wait())

        client.circuits_ended(["c-1", "c-2"])
        controller.channel.send(control.message(CLOSE_CIRCUITS, {"circuitIds": ["c-3"], "reason": "deleted"}))

        assert json.loads((await controller.next(CIRCUITS_ENDED)).body) == {"circuitIds": ["c-1", "c-2"]}
        await controller.settle()
        assert edge.circuits_closed == [(["c-3"], "deleted")]


@run_async
async def test_a_silent_controller_is_left_and_dialled_again(pki: Pki) -> None:
    async with Controller(pki) as controller:
        controller.answer_heartbeats = False
        async with Running(pki, controller, Edge(), heartbeat_seconds=0.05, silent_seconds=0.2) as client:
            await until(lambda: len(controller.hellos) >= 2, "a second hello")
            assert client.sessions >= 1


# -- requests --------------------------------------------------------------------------------------
@run_async
async def test_requests_are_asked_and_answers_understood(pki: Pki) -> None:
    async with Controller(pki) as controller, Running(pki, controller, Edge()) as client:
        await within(client.connected.wait())

        async def answer(content_type: int, reply: Callable[[Message], Message]) -> Message:
            request = await controller.next(content_type)
            controller.channel.send(reply(request))
            return request

        asked = asyncio.ensure_future(
            client.create_circuit(
                session_token="tok",
                api_session_id="as-1",
                fingerprints=["ab"],
                terminator_instance_id="",
                has_public_key=True,
            )
        )
        request = await answer(
            CREATE_CIRCUIT, lambda r: control.message(CREATE_CIRCUIT_REPLY, CIRCUIT_REPLY).reply_to(r)
        )
        assert json.loads(request.body) == {
            "sessionToken": "tok",
            "apiSessionId": "as-1",
            "fingerprints": ["ab"],
            "terminatorInstanceId": "",
            "hasPublicKey": True,
        }
        assert await within(asked) == Circuit(
            session_id="s-1",
            service_id="svc-1",
            service_name="echo",
            caller_id="dialer",
            terminator_id="t-1",
            router_id="r-1",
            binding="edge",
            address="hosted:x",
            instance_id="",
            path=("r-1",),
            circuit_id="c-1",
        )

        asked_t = asyncio.ensure_future(
            client.create_terminator(
                session_token="tok-b",
                api_session_id="as-2",
                fingerprints=["cd"],
                instance_id="i",
                cost=5,
                precedence="failed",
                has_public_key=False,
                address="hosted:tok-b",
            )
        )
        body = {"terminatorId": "t-9", "sessionId": "s-9", "serviceId": "svc-9"}
        request = await answer(
            CREATE_TERMINATOR, lambda r: control.message(CREATE_TERMINATOR_REPLY, body).reply_to(r)
        )
        assert json.loads(request.body)["precedence"] == "failed"
        assert await within(asked_t) == Terminator(terminator_id="t-9", session_id="s-9", service_id="svc-9")

        removing = asyncio.ensure_future(client.remove_terminators(["t-9"]))
        request = await answer(REMOVE_TERMINATORS, result)
        assert json.loads(request.body) == {"terminatorIds": ["t-9"]}
        await within(removing)

        refused = asyncio.ensure_future(
            client.create_circuit(
                session_token="bad",
                api_session_id="as-1",
                fingerprints=[],
                terminator_instance_id="",
                has_public_key=False,
            )
        )
        await answer(CREATE_CIRCUIT, lambda r: control.error(r, 3, "no such session"))
        with pytest.raises(Refused) as caught:
            await within(refused)
        assert (caught.value.code, caught.value.reason) == (3, "no such session")


@run_async
async def test_no_connection_or_no_answer_is_unavailable(pki: Pki) -> None:
    async with Controller(pki) as controller:
        running = Running(pki, controller, Edge(), request_seconds=0.2)
        with pytest.raises(Unavailable):
            await running.client.remove_terminators(["t-1"])  # not connected yet
        async with running as client:
            await within(client.connected.wait())
            with pytest.raises(Unavailable):
                await client.remove_terminators(["t-1"])  # the controller never answers
            assert (await controller.next(REMOVE_TERMINATORS)).content_type == REMOVE_TERMINATORS


# -- reconnecting ----------------------------------------------------------------------------------
@run_async
async def test_after_the_connection_breaks_the_router_dials_again_and_resyncs(pki: Pki) -> None:
    sessions = ApiSessions()
    edge = Edge(terminators=["t-1"])
    async with Controller(pki) as controller:
        controller.after_hello = full_state([wire_session(pki, "dialer"), wire_session(pki, "binder")])
        async with Running(pki, controller, edge, api_sessions=sessions) as client:
            await within(sessions.synced.wait())
            first = controller.channel
            controller.after_hello = full_state([wire_session(pki, "binder")])
            edge.terminators = ["t-1", "t-3"]

            first.close()

            await until(lambda: client.sessions == 2 and sessions.synced.is_set(), "a second sync")
            assert json.loads(controller.hellos[1].body)["terminators"] == ["t-1", "t-3"]
            assert sessions.ids() == ["as-binder"]
            assert edge.closed == [["as-dialer"]]


@run_async
async def test_a_refused_hello_is_tried_again(pki: Pki) -> None:
    async with Controller(pki) as controller:

        def first_no(hello: Message) -> Message:
            if len(controller.hellos) == 1:
                return result(hello, False, "unknown router")
            return Controller.welcome(hello)

        controller.hello_answer = first_no
        async with Running(pki, controller, Edge()) as client:
            await within(client.connected.wait())
            assert len(controller.hellos) == 2
            assert client.sessions == 1


@run_async
async def test_a_controller_certificate_for_another_host_name_is_refused(pki: Pki) -> None:
    async with Controller(pki) as controller:
        running = Running(pki, controller, Edge(), server_hostname="elsewhere.example")
        assert await running.client._session() is False
        assert controller.hellos == []


def test_a_version_is_given_the_five_fields_a_hello_needs() -> None:
    assert version_text("v1|abc|2024-01-01|linux|amd64") == "v1|abc|2024-01-01|linux|amd64"
    fields = version_text("v0.1.0").split("|")
    assert len(fields) == 5
    assert fields[0] == "v0.1.0"


def test_addresses_are_parsed() -> None:
    assert parse_address("ctrl.example:6262") == ("ctrl.example", 6262)
    assert parse_address("tls:10.0.0.1:6262") == ("10.0.0.1", 6262)
    assert parse_address("tls://[::1]:6262") == ("::1", 6262)
    for bad in ("ctrl.example", ":6262", "host:0", "host:port"):
        with pytest.raises(ValueError, match="not a host:port address"):
            parse_address(bad)


# -- with the edge listener ------------------------------------------------------------------------
@run_async
async def test_pushed_sessions_let_an_sdk_in_and_their_removal_closes_it(pki: Pki) -> None:
    """The chain: the controller pushes the API sessions, an SDK's hello passes on them, its Bind
    becomes a terminator through the control connection, and removing its API session closes
    the SDK's channel and removes the terminator."""
    sessions = ApiSessions()
    async with Controller(pki) as controller:
        controller.after_hello = full_state([wire_session(pki, "binder")])
        async with Running(pki, controller, None, api_sessions=sessions) as client:
            listener = EdgeListener(
                ssl_context=pki.edge_server_context(),
                controller=client,
                api_sessions=sessions,
                router_id="r-1",
                version="v0.1.0",
            )
            client.edge = listener
            await listener.start("127.0.0.1", 0)
            binder = await Sdk.connect(listener.port, pki.sdk_context("binder"), "binder")
            try:
                assert (await binder.hello("tok-binder")).content_type == RESULT
                notice = await controller.next(API_SESSION_CHANNELS)
                assert json.loads(notice.body) == {"opened": ["as-binder"], "closed": []}

                binding = asyncio.ensure_future(
                    binder.ask(binder.edge(BIND, 0, b"bind-tok", caller("binder")))
                )
                request = await controller.next(CREATE_TERMINATOR)
                assert json.loads(request.body)["fingerprints"] == [fingerprint(pki.identities["binder"].der)]
                body = {"terminatorId": "t-7", "sessionId": "s-7", "serviceId": "svc"}
                controller.channel.send(control.message(CREATE_TERMINATOR_REPLY, body).reply_to(request))
                assert (await within(binding)).content_type == STATE_CONNECTED

                controller.channel.send(control.message(API_SESSION_REMOVED, {"ids": ["as-binder"]}))

                await binder.closed()
                notice = await controller.next(API_SESSION_CHANNELS)
                assert json.loads(notice.body) == {"opened": [], "closed": ["as-binder"]}
                removal = await controller.next(REMOVE_TERMINATORS)
                assert json.loads(removal.body) == {"terminatorIds": ["t-7"]}
                assert listener.api_session_ids() == []
            finally:
                binder.channel.close()
                await listener.stop()


@run_async
async def test_a_controller_refusal_reaches_the_sdk_as_invalid_session(pki: Pki) -> None:
    sessions = ApiSessions()
    async with Controller(pki) as controller:
        controller.after_hello = full_state([wire_session(pki, "binder")])
        async with Running(pki, controller, None, api_sessions=sessions) as client:
            listener = EdgeListener(
                ssl_context=pki.edge_server_context(),
                controller=client,
                api_sessions=sessions,
                router_id="r-1",
                version="v0.1.0",
            )
            client.edge = listener
            await listener.start("127.0.0.1", 0)
            binder = await Sdk.connect(listener.port, pki.sdk_context("binder"), "binder")
            try:
                await binder.hello("tok-binder")
                binding = asyncio.ensure_future(
                    binder.ask(binder.edge(BIND, 0, b"bind-tok", caller("binder")))
                )
                request = await controller.next(CREATE_TERMINATOR)
                controller.channel.send(control.error(request, 3, "session gone"))
                answer = await within(binding)
                assert answer.content_type == STATE_CLOSED
                assert answer.body == b"Invalid Session"
                assert answer.u32(ERROR_CODE) == 3
            finally:
                binder.channel.close()
                await listener.stop()
