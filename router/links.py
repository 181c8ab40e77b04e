"""Links to other routers: a dialer on this router reaches a terminator on another one.

The controller lists the other online routers and where they take links (``ROUTER_LINKS``, kept
by :class:`~router.control.ControlClient`); :class:`Links` listens on this router's link address
and keeps one link to each listed router: it dials those :func:`channel.link.should_dial` names
(again and again, with a growing pause, while they are listed), takes the links the others dial,
and closes links to routers no longer listed. :mod:`channel.link` is the protocol, and says who
is let in: both sides present their enrolled certificates, verified against the controller's CA,
and each checks that the other's names (CN) a router the controller listed.

A Connect whose terminator is on another router (:meth:`~router.edge.EdgeListener._open_link_end`)
becomes a circuit over the link to that router (:meth:`Links.open_circuit`): the other router
dials its terminator as it would for a dialer of its own (:meth:`~router.edge.EdgeListener.
open_link_circuit`) and answers. Each side then has a :class:`LinkCircuit`, the far end
(:class:`~router.edge.End`) of its SDK's connection, and Data, FIN and StateClosed cross the link
tagged with the circuit's id.

Back-pressure: a circuit has a window each way (:data:`channel.link.WINDOW`). A sender whose
window is used up stops reading the SDK channel that feeds the circuit (as a full channel does,
:meth:`channel.connection.Channel.relay`); the receiver never stops reading the link, hands the
data to its SDK's channel and gives the window back only once that channel takes more. A slow
SDK thus holds back its own circuits and nothing else; a full link (the network) holds back the
SDK channels that write into it. A link that closes ends its circuits (StateClosed to the SDKs).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import itertools
import json
import logging
import random
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

from channel import link as proto
from channel.connection import Channel, ChannelClosed
from channel.edge import APP_DATA, CONNECT, ERROR_CODE, ERROR_INTERNAL, FLAGS, PUBLIC_KEY
from channel.frames import (
    HEARTBEAT,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    HELLO,
    RESULT,
    RESULT_SUCCESS,
    Message,
    result,
)
from router.control import RouterLink, parse_address
from router.edge import EdgeListener, End, SdkConnection, State
from router.ports import Circuit, Refused

log = logging.getLogger(__name__)

#: Seconds to wait for a link to come up, for the other router to answer a dial, and for a TLS
#: handshake; a dial's answer waits on the other router's SDK (5 s) and then some.
DIAL_SECONDS = 10.0
#: Seconds to wait for what the controller's list brings: a link being accepted, for the router
#: that dials it to be listed; a circuit, for the link to its router to come up.
WAIT_SECONDS = 5.0
#: Messages a dialed link may receive between the hello's answer and its registration.
MAX_EARLY_MESSAGES = 64
#: Seconds from the TLS handshake to the hello.
HELLO_SECONDS = 10.0
#: Pauses between attempts to dial a link: the first, and the most they grow to (doubling).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


def common_name(channel: Channel) -> str:
    """The CN of the certificate the peer presented and the TLS handshake verified ("" if none)."""
    transport = channel.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return ""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and isinstance(value, str):
                return value
    return ""


class Phase(enum.Enum):
    HELLO = "hello"  # the hello is awaited, or checked
    OPEN = "open"
    CLOSED = "closed"


class _LinkChannel(Channel):
    """A link's channel: notes when it last heard anything (for the silence check)."""

    last_received = 0.0

    def data_received(self, data: bytes) -> None:
        self.last_received = time.monotonic()
        super().data_received(data)


class _Gate(Channel):
    """A circuit's stand-in for a channel in the back-pressure of :mod:`channel.connection`; never
    connected.

    As a *source*: the circuit hands the data it receives to its local end, which relays it with
    the gate as its source (``relay(message, gate)``, or ``gate.hold_reading``); while the sink is
    full it holds the gate (:meth:`_hold`), and the circuit credits nothing back until every sink
    has let go. As a *holder*: the sources feeding the circuit (SDK channels, a hosted connection's
    own gate) are held (:meth:`Channel.hold_reading`) with the gate while the circuit's window is
    used up."""

    def __init__(self, circuit: LinkCircuit) -> None:
        super().__init__(None, name=f"circuit {circuit.circuit_id}")
        self.circuit = circuit
        #: The sinks that hold the gate (full with what the circuit handed them).
        self.full: set[object] = set()

    def _hold(self, sink: object) -> None:
        self.full.add(sink)

    def _release(self, sink: object) -> None:
        self.full.discard(sink)
        if not self.full:
            self.circuit._drained()


class LinkCircuit(End):
    """One circuit over a link, on this router: the far end of the local SDK's connection.

    On the terminator's router it stands in for the dialer of the other router: ``state``,
    ``close_reason`` and ``peer`` (the local end once joined) are what the dials of
    :mod:`router.edge` and the connections the router hosts (:mod:`router.hosting`) read of a
    dialer."""

    __slots__ = (
        "_early",
        "_gate",
        "_held",
        "_owed",
        "_unacked",
        "_withheld",
        "attached",
        "circuit_id",
        "close_reason",
        "link",
        "local",
        "state",
    )

    def __init__(self, link: Link, circuit_id: int) -> None:
        self.link = link
        self.circuit_id = circuit_id
        #: The end on this router: the dialer's connection, or what the terminator's dial made.
        self.local: End | None = None
        self.state = State.CONNECTING
        self.close_reason: str | None = None
        #: Whether data from the link goes to :attr:`local` (before that it waits in ``_early``).
        self.attached = False
        self._gate = _Gate(self)
        self._early: list[Message] = []
        self._unacked = 0  # bytes sent the other router has not credited back
        self._held: set[Channel] = set()  # SDK channels held while the window is used up
        self._withheld = 0  # bytes handed to a local channel that is full
        self._owed = 0  # bytes taken that the other router has not been credited yet

    def __repr__(self) -> str:
        return f"<circuit {self.link.name}/{self.circuit_id} {self.state.value}>"

    @property
    def peer(self) -> End | None:
        return self.local

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    # -- End: what the local end sends -------------------------------------------------------------
    def deliver(self, message: Message, source: Channel | None) -> None:
        if self.state is not State.CONNECTED:
            return
        out = proto.data(self.circuit_id, message.body, message.headers.get(FLAGS))
        self.link.channel.relay(out, source)
        self._unacked += proto.cost(out)
        if self._unacked >= self.link.links.window and source is not None and source not in self._held:
            self._held.add(source)
            source.hold_reading(self._gate)

    def end(self, reason: str) -> None:
        """The local end is gone: the other router is told."""
        if self.state is State.CLOSED:
            return
        self.close_reason = reason
        self.forget()
        self.link.send(proto.close(self.circuit_id, reason))

    # -- joining -------------------------------------------------------------------------------
    def join(self, local: End) -> None:
        """The circuit is up; ``local`` is its end here (data waits until :meth:`attach`)."""
        self.local = local
        self.state = State.CONNECTED

    def attach(self) -> None:
        """``local`` takes data now: what arrived meanwhile first."""
        if self.state is State.CLOSED or self.attached:
            return
        self.attached = True
        early, self._early = self._early, []
        for message in early:
            if self.state is not State.CONNECTED:  # ended by what was passed on
                break
            self._pass(message)

    def forget(self) -> None:
        """Closed here: the link forgets it, the channels it held read again."""
        self.state = State.CLOSED
        self._early.clear()
        if self.link.circuits.get(self.circuit_id) is self:
            del self.link.circuits[self.circuit_id]
        self._release_sources()

    # -- what the link brings ------------------------------------------------------------------
    def on_data(self, message: Message) -> None:
        if self.state is State.CLOSED:
            return
        if not self.attached:
            self._early.append(message)  # bounded by the window the other router keeps to
            return
        self._pass(message)

    def on_credit(self, amount: int) -> None:
        self._unacked = max(0, self._unacked - amount)
        if self._unacked < self.link.links.window:
            self._release_sources()

    def on_close(self, reason: str) -> None:
        """The other router's end is gone (or the link): this router's end closes."""
        if self.state is State.CLOSED:
            return
        self.close_reason = reason
        local = self.local
        self.forget()
        if local is not None:
            local.end(reason)

    # -- internals -----------------------------------------------------------------------------
    def _pass(self, message: Message) -> None:
        local = self.local
        amount = proto.cost(message)
        if local is not None:
            local.deliver(message, self._gate)
        if self._gate.full:
            self._withheld += amount
        else:
            self._taken(amount)

    def _drained(self) -> None:
        amount, self._withheld = self._withheld, 0
        if amount and self.state is not State.CLOSED:
            self._taken(amount)

    def _taken(self, amount: int) -> None:
        self._owed += amount
        if self._owed >= self.link.links.window // 4:
            owed, self._owed = self._owed, 0
            self.link.send(proto.credit(self.circuit_id, owed))

    def _release_sources(self) -> None:
        held, self._held = self._held, set()
        for source in held:
            source.release_reading(self._gate)


class Link:
    """One link to another router (its channel's handler), from the TLS handshake to its close."""

    def __init__(self, links: Links, *, dialed: bool, peer_id: str = "") -> None:
        self.links = links
        #: Whether this router dialed the link (its circuits have odd ids), or accepted it (even).
        self.dialed = dialed
        self.peer_id = peer_id
        #: The link's id (the dialer makes it; both report the link to the controller by it).
        self.link_id = proto.new_link_id() if dialed else ""
        self.phase = Phase.HELLO
        self.channel = _LinkChannel(
            self,
            name="link",
            first_body_limit=None if dialed else proto.MAX_HELLO_BODY_BYTES,
            first_message_timeout=None if dialed else links.hello_seconds,
        )
        self.channel.last_received = time.monotonic()
        self.circuits: dict[int, LinkCircuit] = {}
        self.last_beat = time.monotonic()
        self._ids = itertools.count(1 if dialed else 2, 2)
        self._early: list[Message] = []

    @property
    def name(self) -> str:
        return f"link{'>' if self.dialed else '<'}{self.peer_id or '?'}"

    @property
    def dialer_id(self) -> str:
        return self.links.router_id if self.dialed else self.peer_id

    @property
    def is_open(self) -> bool:
        return self.phase is Phase.OPEN and self.channel.is_open

    def __repr__(self) -> str:
        return f"<{self.name} {self.phase.value} circuits={len(self.circuits)}>"

    def send(self, message: Message) -> None:
        if self.channel.is_open:
            self.channel.send(message)

    def close(self, reason: str) -> None:
        if self.phase is Phase.OPEN:
            log.info("%s: closing: %s", self.name, reason)
        self.channel.close()

    def opened(self) -> None:
        """The link is up: what arrived since the hello's answer is handled now."""
        self.phase = Phase.OPEN
        early, self._early = self._early, []
        for message in early:
            if not self.is_open:
                break
            self.on_message(self.channel, message)

    def new_circuit(self) -> LinkCircuit:
        """A circuit this router opens (its id of this router's parity)."""
        if len(self.circuits) >= proto.MAX_CIRCUITS:
            raise Refused(ERROR_INTERNAL, f"too many circuits on the link to router {self.peer_id}")
        while True:
            circuit_id = next(self._ids) & 0xFFFFFFFF
            if circuit_id and circuit_id not in self.circuits:
                break
        circuit = LinkCircuit(self, circuit_id)
        self.circuits[circuit_id] = circuit
        return circuit

    def is_peers(self, circuit_id: int) -> bool:
        """Whether ``circuit_id`` is of the other router's parity."""
        return circuit_id % 2 == (0 if self.dialed else 1)

    # -- the channel's handler -----------------------------------------------------------------
    def on_message(self, channel: Channel, message: Message) -> None:
        kind = message.content_type
        if self.phase is Phase.HELLO:
            if self.dialed:  # the other router may use the link as soon as it answered the hello
                self._early.append(message)
                if len(self._early) > MAX_EARLY_MESSAGES:
                    log.info("%s: too much before the link was up: closing", self.name)
                    channel.close()
                return
            if kind != HELLO or self.links._admitting(self):
                log.info("%s: content type %d before the hello was answered: closing", self.name, kind)
                channel.close()
                return
            self.links._spawn(self.links._admit(self, message))
            return
        if self.phase is not Phase.OPEN:
            return
        circuit_id = message.u32(proto.CIRCUIT_ID)
        circuit = self.circuits.get(circuit_id) if circuit_id is not None else None
        if kind == proto.DATA:
            if circuit is not None:
                circuit.on_data(message)
        elif kind == proto.CREDIT:
            amount = message.u32(proto.CREDIT_BYTES)
            if circuit is not None and amount is not None:
                circuit.on_credit(amount)
        elif kind == proto.CLOSE:
            if circuit is not None:
                circuit.on_close(message.body.decode("utf-8", "replace") or "closed by the other router")
        elif kind == proto.DIAL:
            self.links._take_dial(self, message)
        elif kind == HEARTBEAT:
            stamp = message.u64(HEARTBEAT_REQUEST)
            if stamp is not None:
                answer = Message(HEARTBEAT).set_u64(HEARTBEAT_RESPONSE, stamp)
                self.send(answer.reply_to(message))
        else:
            log.debug("%s: ignoring %r", self.name, message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        was, self.phase = self.phase, Phase.CLOSED
        if was is Phase.OPEN:
            log.info("%s: closed%s", self.name, f": {error}" if error is not None else "")
        self.links._gone(self)
        reason = f"the link to router {self.peer_id} was lost"
        for circuit in list(self.circuits.values()):
            circuit.on_close(reason)
        self.circuits.clear()


class Links:
    """This router's links (see the module docstring).

    ``server_context`` and ``client_context`` are :func:`router.identity.link_contexts`' (the
    client context's host-name check is turned off: the listener's certificate must name the
    router dialed instead). ``listener_url`` is what the controller is told (``tls://host:port``;
    :meth:`start` fills it in when empty): :func:`channel.link.should_dial` needs it. ``edge``
    dials the terminators other routers open circuits to. :meth:`update` takes the controller's
    list of routers. ``on_change`` (settable later) is told the links that are up (:meth:`state`,
    what the controller's ``LINKS`` report carries) whenever they change, once per turn of the
    event loop."""

    def __init__(
        self,
        *,
        router_id: str,
        edge: EdgeListener,
        server_context: ssl.SSLContext,
        client_context: ssl.SSLContext,
        listener_url: str = "",
        window: int = proto.WINDOW,
        dial_seconds: float = DIAL_SECONDS,
        wait_seconds: float = WAIT_SECONDS,
        hello_seconds: float = HELLO_SECONDS,
        heartbeat_seconds: float = proto.HEARTBEAT_SECONDS,
        silent_seconds: float = proto.SILENT_SECONDS,
        backoff_first: float = BACKOFF_FIRST,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.router_id = router_id
        self.edge = edge
        self.server_context = server_context
        self.client_context = client_context
        client_context.check_hostname = False
        self.listener_url = listener_url
        self.window = window
        self.dial_seconds = dial_seconds
        self.wait_seconds = wait_seconds
        self.hello_seconds = hello_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.silent_seconds = silent_seconds
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        self._server: asyncio.Server | None = None
        #: The other routers the controller listed last, by id.
        self._listed: dict[str, RouterLink] = {}
        #: The open link to each router; every link from its handshake to its close.
        self._links: dict[str, Link] = {}
        self._all: set[Link] = set()
        self._admissions: set[Link] = set()
        self._keepers: dict[str, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._stopping = False
        self.on_change: Callable[[list[dict[str, Any]]], None] | None = None
        self._report_due = False

    # -- life ----------------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        """Listen for links on ``host``:``port`` (0: any free port, see :attr:`port`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._inbound, host, port, ssl=self.server_context, ssl_handshake_timeout=self.dial_seconds
        )
        if not self.listener_url:
            self.listener_url = f"tls://{host}:{self.port}"
        self._start_heartbeats()
        log.info("link listener on %s", ", ".join(str(s.getsockname()) for s in self._server.sockets))

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the link listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening and dialing; close every link (their circuits end)."""
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for task in [*self._keepers.values(), *self._tasks]:
            task.cancel()
        if self._ticker is not None:
            self._ticker.cancel()
        for link in list(self._all):
            link.close("the router stops")
        pending = [*self._keepers.values(), *self._tasks, *([self._ticker] if self._ticker else [])]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        self._keepers.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- the controller's list -----------------------------------------------------------------
    def update(self, routers: Iterable[RouterLink]) -> None:
        """The other online routers, as the controller lists them (``ROUTER_LINKS``)."""
        if self._stopping:
            return
        listed = {r.id: r for r in routers if r.id and r.id != self.router_id}
        self._listed = listed
        self._start_heartbeats()
        self._wake()
        for peer_id, link in list(self._links.items()):
            if peer_id not in listed:
                link.close(f"router {peer_id} is no longer listed")
        for peer_id, task in list(self._keepers.items()):
            peer = listed.get(peer_id)
            if task.done() or peer is None or not self._should_dial(peer):
                task.cancel()
                del self._keepers[peer_id]
        for peer in listed.values():
            if peer.id not in self._keepers and self._should_dial(peer):
                self._keepers[peer.id] = asyncio.get_running_loop().create_task(
                    self._keep(peer.id), name=f"link to {peer.id}"
                )

    def link(self, peer_id: str) -> Link | None:
        """The open link to ``peer_id``."""
        link = self._links.get(peer_id)
        return link if link is not None and link.is_open else None

    def links(self) -> list[Link]:
        """The open links (tests, diagnostics)."""
        return [link for link in self._links.values() if link.is_open]

    def state(self) -> list[dict[str, Any]]:
        """The links up now, as the controller is told of them (``LINKS``), by the other router's id."""
        return [
            {"id": link.link_id, "routerId": link.peer_id, "dialed": link.dialed, "protocol": "tls"}
            for link in sorted(self.links(), key=lambda link: link.peer_id)
        ]

    # -- circuits this router opens ------------------------------------------------------------
    async def open_circuit(
        self, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """A circuit to ``circuit``'s terminator on another router for ``dialer`` (a Connect,
        ``request``): the far end, and the public key to show the dialer. Returns with the dialer
        still connecting; :class:`Refused` when the circuit cannot be made."""
        peer_id = circuit.router_id
        if not await self._wait_for(lambda: self.link(peer_id) is not None, self.wait_seconds):
            raise Refused(ERROR_INTERNAL, f"no link to router {peer_id}")
        link = self._links[peer_id]
        far = link.new_circuit()
        dial = proto.dial(
            far.circuit_id,
            {
                "terminatorId": circuit.terminator_id,
                "serviceId": circuit.service_id,
                "serviceName": circuit.service_name,
                "sessionId": circuit.session_id,
                "callerId": circuit.caller_id,
                "binding": circuit.binding,
                "address": circuit.address,
                "instanceId": circuit.instance_id,
            },
        )
        for key in (PUBLIC_KEY, APP_DATA):
            if key in request.headers:
                dial.headers[key] = request.headers[key]
        try:
            reply = await link.channel.request(dial, self.dial_seconds)
        except TimeoutError:
            far.end("the dial was given up")
            raise Refused(ERROR_INTERNAL, f"router {peer_id} did not answer the dial in time") from None
        except ChannelClosed:
            far.forget()
            raise Refused(ERROR_INTERNAL, f"the link to router {peer_id} was lost") from None
        if reply.content_type != RESULT or not reply.flag(RESULT_SUCCESS):
            far.forget()
            reason = reply.body.decode("utf-8", "replace") or f"router {peer_id} refused the dial"
            raise Refused(reply.u32(ERROR_CODE) or ERROR_INTERNAL, reason)
        if far.state is State.CLOSED:  # the link went, or the other side closed at once
            raise Refused(ERROR_INTERNAL, far.close_reason or f"the link to router {peer_id} was lost")
        if dialer.state is not State.CONNECTING:
            far.end(dialer.close_reason or "the dialer went away")
            raise Refused(ERROR_INTERNAL, dialer.close_reason or "closed")
        far.join(dialer)

        def attach() -> None:  # after the caller has joined the dialer to ``far``
            if far.state is State.CLOSED:
                return
            if dialer.peer is not far:
                far.end("the dialer went away")
                return
            far.attach()

        asyncio.get_running_loop().call_soon(attach)
        return far, reply.headers.get(PUBLIC_KEY)

    # -- circuits other routers open -----------------------------------------------------------
    def _take_dial(self, link: Link, message: Message) -> None:
        """A ``DIAL`` from the other router: checked and its circuit registered at once (a
        ``CLOSE`` right behind it finds it), then the terminator is dialed."""
        circuit_id = message.u32(proto.CIRCUIT_ID)
        problem = None
        fields: dict[str, str] = {}
        try:
            body = json.loads(message.body)
        except ValueError:
            body = None
        names = ("terminatorId", "serviceId", "serviceName", "sessionId", "callerId", "binding", "address")
        if circuit_id is None or not link.is_peers(circuit_id):
            problem = "a dial needs a circuit id of the dialing router's"
        elif circuit_id in link.circuits:
            problem = f"circuit {circuit_id} is in use"
        elif len(link.circuits) >= proto.MAX_CIRCUITS:
            problem = "too many circuits on this link"
        elif not isinstance(body, dict) or not all(
            isinstance(body.get(k, ""), str) for k in (*names, "instanceId")
        ):
            problem = "a dial's body must be an object of strings"
        elif not body.get("terminatorId"):
            problem = "a dial needs a terminator id"
        else:
            fields = {k: body.get(k, "") for k in (*names, "instanceId")}
        if problem is not None or circuit_id is None:
            log.info("%s: refusing a dial: %s", link.name, problem)
            link.send(_failure(message, problem or "bad dial", ERROR_INTERNAL))
            return
        far = LinkCircuit(link, circuit_id)
        link.circuits[circuit_id] = far
        self._spawn(self._serve_dial(link, message, far, fields))

    async def _serve_dial(
        self, link: Link, message: Message, far: LinkCircuit, fields: dict[str, str]
    ) -> None:
        circuit_id = far.circuit_id
        if far.closed:  # closed by the other router before it could start
            return
        circuit = Circuit(
            session_id=fields["sessionId"],
            service_id=fields["serviceId"],
            service_name=fields["serviceName"],
            caller_id=fields["callerId"],
            terminator_id=fields["terminatorId"],
            router_id=self.router_id,
            binding=fields["binding"],
            address=fields["address"],
            instance_id=fields["instanceId"],
            path=(link.peer_id, self.router_id),
        )
        request = Message(CONNECT)
        for header in (PUBLIC_KEY, APP_DATA):
            if header in message.headers:
                request.headers[header] = message.headers[header]
        try:
            local, key = await self.edge.open_link_circuit(circuit, far, request)
        except Refused as ex:
            far.forget()
            log.info(
                "%s: circuit %d to %s refused: %s", link.name, circuit_id, circuit.terminator_id, ex.reason
            )
            link.send(_failure(message, ex.reason, ex.code))
            return
        except Exception:
            far.forget()
            log.exception("%s: circuit %d: dialing the terminator failed", link.name, circuit_id)
            link.send(_failure(message, "internal error", ERROR_INTERNAL))
            return
        if far.closed:  # the link went while a far end took its time
            local.end(far.close_reason or "closed")
            return
        far.join(local)
        far.attach()
        answer = result(message, True)
        if key is not None and PUBLIC_KEY in message.headers:
            answer.headers[PUBLIC_KEY] = key
        link.send(answer)
        log.debug("%s: circuit %d to %s connected", link.name, circuit_id, circuit.service_name)

    # -- dialing -------------------------------------------------------------------------------
    def _should_dial(self, peer: RouterLink) -> bool:
        return proto.should_dial(self.router_id, self.listener_url, peer.id, peer.link_listener)

    async def _keep(self, peer_id: str) -> None:
        """Keep a link to ``peer_id`` while it is listed and this router is the one to dial."""
        delay = self.backoff_first
        while not self._stopping:
            peer = self._listed.get(peer_id)
            if peer is None or not self._should_dial(peer):
                return
            link = self.link(peer_id)
            if link is None:
                link = await self._dial(peer)
            if link is not None:
                delay = self.backoff_first
                assert link.channel.closed is not None
                await link.channel.closed.wait()
                if self._stopping:
                    return
            await asyncio.sleep(random.uniform(delay / 2, delay))
            if link is None:
                delay = min(delay * 2, self.backoff_max)

    async def _dial(self, peer: RouterLink) -> Link | None:
        """One attempt at a link to ``peer``; the link, open, or None."""
        try:
            host, port = parse_address(peer.link_listener)
        except ValueError as ex:
            log.warning("router %s: %s", peer.id, ex)
            return None
        link = Link(self, dialed=True, peer_id=peer.id)
        self._all.add(link)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: link.channel,
                    host,
                    port,
                    ssl=self.client_context,
                    server_hostname=host,
                    ssl_handshake_timeout=self.dial_seconds,
                ),
                self.dial_seconds * 2,
            )
            named = common_name(link.channel)
            if named != peer.id:
                log.warning(
                    "router %s's link listener %s presents the certificate of %r: closing",
                    peer.id,
                    peer.link_listener,
                    named,
                )
                link.close("not the router dialed")
                return None
            reply = await link.channel.request(proto.hello(self.router_id, link.link_id), self.dial_seconds)
        except (OSError, TimeoutError, ChannelClosed) as ex:
            log.info(
                "cannot link to router %s at %s: %s", peer.id, peer.link_listener, ex or type(ex).__name__
            )
            link.close("dialing failed")
            return None
        except BaseException:
            link.close("dialing stopped")
            raise
        if reply.content_type != RESULT or not reply.flag(RESULT_SUCCESS):
            log.warning(
                "router %s refused the link: %s",
                peer.id,
                reply.body.decode("utf-8", "replace") or "no reason",
            )
            link.close("refused")
            return None
        try:
            answered = json.loads(reply.body).get("linkId")
        except (ValueError, AttributeError):
            answered = None
        link.link_id = proto.link_id(answered) or link.link_id
        if self._stopping or peer.id not in self._listed or not self._register(link):
            link.close("not wanted any more")
            return None
        return link

    # -- accepting -----------------------------------------------------------------------------
    def _inbound(self) -> Channel:
        link = Link(self, dialed=False)
        self._all.add(link)
        return link.channel

    def _admitting(self, link: Link) -> bool:
        return link in self._admissions

    async def _admit(self, link: Link, hello: Message) -> None:
        """The hello of a link another router dialed: let in the router its certificate names if
        the controller lists it (waiting a little for the list), else refuse and close."""
        self._admissions.add(link)
        try:
            named = common_name(link.channel)
            try:
                said = json.loads(hello.body)
                claimed, named_link = said.get("routerId"), said.get("linkId")
            except (ValueError, AttributeError):
                claimed = named_link = None
            link.link_id = proto.link_id(named_link) or proto.new_link_id()
            problem = None
            if not named:
                problem = "no certificate"
            elif claimed != named:
                problem = f"the hello names {claimed!r}, the certificate {named!r}"
            elif named == self.router_id:
                problem = "a link to itself"
            elif not await self._wait_for(lambda: named in self._listed, self.wait_seconds):
                problem = f"router {named} is not one the controller lists"
            elif not self._current_certificate(link, named):
                problem = f"router {named} presented a certificate it no longer holds"
            if link.phase is not Phase.HELLO or not link.channel.is_open:
                return
            link.peer_id = named
            if problem is None and (self._stopping or not self._register(link)):
                problem = "a link to this router is up already"
            if problem is not None:
                log.warning("refusing a link from %s: %s", named or "an unnamed peer", problem)
                link.send(result(hello, False, problem))
                link.close(problem)
                return
            link.send(result(hello, True, json.dumps({"routerId": self.router_id, "linkId": link.link_id})))
        finally:
            self._admissions.discard(link)

    def _current_certificate(self, link: Link, router_id: str) -> bool:
        """Whether the dialing peer's certificate is the router's current one, as the controller
        listed it (a re-enrolled or extended router's old certificate chains to our CA and names
        the router, but no longer identifies it)."""
        listed = self._listed.get(router_id)
        expected = listed.fingerprint if listed is not None else ""
        if not expected:
            return True
        chain = link.channel.peer_chain
        return bool(chain) and hashlib.sha1(chain[0]).hexdigest() == expected

    # -- the set of links ----------------------------------------------------------------------
    def _register(self, link: Link) -> bool:
        """``link`` is open; an earlier link to the same router gives way to it unless that one is
        the preferred of the two (:func:`channel.link.preferred`). Whether it was registered."""
        current = self.link(link.peer_id)
        if current is not None and current is not link:
            same_dialer = current.dialer_id == link.dialer_id
            if not same_dialer and proto.preferred(current.dialer_id, link.dialer_id) == current.dialer_id:
                return False
        self._links[link.peer_id] = link
        if current is not None and current is not link:
            current.close("replaced by a newer link")
        log.info("%s: up (%s)", link.name, link.link_id)
        link.opened()
        self._wake()
        self._report()
        return True

    def _gone(self, link: Link) -> None:
        self._all.discard(link)
        if link.peer_id and self._links.get(link.peer_id) is link:
            del self._links[link.peer_id]
            self._report()
        self._wake()

    def _report(self) -> None:
        """The links changed: ``on_change`` is told once this turn of the event loop is over."""
        if self._report_due or self.on_change is None:
            return
        try:
            asyncio.get_running_loop().call_soon(self._send_report)
        except RuntimeError:  # the loop is gone: so is the control connection
            return
        self._report_due = True

    def _send_report(self) -> None:
        self._report_due = False
        if self.on_change is None:
            return
        try:
            self.on_change(self.state())
        except Exception:
            log.exception("telling the controller of the links failed")

    def _start_heartbeats(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._heartbeats(), name="link heartbeats")

    async def _heartbeats(self) -> None:
        tick = min(1.0, self.heartbeat_seconds, self.silent_seconds / 2)
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for link in list(self._links.values()):
                if now - link.channel.last_received > self.silent_seconds:
                    log.warning("%s: nothing heard for %.0f s: closing", link.name, self.silent_seconds)
                    link.channel.abort(TimeoutError("link silent"))
                elif now - link.last_beat >= self.heartbeat_seconds:
                    link.last_beat = now
                    link.send(Message(HEARTBEAT).set_u64(HEARTBEAT_REQUEST, time.time_ns()))

    # -- helpers -------------------------------------------------------------------------------
    def _wake(self) -> None:
        self._changed.set()

    async def _wait_for(self, condition: Callable[[], bool], timeout: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition():
            left = deadline - loop.time()
            if left <= 0 or self._stopping:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("link task failed", exc_info=task.exception())


def _failure(request: Message, reason: str, code: int) -> Message:
    answer = result(request, False, reason)
    return answer.set_u32(ERROR_CODE, code)
