"""Services the router hosts itself (router.hosting, router.crypto): a test SDK over real TLS dials
a service whose terminator is the router's own; the router connects to a real asyncio TCP (or
UDP) server in the test and relays, plain and end-to-end encrypted as the C SDK does it (PyNaCl:
the test SDK is the libsodium kx client)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any, cast

import pytest
from nacl import bindings

from channel.control import CREATE_TUNNEL_TERMINATOR, CREATE_TUNNEL_TERMINATOR_REPLY, HOSTED_SERVICES
from channel.control import message as control_message
from channel.edge import (
    APP_DATA,
    CONN_ID,
    CONNECT,
    DATA,
    ERROR_CODE,
    ERROR_ENCRYPTION_DATA_MISSING,
    ERROR_INVALID_TERMINATOR,
    FIN,
    FLAGS,
    PUBLIC_KEY,
    STATE_CLOSED,
    STATE_CONNECTED,
)
from channel.frames import Message
from router.crypto import HEADER_BYTES, MAX_PLAINTEXT, OVERHEAD, CryptoError, ServerCrypto
from router.edge import EdgeListener, SdkChannel
from router.hosting import (
    Hosting,
    HostRefused,
    TcpEnd,
    address_allowed,
    connect_seconds,
    parse_duration,
    resolve,
)
from router.ports import ApiSession, ApiSessions, Circuit, HostedService, Refused, Unavailable, token_hash
from tests.router.helpers import ROUTER_ID, Pki, Sdk, TableController, caller, run_async, until
from tests.router.test_control import Controller, Running

SERVICE = "svc-hosted"
TERMINATOR = f"tt-{SERVICE}"
PAYLOAD_BYTES = 100_000


def payload(size: int) -> bytes:
    out = bytearray()
    block = b"trellis"
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


# -- the servers ------------------------------------------------------------------------------------
class EchoServer:
    """A TCP server on 127.0.0.1 that writes back what it reads and half-closes at EOF. It may
    greet first (``banner``), hold off reading until :attr:`may_read` is set, or send ``flood``
    bytes at once."""

    def __init__(self, *, banner: bytes = b"", reading: bool = True, flood: int = 0) -> None:
        self.banner = banner
        self.flood = flood
        self.may_read = asyncio.Event()
        if reading:
            self.may_read.set()
        self.received = 0
        self.connections = 0
        self.eofs = 0
        self.closed = 0
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> EchoServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in self.writers:
            writer.transport.abort()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            if self.banner:
                writer.write(self.banner)
            if self.flood:
                writer.write(payload(self.flood))
            await self.may_read.wait()
            while chunk := await reader.read(65536):
                self.received += len(chunk)
                writer.write(chunk)
                await writer.drain()
            self.eofs += 1
            writer.write_eof()
            await writer.drain()
            await reader.read()  # the router closes once FIN went both ways
        except ConnectionError:
            pass
        finally:
            self.closed += 1
            writer.close()


class UdpEcho(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.datagrams: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # selector ones are no subclass

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.datagrams.append(data)
        assert self.transport is not None
        self.transport.sendto(data[::-1], addr)


# -- the router ---------------------------------------------------------------------------------------
class HostingController(TableController):
    """The table controller, also answering a hosting router's tunnel terminator requests."""

    def __init__(self) -> None:
        super().__init__()
        self.connected = asyncio.Event()
        self.connected.set()
        self.tunnel_calls: list[dict[str, Any]] = []
        self.tunnel_refusals: dict[str, list[Exception]] = {}

    async def create_tunnel_terminator(
        self, *, service_id: str, cost: int, precedence: str, instance_id: str
    ) -> str:
        self.tunnel_calls.append(
            {"service_id": service_id, "cost": cost, "precedence": precedence, "instance_id": instance_id}
        )
        refusals = self.tunnel_refusals.get(service_id)
        if refusals:
            raise refusals.pop(0)
        return f"tt-{service_id}"


def hosted(
    host: dict[str, Any], *, encrypted: bool = False, service_id: str = SERVICE, **extra: Any
) -> HostedService:
    return HostedService(id=service_id, name=service_id, encryption_required=encrypted, host=host, **extra)


def tcp_host(port: int, **extra: Any) -> dict[str, Any]:
    return {"protocol": "tcp", "address": "127.0.0.1", "port": port, **extra}


class Router:
    """An edge listener on 127.0.0.1 hosting services through :class:`Hosting`; ``dialer`` may
    dial with tokens routed to the hosted terminators (:meth:`route`)."""

    def __init__(self, pki: Pki, **options: Any) -> None:
        self.pki = pki
        self.controller = HostingController()
        self.api_sessions = ApiSessions()
        self.api_sessions.put(
            ApiSession(
                id="as-dialer",
                token_hash=token_hash("tok-dialer"),
                identity_id="id-dialer",
                identity_name="dialer",
                fingerprints=frozenset({pki.identities["dialer"].fingerprint}),
            )
        )
        self.listener = EdgeListener(
            ssl_context=pki.edge_server_context(),
            controller=self.controller,
            api_sessions=self.api_sessions,
            router_id=ROUTER_ID,
            version="v0.1.0",
            api_session_wait=0.2,
        )
        self.hosting = Hosting(self.controller, retry_first=0.01, retry_max=0.05, **options)
        self.listener.hosting = self.hosting
        self.sdks: list[Sdk] = []

    async def __aenter__(self) -> Router:
        await self.listener.start("127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for sdk in self.sdks:
            sdk.channel.close()
        await self.listener.stop()
        await self.hosting.stop()

    async def host(self, *services: HostedService) -> None:
        """Host ``services`` (as a ``HOSTED_SERVICES`` would) and wait for their terminators."""
        self.hosting.update(services)
        wanted = {s.id for s in services}
        await until(lambda: set(self.hosting.terminators()) == wanted, "the terminators are made")

    def route(self, token: str, service_id: str = SERVICE) -> None:
        self.controller.circuits[token] = Circuit(
            session_id=f"s-{token}",
            service_id=service_id,
            service_name=service_id,
            caller_id="dialer",
            terminator_id=f"tt-{service_id}",
            router_id=ROUTER_ID,
            binding="tunnel",
            address=f"tunnel:{service_id}",
        )

    async def dialer(self) -> Sdk:
        sdk = await Sdk.connect(self.listener.port, self.pki.sdk_context("dialer"), "dialer")
        self.sdks.append(sdk)
        await sdk.hello("tok-dialer")
        return sdk

    def side(self) -> SdkChannel:
        [found] = [s for s in self.listener.channels() if s.api_session is not None]
        return found

    def end(self) -> TcpEnd:
        [found] = self.hosting.connections()
        assert isinstance(found, TcpEnd)
        return found


# -- the test SDK's side --------------------------------------------------------------------------------
class ClientCrypto:
    """The dialer's side of end-to-end encryption, as the C SDK does it (libsodium kx client)."""

    def __init__(self) -> None:
        self.public, self.secret = bindings.crypto_kx_keypair()
        self.push = bindings.crypto_secretstream_xchacha20poly1305_state()
        self.pull = bindings.crypto_secretstream_xchacha20poly1305_state()
        self.header = b""
        self.rx = b""

    def connected(self, server_key: bytes) -> None:
        self.rx, tx = bindings.crypto_kx_client_session_keys(self.public, self.secret, server_key)
        self.header = bindings.crypto_secretstream_xchacha20poly1305_init_push(self.push, tx)

    def take_header(self, header: bytes) -> None:
        bindings.crypto_secretstream_xchacha20poly1305_init_pull(self.pull, header, self.rx)

    def encrypt(self, plaintext: bytes) -> bytes:
        return bindings.crypto_secretstream_xchacha20poly1305_push(self.push, plaintext)

    def decrypt(self, ciphertext: bytes) -> bytes:
        plaintext, tag = bindings.crypto_secretstream_xchacha20poly1305_pull(self.pull, ciphertext)
        assert tag == bindings.crypto_secretstream_xchacha20poly1305_TAG_MESSAGE
        return bytes(plaintext)


def connect(sdk: Sdk, token: str = "dial-1", conn_id: int = 0, **headers: bytes) -> Message:
    extra = {PUBLIC_KEY: headers["key"]} if "key" in headers else {}
    if "app_data" in headers:
        extra[APP_DATA] = headers["app_data"]
    return sdk.edge(CONNECT, conn_id, token.encode(), caller("dialer"), extra)


def data(sdk: Sdk, body: bytes, *, fin: bool = False, conn_id: int = 0) -> Message:
    message = sdk.edge(DATA, conn_id, body)
    if fin:
        message.set_u32(FLAGS, FIN)
    return message


def is_fin(message: Message) -> bool:
    return bool((message.u32(FLAGS) or 0) & FIN)


async def until_fin(sdk: Sdk) -> list[Message]:
    """The Data messages the dialer gets, up to and with the FIN."""
    got = []
    while True:
        message = await sdk.next()
        assert message.content_type == DATA, message
        got.append(message)
        if is_fin(message):
            return got


async def next_of(sdk: Sdk, content_type: int) -> Message:
    message = await sdk.next()
    assert message.content_type == content_type, message
    return message


def send_chunks(sdk: Sdk, body: bytes, size: int, seal: Any = None) -> None:
    for at in range(0, len(body), size):
        chunk = body[at : at + size]
        sdk.channel.send(data(sdk, seal(chunk) if seal is not None else chunk))


# == relaying ==========================================================================================
@run_async
async def test_a_dial_to_a_hosted_service_echoes_through_the_server_with_fin_both_ways(pki: Pki) -> None:
    async with EchoServer() as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port)))
        router.route("dial-1")
        sdk = await router.dialer()
        sent = payload(PAYLOAD_BYTES)

        answer = await sdk.ask(connect(sdk))
        send_chunks(sdk, sent, 30_000)
        sdk.channel.send(data(sdk, b"", fin=True))
        got = await until_fin(sdk)
        closed = await next_of(sdk, STATE_CLOSED)

        assert answer.content_type == STATE_CONNECTED, answer.body
        assert PUBLIC_KEY not in answer.headers
        assert b"".join(m.body for m in got) == sent
        assert all(len(m.body) <= MAX_PLAINTEXT for m in got)
        assert got[-1].body == b""
        assert closed.u32(CONN_ID) == 0
        await until(lambda: server.closed == 1, "the server's connection closes")
        assert (server.connections, server.eofs, server.received) == (1, 1, PAYLOAD_BYTES)
        assert router.hosting.connections() == []
        assert router.side().conns == {}


@run_async
async def test_an_encrypted_dial_is_the_routers_kx_server_side(pki: Pki) -> None:
    async with EchoServer(banner=b"hello from the server\n") as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port), encrypted=True))
        router.route("dial-1")
        sdk = await router.dialer()
        client = ClientCrypto()
        sent = payload(PAYLOAD_BYTES)

        answer = await sdk.ask(connect(sdk, key=client.public))
        assert answer.content_type == STATE_CONNECTED, answer.body
        client.connected(answer.headers[PUBLIC_KEY])
        header = await next_of(sdk, DATA)
        client.take_header(header.body)
        sdk.channel.send(data(sdk, client.header))
        banner = client.decrypt((await next_of(sdk, DATA)).body)
        send_chunks(sdk, sent, MAX_PLAINTEXT, client.encrypt)
        sdk.channel.send(data(sdk, b"", fin=True))
        got = await until_fin(sdk)

        assert len(answer.headers[PUBLIC_KEY]) == 32
        assert len(header.body) == HEADER_BYTES
        assert banner == b"hello from the server\n"
        assert got[-1].body == b""
        bodies = [m.body for m in got[:-1]]
        assert all(OVERHEAD < len(b) <= MAX_PLAINTEXT + OVERHEAD for b in bodies)
        assert b"".join(client.decrypt(b) for b in bodies) == sent
        assert server.received == PAYLOAD_BYTES
        await next_of(sdk, STATE_CLOSED)


@run_async
async def test_a_message_that_does_not_decrypt_ends_the_connection(pki: Pki) -> None:
    async with EchoServer() as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port), encrypted=True))
        router.route("dial-1")
        sdk = await router.dialer()
        client = ClientCrypto()
        answer = await sdk.ask(connect(sdk, key=client.public))
        client.connected(answer.headers[PUBLIC_KEY])
        await next_of(sdk, DATA)  # the router's header

        sdk.channel.send(data(sdk, client.header))
        sdk.channel.send(data(sdk, b"not a secretstream message, just bytes"))
        closed = await next_of(sdk, STATE_CLOSED)

        assert "encryption failed" in closed.body.decode()
        await until(lambda: server.closed == 1, "the server's connection is cut")
        assert server.received == 0


@run_async
async def test_the_dialers_state_closed_closes_the_servers_connection(pki: Pki) -> None:
    async with EchoServer() as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port)))
        router.route("dial-1")
        sdk = await router.dialer()
        await sdk.ask(connect(sdk))
        sdk.channel.send(data(sdk, b"ping"))
        echoed = await next_of(sdk, DATA)

        sdk.channel.send(sdk.edge(STATE_CLOSED, 0, b"bye"))

        assert echoed.body == b"ping"
        await until(lambda: server.closed == 1, "the server sees the connection end")
        assert router.hosting.connections() == []


@run_async
async def test_a_server_that_closes_first_sends_fin_then_the_dialers_fin_ends_it(pki: Pki) -> None:
    async with EchoServer(banner=b"bye", reading=False) as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port)))
        router.route("dial-1")
        sdk = await router.dialer()
        await sdk.ask(connect(sdk))
        await until(lambda: len(server.writers) == 1, "the server took the connection")

        server.writers[0].write_eof()
        got = await until_fin(sdk)
        sdk.channel.send(data(sdk, b"late words", fin=True))
        closed = await next_of(sdk, STATE_CLOSED)

        assert b"".join(m.body for m in got) == b"bye"
        assert closed.u32(CONN_ID) == 0
        server.may_read.set()
        await until(lambda: server.received == len(b"late words"), "the server read what came before the FIN")


# == back-pressure ====================================================================================
@run_async
async def test_a_server_that_does_not_read_holds_back_the_dialers_channel(pki: Pki) -> None:
    total = 32 * 1024 * 1024
    async with EchoServer(reading=False) as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port)))
        router.route("dial-1")
        sdk = await router.dialer()
        await sdk.ask(connect(sdk))
        side = router.side()
        assert side.channel.transport is not None

        block = payload(256 * 1024)
        for _ in range(total // len(block)):
            sdk.channel.send(data(sdk, block))
        await until(lambda: not side.channel.transport.is_reading(), "the router stops reading the SDK")  # type: ignore[union-attr]
        held = router.end().transport
        assert held is not None
        buffered = held.get_write_buffer_size()
        server.may_read.set()
        await until(lambda: server.received == total, "the server gets every byte")

        assert buffered < 4 * 1024 * 1024
        await until(lambda: side.channel.transport.is_reading(), "the router reads the SDK again")  # type: ignore[union-attr]


@run_async
async def test_a_dialer_that_does_not_read_holds_back_the_server(pki: Pki) -> None:
    total = 32 * 1024 * 1024
    async with EchoServer(flood=total) as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port)))
        router.route("dial-1")
        sdk = await router.dialer()
        await sdk.ask(connect(sdk))
        assert sdk.channel.transport is not None
        sdk.channel.transport.pause_reading()

        await until(lambda: len(router.hosting.connections()) == 1, "the connection is up")
        end = router.end()
        await until(
            lambda: end.transport is not None and not end.transport.is_reading(),
            "the router stops reading the server",
        )
        server_buffered = server.writers[0].transport.get_write_buffer_size()
        sdk.channel.transport.resume_reading()
        received = 0
        while received < total:
            received += len((await next_of(sdk, DATA)).body)

        assert server_buffered > 0
        assert received == total


# == refusals ========================================================================================
async def refusal(router: Router, **headers: bytes) -> Message:
    sdk = await router.dialer()
    answer = await sdk.ask(connect(sdk, **headers))
    assert answer.content_type == STATE_CLOSED, answer
    return answer


@run_async
async def test_a_server_that_is_not_there_refuses_the_connect(pki: Pki) -> None:
    async with EchoServer() as server:
        port = server.port
    async with Router(pki) as router:
        await router.host(hosted(tcp_host(port)))
        router.route("dial-1")

        answer = await refusal(router)

        assert f"cannot connect to tcp:127.0.0.1:{port}" in answer.body.decode()
        assert router.hosting.connections() == []


@run_async
async def test_a_terminator_this_router_does_not_host_refuses_the_connect(pki: Pki) -> None:
    async with Router(pki) as router:
        router.route("dial-1", service_id="svc-elsewhere")

        answer = await refusal(router)

        assert answer.u32(ERROR_CODE) == ERROR_INVALID_TERMINATOR
        assert "not hosted by this router" in answer.body.decode()


@run_async
async def test_an_encrypted_service_without_the_dialers_key_is_refused(pki: Pki) -> None:
    async with EchoServer() as server, Router(pki) as router:
        await router.host(hosted(tcp_host(server.port), encrypted=True))
        router.route("dial-1")

        answer = await refusal(router)

        assert answer.u32(ERROR_CODE) == ERROR_ENCRYPTION_DATA_MISSING
        assert server.connections == 0


def forwarding(**extra: Any) -> dict[str, Any]:
    return {
        "forwardProtocol": True,
        "allowedProtocols": ["tcp"],
        "forwardAddress": True,
        "allowedAddresses": ["127.0.0.0/8", "*.example.test", "exact.example.org"],
        "forwardPort": True,
        "allowedPortRanges": [{"low": 1024, "high": 65535}],
        **extra,
    }


@run_async
async def test_a_forwarding_config_dials_what_the_dialer_names_when_allowed(pki: Pki) -> None:
    async with EchoServer() as server, Router(pki) as router:
        await router.host(hosted(forwarding()))
        router.route("dial-1")
        sdk = await router.dialer()
        wanted = {"dst_protocol": "tcp", "dst_ip": "127.0.0.1", "dst_port": str(server.port)}

        answer = await sdk.ask(connect(sdk, app_data=json.dumps(wanted).encode()))
        sdk.channel.send(data(sdk, b"forwarded", fin=True))
        got = await until_fin(sdk)

        assert answer.content_type == STATE_CONNECTED, answer.body
        assert b"".join(m.body for m in got) == b"forwarded"


@pytest.mark.parametrize(
    ("app_data", "reason"),
    [
        ({"dst_protocol": "tcp", "dst_hostname": "(null)", "dst_port": "0"}, "names no address"),
        ({"dst_protocol": "tcp", "dst_ip": "127.0.0.1", "dst_port": "0"}, "names no port"),
        ({"dst_protocol": "tcp", "dst_ip": "10.1.2.3", "dst_port": "4000"}, "not allowed"),
        ({"dst_protocol": "tcp", "dst_hostname": "evil.example.com", "dst_port": "4000"}, "not allowed"),
        ({"dst_protocol": "tcp", "dst_ip": "127.0.0.1", "dst_port": "80"}, "port 80 is not allowed"),
        ({"dst_protocol": "udp", "dst_ip": "127.0.0.1", "dst_port": "4000"}, "protocol 'udp' is not allowed"),
        ({}, "names no protocol"),
    ],
    ids=["sdk-by-name", "port-0", "ip", "hostname", "port-range", "protocol", "no-app-data"],
)
def test_a_forwarding_config_refuses_what_it_does_not_allow(
    pki: Pki, app_data: dict[str, str], reason: str
) -> None:
    async def scenario() -> None:
        async with Router(pki) as router:
            await router.host(hosted(forwarding()))
            router.route("dial-1")

            answer = await refusal(router, app_data=json.dumps(app_data).encode())

            assert reason in answer.body.decode()

    asyncio.run(scenario())


# == UDP ==============================================================================================
@run_async
async def test_udp_datagrams_go_one_per_data_message_each_way(pki: Pki) -> None:
    loop = asyncio.get_running_loop()
    transport, echo = await loop.create_datagram_endpoint(UdpEcho, local_addr=("127.0.0.1", 0))
    try:
        port = transport.get_extra_info("sockname")[1]
        async with Router(pki) as router:
            await router.host(
                hosted({"protocol": "udp", "address": "127.0.0.1", "port": port}, encrypted=True)
            )
            router.route("dial-1")
            sdk = await router.dialer()
            client = ClientCrypto()
            answer = await sdk.ask(connect(sdk, key=client.public))
            client.connected(answer.headers[PUBLIC_KEY])
            client.take_header((await next_of(sdk, DATA)).body)
            sdk.channel.send(data(sdk, client.header))

            for word in (b"one", b"two", b"three"):
                sdk.channel.send(data(sdk, client.encrypt(word)))
            back = [client.decrypt((await next_of(sdk, DATA)).body) for _ in range(3)]
            sdk.channel.send(sdk.edge(STATE_CLOSED, 0))

            assert echo.datagrams == [b"one", b"two", b"three"]
            assert back == [b"eno", b"owt", b"eerht"]
            await until(lambda: router.hosting.connections() == [], "the flow ends")
    finally:
        transport.close()


@run_async
async def test_an_idle_udp_flow_ends(pki: Pki) -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(UdpEcho, local_addr=("127.0.0.1", 0))
    try:
        port = transport.get_extra_info("sockname")[1]
        async with Router(pki, udp_idle_seconds=0.2) as router:
            await router.host(hosted({"protocol": "udp", "address": "127.0.0.1", "port": port}))
            router.route("dial-1")
            sdk = await router.dialer()
            await sdk.ask(connect(sdk))

            fin = await next_of(sdk, DATA)
            closed = await next_of(sdk, STATE_CLOSED)

            assert is_fin(fin)
            assert "no datagram" in closed.body.decode()
    finally:
        transport.close()


# == terminators =====================================================================================
@run_async
async def test_terminators_follow_the_hosted_services(pki: Pki) -> None:
    async with Router(pki) as router:
        one = hosted(tcp_host(1), service_id="one", cost=3, precedence="required", instance_id="me")
        two = hosted(tcp_host(2), service_id="two")
        await router.host(one, two)
        calls = list(router.controller.tunnel_calls)

        await router.host(one)
        removed = list(router.controller.removed)
        cheaper = hosted(tcp_host(1), service_id="one", cost=1)
        router.hosting.update([cheaper])
        await until(lambda: len(router.controller.tunnel_calls) == 3, "asked again for the new cost")
        moved = hosted(tcp_host(9), service_id="one", cost=1)
        router.hosting.update([moved])  # the same terminator serves the new server
        await until(lambda: router.hosting.services()["one"].host["port"] == 9, "the new config is taken")

        assert sorted((c["service_id"], c["cost"], c["precedence"], c["instance_id"]) for c in calls) == [
            ("one", 3, "required", "me"),
            ("two", 0, "default", ""),
        ]
        assert removed == ["tt-two"]
        assert router.controller.tunnel_calls[-1]["cost"] == 1
        assert len(router.controller.tunnel_calls) == 3
        assert router.listener.terminator_ids() == ["tt-one"]


@run_async
async def test_terminators_unknown_to_the_controller_are_asked_for_again(pki: Pki) -> None:
    async with Router(pki) as router:
        await router.host(hosted(tcp_host(1)))

        router.listener.drop_terminators([TERMINATOR, "t-of-some-bind"])
        await until(lambda: len(router.controller.tunnel_calls) == 2, "asked again")

        assert router.hosting.terminators() == {SERVICE: TERMINATOR}


@run_async
async def test_a_refused_or_unanswered_terminator_is_asked_for_again(pki: Pki) -> None:
    async with Router(pki) as router:
        router.controller.tunnel_refusals[SERVICE] = [Refused(6, "not yet"), Unavailable("no connection")]

        await router.host(hosted(tcp_host(1)))

        assert len(router.controller.tunnel_calls) == 3


# == the control connection ==========================================================================
@run_async
async def test_the_control_client_passes_hosted_services_on_and_asks_for_their_terminators(pki: Pki) -> None:
    listed = {"id": SERVICE, "name": "hosted", "encryptionRequired": True, "host": tcp_host(7), "cost": 5}
    async with Controller(pki) as controller:
        controller.after_hello = [control_message(HOSTED_SERVICES, {"services": [listed, {"id": 7}]})]
        async with Running(pki, controller, tunneler=True) as client:
            hosting = Hosting(client)
            client.on_hosted_services = hosting.update
            try:
                request = await controller.next(CREATE_TUNNEL_TERMINATOR)
                reply = control_message(
                    CREATE_TUNNEL_TERMINATOR_REPLY, {"terminatorId": "tt-1", "serviceId": SERVICE}
                )
                controller.channel.send(reply.reply_to(request))
                await until(lambda: hosting.terminators() == {SERVICE: "tt-1"}, "the terminator is held")

                assert json.loads(request.body) == {
                    "serviceId": SERVICE,
                    "cost": 5,
                    "precedence": "default",
                    "instanceId": "",
                }
                assert [s.id for s in client.hosted_services] == [SERVICE]
                assert client.hosted_services[0].encryption_required is True
                assert json.loads(controller.hellos[0].body)["tunneler"] is True
            finally:
                await hosting.stop()


# == pieces ==========================================================================================
def test_addresses_match_names_wildcards_ips_and_cidrs() -> None:
    allowed = ["*.example.test", "db.example.org", "10.0.0.0/8", "192.168.1.7", "fd00::/8"]

    assert address_allowed("a.example.test", allowed)
    assert address_allowed("deep.a.Example.TEST", allowed)
    assert not address_allowed("example.test", allowed)
    assert not address_allowed("badexample.test", allowed)
    assert address_allowed("db.example.org.", allowed)
    assert not address_allowed("x.db.example.org", allowed)
    assert address_allowed("10.200.3.4", allowed)
    assert address_allowed("192.168.1.7", allowed)
    assert not address_allowed("192.168.1.8", allowed)
    assert address_allowed("fd00::1", allowed)
    assert not address_allowed("11.0.0.1", allowed)


def test_a_fixed_config_ignores_what_the_dialer_names() -> None:
    target = resolve(tcp_host(8080), {"dst_hostname": "elsewhere", "dst_port": "1"})

    assert (target.protocol, target.host, target.port) == ("tcp", "127.0.0.1", 8080)
    with pytest.raises(HostRefused, match="no usable port"):
        resolve({"protocol": "tcp", "address": "x", "port": 0}, {})


def test_connect_timeouts_come_from_listen_options() -> None:
    assert connect_seconds({}) == 5.0
    assert connect_seconds({"listenOptions": {"connectTimeoutSeconds": 2}}) == 2.0
    assert connect_seconds({"listenOptions": {"connectTimeout": "1500ms"}}) == 1.5
    assert connect_seconds({"listenOptions": {"connectTimeoutSeconds": 0, "connectTimeout": "1m"}}) == 60.0
    assert connect_seconds({"listenOptions": {"connectTimeout": "soon"}}) == 5.0
    assert parse_duration("1h2m3.5s") == 3723.5
    assert parse_duration("5") is None


def test_server_crypto_refuses_bad_keys_and_out_of_turn_messages() -> None:
    with pytest.raises(CryptoError):
        ServerCrypto(b"short")
    crypto = ServerCrypto(bindings.crypto_kx_keypair()[0])
    with pytest.raises(CryptoError):
        crypto.decrypt(b"x" * 40)
    with pytest.raises(CryptoError):
        crypto.take_peer_header(b"x" * 23)
