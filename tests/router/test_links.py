"""Links between routers (router.links) over real TLS: two routers, each an edge listener and its
links with certificates of one network CA (written as an enrolled router's directory, so the
contexts are router.identity's), test SDKs speaking channel v2, controllers answering from tables.
A dialer on router A reaches a bind on router B over the link A dials to B."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from channel import link as proto
from channel.edge import (
    APP_DATA,
    BIND,
    CALLER_ID,
    CONN_ID,
    CONNECT,
    DATA,
    DIAL,
    DIAL_SUCCESS,
    ERROR_CODE,
    FIN,
    FLAGS,
    PUBLIC_KEY,
    STATE_CLOSED,
    STATE_CONNECTED,
)
from channel.frames import RESULT_SUCCESS, Message
from router import identity
from router.control import RouterLink
from router.edge import EdgeListener, SdkChannel
from router.hosting import HostedService, Hosting
from router.links import Links
from router.ports import ApiSession, ApiSessions, Circuit, token_hash
from tests.router.helpers import Ca, Pki, Sdk, TableController, caller, run_async, until, within

A, B, X = "router-a", "router-b", "router-0"
KEY_D = bytes(range(32))
KEY_B = bytes(range(100, 132))
APP = b'{"dst_protocol":"tcp","dst_hostname":"(null)","dst_port":"0"}'
MB = 1024 * 1024


# -- certificates: enrolled routers' directories ------------------------------------------------------
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _leaf(ca: Ca, cn: str, key: ec.EllipticCurvePrivateKey, *, server: bool) -> bytes:
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
    )
    if server:
        names: list[x509.GeneralName] = [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        ]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def router_dir(parent: Path, ca: Ca, router_id: str) -> Path:
    """An enrolled router's directory: one key, a client and a server certificate of ``ca`` (CN =
    the router's id, as the controller issues them) and ``ca`` as the trusted bundle."""
    directory = parent / f"{router_id}-{ca.name.replace(' ', '-')}"
    directory.mkdir()
    key = ec.generate_private_key(ec.SECP256R1())
    (directory / identity.KEY).write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (directory / identity.CERT).write_bytes(_leaf(ca, router_id, key, server=False))
    (directory / identity.SERVER_CERT).write_bytes(_leaf(ca, router_id, key, server=True))
    (directory / identity.CA).write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    return directory


@dataclass(frozen=True)
class Network:
    """Directories of routers A and B and of a router X (listed or not), all of one CA; and of a
    router X of another CA."""

    ca_file: Path
    dirs: dict[str, Path]
    foreign_x: Path


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory) -> Network:
    parent = tmp_path_factory.mktemp("link-pki")
    ca, other = Ca("Link Network CA"), Ca("Foreign CA")
    (parent / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    return Network(
        ca_file=parent / "ca.pem",
        dirs={who: router_dir(parent, ca, who) for who in (A, B, X, "router-c")},
        foreign_x=router_dir(parent, other, X),
    )


# -- a router: edge listener and links ------------------------------------------------------------
def session(pki: Pki, who: str) -> ApiSession:
    return ApiSession(
        id=f"as-{who}",
        token_hash=token_hash(f"tok-{who}"),
        identity_id=f"id-{who}",
        identity_name=who,
        fingerprints=frozenset({pki.identities[who].fingerprint}),
    )


class Stack:
    """One router: its edge listener (controller from tables, API sessions of ``dialer`` and
    ``binder``) and its links, from an enrolled directory."""

    def __init__(self, pki: Pki, net: Network, router_id: str, directory: Path | None = None, **opts: Any):
        self.pki, self.net, self.id = pki, net, router_id
        directory = directory or net.dirs[router_id]
        self.controller = TableController()
        self.api_sessions = ApiSessions()
        for who in ("dialer", "binder"):
            self.api_sessions.put(session(pki, who))
        self.edge = EdgeListener(
            ssl_context=identity.edge_context(directory),
            controller=self.controller,
            api_sessions=self.api_sessions,
            router_id=router_id,
            version="v0.1.0",
            api_session_wait=0.2,
        )
        server, client = identity.link_contexts(directory)
        opts.setdefault("backoff_first", 0.05)
        opts.setdefault("backoff_max", 0.2)
        self.links = Links(
            router_id=router_id, edge=self.edge, server_context=server, client_context=client, **opts
        )
        self.edge.links = self.links
        self.sdks: list[Sdk] = []

    async def start(self) -> Stack:
        await self.edge.start("127.0.0.1", 0)
        await self.links.start("127.0.0.1", 0)
        return self

    async def stop(self) -> None:
        for sdk in self.sdks:
            sdk.channel.close()
        await self.edge.stop()
        await self.links.stop()

    @property
    def listing(self) -> RouterLink:
        """How the controller lists this router to the others."""
        return RouterLink(id=self.id, name=self.id, link_listener=self.links.listener_url)

    async def sdk(self, who: str) -> Sdk:
        """``who``'s SDK with its hello accepted (a new channel each time)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile=self.net.ca_file)
        pair = self.pki.identities[who]
        ctx.load_cert_chain(pair.cert_file, pair.key_file)
        sdk = await Sdk.connect(self.edge.port, ctx, who)
        self.sdks.append(sdk)
        answer = await sdk.hello(f"tok-{who}")
        assert answer.flag(RESULT_SUCCESS)
        return sdk

    def side(self, sdk: Sdk) -> SdkChannel:
        """The router's end of ``sdk``'s channel (matched by the ports of the TCP connection)."""
        assert sdk.channel.transport is not None
        mine = sdk.channel.transport.get_extra_info("sockname")
        for side in self.edge.channels():
            assert side.channel.transport is not None
            if side.channel.transport.get_extra_info("peername") == mine:
                return side
        raise AssertionError(f"no channel of {sdk.name} on {self.id}")


class Pair:
    """Routers A and B, listed to each other, their link up (A dials: its id is the smaller)."""

    def __init__(self, pki: Pki, net: Network, **opts: Any) -> None:
        self.a = Stack(pki, net, A, **opts)
        self.b = Stack(pki, net, B, **opts)

    async def __aenter__(self) -> Pair:
        await self.a.start()
        await self.b.start()
        self.a.links.update([self.b.listing])
        self.b.links.update([self.a.listing])
        await until(self.linked, "the link is up on both sides")
        return self

    def linked(self) -> bool:
        return self.a.links.link(B) is not None and self.b.links.link(A) is not None

    async def __aexit__(self, *exc: object) -> None:
        await self.a.stop()
        await self.b.stop()


# -- the SDK side's steps --------------------------------------------------------------------------
async def bind(binder: Sdk, token: str = "bind-1", conn_id: int = 0) -> None:
    answer = await binder.ask(
        binder.edge(BIND, conn_id, token.encode(), caller("binder"), {PUBLIC_KEY: KEY_B})
    )
    assert answer.content_type == STATE_CONNECTED


async def connect(
    dialer: Sdk,
    binder: Sdk,
    *,
    conn_id: int = 0,
    token: str = "dial-1",
    bind_conn: int = 0,
    new_conn: int = 7,
) -> tuple[Message, Message]:
    """Connect on A -> Dial on B -> DialSuccess -> StateConnected to both: (the Dial, the answer)."""
    headers = {PUBLIC_KEY: KEY_D, APP_DATA: APP, CALLER_ID: b"what-the-sdk-says"}
    connecting = asyncio.ensure_future(dialer.ask(dialer.edge(CONNECT, conn_id, token.encode(), headers)))
    dial = await binder.next()
    assert dial.content_type == DIAL, dial
    success = binder.edge(DIAL_SUCCESS, bind_conn, new_conn.to_bytes(4, "little")).reply_to(dial)
    connected = await binder.ask(success)
    assert connected.content_type == STATE_CONNECTED
    assert connected.u32(CONN_ID) == bind_conn
    return dial, await within(connecting)


def data(sdk: Sdk, conn_id: int, body: bytes, *, fin: bool = False) -> Message:
    message = sdk.edge(DATA, conn_id, body)
    if fin:
        message.set_u32(FLAGS, FIN)
    return message


async def receive(sdk: Sdk, conn_id: int, size: int) -> tuple[bytes, bool]:
    """Data on ``conn_id`` until ``size`` bytes or a FIN: (the bytes, whether FIN came)."""
    got = bytearray()
    while len(got) < size:
        message = await sdk.next()
        assert message.content_type == DATA, message
        assert message.u32(CONN_ID) == conn_id
        got += message.body
        if message.u32(FLAGS) == FIN:
            return bytes(got), True
    return bytes(got), False


def payload(size: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(size))


def send_all(sdk: Sdk, conn_id: int, body: bytes, *, chunk: int = 32 * 1024, fin: bool = True) -> None:
    for at in range(0, len(body), chunk):
        last = at + chunk >= len(body)
        sdk.channel.send(data(sdk, conn_id, body[at : at + chunk], fin=fin and last))


# == the circuit ===================================================================================
@run_async
async def test_a_dialer_on_one_router_reaches_a_bind_on_another(pki: Pki, network: Network) -> None:
    async with Pair(pki, network, window=64 * 1024) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", caller_id="dialer-identity", router_id=B)

        dial, answer = await connect(dialer, binder, conn_id=3, new_conn=9)

        assert dial.u32(CONN_ID) == 0  # the bind's
        assert dial.text(CALLER_ID) == "dialer-identity"  # the controller's, not the SDK's header
        assert dial.headers[PUBLIC_KEY] == KEY_D
        assert dial.headers[APP_DATA] == APP
        assert dial.body == b"bind-1"
        assert answer.content_type == STATE_CONNECTED
        assert answer.u32(CONN_ID) == 3
        assert answer.headers[PUBLIC_KEY] == KEY_B  # the binder's, from B
        assert pair.a.controller.circuit_calls[0]["has_public_key"] is True

        # 1 MB each way at once, in 32 KiB messages, with a 64 KiB window: credit keeps it going
        up, down = payload(MB, 1), payload(MB, 2)
        send_all(dialer, 3, up)
        send_all(binder, 9, down)
        (got_up, fin_up), (got_down, fin_down) = await asyncio.gather(
            receive(binder, 9, 2 * MB), receive(dialer, 3, 2 * MB)
        )
        assert got_up == up
        assert got_down == down
        assert fin_up
        assert fin_down

        binder.channel.send(binder.edge(STATE_CLOSED, 9, b"done"))
        closed = await dialer.next()
        assert (closed.content_type, closed.u32(CONN_ID), closed.body) == (STATE_CLOSED, 3, b"done")
        await until(lambda: not pair.a.links.link(B).circuits, "A forgets the circuit")  # type: ignore[union-attr]
        await until(lambda: not pair.b.links.link(A).circuits, "B forgets the circuit")  # type: ignore[union-attr]
        assert pair.a.side(dialer).conns == {}
        assert 9 not in pair.b.side(binder).conns


@run_async
async def test_the_dialer_closing_closes_the_binders_connection(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=B)
        await connect(dialer, binder, conn_id=1, new_conn=4)

        dialer.channel.send(dialer.edge(STATE_CLOSED, 1, b"bye"))

        closed = await binder.next()
        assert (closed.content_type, closed.u32(CONN_ID), closed.body) == (STATE_CLOSED, 4, b"bye")
        assert pair.b.edge.terminator_ids() == ["t-bind-1"]  # the bind stays


@run_async
async def test_a_terminator_the_other_router_does_not_hold_is_refused(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        dialer = await pair.a.sdk("dialer")
        pair.a.controller.route("dial-1", "bind-gone", router_id=B)

        answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer")))

        assert answer.content_type == STATE_CLOSED
        assert "t-bind-gone is not bound on this router" in answer.body.decode()
        assert answer.u32(ERROR_CODE) == 8
        assert not pair.a.links.link(B).circuits  # type: ignore[union-attr]
        assert not pair.b.links.link(A).circuits  # type: ignore[union-attr]


@run_async
async def test_a_router_without_a_link_refuses_the_connect(pki: Pki, network: Network) -> None:
    a = await Stack(pki, network, A, wait_seconds=0.2).start()
    try:
        dialer = await a.sdk("dialer")
        a.controller.route("dial-1", "bind-1", router_id=B)

        answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer")))

        assert answer.content_type == STATE_CLOSED
        assert answer.body == b"no link to router router-b"
    finally:
        await a.stop()


@run_async
async def test_circuits_go_both_ways_on_one_link(pki: Pki, network: Network) -> None:
    """B dials a bind on A over the link A dialed: B's circuit ids are even, A's odd."""
    async with Pair(pki, network) as pair:
        binder_a, dialer_b = await pair.a.sdk("binder"), await pair.b.sdk("dialer")
        binder_b, dialer_a = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder_a, "bind-a")
        await bind(binder_b, "bind-b")
        pair.b.controller.route("dial-b", "bind-a", router_id=A)
        pair.a.controller.route("dial-a", "bind-b", router_id=B)

        await connect(dialer_b, binder_a, token="dial-b", new_conn=5)
        await connect(dialer_a, binder_b, token="dial-a", new_conn=6)

        assert list(pair.a.links.link(B).circuits) == [2, 1]  # type: ignore[union-attr]
        dialer_b.channel.send(data(dialer_b, 0, b"from b"))
        dialer_a.channel.send(data(dialer_a, 0, b"from a"))
        assert (await binder_a.next()).body == b"from b"
        assert (await binder_b.next()).body == b"from a"


@run_async
async def test_both_routers_report_the_link_by_the_id_its_dialer_made(pki: Pki, network: Network) -> None:
    pair = Pair(pki, network)
    told: dict[str, list[list[dict[str, Any]]]] = {A: [], B: []}
    pair.a.links.on_change = told[A].append
    pair.b.links.on_change = told[B].append
    async with pair:
        await until(lambda: bool(told[A] and told[A][-1] and told[B] and told[B][-1]), "both report the link")
        [on_a], [on_b] = told[A][-1], told[B][-1]
        assert on_a == {"id": on_a["id"], "routerId": B, "dialed": True, "protocol": "tls"}
        assert on_b == {"id": on_a["id"], "routerId": A, "dialed": False, "protocol": "tls"}
        assert proto.link_id(on_a["id"]) == on_a["id"]
        assert pair.a.links.state() == [on_a]

        pair.a.links.update([])  # the controller says B went: A closes the link

        await until(lambda: told[A][-1] == [] and told[B][-1] == [], "both report it gone")


@run_async
async def test_a_granted_circuit_is_reported_ended_when_its_connection_ends(
    pki: Pki, network: Network
) -> None:
    async with Pair(pki, network) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=B, circuit_id="c-1")
        await connect(dialer, binder, conn_id=1, new_conn=4)
        assert pair.a.edge.circuit_ids() == ["c-1"]

        binder.channel.send(binder.edge(STATE_CLOSED, 4, b"done"))

        assert (await dialer.next()).content_type == STATE_CLOSED
        await until(lambda: pair.a.controller.ended == ["c-1"], "the end is reported")
        assert pair.a.edge.circuit_ids() == []
        assert pair.b.controller.ended == []  # the terminator's router opened no circuit


@run_async
async def test_closing_a_circuit_ends_both_of_its_ends(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=B, circuit_id="c-2")
        await connect(dialer, binder, conn_id=2, new_conn=6)

        pair.a.edge.close_circuits(["c-unknown", "c-2"], "circuit deleted by an administrator")

        closed = await dialer.next()
        assert (closed.content_type, closed.u32(CONN_ID)) == (STATE_CLOSED, 2)
        assert closed.body == b"circuit deleted by an administrator"
        far = await binder.next()
        assert (far.content_type, far.u32(CONN_ID)) == (STATE_CLOSED, 6)
        await until(lambda: pair.a.controller.ended == ["c-2"], "the end is reported")
        assert pair.b.edge.terminator_ids() == ["t-bind-1"]  # the bind stays


@run_async
async def test_a_granted_circuit_that_cannot_be_made_is_reported_ended(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        dialer = await pair.a.sdk("dialer")
        pair.a.controller.route("dial-1", "bind-gone", router_id=B, circuit_id="c-3")

        answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-1", caller("dialer")))

        assert answer.content_type == STATE_CLOSED
        await until(lambda: pair.a.controller.ended == ["c-3"], "the end is reported")
        assert pair.a.edge.circuit_ids() == []


class TunnelController(TableController):
    """The table controller, also answering the hosting side's tunnel terminator requests."""

    def __init__(self) -> None:
        super().__init__()
        self.connected = asyncio.Event()
        self.connected.set()

    async def create_tunnel_terminator(
        self, *, service_id: str, cost: int, precedence: str, instance_id: str
    ) -> str:
        return f"tt-{service_id}"


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A TCP echo server's connection: back what comes, half-close at EOF."""
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    writer.write_eof()
    await writer.drain()
    await reader.read()
    writer.close()


@run_async
async def test_a_dialer_on_one_router_reaches_a_server_the_other_hosts(pki: Pki, network: Network) -> None:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    async with Pair(pki, network, window=64 * 1024) as pair:
        controller = TunnelController()
        hosting = Hosting(controller, retry_first=0.01, retry_max=0.05)
        pair.b.edge.hosting = hosting
        try:
            port = int(server.sockets[0].getsockname()[1])
            host = {"protocol": "tcp", "address": "127.0.0.1", "port": port}
            hosting.update([HostedService(id="svc-h", name="svc-h", encryption_required=False, host=host)])
            await until(lambda: hosting.terminators() == {"svc-h": "tt-svc-h"}, "B hosts the service")
            pair.a.controller.circuits["dial-h"] = Circuit(
                session_id="s-dial-h",
                service_id="svc-h",
                service_name="svc-h",
                caller_id="dialer",
                terminator_id="tt-svc-h",
                router_id=B,
                binding="tunnel",
                address="tunnel:svc-h",
            )
            dialer = await pair.a.sdk("dialer")

            answer = await dialer.ask(dialer.edge(CONNECT, 0, b"dial-h", caller("dialer"), {APP_DATA: APP}))

            assert answer.content_type == STATE_CONNECTED, answer.body
            body = payload(MB, 5)
            send_all(dialer, 0, body)
            got, fin = await receive(dialer, 0, 2 * MB)
            assert got == body
            assert fin  # the server's half-close
            closed = await dialer.next()  # FIN both ways: the connection ends
            assert (closed.content_type, closed.u32(CONN_ID)) == (STATE_CLOSED, 0)
            await until(lambda: not hosting.connections(), "B closed the server connection")
        finally:
            await hosting.stop()
            server.close()


# == back-pressure =================================================================================
@run_async
async def test_a_slow_binder_holds_back_its_own_circuit_only(pki: Pki, network: Network) -> None:
    async with Pair(pki, network, window=64 * 1024) as pair:
        slow, quick = await pair.b.sdk("binder"), await pair.b.sdk("binder")
        dialer_slow, dialer_quick = await pair.a.sdk("dialer"), await pair.a.sdk("dialer")
        await bind(slow, "bind-slow")
        await bind(quick, "bind-quick")
        pair.a.controller.route("dial-slow", "bind-slow", router_id=B)
        pair.a.controller.route("dial-quick", "bind-quick", router_id=B)
        await connect(dialer_slow, slow, token="dial-slow")
        await connect(dialer_quick, quick, token="dial-quick")
        held = pair.a.side(dialer_slow).channel.transport
        assert held is not None
        assert slow.channel.transport is not None

        slow.channel.transport.pause_reading()  # the slow binder stops reading

        def stalled() -> bool:
            """A holds the dialer because the circuit's window is used up, and B credits nothing
            back because the slow binder is full: for good, unlike a pause of A's while the link
            itself is busy (which ends as soon as the link drains)."""
            a_link, b_link = pair.a.links.link(B), pair.b.links.link(A)
            if a_link is None or b_link is None:
                return False
            window_used = any(c._held for c in a_link.circuits.values())
            return window_used and any(c._gate.full for c in b_link.circuits.values())

        chunk, sent = 256 * 1024, 0
        while not stalled():
            assert sent < 400, "router A never stopped reading the slow circuit's dialer"
            dialer_slow.channel.send(data(dialer_slow, 0, sent.to_bytes(4, "little") + bytes(chunk - 4)))
            sent += 1
            await asyncio.sleep(0.01)

        # the other circuit on the same link goes on
        for round_trip in range(3):
            body = payload(100_000, round_trip)
            send_all(dialer_quick, 0, body, fin=False)
            assert (await receive(quick, 7, len(body)))[0] == body
            send_all(quick, 7, body, fin=False)
            assert (await receive(dialer_quick, 0, len(body)))[0] == body
        assert not held.is_reading()
        b_circuit = next(iter(pair.b.links.link(A).circuits.values()))  # type: ignore[union-attr]
        assert b_circuit._gate.full  # B hands the slow binder nothing more than the window

        slow.channel.transport.resume_reading()
        for expected in range(sent):
            message = await slow.next()
            assert message.content_type == DATA
            assert int.from_bytes(message.body[:4], "little") == expected
            assert len(message.body) == chunk
        await until(held.is_reading, "router A reads the slow circuit's dialer again")


# == link loss, who may link =======================================================================
@run_async
async def test_losing_the_link_ends_its_circuits_and_it_is_dialed_again(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=B)
        await connect(dialer, binder, conn_id=2, new_conn=8)
        first = pair.a.links.link(B)
        assert first is not None

        first.channel.abort()

        to_dialer, to_binder = await dialer.next(), await binder.next()
        assert (to_dialer.content_type, to_dialer.u32(CONN_ID)) == (STATE_CLOSED, 2)
        assert to_dialer.body == b"the link to router router-b was lost"
        assert (to_binder.content_type, to_binder.u32(CONN_ID)) == (STATE_CLOSED, 8)
        await until(lambda: pair.linked() and pair.a.links.link(B) is not first, "A dials B again")
        await connect(dialer, binder, conn_id=3, new_conn=10)  # and circuits work again


@run_async
async def test_a_silent_link_is_closed(pki: Pki, network: Network) -> None:
    a = await Stack(pki, network, A, heartbeat_seconds=0.05, silent_seconds=0.5).start()
    b = await Stack(pki, network, B, heartbeat_seconds=3600).start()
    try:
        a.links.update([b.listing])
        b.links.update([a.listing])
        await until(lambda: a.links.link(B) is not None and b.links.link(A) is not None, "linked")
        first = a.links.link(B)
        quiet = b.links.link(A)
        assert quiet is not None
        assert quiet.channel.transport is not None

        quiet.channel.transport.pause_reading()  # B hears A's heartbeats no more, so answers none

        await until(lambda: a.links.link(B) is not first, "A closes the silent link")
        await until(lambda: a.links.link(B) is not None, "and dials B again")
        quiet.channel.abort()  # B's end of the old link, deaf, is not waited for
    finally:
        await a.stop()
        await b.stop()


@run_async
async def test_a_router_no_longer_listed_loses_its_link(pki: Pki, network: Network) -> None:
    async with Pair(pki, network) as pair:
        binder, dialer = await pair.b.sdk("binder"), await pair.a.sdk("dialer")
        await bind(binder)
        pair.a.controller.route("dial-1", "bind-1", router_id=B)
        await connect(dialer, binder)

        pair.b.links.update([])  # the controller says A went

        closed = await dialer.next()
        assert closed.content_type == STATE_CLOSED
        await until(lambda: pair.a.links.link(B) is None and pair.b.links.link(A) is None, "no link")
        pair.b.links.update([pair.a.listing])
        await until(pair.linked, "linked again once listed again")


@pytest.fixture
def link_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="router.links"):
        yield caplog


def logged(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    return any(text in record.getMessage() for record in caplog.records)


@run_async
async def test_a_router_with_a_foreign_certificate_gets_no_link(
    pki: Pki, network: Network, link_log: pytest.LogCaptureFixture
) -> None:
    b = await Stack(pki, network, B).start()
    x = await Stack(pki, network, X, directory=network.foreign_x).start()
    try:
        b.links.update([x.listing])  # even listed, its certificate is not of our CA
        x.links.update([b.listing])

        await until(lambda: logged(link_log, "cannot link to router router-b"), "X tried")
        assert b.links.link(X) is None
        assert x.links.link(B) is None
    finally:
        await x.stop()
        await b.stop()


@run_async
async def test_a_router_the_controller_does_not_list_gets_no_link(
    pki: Pki, network: Network, link_log: pytest.LogCaptureFixture
) -> None:
    b = await Stack(pki, network, B, wait_seconds=0.2).start()
    x = await Stack(pki, network, X).start()
    try:
        b.links.update([])  # B's controller does not list X
        x.links.update([b.listing])

        await until(lambda: logged(link_log, "router router-b refused the link"), "B refused X")
        assert logged(link_log, "router router-0 is not one the controller lists")
        assert b.links.link(X) is None
        assert x.links.link(B) is None
    finally:
        await x.stop()
        await b.stop()


@run_async
async def test_a_router_dialing_with_a_certificate_it_no_longer_holds_gets_no_link(
    pki: Pki, network: Network, link_log: pytest.LogCaptureFixture
) -> None:
    """A re-enrolled router's old certificate still chains to our CA and names it; the controller
    lists the router with its current certificate's fingerprint, which the old one is not."""
    b = await Stack(pki, network, B, wait_seconds=0.2).start()
    x = await Stack(pki, network, X).start()
    try:
        retired = dataclasses.replace(x.listing, fingerprint="00" * 20)
        b.links.update([retired])
        x.links.update([b.listing])

        await until(lambda: logged(link_log, "router router-b refused the link"), "B refused X")
        assert logged(link_log, "presented a certificate it no longer holds")
        assert b.links.link(X) is None
        assert x.links.link(B) is None
    finally:
        await x.stop()
        await b.stop()


@run_async
async def test_a_listener_that_is_not_the_router_listed_is_left(
    pki: Pki, network: Network, link_log: pytest.LogCaptureFixture
) -> None:
    a, c = await Stack(pki, network, A).start(), await Stack(pki, network, "router-c").start()
    try:
        c.links.update([a.listing])
        a.links.update([RouterLink(id=B, name=B, link_listener=c.links.listener_url)])  # C's address

        await until(lambda: logged(link_log, "presents the certificate of 'router-c'"), "A checked")
        assert a.links.link(B) is None
        assert c.links.link(A) is None
    finally:
        await a.stop()
        await c.stop()


def test_one_router_of_each_pair_dials() -> None:
    assert proto.should_dial("a", "tls://a:1", "b", "tls://b:1")
    assert not proto.should_dial("b", "tls://b:1", "a", "tls://a:1")
    assert proto.should_dial("b", "", "a", "tls://a:1")  # b takes no links: it dials
    assert not proto.should_dial("a", "tls://a:1", "b", "")
    assert proto.preferred("b", "a") == "a"


def test_a_router_record_without_a_link_address_loads(tmp_path: Path, network: Network) -> None:
    directory = tmp_path / "old"
    directory.mkdir(mode=0o700)
    for name in (identity.KEY, identity.CERT, identity.SERVER_CERT, identity.CA):
        (directory / name).write_bytes((network.dirs[A] / name).read_bytes())
    (directory / identity.KEY).chmod(0o600)
    (directory / identity.CONFIG).write_text(
        '{"id": "r", "name": "n", "controller": "https://c:1", "ctrl": "c:6262", '
        '"edge": "0.0.0.0:3022", "advertise": "er.example.test"}'
    )

    record = identity.load(directory)

    assert (record.link, record.link_url) == ("", "")
    assert dataclasses.replace(record, link="0.0.0.0:4022").link_url == "tls://er.example.test:4022"
    assert dataclasses.replace(record, link="127.0.0.1:4022").link_url == "tls://127.0.0.1:4022"
