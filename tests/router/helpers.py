"""Builders for the router tests: throwaway certificates, a test SDK speaking channel v2 over
real TLS, a :class:`~router.ports.ControllerPort` that answers from tables, and waiting for a
condition. Builders set up state and never assert (except :func:`until`, which fails a test
whose condition never comes instead of letting it hang)."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from channel.connection import Channel
from channel.edge import CALLER_ID, CONN_ID, SEQ, SESSION_TOKEN
from channel.frames import HELLO, Message
from pki.tls import ServerContext, accept_any_client_certificate
from router.ports import Circuit, Refused, Terminator

P = ParamSpec("P")
T = TypeVar("T")

#: Seconds a test waits for something that should come at once (a safety net, not a measure).
WAIT = 30.0


def run_async(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """An ``async def`` test run on its own event loop (pytest takes the fixtures it names)."""

    @functools.wraps(test)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return wrapper


async def until(condition: Callable[[], bool], what: str) -> None:
    """Wait for ``condition`` (polled); fail with ``what`` if it never holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.005)


async def within(awaitable: Awaitable[T]) -> T:
    return await asyncio.wait_for(awaitable, WAIT)


# -- certificates ---------------------------------------------------------------------------------
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class Ca:
    name: str
    key: ec.EllipticCurvePrivateKey = field(default_factory=lambda: ec.generate_private_key(ec.SECP256R1()))
    cert: x509.Certificate = field(init=False)

    def __post_init__(self) -> None:
        now = datetime.now(UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(self.name))
            .issuer_name(_name(self.name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, cn: str, *, server: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


@dataclass(frozen=True)
class Pair:
    """A certificate (with the file holding it and its key) and its fingerprint."""

    cert_file: Path
    key_file: Path
    der: bytes

    @property
    def fingerprint(self) -> str:
        from router.edge import fingerprint

        return fingerprint(self.der)


def write_pair(directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Pair:
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Pair(cert_file, key_file, cert.public_bytes(serialization.Encoding.DER))


@dataclass(frozen=True)
class Pki:
    """The network's CA (signs the router's and the controller's server certificates and the
    router's client certificate) and an unrelated CA that issued the SDK identities'."""

    network_ca_file: Path
    router_server: Pair
    controller_server: Pair
    router_client: Pair
    identities_ca_file: Path
    identities: dict[str, Pair]

    def edge_server_context(self) -> ServerContext:
        ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.router_server.cert_file, self.router_server.key_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.load_verify_locations(cafile=self.network_ca_file)
        problem = accept_any_client_certificate(ctx)
        assert problem is None, problem
        return ctx

    def sdk_context(self, who: str) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cafile=self.network_ca_file)
        pair = self.identities[who]
        ctx.load_cert_chain(pair.cert_file, pair.key_file)
        return ctx

    def controller_server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.controller_server.cert_file, self.controller_server.key_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cafile=self.network_ca_file)
        return ctx


def make_pki(directory: Path) -> Pki:
    network, identities = Ca("Test Network CA"), Ca("Some Other Identity CA")
    (directory / "network-ca.pem").write_bytes(network.cert.public_bytes(serialization.Encoding.PEM))
    (directory / "identities-ca.pem").write_bytes(identities.cert.public_bytes(serialization.Encoding.PEM))
    return Pki(
        network_ca_file=directory / "network-ca.pem",
        router_server=write_pair(directory, "router-server", *network.issue("router", server=True)),
        controller_server=write_pair(
            directory, "controller-server", *network.issue("controller", server=True)
        ),
        router_client=write_pair(directory, "router-client", *network.issue("router-1", server=False)),
        identities_ca_file=directory / "identities-ca.pem",
        identities={
            who: write_pair(directory, who, *identities.issue(who, server=False))
            for who in ("dialer", "binder", "stranger")
        },
    )


# -- a test SDK ----------------------------------------------------------------------------------
class Sdk:
    """A test SDK: one channel v2 over TLS to a router. What arrives unasked is in :attr:`inbox`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.channel = Channel(self, name=name)

    def on_message(self, channel: Channel, message: Message) -> None:
        self.inbox.put_nowait(message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        pass

    @classmethod
    async def connect(cls, port: int, ctx: ssl.SSLContext, name: str = "sdk") -> Sdk:
        sdk = cls(name)
        loop = asyncio.get_running_loop()
        await loop.create_connection(
            lambda: sdk.channel, "127.0.0.1", port, ssl=ctx, server_hostname="localhost"
        )
        return sdk

    async def hello(self, token: str) -> Message:
        hello = Message(HELLO, f"ziti-sdk-c[0]@{self.name}".encode())
        hello.set_text(SESSION_TOKEN, token)
        return await self.channel.request(hello, WAIT)

    async def next(self) -> Message:
        return await within(self.inbox.get())

    def edge(self, content_type: int, conn_id: int, body: bytes = b"", *headers: dict[int, bytes]) -> Message:
        """An edge message on ``conn_id`` with ``headers`` added."""
        message = Message(content_type, body)
        message.set_u32(CONN_ID, conn_id).set_u32(SEQ, 0)
        for more in headers:
            message.headers.update(more)
        return message

    async def ask(self, message: Message) -> Message:
        return await self.channel.request(message, WAIT)

    async def closed(self) -> None:
        assert self.channel.closed is not None
        await within(self.channel.closed.wait())


def caller(name: str) -> dict[int, bytes]:
    """The CallerId header the C SDK puts on Connect and Bind."""
    return {CALLER_ID: name.encode()}


# -- a controller answering from tables ------------------------------------------------------------
ROUTER_ID = "router-1"


class TableController:
    """A :class:`~router.ports.ControllerPort`: a Bind's terminator is ``t-<token>``; a Connect
    gets ``circuits[token]`` (a :class:`Circuit`, or an exception to raise), else Invalid Session."""

    def __init__(self) -> None:
        self.circuits: dict[str, Circuit | Exception] = {}
        self.bind_refusals: dict[str, Exception] = {}
        self.circuit_calls: list[dict[str, Any]] = []
        self.terminator_calls: list[dict[str, Any]] = []
        self.removed: list[str] = []
        self.channel_notices: list[tuple[list[str], list[str]]] = []
        #: Circuit ids the router reported ended, in order.
        self.ended: list[str] = []

    def route(self, dial_token: str, bind_token: str, *, caller_id: str = "dialer", **fields: Any) -> None:
        """Connects with ``dial_token`` reach the bind made with ``bind_token``."""
        values: dict[str, Any] = {
            "session_id": f"s-{dial_token}",
            "service_id": "svc-echo",
            "service_name": "echo",
            "caller_id": caller_id,
            "terminator_id": f"t-{bind_token}",
            "router_id": ROUTER_ID,
            "binding": "edge",
            "address": f"hosted:{bind_token}",
        }
        values.update(fields)
        self.circuits[dial_token] = Circuit(**values)

    async def create_circuit(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        terminator_instance_id: str,
        has_public_key: bool,
    ) -> Circuit:
        self.circuit_calls.append(
            {
                "session_token": session_token,
                "api_session_id": api_session_id,
                "fingerprints": fingerprints,
                "terminator_instance_id": terminator_instance_id,
                "has_public_key": has_public_key,
            }
        )
        outcome = self.circuits.get(session_token)
        if outcome is None:
            raise Refused(3, "no such session")
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create_terminator(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        instance_id: str,
        cost: int,
        precedence: str,
        has_public_key: bool,
        address: str,
        terminator_id: str = "",
    ) -> Terminator:
        self.terminator_calls.append(
            {
                "session_token": session_token,
                "api_session_id": api_session_id,
                "fingerprints": fingerprints,
                "instance_id": instance_id,
                "cost": cost,
                "precedence": precedence,
                "has_public_key": has_public_key,
                "address": address,
                "terminator_id": terminator_id,
            }
        )
        refusal = self.bind_refusals.get(session_token)
        if refusal is not None:
            raise refusal
        return Terminator(
            terminator_id=f"t-{session_token}", session_id=f"s-{session_token}", service_id="svc-echo"
        )

    async def remove_terminators(self, terminator_ids: list[str]) -> None:
        self.removed.extend(terminator_ids)

    def api_session_channels(self, opened: list[str], closed: list[str]) -> None:
        self.channel_notices.append((opened, closed))

    def circuits_ended(self, circuit_ids: list[str]) -> None:
        self.ended.extend(circuit_ids)
