"""Services the router hosts itself (``host.v1``): its tunnel terminators, and the TCP and UDP
connections it opens to their servers.

A tunneler-enabled router acts as its router identity. The controller tells it, after every hello
and whenever the list changes, which services that identity may Bind that carry a ``host.v1``
config (``HOSTED_SERVICES``: :meth:`Hosting.update`). :class:`Hosting` keeps one terminator per
such service at the controller (``CREATE_TUNNEL_TERMINATOR``; ``REMOVE_TERMINATORS`` for the ones
no longer hosted), one reconciling pass at a time, retried with back-off while the controller
cannot be asked; the terminators it holds are listed in the router's hello, and those the
controller no longer knows are asked for again.

A Connect whose circuit ends at one of these terminators (made on this router, or on another one
and brought over a link: the "dialer" is then that circuit's end here) is joined to a connection
the router opens itself (:meth:`Hosting.open`, the edge listener's hosted far end; at most
:data:`MAX_CONNECTIONS` at once). Connections already made outlive their service's hosting (as
an OpenZiti circuit outlives its terminator):

- the destination is the config's ``protocol``/``address``/``port``, or with ``forwardProtocol``,
  ``forwardAddress``, ``forwardPort`` what the dialer's AppData (header 1011, JSON) names in
  ``dst_protocol``, ``dst_hostname`` (else ``dst_ip``) and ``dst_port``, each of which must be
  allowed by ``allowedProtocols``, ``allowedAddresses`` (host names, ``*.domain`` wildcards, IPs,
  CIDRs) and ``allowedPortRanges``. The C SDK 0.29.3 wrapper names ``(null)`` and port ``0`` when
  it dials by service name: a forwarding config refuses that;
- TCP is given ``listenOptions.connectTimeoutSeconds`` (or ``connectTimeout``, a duration such
  as ``"1500ms"``; 5 s by default) to connect; a refusal answers the Connect with StateClosed and
  the reason;
- the Connect is answered StateConnected (with the router's fresh kx public key when the dialer
  sent one: :mod:`router.crypto`), and bytes flow: each Data body (decrypted) is written to the
  socket, what the socket reads goes back in Data messages of at most 32 KiB of plaintext (each
  one secretstream message when encrypted, the stream header first). FIN (Data with flag 1) is a
  TCP half-close both ways; once both ways are closed, or the server or the dialer ends the
  connection, the other side ends too (StateClosed / close);
- back-pressure both ways: a server that reads slowly holds back reading from the dialer's SDK
  channel (:meth:`channel.connection.Channel.hold_reading`), and an SDK channel that drains
  slowly holds back reading from the server;
- UDP: one datagram per Data message each way (encrypted as one message each); a datagram the
  SDK channel has no room for is dropped, as UDP may; FIN from the dialer sends nothing; the
  flow ends after :data:`UDP_IDLE_SECONDS` without a datagram.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import re
from abc import abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from channel.connection import Channel
from channel.edge import (
    APP_DATA,
    DATA,
    ERROR_ENCRYPTION_DATA_MISSING,
    ERROR_INTERNAL,
    ERROR_INVALID_TERMINATOR,
    FIN,
    FLAGS,
    PUBLIC_KEY,
)
from channel.frames import Message
from router.crypto import MAX_PLAINTEXT, CryptoError, ServerCrypto
from router.edge import End, State
from router.ports import Circuit, HostedService, Refused, Unavailable

log = logging.getLogger(__name__)

#: Seconds a TCP connection to a hosted server may take (``listenOptions`` may say otherwise).
CONNECT_SECONDS = 5.0
#: Seconds a UDP flow lives without a datagram either way.
UDP_IDLE_SECONDS = 60.0
#: Seconds a closed TCP connection may take to write out what it holds before it is cut.
CLOSE_GRACE_SECONDS = 10.0
#: Bytes a server's socket may hold unwritten before the dialer's channel stops being read.
TCP_WRITE_HIGH_WATER = 256 * 1024
TCP_WRITE_LOW_WATER = 64 * 1024
#: Connections to hosted servers the router keeps open at once (a Connect beyond is refused).
MAX_CONNECTIONS = 16384
#: Datagrams from a server kept until the dialer is connected (more are dropped).
MAX_EARLY_DATAGRAMS = 16
#: Pauses between reconciling passes that could not finish (doubling).
RETRY_FIRST = 0.5
RETRY_MAX = 30.0
#: What the C SDK 0.29.3 wrapper sends as ``dst_hostname`` when it dials by service name.
NULL_HOSTNAME = "(null)"

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class HostRefused(Refused):
    """A Connect to a hosted service that cannot go on (answered with StateClosed, the reason and
    ``code``, an edge error code)."""

    def __init__(self, reason: str, code: int = ERROR_INTERNAL) -> None:
        super().__init__(code, reason)


# -- host.v1 ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Target:
    """Where a hosted connection goes."""

    protocol: str
    host: str
    port: int


def app_data(raw: bytes | None) -> dict[str, Any]:
    """The dialer's AppData (header 1011) as a JSON object ({} when absent or not one)."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def resolve(host: Mapping[str, Any], data: Mapping[str, Any]) -> Target:
    """Apply ``host`` (``host.v1`` data) to a dial whose AppData is ``data`` (:class:`HostRefused`
    when it names nothing allowed, or the config names nothing usable)."""
    if host.get("forwardProtocol") is True:
        wanted = data.get("dst_protocol")
        protocol = wanted.lower() if isinstance(wanted, str) else ""
        if not protocol:
            raise HostRefused("the dial names no protocol to forward (dst_protocol)")
        if protocol not in _strings(host.get("allowedProtocols")):
            raise HostRefused(f"protocol {protocol!r} is not allowed for this service")
    else:
        protocol = _text(host.get("protocol"))
    if protocol not in ("tcp", "udp"):
        raise HostRefused(f"protocol {protocol!r} cannot be hosted (tcp or udp)")
    if host.get("forwardAddress") is True:
        address = _forwarded_address(data, _strings(host.get("allowedAddresses")))
    else:
        address = _text(host.get("address"))
        if not address:
            raise HostRefused("the service's host.v1 config names no address")
    if host.get("forwardPort") is True:
        port = _forwarded_port(data, host.get("allowedPortRanges"))
    else:
        fixed = host.get("port")
        if not isinstance(fixed, int) or isinstance(fixed, bool) or not 0 < fixed < 65536:
            raise HostRefused(f"the service's host.v1 config names no usable port ({fixed!r})")
        port = fixed
    return Target(protocol, address, port)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _forwarded_address(data: Mapping[str, Any], allowed: list[str]) -> str:
    hostname = data.get("dst_hostname")
    if isinstance(hostname, str) and hostname.strip() and hostname.strip() != NULL_HOSTNAME:
        candidate = hostname.strip().rstrip(".").lower()
    else:
        ip = data.get("dst_ip")
        if not isinstance(ip, str) or not ip.strip():
            raise HostRefused("the dial names no address to forward (dst_hostname or dst_ip)")
        candidate = ip.strip()
        try:
            ipaddress.ip_address(candidate)
        except ValueError:
            raise HostRefused(f"dst_ip {candidate!r} is not an IP address") from None
    if not address_allowed(candidate, allowed):
        raise HostRefused(f"address {candidate!r} is not allowed for this service")
    return candidate


def address_allowed(candidate: str, allowed: Iterable[str]) -> bool:
    """Whether ``candidate`` (a host name or an IP address) is one of ``allowed``: an IP matches
    IPs and CIDRs, a host name matches the same name or a ``*.domain`` wildcard (any name below
    ``domain``), case aside."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(candidate)
    except ValueError:
        ip = None
    name = candidate.rstrip(".").lower()
    for raw in allowed:
        entry = raw.strip().rstrip(".").lower()
        if not entry:
            continue
        if ip is not None:
            try:
                network = ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            if network.version == ip.version and ip in network:
                return True
        elif entry.startswith("*."):
            suffix = entry[1:]
            if name.endswith(suffix) and len(name) > len(suffix):
                return True
        elif entry == name:
            return True
    return False


def _forwarded_port(data: Mapping[str, Any], ranges: Any) -> int:
    raw = data.get("dst_port")
    try:
        port = int(raw) if isinstance(raw, str | int) and not isinstance(raw, bool) else 0
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise HostRefused(f"the dial names no port to forward (dst_port {raw!r})")
    for entry in ranges if isinstance(ranges, list) else []:
        if isinstance(entry, dict):
            low, high = entry.get("low"), entry.get("high")
            if isinstance(low, int) and isinstance(high, int) and low <= port <= high:
                return port
    raise HostRefused(f"port {port} is not allowed for this service")


def connect_seconds(host: Mapping[str, Any], default: float = CONNECT_SECONDS) -> float:
    """``listenOptions.connectTimeoutSeconds``, else ``listenOptions.connectTimeout`` (a Go
    duration such as ``5s`` or ``1m30s``), else ``default`` (also for 0 or nonsense)."""
    options = host.get("listenOptions")
    if not isinstance(options, Mapping):
        return default
    seconds = options.get("connectTimeoutSeconds")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return float(seconds)
    duration = options.get("connectTimeout")
    if isinstance(duration, str):
        parsed = parse_duration(duration)
        if parsed is not None and parsed > 0:
            return parsed
    return default


def parse_duration(text: str) -> float | None:
    """Seconds of a Go duration (``300ms``, ``1.5s``, ``2m``, ``1h2m3s``); None when it is not one."""
    text = text.strip()
    if not text:
        return None
    total, at = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return total if at == len(text) else None


# -- the controller, as hosting asks it -------------------------------------------------------------
class TunnelController(Protocol):
    """What :class:`Hosting` asks of the controller (:class:`router.controllers.Controllers`, or one
    :class:`router.control.ControlClient`)."""

    #: Set while a control connection is up (requests made without one fail at once).
    connected: asyncio.Event

    async def create_tunnel_terminator(
        self, *, service_id: str, cost: int, precedence: str, instance_id: str
    ) -> str: ...

    async def remove_terminators(self, terminator_ids: list[str]) -> None: ...


# -- the connections --------------------------------------------------------------------------------
def _state(end: End) -> State | None:
    """The state of the end a hosted connection serves (an SDK's connection, or a circuit from
    another router standing in for its dialer: both keep ``state`` and ``close_reason``)."""
    state = getattr(end, "state", None)
    return state if isinstance(state, State) else None


class _Gate(Channel):
    """A hosted connection as the *source* of what it hands its dialer's end: never connected, it
    stands in for a channel in :meth:`Channel.relay`'s back-pressure. While a sink it fed is full
    it holds the gate, and the hosted connection reads no more from its server."""

    def __init__(self, end: HostedEnd) -> None:
        super().__init__(None, name="hosted")
        self.end = end
        #: The sinks that hold the gate (full with what the connection handed them).
        self.full: set[object] = set()

    def _hold(self, sink: object) -> None:
        if not self.full:
            self.end._pause_server()
        self.full.add(sink)

    def _release(self, sink: object) -> None:
        if sink in self.full:
            self.full.discard(sink)
            if not self.full:
                self.end._resume_server()


class HostedEnd(End):
    """The far end of a Connect to a hosted service: a socket the router opened itself.

    It is made while the dialer is still connecting and holds back what the server sends until
    :meth:`start` (called once the dialer has its StateConnected). ``dialer`` is the end it serves:
    the SDK's connection, or a circuit from another router standing in for it. ``public_key`` is
    the router's kx public key for the dialer (None when the dialer sent none: no encryption)."""

    def __init__(self, hosting: Hosting, dialer: End, crypto: ServerCrypto | None) -> None:
        self.hosting = hosting
        self.dialer = dialer
        self.crypto = crypto
        self.public_key = crypto.public_key if crypto is not None else None
        self.started = False
        self.closed = False
        self.gate = _Gate(self)

    @abstractmethod
    def start(self) -> None:
        """The dialer is connected: data may flow (the stream header goes first)."""

    @abstractmethod
    def abandon(self) -> None:
        """The Connect did not go through after all, or the router ends the connection: close the
        socket, tell nobody."""

    def _pause_server(self) -> None:
        """The dialer's side is full: read no more from the server (nothing for UDP)."""

    def _resume_server(self) -> None:
        """The dialer's side has room again."""

    def _begin(self) -> bool:
        """Common start: whether the dialer is still joined to this end (else it is abandoned)."""
        if self.closed:
            return False
        joined = _state(self.dialer) is State.CONNECTED
        for attribute in ("peer", "local"):  # an SDK's connection, a circuit over a link
            if joined and hasattr(self.dialer, attribute):
                joined = getattr(self.dialer, attribute) is self
        if not joined:
            self.abandon()
            return False
        self.started = True
        if self.crypto is not None:
            self._to_dialer(self.crypto.header)
        return True

    def _to_dialer(self, body: bytes, *, fin: bool = False) -> None:
        message = Message(DATA, body)
        if fin:
            message.set_u32(FLAGS, FIN)
        self.dialer.deliver(message, self.gate)

    def _open_body(self, message: Message) -> bytes:
        """The plaintext of a Data body from the dialer (b"": nothing to pass on). A body that
        does not decrypt ends the connection (:class:`CryptoError`)."""
        body = message.body
        crypto = self.crypto
        if crypto is None or not body:
            return body
        if not crypto.has_peer_header:
            crypto.take_peer_header(body)
            return b""
        return crypto.decrypt(body)

    def _seal(self, plaintext: bytes) -> bytes:
        return self.crypto.encrypt(plaintext) if self.crypto is not None else plaintext

    def _fail(self, reason: str) -> None:
        """The router ends the connection: the dialer is told ``reason``, the socket closed."""
        log.info("hosted connection %r: %s", self.dialer, reason)
        self.abandon()
        self.dialer.end(reason)


class TcpEnd(HostedEnd, asyncio.Protocol):
    """A TCP connection to a hosted server (an ``asyncio.Protocol``)."""

    def __init__(self, hosting: Hosting, dialer: End, crypto: ServerCrypto | None) -> None:
        super().__init__(hosting, dialer, crypto)
        self.transport: asyncio.Transport | None = None
        #: FIN sent to the dialer (the server's EOF), and FIN from the dialer (written as EOF).
        self.fin_sent = False
        self.fin_received = False
        self._write_paused = False
        self._holding: set[Channel] = set()  # dialer channels whose reading a full socket holds

    def __repr__(self) -> str:
        return f"<tcp end of {self.dialer!r}>"

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=TCP_WRITE_HIGH_WATER, low=TCP_WRITE_LOW_WATER)
        transport.pause_reading()  # nothing goes to the dialer before its StateConnected

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        view = memoryview(data)
        for at in range(0, len(view), MAX_PLAINTEXT):
            self._to_dialer(self._seal(bytes(view[at : at + MAX_PLAINTEXT])))

    def eof_received(self) -> bool:
        if self.closed:
            return False
        self.fin_sent = True
        self._to_dialer(b"", fin=True)
        if self.fin_received:
            self._finish()
        return True  # keep writing to the server until the dialer's FIN

    def connection_lost(self, exc: BaseException | None) -> None:
        self._release_all()
        self.hosting._forget(self)
        if self.closed:
            return
        self.closed = True
        if exc is not None:
            reason = f"the connection to the server broke: {exc}"
        else:
            reason = "the server closed the connection"
        log.debug("hosted connection %r: %s", self.dialer, reason)
        self.dialer.end(reason)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._release_all()

    # -- HostedEnd -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._begin() and not self.gate.full:
            self._resume_server()

    def abandon(self) -> None:
        self.closed = True
        self._release_all()
        if self.transport is not None:
            self.transport.abort()

    def _pause_server(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def _resume_server(self) -> None:
        if (
            self.started
            and not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
        ):
            self.transport.resume_reading()

    # -- End -----------------------------------------------------------------------------------
    def deliver(self, message: Message, source: Channel | None) -> None:
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return
        try:
            body = self._open_body(message)
        except CryptoError as ex:
            self._fail(f"end-to-end encryption failed: {ex}")
            return
        if body and not self.fin_received:  # nothing may follow a FIN
            transport.write(body)
        if (message.u32(FLAGS) or 0) & FIN and not self.fin_received:
            self.fin_received = True
            if transport.can_write_eof():
                transport.write_eof()
            if self.fin_sent:
                self._finish()
                return
        if self._write_paused and source is not None and source not in self._holding:
            self._holding.add(source)
            source.hold_reading(self)

    def end(self, reason: str) -> None:
        """The dialer ended the connection: what the server was sent is written out, then the
        socket closes (cut after :data:`CLOSE_GRACE_SECONDS` if the server does not read)."""
        if self.closed:
            return
        self.closed = True
        self._release_all()
        self._close_gracefully()

    # -- internals -----------------------------------------------------------------------------
    def _finish(self) -> None:
        """FIN both ways: the socket closes and so does the dialer's connection."""
        self.closed = True
        self._release_all()
        self._close_gracefully()
        self.dialer.end("closed")

    def _close_gracefully(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.close()
        if transport.get_write_buffer_size():
            asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, transport.abort)

    def _release_all(self) -> None:
        held, self._holding = self._holding, set()
        for channel in held:
            channel.release_reading(self)


class UdpEnd(HostedEnd, asyncio.DatagramProtocol):
    """A UDP flow to a hosted server: one datagram per Data message each way."""

    def __init__(self, hosting: Hosting, dialer: End, crypto: ServerCrypto | None) -> None:
        super().__init__(hosting, dialer, crypto)
        self.transport: asyncio.DatagramTransport | None = None
        self.idle_seconds = hosting.udp_idle_seconds
        self._timer: asyncio.TimerHandle | None = None
        self._early: list[bytes] = []

    def __repr__(self) -> str:
        return f"<udp end of {self.dialer!r}>"

    # -- asyncio.DatagramProtocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # selector ones are no subclass

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.closed:
            return
        if not self.started:
            if len(self._early) < MAX_EARLY_DATAGRAMS:
                self._early.append(data)
            return
        self._touch()
        if self.gate.full:
            log.debug("hosted connection %r: dropping a datagram: the dialer's side is full", self.dialer)
            return
        self._to_dialer(self._seal(data))

    def error_received(self, exc: Exception) -> None:
        log.debug("hosted connection %r: %s", self.dialer, exc)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_timer()
        self.hosting._forget(self)
        if self.closed:
            return
        self.closed = True
        self.dialer.end(f"the UDP socket closed: {exc}" if exc is not None else "closed")

    # -- HostedEnd -----------------------------------------------------------------------------
    def start(self) -> None:
        if not self._begin():
            return
        self._touch()
        early, self._early = self._early, []
        for data in early:
            self.datagram_received(data, None)

    def abandon(self) -> None:
        self.closed = True
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()

    # -- End -----------------------------------------------------------------------------------
    def deliver(self, message: Message, source: Channel | None) -> None:
        if self.closed or self.transport is None:
            return
        try:
            body = self._open_body(message)
        except CryptoError as ex:
            self._fail(f"end-to-end encryption failed: {ex}")
            return
        if body:
            self._touch()
            self.transport.sendto(body)

    def end(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self._cancel_timer()
        if self.transport is not None:
            self.transport.close()

    # -- internals -----------------------------------------------------------------------------
    def _touch(self) -> None:
        self._cancel_timer()
        if not self.closed:
            self._timer = asyncio.get_running_loop().call_later(self.idle_seconds, self._idle)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _idle(self) -> None:
        self._timer = None
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self._to_dialer(b"", fin=True)
        self.dialer.end(f"no datagram for {self.idle_seconds:g} s")


# -- hosting --------------------------------------------------------------------------------------
class Hosting:
    """The services this router hosts, their terminators, and the connections to their servers.

    ``controller`` is asked for and told of terminators (:class:`TunnelController`); the edge
    listener calls :meth:`open` for a Connect that reaches one of them. Event-loop only."""

    def __init__(
        self,
        controller: TunnelController,
        *,
        connect_seconds: float = CONNECT_SECONDS,
        udp_idle_seconds: float = UDP_IDLE_SECONDS,
        retry_first: float = RETRY_FIRST,
        retry_max: float = RETRY_MAX,
    ) -> None:
        self.controller = controller
        self.connect_seconds = connect_seconds
        self.udp_idle_seconds = udp_idle_seconds
        self.retry_first = retry_first
        self.retry_max = retry_max
        #: What the controller last said this router hosts, by service id.
        self._services: dict[str, HostedService] = {}
        #: The terminator held for each service (and what it was asked for with), and back.
        self._terminators: dict[str, str] = {}
        self._options: dict[str, tuple[int, str, str]] = {}
        self._by_terminator: dict[str, str] = {}
        self._connections: set[HostedEnd] = set()
        self._dirty: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._delay = retry_first

    # -- what the control side says ------------------------------------------------------------
    def update(self, services: Iterable[HostedService]) -> None:
        """The whole list of services hosted now (``HOSTED_SERVICES``): terminators follow."""
        new = {s.id: s for s in services}
        if new != self._services:
            gone = sorted(set(self._services) - set(new))
            came = sorted(set(new) - set(self._services))
            if gone or came:
                log.info("hosting: now %d services (new %s, gone %s)", len(new), came or "-", gone or "-")
            self._services = new
        self._wake()

    def terminator_ids(self) -> list[str]:
        """The terminators held (the router's hello lists them)."""
        return list(self._by_terminator)

    def drop_terminators(self, terminator_ids: Iterable[str]) -> None:
        """The controller does not know these: they are asked for again."""
        dropped = False
        for terminator_id in terminator_ids:
            service_id = self._by_terminator.pop(terminator_id, None)
            if service_id is not None:
                dropped = True
                self._terminators.pop(service_id, None)
                self._options.pop(service_id, None)
        if dropped:
            self._wake()

    # -- looking in ----------------------------------------------------------------------------
    def services(self) -> dict[str, HostedService]:
        return dict(self._services)

    def terminators(self) -> dict[str, str]:
        """Service id -> the terminator held for it."""
        return dict(self._terminators)

    def connections(self) -> list[HostedEnd]:
        return list(self._connections)

    def hosts(self, terminator_id: str) -> bool:
        service_id = self._by_terminator.get(terminator_id)
        return service_id is not None and service_id in self._services

    # -- connections ---------------------------------------------------------------------------
    async def open(self, circuit: Circuit, dialer: End, request: Message) -> tuple[HostedEnd, bytes | None]:
        """Open the connection a Connect (``request``: its PublicKey and AppData count) reaching
        one of this router's tunnel terminators asks for; returns it, with ``dialer`` still
        connecting (its start is scheduled for once the Connect is answered), and the router's
        public key for the dialer (None: no encryption), or raises
        :class:`HostRefused`. ``dialer`` is the SDK's connection, or a circuit from another router
        standing in for it (``state`` and ``close_reason`` are read)."""
        service_id = self._by_terminator.get(circuit.terminator_id)
        service = self._services.get(service_id) if service_id is not None else None
        if service is None:
            raise HostRefused(
                f"terminator {circuit.terminator_id} is not hosted by this router", ERROR_INVALID_TERMINATOR
            )
        target = resolve(service.host, app_data(request.headers.get(APP_DATA)))
        key = request.headers.get(PUBLIC_KEY)
        crypto = None
        if key is not None:
            try:
                crypto = ServerCrypto(key)
            except CryptoError as ex:
                raise HostRefused(f"end-to-end encryption cannot start: {ex}") from None
        elif service.encryption_required:
            raise HostRefused(
                "encryption required on service, initiator did not send public header",
                ERROR_ENCRYPTION_DATA_MISSING,
            )
        if len(self._connections) >= MAX_CONNECTIONS:
            raise HostRefused(f"this router holds {MAX_CONNECTIONS} hosted connections already")
        timeout = connect_seconds(service.host, self.connect_seconds)
        end = await self._connect(target, dialer, crypto, timeout)
        if _state(dialer) is not State.CONNECTING:
            end.abandon()
            raise HostRefused(getattr(dialer, "close_reason", None) or "closed")
        self._connections.add(end)
        asyncio.get_running_loop().call_soon(end.start)  # after the StateConnected is sent
        log.debug("hosting: %s -> %s %s:%d", dialer, target.protocol, target.host, target.port)
        return end, end.public_key

    async def _connect(
        self, target: Target, dialer: End, crypto: ServerCrypto | None, timeout: float
    ) -> HostedEnd:
        loop = asyncio.get_running_loop()
        where = f"{target.host}:{target.port}"
        try:
            if target.protocol == "udp":
                _, udp = await asyncio.wait_for(
                    loop.create_datagram_endpoint(
                        lambda: UdpEnd(self, dialer, crypto), remote_addr=(target.host, target.port)
                    ),
                    timeout,
                )
                return udp
            _, tcp = await asyncio.wait_for(
                loop.create_connection(lambda: TcpEnd(self, dialer, crypto), target.host, target.port),
                timeout,
            )
            return tcp
        except TimeoutError:
            raise HostRefused(f"no connection to {target.protocol}:{where} within {timeout:g} s") from None
        except OSError as ex:
            raise HostRefused(
                f"cannot connect to {target.protocol}:{where}: {ex.strerror or ex}".rstrip(": ")
            ) from None

    def _forget(self, end: HostedEnd) -> None:
        self._connections.discard(end)

    async def stop(self) -> None:
        """Stop reconciling and close every hosted connection."""
        if self._retry is not None:
            self._retry.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for end in list(self._connections):
            end.abandon()
        self._connections.clear()

    # -- terminators ---------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._dirty is None:
            self._dirty = asyncio.Event()
        self._dirty.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._reconcile(self._dirty), name="hosting")

    async def _reconcile(self, dirty: asyncio.Event) -> None:
        """Passes that bring the terminators held in line with the services hosted, one at a time,
        each when something changed (or a failed one is due again)."""
        while True:
            await dirty.wait()
            dirty.clear()
            if self._retry is not None:
                self._retry.cancel()
                self._retry = None
            try:
                done = await self._pass()
            except Exception:
                log.exception("hosting: reconciling terminators failed")
                done = False
            if done:
                self._delay = self.retry_first
            elif not dirty.is_set():
                self._retry = asyncio.get_running_loop().call_later(self._delay, dirty.set)
                self._delay = min(self._delay * 2, self.retry_max)

    async def _pass(self) -> bool:
        """One reconciling pass; whether everything is in line."""
        stale = [s for s in self._terminators if s not in self._services]
        if stale:
            ids = []
            for service_id in stale:
                terminator_id = self._terminators.pop(service_id)
                self._options.pop(service_id, None)
                self._by_terminator.pop(terminator_id, None)
                ids.append(terminator_id)
            log.info("hosting: removing terminators %s", ids)
            try:
                await self.controller.remove_terminators(ids)
            except (Refused, Unavailable) as ex:  # not listed in the next hello: removed then
                log.info("hosting: terminators %s not removed at the controller: %s", ids, ex)
        done = True
        for service_id, service in list(self._services.items()):
            wanted = service.terminator_options
            if service_id in self._terminators and self._options.get(service_id) == wanted:
                continue
            if self._services.get(service_id) is not service:
                continue  # changed meanwhile: the next pass
            if not self.controller.connected.is_set():
                try:  # a list pushed with the hello may be taken just before the hello's answer
                    await asyncio.wait_for(self.controller.connected.wait(), self.retry_first)
                except TimeoutError:
                    return False
            cost, precedence, instance_id = wanted
            try:
                terminator_id = await self.controller.create_tunnel_terminator(
                    service_id=service_id, cost=cost, precedence=precedence, instance_id=instance_id
                )
            except Refused as ex:
                log.warning("hosting: no terminator for service %s: %s", service.name, ex.reason)
                done = False
                continue
            except Unavailable as ex:
                log.info("hosting: no terminator for service %s yet: %s", service.name, ex)
                return False
            old = self._terminators.get(service_id)
            if old is not None and old != terminator_id:
                self._by_terminator.pop(old, None)
            self._terminators[service_id] = terminator_id
            self._options[service_id] = wanted
            self._by_terminator[terminator_id] = service_id
            log.info("hosting: service %s holds terminator %s", service.name, terminator_id)
        return done
