"""The edge listener (router.edge) over real TLS: test SDKs with certificates of a CA the router
does not know, speaking channel v2, against a listener whose controller answers from tables."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import Any

import pytest

from channel.connection import ChannelClosed
from channel.edge import (
    APP_DATA,
    BIND,
    CALLER_ID,
    CONN_ID,
    CONNECT,
    COST,
    DATA,
    DIAL,
    DIAL_FAILED,
    DIAL_SUCCESS,
    ERROR_CODE,
    FIN,
    FLAGS,
    HEALTH_EVENT,
    PRECEDENCE,
    PUBLIC_KEY,
    SEQ,
    STATE_CLOSED,
    STATE_CONNECTED,
    TERMINATOR_IDENTITY,
    UNBIND,
    UPDATE_BIND,
)
from channel.frames import (
    CONNECTION_ID,
    HELLO,
    HELLO_VERSION,
    LATENCY,
    LATENCY_PROBE_TIME,
    RESULT,
    RESULT_SUCCESS,
    Message,
)
from router.edge import EdgeListener, Phase, SdkChannel, State
from router.ports import ApiSession, ApiSessions, Refused, Unavailable, token_hash
from tests.router.helpers import ROUTER_ID, Pki, Sdk, TableController, caller, run_async, until, within

KEY_D = bytes(range(32))
KEY_B = bytes(range(100, 132))


def session(pki: Pki, who: str, *, fingerprint_of: str | None = None) -> ApiSession:
    return ApiSession(
        id=f"as-{who}",
        token_hash=token_hash(f"tok-{who}"),
        identity_id=f"id-{who}",
        identity_name=who,
        fingerprints=frozenset({pki.identities[fingerprint_of or who].fingerprint}),
    )


class Router:
    """An edge listener on 127.0.0.1 whose API sessions know ``dialer`` and ``binder``."""

    def __init__(self, pki: Pki, **options: Any) -> None:
        self.pki = pki
        self.controller = TableController()
        self.api_sessions = ApiSessions()
        options.setdefault("api_session_wait", 0.2)
        self.listener = EdgeListener(
            ssl_context=pki.edge_server_context(),
            controller=self.controller,
            api_sessions=self.api_sessions,
            router_id=ROUTER_ID,
            version="v0.1.0",
            **options,
        )
        self.sdks: list[Sdk] = []
        for who in ("dialer", "binder"):
            self.api_sessions.put(session(pki, who))

    async def __aenter__(self) -> Router:
        await self.listener.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sdk in self.sdks:
            sdk.channel.close()
        await self.listener.stop()

    async def connect(self, who: str, *, cert: str | None = None) -> Sdk:
        """A TLS connection presenting ``cert``'s certificate (``who``'s by default), no hello yet."""
        sdk = await Sdk.connect(self.listener.port, self.pki.sdk_context(cert or who), who)
        self.sdks.append(sdk)
        return sdk

    async def sdk(self, who: str) -> Sdk:
        """``who``'s SDK, its hello accepted."""
        sdk = await self.connect(who)
        answer = await sdk.hello(f"tok-{who}")
        assert answer.content_type == RESULT
        assert answer.flag(RESULT_SUCCESS)
        return sdk

    def side_of(self, *, sdk_phase: Phase) -> SdkChannel:
        """The router's end of the (only) channel in ``sdk_phase``."""
        found = [s for s in self.listener.channels() if s.phase is sdk_phase]
        assert len(found) == 1, found
        return found[0]

    def side(self, who: str) -> SdkChannel:
        """The router's end of ``who``'s (only) channel."""
        found = [
            s
            for s in self.listener.channels()
            if s.api_session is not None and s.api_session.id == f"as-{who}"
        ]
        assert len(found) == 1, found
        return found[0]


async def bind(
    binder: Sdk, conn_id: int = 0, token: str = "bind-1", headers: dict[int, bytes] | None = None
) -> Message:
    return await binder.ask(binder.edge(BIND, conn_id, token.encode(), caller("binder"), headers or {}))


async def dial(
    dialer: Sdk,
    binder: Sdk,
    *,
    conn_id: int = 0,
    token: str = "dial-1",
    bind_conn: int = 0,
    new_conn: int = 7,
    headers: dict[int, bytes] | None = None,
) -> tuple[Message, Message]:
    """Connect -> Dial -> DialSuccess -> StateConnected to both: (the Dial, the Connect's answer)."""
    connecting = asyncio.ensure_future(
        dialer.ask(dialer.edge(CONNECT, conn_id, token.encode(), caller("dialer"), headers or {}))
    )
    dial_message = await binder.next()
    assert dial_message.content_type == DIAL
    success = binder.edge(DIAL_SUCCESS, bind_conn, new_conn.to_bytes(4, "little")).reply_to(dial_message)
    connected = await binder.ask(success)
    assert connected.content_type == STATE_CONNECTED
    assert connected.u32(CONN_ID) == bind_conn
    assert connected.reply_for == success.seq
    answer = await within(connecting)
    return dial_message, answer


def data(sdk: Sdk, conn_id: int, body: bytes, *, fin: bool = False) -> Message:
    message = sdk.edge(DATA, conn_id, body)
    if fin:
        message.set_u32(FLAGS, FIN)
    return message


async def next_data(sdk: Sdk) -> Message:
    message = await sdk.next()
    assert message.content_type == DATA, message
    return message


# -- hello ---------------------------------------------------------------------------------------
@run_async
async def test_a_hello_with_a_known_token_and_certificate_is_answered(pki: Pki) -> None:
    async with Router(pki) as router:
        sdk = await router.connect("dialer")
        hello = Message(HELLO, b"ziti-sdk-c[0]@test")
        hello.set_text(1002, "tok-dialer")
        answer = await sdk.channel.request(hello, 30)

        assert answer.content_type == RESULT
        assert answer.headers[RESULT_SUCCESS] == b"\x01"
        assert answer.reply_for == hello.seq
        assert answer.text(HELLO_VERSION) is not None
        assert answer.text(HELLO_VERSION).count("|") == 4  # type: ignore[union-attr]
        assert answer.text(HELLO_VERSION).startswith("v0.1.0|")  # type: ignore[union-attr]
        assert answer.text(CONNECTION_ID)
        assert router.side("dialer").fingerprints == [pki.identities["dialer"].fingerprint]
        assert router.listener.api_session_ids() == ["as-dialer"]


@run_async
async def test_a_hello_waits_for_the_controller_to_push_its_api_session(pki: Pki) -> None:
    async with Router(pki, api_session_wait=60) as router:
        router.api_sessions.remove(["as-dialer"])
        sdk = await router.connect("dialer")
        answering = asyncio.ensure_future(sdk.hello("tok-dialer"))
        await until(
            lambda: any(s.phase is Phase.HELLO for s in router.listener.channels()),
            "the hello is being checked",
        )
        probing = asyncio.ensure_future(sdk.ask(Message(LATENCY)))  # sent early: kept for later
        await until(lambda: router.side_of(sdk_phase=Phase.HELLO).held == 1, "the probe is held")
        assert not answering.done()

        router.api_sessions.put(session(pki, "dialer"))

        answer = await within(answering)
        assert answer.flag(RESULT_SUCCESS)
        assert (await within(probing)).content_type == RESULT


@run_async
async def test_too_much_before_the_hello_is_answered_closes_the_connection(pki: Pki) -> None:
    async with Router(pki, api_session_wait=60) as router:
        router.api_sessions.remove(["as-dialer"])
        sdk = await router.connect("dialer")
        answering = asyncio.ensure_future(sdk.hello("tok-dialer"))
        for _ in range(17):
            sdk.channel.send(Message(LATENCY))

        await sdk.closed()
        with pytest.raises(ChannelClosed):
            await within(answering)


@pytest.mark.parametrize(
    ("cert", "token"),
    [("dialer", "tok-unknown"), ("stranger", "tok-dialer"), ("dialer", "")],
    ids=["unknown-token", "fingerprint-mismatch", "no-token"],
)
@run_async
async def test_a_bad_hello_is_not_answered_and_the_connection_closes(pki: Pki, cert: str, token: str) -> None:
    async with Router(pki) as router:
        sdk = await router.connect("dialer", cert=cert)
        with pytest.raises(ChannelClosed):
            await sdk.hello(token)
        assert sdk.inbox.empty()
        assert router.listener.api_session_ids() == []


@run_async
async def test_a_certificate_of_another_identity_is_refused(pki: Pki) -> None:
    """The binder's certificate with the dialer's token: the leaf is not one of the session's."""
    async with Router(pki) as router:
        sdk = await router.connect("dialer", cert="binder")
        with pytest.raises(ChannelClosed):
            await sdk.hello("tok-dialer")


@run_async
async def test_no_hello_in_time_closes_the_connection(pki: Pki) -> None:
    async with Router(pki, hello_seconds=0.1) as router:
        sdk = await router.connect("dialer")
        await sdk.closed()
        assert sdk.inbox.empty()


@pytest.mark.parametrize("part", ["body", "headers"])
@run_async
async def test_an_oversized_hello_closes_the_connection(pki: Pki, part: str) -> None:
    async with Router(pki) as router:
        sdk = await router.connect("dialer")
        hello = Message(HELLO, b"x" * 4193 if part == "body" else b"")
        hello.set_text(1002, "tok-dialer")
        if part == "headers":
            hello.headers[3000] = b"h" * (16 * 1024)
        with pytest.raises(ChannelClosed):
            await sdk.channel.request(hello, 30)


@run_async
async def test_a_first_message_that_is_no_hello_closes_the_connection(pki: Pki) -> None:
    async with Router(pki) as router:
        sdk = await router.connect("dialer")
        probe = Message(LATENCY).set_u64(LATENCY_PROBE_TIME, 1)
        with pytest.raises(ChannelClosed):
            await sdk.channel.request(probe, 30)


# -- latency, unknown types ------------------------------------------------------------------------
@run_async
async def test_a_latency_probe_is_echoed(pki: Pki) -> None:
    async with Router(pki) as router:
        sdk = await router.sdk("dialer")
        sdk.channel.send(Message(12345, b"what is this"))  # unknown content type: ignored
        probe = Message(LATENCY)
        probe.headers[LATENCY_PROBE_TIME] = b"\x01\x02\x03\x04\x05\x06\x07\x08"
        answer = await sdk.ask(probe)

        assert answer.content_type == RESULT
        assert answer.headers[RESULT_SUCCESS] == b"\x01"
        assert answer.headers[LATENCY_PROBE_TIME] == b"\x01\x02\x03\x04\x05\x06\x07\x08"
        assert sdk.inbox.empty()


# -- bind ------------------------------------------------------------------------------------------
@run_async
async def test_a_bind_registers_a_terminator_and_is_answered_state_connected(pki: Pki) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        request = binder.edge(
            BIND,
            3,
            b"bind-1",
            caller("binder"),
            {
                COST: (300).to_bytes(4, "little"),  # 0.29.3 sends 4 bytes
                PRECEDENCE: (1).to_bytes(4, "little"),
                TERMINATOR_IDENTITY: b"instance-a",
            },
        )
        request.set_u32(SEQ, 5)
        answer = await binder.ask(request)

        assert answer.content_type == STATE_CONNECTED
        assert answer.reply_for == request.seq
        assert answer.u32(CONN_ID) == 3
        assert answer.u32(SEQ) == 5
        chosen = router.controller.terminator_calls[0].pop("terminator_id")
        assert re.fullmatch(r"[A-Za-z0-9._-]{1,64}", chosen), chosen  # its own id, asked again as is
        assert router.controller.terminator_calls == [
            {
                "session_token": "bind-1",
                "api_session_id": "as-binder",
                "fingerprints": [pki.identities["binder"].fingerprint],
                "instance_id": "instance-a",
                "cost": 300,
                "precedence": "required",
                "has_public_key": False,
                "address": "hosted:bind-1",
            }
        ]
        assert router.listener.terminator_ids() == ["t-bind-1"]


@pytest.mark.parametrize(
    ("refusal", "text", "code"),
    [
        (Refused(3, "session not found"), "Invalid Session", 3),
        (Refused(5, "router not allowed"), "Invalid Session", 5),
        (Refused(6, "no such service"), "no such service", 6),
        # OpenZiti's router with no controller to ask: its text, no error code
        (Unavailable("no control connection"), "no controller available, cannot create terminator", None),
    ],
    ids=["invalid-session", "invalid-router", "other-code", "unavailable"],
)
@run_async
async def test_a_refused_bind_is_answered_state_closed(
    pki: Pki, refusal: Exception, text: str, code: int | None
) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        router.controller.bind_refusals["bind-1"] = refusal
        answer = await bind(binder, conn_id=2)

        assert answer.content_type == STATE_CLOSED
        assert answer.body.decode() == text
        assert answer.u32(ERROR_CODE) == code
        assert answer.u32(CONN_ID) == 2
        assert router.listener.terminator_ids() == []
        assert router.side("binder").conns == {}


@run_async
async def test_a_bind_with_an_unknown_precedence_is_refused(pki: Pki) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        answer = await bind(binder, headers={PRECEDENCE: b"\x07"})
        assert answer.content_type == STATE_CLOSED
        assert router.controller.terminator_calls == []


@run_async
async def test_a_bind_again_on_the_same_connection_replaces_the_first(pki: Pki) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        await bind(binder, conn_id=0, token="bind-1")
        answer = await bind(binder, conn_id=0, token="bind-2")

        assert answer.content_type == STATE_CONNECTED
        assert router.listener.terminator_ids() == ["t-bind-2"]
        await until(lambda: router.controller.removed == ["t-bind-1"], "the first terminator is removed")


@pytest.mark.parametrize("how", ["state-closed", "unbind"])
@run_async
async def test_the_sdk_ending_a_bind_removes_its_terminator(pki: Pki, how: str) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        await bind(binder, conn_id=4)
        binder.channel.send(binder.edge(UPDATE_BIND, 4, b"bind-1"))  # accepted, ignored
        binder.channel.send(binder.edge(HEALTH_EVENT, 4, b"bind-1"))

        if how == "unbind":
            answer = await binder.ask(binder.edge(UNBIND, 4, b"bind-1"))
            assert answer.content_type == STATE_CLOSED
        else:
            binder.channel.send(binder.edge(STATE_CLOSED, 4))

        await until(lambda: router.controller.removed == ["t-bind-1"], "the terminator is removed")
        assert router.listener.terminator_ids() == []
        assert binder.inbox.empty()  # UpdateBind and HealthEvent are not answered


# -- connect, dial, data ---------------------------------------------------------------------------
@run_async
async def test_a_connect_reaches_the_bind_and_data_flows_both_ways(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder, conn_id=0)
        router.controller.route("dial-1", "bind-1", caller_id="dialer-identity")

        dial_message, answer = await dial(
            dialer, binder, conn_id=5, new_conn=9, headers={APP_DATA: b'{"dst_hostname":"(null)"}'}
        )

        assert dial_message.u32(CONN_ID) == 0  # the bind's
        assert dial_message.headers[SEQ] == b"\x00\x00\x00\x00"
        assert dial_message.text(CALLER_ID) == "dialer-identity"  # the controller's, not the header's
        assert dial_message.headers[APP_DATA] == b'{"dst_hostname":"(null)"}'
        assert PUBLIC_KEY not in dial_message.headers
        assert dial_message.body == b"bind-1"
        assert answer.content_type == STATE_CONNECTED
        assert answer.u32(CONN_ID) == 5
        assert PUBLIC_KEY not in answer.headers
        assert router.controller.circuit_calls == [
            {
                "session_token": "dial-1",
                "api_session_id": "as-dialer",
                "fingerprints": [pki.identities["dialer"].fingerprint],
                "terminator_instance_id": "",
                "has_public_key": False,
            }
        ]

        # dialer -> binder, in order, message by message (1 MB stays one message)
        big = bytes(itertools.islice(itertools.cycle(range(251)), 1024 * 1024))
        bodies = [b"hello", big, b"", b"after"]
        for body in bodies:
            dialer.channel.send(data(dialer, 5, body))
        got = [await next_data(binder) for _ in bodies]
        assert [m.body for m in got] == bodies
        assert {m.u32(CONN_ID) for m in got} == {9}
        seqs = [m.u32(SEQ) or 0 for m in got]
        assert seqs == sorted(set(seqs))  # fresh and increasing
        assert all(FLAGS not in m.headers for m in got)

        # binder -> dialer
        for body in (big, b"world"):
            binder.channel.send(data(binder, 9, body))
        assert [(await next_data(dialer)).body for _ in range(2)] == [big, b"world"]

        # FIN (half-close) is passed on and the other way still works
        dialer.channel.send(data(dialer, 5, b"", fin=True))
        fin = await next_data(binder)
        assert fin.headers[FLAGS] == b"\x01\x00\x00\x00"
        assert fin.body == b""
        assert fin.u32(CONN_ID) == 9
        binder.channel.send(data(binder, 9, b"last words"))
        assert (await next_data(dialer)).body == b"last words"

        # StateClosed is passed on; both ends are forgotten
        binder.channel.send(binder.edge(STATE_CLOSED, 9, b"bye"))
        closed = await dialer.next()
        assert closed.content_type == STATE_CLOSED
        assert closed.u32(CONN_ID) == 5
        assert closed.reply_for is None
        await until(lambda: router.side("dialer").conns == {}, "the dialer's end is forgotten")
        assert list(router.side("binder").conns) == [0]  # the bind remains


@run_async
async def test_public_keys_are_passed_on_only_when_the_dialer_sent_one(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder, headers={PUBLIC_KEY: KEY_B})
        router.controller.route("dial-1", "bind-1")
        assert router.controller.terminator_calls[0]["has_public_key"] is True

        dial_message, answer = await dial(dialer, binder, conn_id=0, new_conn=10)
        assert PUBLIC_KEY not in dial_message.headers
        assert PUBLIC_KEY not in answer.headers  # 0.29.3 would switch to encryption on it

        dial_message, answer = await dial(dialer, binder, conn_id=1, new_conn=11, headers={PUBLIC_KEY: KEY_D})
        assert dial_message.headers[PUBLIC_KEY] == KEY_D
        assert answer.headers[PUBLIC_KEY] == KEY_B
        assert router.controller.circuit_calls[-1]["has_public_key"] is True


@run_async
async def test_data_before_the_connection_is_up_is_dropped(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        connecting = asyncio.ensure_future(dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer"))))
        dial_message = await binder.next()
        dialer.channel.send(data(dialer, 0, b"too early"))
        await dialer.ask(Message(LATENCY))  # the early data has been read by now
        connected = await binder.ask(
            binder.edge(DIAL_SUCCESS, 0, (3).to_bytes(4, "little")).reply_to(dial_message)
        )
        assert connected.content_type == STATE_CONNECTED
        assert (await within(connecting)).content_type == STATE_CONNECTED

        dialer.channel.send(data(dialer, 0, b"in time"))
        assert (await next_data(binder)).body == b"in time"


@pytest.mark.parametrize(
    ("outcome", "text", "code"),
    [
        (Refused(3, "session not found"), "Invalid Session", 3),
        (Refused(2, "api session gone"), "Invalid Session", 2),
        (Refused(4, "wrong type"), "Invalid Session", 4),
        (Refused(11, "encryption required on service, initiator did not send public header"), None, 11),
        # OpenZiti's router with no controller to ask: its text, no error code
        (Unavailable("no answer in time"), "no controller available, cannot create circuit", None),
    ],
    ids=["invalid-session", "invalid-api-session", "wrong-type", "encryption", "unavailable"],
)
@run_async
async def test_a_refused_connect_is_answered_state_closed_with_reason_and_code(
    pki: Pki, outcome: Exception, text: str | None, code: int | None
) -> None:
    async with Router(pki) as router:
        dialer = await router.sdk("dialer")
        router.controller.circuits["dial-1"] = outcome
        request = dialer.edge(CONNECT, 6, b"dial-1", caller("dialer"))
        answer = await dialer.ask(request)

        assert answer.content_type == STATE_CLOSED
        assert answer.reply_for == request.seq
        assert answer.u32(CONN_ID) == 6
        expected = text if text is not None else str(outcome)
        assert answer.body.decode() == expected
        assert answer.u32(ERROR_CODE) == code
        assert router.side("dialer").conns == {}


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"router_id": "router-2"}, "router-2"),
        ({"terminator_id": "t-gone"}, "not bound on this router"),
        ({"terminator_id": "t-tcp", "binding": "tunnel", "address": "tcp:127.0.0.1:7"}, "tunnel"),
    ],
    ids=["other-router", "bind-gone", "router-hosted"],
)
@run_async
async def test_a_terminator_this_router_cannot_reach_is_refused(
    pki: Pki, fields: dict[str, str], words: str
) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1", **fields)
        answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer")))
        assert answer.content_type == STATE_CLOSED
        assert words in answer.body.decode()
        assert binder.inbox.empty()


@run_async
async def test_a_dial_failed_refuses_the_connect(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        connecting = asyncio.ensure_future(dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer"))))
        dial_message = await binder.next()
        binder.channel.send(binder.edge(DIAL_FAILED, 0, b"not accepting").reply_to(dial_message))

        answer = await within(connecting)
        assert answer.content_type == STATE_CLOSED
        assert "not accepting" in answer.body.decode()
        assert router.side("dialer").conns == {}


@run_async
async def test_a_dial_not_answered_in_time_refuses_the_connect_and_a_late_success_is_closed(pki: Pki) -> None:
    async with Router(pki, dial_seconds=0.1) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer")))
        assert answer.content_type == STATE_CLOSED
        dial_message = await binder.next()

        late = binder.edge(DIAL_SUCCESS, 0, (8).to_bytes(4, "little")).reply_to(dial_message)
        closed = await binder.ask(late)
        assert closed.content_type == STATE_CLOSED
        assert list(router.side("binder").conns) == [0]


@run_async
async def test_the_binders_channel_closing_ends_the_dialers_connection_and_the_terminator(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        await dial(dialer, binder, conn_id=2)

        binder.channel.close()

        closed = await dialer.next()
        assert closed.content_type == STATE_CLOSED
        assert closed.u32(CONN_ID) == 2
        await until(lambda: router.controller.removed == ["t-bind-1"], "the terminator is removed")
        assert router.listener.terminator_ids() == []
        assert router.side("dialer").conns == {}
        assert router.listener.api_session_ids() == ["as-dialer"]


@run_async
async def test_the_dialers_channel_closing_ends_the_binders_connection(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        await dial(dialer, binder, new_conn=12)

        dialer.channel.close()

        closed = await binder.next()
        assert closed.content_type == STATE_CLOSED
        assert closed.u32(CONN_ID) == 12
        assert router.listener.terminator_ids() == ["t-bind-1"]
        assert router.controller.removed == []


# -- closing: who sends StateClosed when (docs/dataplane.md §4, issue 24) ---------------------------
async def drained(sdk: Sdk) -> list[Message]:
    """Everything the router sent ``sdk`` so far: a latency probe's answer comes after it all."""
    assert (await sdk.ask(Message(LATENCY))).content_type == RESULT
    got = []
    while not sdk.inbox.empty():
        got.append(sdk.inbox.get_nowait())
    return got


def wire(messages: list[Message]) -> list[tuple[str, int | None, bytes, bytes | None]]:
    """(kind, conn id, body, flags) of each message, for comparing whole sequences."""
    names = {DATA: "Data", STATE_CLOSED: "StateClosed", STATE_CONNECTED: "StateConnected"}
    return [
        (names.get(m.content_type, str(m.content_type)), m.u32(CONN_ID), m.body, m.headers.get(FLAGS))
        for m in messages
    ]


FIN_FLAGS = b"\x01\x00\x00\x00"


@pytest.mark.parametrize("closer", ["binder", "dialer"])
@run_async
async def test_the_sdk_that_closes_is_sent_nothing_more_and_the_other_gets_data_fin_closed(
    pki: Pki, closer: str
) -> None:
    """What the Go tunneler does at the end of every TCP connection: Data, FIN, StateClosed from
    one side, then the other side's own FIN and StateClosed crossing the router's."""
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        await dial(dialer, binder, conn_id=5, new_conn=9)
        sdks = {"binder": (binder, 9), "dialer": (dialer, 5)}
        (first, first_id), (other, other_id) = sdks.pop(closer), sdks.popitem()[1]

        first.channel.send(data(first, first_id, b"echo"))
        first.channel.send(data(first, first_id, b"", fin=True))
        first.channel.send(first.edge(STATE_CLOSED, first_id))
        got = [await other.next() for _ in range(3)]

        assert wire(got) == [
            ("Data", other_id, b"echo", None),
            ("Data", other_id, b"", FIN_FLAGS),
            ("StateClosed", other_id, b"", None),
        ]
        seqs = [m.u32(SEQ) or 0 for m in got]
        assert seqs == sorted(set(seqs))  # one sequence for Data and StateClosed, as OpenZiti's
        # the other side's own FIN and StateClosed, already on their way: passed to nobody
        other.channel.send(data(other, other_id, b"", fin=True))
        other.channel.send(other.edge(STATE_CLOSED, other_id))
        assert await drained(other) == []
        assert await drained(first) == []  # never a StateClosed back to the SDK that closed
        assert router.side("dialer").conns == {}
        assert list(router.side("binder").conns) == [0]  # the bind remains


@run_async
async def test_a_fin_after_the_sdks_own_state_closed_is_dropped(pki: Pki) -> None:
    """The Go SDK's Close() and CloseWrite() race: its StateClosed may go before its FIN."""
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        await dial(dialer, binder, conn_id=5, new_conn=9)

        binder.channel.send(data(binder, 9, b"echo"))
        binder.channel.send(binder.edge(STATE_CLOSED, 9))
        binder.channel.send(data(binder, 9, b"", fin=True))

        assert wire(await drained(binder)) == []
        got = [await dialer.next() for _ in range(2)]
        assert wire(got) == [("Data", 5, b"echo", None), ("StateClosed", 5, b"", None)]
        dialer.channel.send(dialer.edge(STATE_CLOSED, 5))
        assert await drained(dialer) == []
        assert await drained(binder) == []


@run_async
async def test_a_slow_reader_holds_back_its_writer(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        await dial(dialer, binder)
        router_dialer, router_binder = router.side("dialer"), router.side("binder")
        assert router_dialer.channel.transport is not None

        assert binder.channel.transport is not None
        binder.channel.transport.pause_reading()  # the binder stops reading
        chunk, sent = 256 * 1024, 0
        while router_dialer.channel.transport.is_reading():
            assert sent < 400, "the router never stopped reading from the dialer"
            dialer.channel.send(data(dialer, 0, sent.to_bytes(4, "little") + bytes(chunk - 4)))
            sent += 1
            await asyncio.sleep(0.01)

        assert not router_binder.channel.writable  # the binder's side is full ...
        assert not router_dialer.channel.transport.is_reading()  # ... so the dialer's is not read

        binder.channel.transport.resume_reading()
        for expected in range(sent):
            message = await next_data(binder)
            assert int.from_bytes(message.body[:4], "little") == expected
            assert len(message.body) == chunk
        await until(router_dialer.channel.transport.is_reading, "the router reads the dialer again")


# -- the control side's calls ----------------------------------------------------------------------
@run_async
async def test_ending_a_dial_session_closes_its_connections(pki: Pki) -> None:
    async with Router(pki) as router:
        binder, dialer = await router.sdk("binder"), await router.sdk("dialer")
        await bind(binder)
        router.controller.route("dial-1", "bind-1")
        router.controller.route("dial-2", "bind-1")
        await dial(dialer, binder, conn_id=0, token="dial-1", new_conn=20)
        await dial(dialer, binder, conn_id=1, token="dial-2", new_conn=21)

        router.listener.end_sessions(["s-dial-1"], [])

        to_dialer, to_binder = await dialer.next(), await binder.next()
        assert (to_dialer.content_type, to_dialer.u32(CONN_ID)) == (STATE_CLOSED, 0)
        assert (to_binder.content_type, to_binder.u32(CONN_ID)) == (STATE_CLOSED, 20)
        assert set(router.side("dialer").conns) == {1}
        assert set(router.side("binder").conns) == {0, 21}

        router.listener.end_sessions([], ["dial-2"])  # by token
        assert (await dialer.next()).u32(CONN_ID) == 1
        assert (await binder.next()).u32(CONN_ID) == 21


@run_async
async def test_ending_a_bind_session_ends_the_bind(pki: Pki) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        await bind(binder, conn_id=3)
        await bind(binder, conn_id=4, token="bind-2")

        router.listener.end_sessions(["s-bind-1"], [])

        closed = await binder.next()
        assert (closed.content_type, closed.u32(CONN_ID)) == (STATE_CLOSED, 3)
        assert router.listener.terminator_ids() == ["t-bind-2"]
        router.listener.end_sessions([], ["bind-2"])  # by token
        closed = await binder.next()
        assert (closed.content_type, closed.u32(CONN_ID)) == (STATE_CLOSED, 4)
        assert router.listener.terminator_ids() == []
        await binder.ask(Message(LATENCY))
        assert router.controller.removed == []  # the controller removed them with the sessions


@run_async
async def test_terminators_the_controller_does_not_know_end_their_binds_quietly(pki: Pki) -> None:
    async with Router(pki) as router:
        binder = await router.sdk("binder")
        await bind(binder, conn_id=3)
        assert router.listener.binds()["t-bind-1"].state is State.CONNECTED

        router.listener.drop_terminators(["t-bind-1", "t-never-heard-of"])

        closed = await binder.next()
        assert (closed.content_type, closed.u32(CONN_ID)) == (STATE_CLOSED, 3)
        assert router.listener.terminator_ids() == []
        await binder.ask(Message(LATENCY))
        assert router.controller.removed == []


@run_async
async def test_the_controller_is_told_of_an_api_sessions_first_and_last_channel(pki: Pki) -> None:
    async with Router(pki) as router:
        notices = router.controller.channel_notices
        first = await router.sdk("dialer")
        await until(lambda: notices == [(["as-dialer"], [])], "the first channel is told")
        second = await router.sdk("dialer")
        await second.ask(Message(LATENCY))

        first.channel.close()
        await until(lambda: len(router.listener.channels()) == 1, "the router sees the close")
        second.channel.close()

        await until(lambda: len(notices) == 2, "the last channel is told")
        assert notices == [(["as-dialer"], []), ([], ["as-dialer"])]


@run_async
async def test_removing_an_api_session_closes_its_channels(pki: Pki) -> None:
    async with Router(pki) as router:
        first, second = await router.sdk("dialer"), await router.sdk("dialer")
        binder = await router.sdk("binder")
        assert sorted(router.listener.api_session_ids()) == ["as-binder", "as-dialer"]

        router.listener.close_api_sessions(["as-dialer"])

        await first.closed()
        await second.closed()
        assert router.listener.api_session_ids() == ["as-binder"]
        assert (await binder.ask(Message(LATENCY))).content_type == RESULT


# -- hostile input ---------------------------------------------------------------------------------
@run_async
async def test_a_malformed_frame_closes_only_that_channel(pki: Pki) -> None:
    async with Router(pki) as router:
        bad, good = await router.sdk("dialer"), await router.sdk("binder")
        await bind(good)
        assert bad.channel.transport is not None
        bad.channel.transport.write(b"\x03\x06\x09\x0b" + bytes(16))  # not channel v2

        await bad.closed()
        assert (await good.ask(Message(LATENCY))).content_type == RESULT
        assert router.listener.terminator_ids() == ["t-bind-1"]


@run_async
async def test_nonsense_from_an_sdk_is_ignored_or_refused(pki: Pki) -> None:
    async with Router(pki) as router:
        sdk = await router.sdk("binder")
        await bind(sdk, conn_id=1)
        sdk.channel.send(data(sdk, 99, b"nobody"))  # unknown connection
        sdk.channel.send(data(sdk, 1, b"to a bind"))  # a bind carries no data
        sdk.channel.send(sdk.edge(STATE_CLOSED, 98))  # unknown connection
        sdk.channel.send(Message(DATA, b"no conn id"))
        sdk.channel.send(sdk.edge(DIAL_FAILED, 1, b"nobody asked"))
        unasked = sdk.edge(DIAL_SUCCESS, 1, b"\x05\x00\x00\x00")
        unasked.set_i32(1, 4242)  # a reply to nothing the router sent
        sdk.channel.send(unasked)
        closed = await sdk.next()  # answers the DialSuccess, so the SDK's accept fails
        assert closed.content_type == STATE_CLOSED
        assert closed.reply_for == unasked.seq

        in_use = await sdk.ask(sdk.edge(CONNECT, 1, b"dial-1"))  # conn id 1 is the bind's
        assert in_use.content_type == STATE_CLOSED
        assert "in use" in in_use.body.decode()
        no_token = await sdk.ask(sdk.edge(CONNECT, 2, b"\xff\xfe"))
        assert no_token.body == b"Invalid Session"

        assert (await sdk.ask(Message(LATENCY))).content_type == RESULT
        assert sdk.inbox.empty()
        assert list(router.side("binder").conns) == [1]
        assert router.controller.removed == []
