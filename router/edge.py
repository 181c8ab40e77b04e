"""The router's edge listener: the TLS port OpenZiti SDKs open their channels to, Dial and Bind on.

An SDK context opens one channel per router. Its first message is a hello naming its API
session (header 1002); the listener answers only once the router holds that session (pushed by
the controller: :class:`~router.ports.ApiSessions`, waited for a few seconds) and the leaf
certificate the SDK presented is one of the session's, else it closes the connection unanswered.
A hello may instead carry an OIDC access token (OpenZiti's Go SDK in HA mode), which the router
verifies itself (:mod:`router.tokens`) and which UpdateToken replaces on the open channel.
After that the channel carries latency probes (answered at once) and the edge protocol
(:mod:`channel.edge`), connection by connection; the SDK numbers its connections itself, so
every connection is known by (channel, conn id).

- Bind: the controller registers a terminator for the Bind session
  (:meth:`~router.ports.ControllerPort.create_terminator`); the router keeps the terminator id ->
  bind, answers StateConnected, and removes the terminator when the bind or its channel ends.
- Connect: the controller checks the Dial session and picks a terminator
  (:meth:`~router.ports.ControllerPort.create_circuit`). The dialer's connection is then joined
  to a *far end* (:class:`End`): for a terminator bound on this router, a new connection on the
  binder's channel (Dial -> DialSuccess -> StateConnected to both sides). Router-hosted servers
  (``host.v1``: a TCP or UDP connection the router opens itself, :mod:`router.hosting`) and
  terminators on other routers (links) are further kinds of :class:`End`:
  :meth:`EdgeListener._open_far_end` is where they plug in.
- Data is passed on message by message, with the connection id of the receiving side and its
  own sequence counter, body and flags untouched (end-to-end encrypted streams depend on it);
  a slow reader holds back the channel that writes to it (:meth:`channel.connection.Channel.
  relay`). StateClosed ends both sides; the end of a channel ends all of its connections.
- Refusals answer the Connect or Bind with StateClosed, the reason and its error code; for a
  bad session the text is exactly ``Invalid Session``, on which the SDK fetches a new session
  and tries again.
- With no controller to ask, established connections go on, and for a bounded time the router
  decides alone from what it holds (:mod:`router.offline`): hellos from held API sessions, and
  Dials it was granted before to a terminator at hand; what it cannot decide is refused as
  OpenZiti's router does (``no controller available, cannot create circuit``, no error code).

Nothing an SDK sends may hurt another channel: unknown connection ids, Data before a connection
is up, unasked-for replies and odd bodies are dropped (or answered with StateClosed), frames are
bounded (:mod:`channel.frames`), and so are the connections per channel. The control side drives
the listener through :class:`~router.ports.EdgePort` (sessions ended, API sessions removed,
terminators the controller does not know).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import itertools
import logging
import random
import secrets
import ssl
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar, cast

import jwt

from channel.connection import Channel, ChannelClosed
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
    ERROR_INTERNAL,
    ERROR_INVALID_PRECEDENCE,
    ERROR_INVALID_SESSION,
    ERROR_INVALID_TERMINATOR,
    FLAGS,
    HEALTH_EVENT,
    INVALID_SESSION_TEXT,
    PRECEDENCE,
    PRECEDENCES,
    PUBLIC_KEY,
    SEQ,
    SESSION_TOKEN,
    STATE_CLOSED,
    STATE_CONNECTED,
    TERMINATOR_IDENTITY,
    UNBIND,
    UPDATE_BIND,
    UPDATE_TOKEN,
    UPDATE_TOKEN_FAILURE,
    UPDATE_TOKEN_SUCCESS,
)
from channel.frames import CONNECTION_ID, HELLO, HELLO_VERSION, LATENCY, MAX_HELLO_BODY_BYTES, Message, result
from router.offline import NO_CONTROLLER_CIRCUIT, NO_CONTROLLER_TERMINATOR, Offline
from router.ports import (
    ApiSession,
    ApiSessions,
    Circuit,
    ControllerPort,
    HostedService,
    Refused,
    Unavailable,
    version_text,
)
from router.tokens import MAX_TOKEN_CHARS, AccessClaims, TokenRefused, is_bearer

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Seconds from the end of the TLS handshake to the hello; the handshake itself may take this long.
HELLO_SECONDS = 5.0
HANDSHAKE_SECONDS = 20.0
#: Seconds a hello waits for the controller to push its API session.
API_SESSION_WAIT_SECONDS = 5.0
#: Seconds a Dial waits for the binding SDK's DialSuccess or DialFailed.
DIAL_SECONDS = 5.0
#: Connections and binds one channel may hold at once (an SDK context holds a handful).
MAX_CONNECTIONS = 4096
#: What may arrive between a hello and its answer (an SDK sends nothing there; more closes).
MAX_EARLY_MESSAGES = 16
MAX_EARLY_BYTES = 64 * 1024
#: Bytes a channel may leave unread, where no back-pressure holds the sender back, before it is
#: closed: the router's own answers to a peer that keeps asking and never reads, and data an SDK
#: sends itself (a Dial to its own bind on the same channel).
MAX_UNREAD_BYTES = 32 * 1024 * 1024
#: Characters of an SDK's close reason passed on to the other side.
MAX_REASON_CHARS = 512
#: The address of a terminator an SDK hosts: this prefix and the Bind session's token.
HOSTED_PREFIX = "hosted:"


def fingerprint(der: bytes) -> str:
    """OpenZiti's certificate fingerprint: lowercase hex SHA-1 of the DER."""
    return hashlib.sha1(der, usedforsecurity=False).hexdigest()


#: Terminator precedences, best first (the controller's order of choice).
PRECEDENCE_RANK = {"required": 0, "default": 1, "failed": 2}


class _Refusal(Exception):
    """A Connect or Bind that cannot go on: answered with StateClosed, ``reason`` and ``code``
    (None: no error code header, as OpenZiti's router answers when it has no controller)."""

    def __init__(self, reason: str, code: int | None = ERROR_INTERNAL) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def _state_closed(
    conn_id: int, reason: str, *, code: int | None = None, answering: Message | None = None
) -> Message:
    """StateClosed on ``conn_id``; the reply to ``answering`` when given."""
    message = Message(STATE_CLOSED, reason.encode())
    message.set_u32(CONN_ID, conn_id).set_u32(SEQ, 0)
    if code is not None:
        message.set_u32(ERROR_CODE, code)
    if answering is not None:
        message.reply_to(answering)
    return message


def _kid(token: str) -> str:
    """The ``kid`` a JWT's header names ("" when there is none or the header is unreadable)."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.PyJWTError:
        return ""
    return kid if isinstance(kid, str) else ""


def _text(raw: bytes, limit: int | None = None) -> str:
    text = raw.decode("utf-8", "replace")
    return text if limit is None else text[:limit]


def _token(body: bytes) -> str:
    """A session token from a Connect or Bind body ("" when it is no text)."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return ""


class State(enum.Enum):
    """Where a connection or a bind stands (CONNECTING: the controller or the binder is asked)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class End(ABC):
    """One end of a relayed connection, as the other end sees it.

    The dialer's connection is one; what it is joined to (its *far end*) is another: an SDK's
    connection on this router (:class:`SdkConnection`), and later a TCP connection the router
    opens itself (router-hosted services) or a circuit over a link to another router."""

    __slots__ = ()

    @abstractmethod
    def deliver(self, message: Message, source: Channel | None) -> None:
        """Pass on a Data message from the other end (its body and Flags as they came), in order.
        ``source`` is the channel it was read from: held back while this end cannot take more."""

    @abstractmethod
    def end(self, reason: str) -> None:
        """The other end is gone: close this one with ``reason`` and forget it (no call back)."""


class HostedServices(Protocol):
    """The services this router hosts itself, as the listener uses them (``router.hosting``)."""

    def hosts(self, terminator_id: str) -> bool:
        """Whether the terminator is one of this router's hosted services'."""
        ...

    async def open(self, circuit: Circuit, dialer: End, request: Message) -> tuple[End, bytes | None]:
        """The connection to the service's server, made for ``dialer`` (still connecting), and the
        public key to show it; :class:`~router.ports.Refused` when it cannot be made."""
        ...

    def terminator_ids(self) -> list[str]: ...

    def drop_terminators(self, terminator_ids: Iterable[str]) -> None: ...

    def services(self) -> dict[str, HostedService]:
        """The services hosted, by id."""
        ...

    def terminators(self) -> dict[str, str]:
        """Service id -> the terminator held for it."""
        ...


class RouterLinks(Protocol):
    """The links to other routers, as the listener uses them (``router.links``)."""

    async def open_circuit(
        self, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """A circuit over the link to the router of ``circuit``'s terminator for ``dialer`` (still
        connecting when it returns): the far end, and the public key to show the dialer;
        :class:`~router.ports.Refused` when it cannot be made."""
        ...

    def link(self, peer_id: str) -> object | None:
        """The open link to router ``peer_id``, if any."""
        ...


class SdkConnection(End):
    """A connection of an SDK on one of its channels: a Connect it sent (``dialer``), or one it
    accepted on a bind (DialSuccess)."""

    __slots__ = (
        "_seq",
        "circuit_id",
        "close_reason",
        "conn_id",
        "dialer",
        "peer",
        "sdk",
        "session_id",
        "session_token",
        "state",
    )

    def __init__(self, sdk: SdkChannel, conn_id: int, *, dialer: bool, session_token: str = "") -> None:
        self.sdk = sdk
        self.conn_id = conn_id
        self.dialer = dialer
        self.session_token = session_token
        self.session_id = ""
        #: The controller's id of the circuit a dialer's Connect was granted ("" otherwise).
        self.circuit_id = ""
        self.state = State.CONNECTING
        self.peer: End | None = None
        #: Why the router ended it while it was connecting (None: not ended, or by the SDK).
        self.close_reason: str | None = None
        self._seq = itertools.count(1)

    def __repr__(self) -> str:
        return f"<conn {self.sdk.name}/{self.conn_id} {self.state.value}>"

    def deliver(self, message: Message, source: Channel | None) -> None:
        if self.state is not State.CONNECTED:
            return
        out = Message(DATA, message.body)
        out.set_u32(CONN_ID, self.conn_id).set_u32(SEQ, next(self._seq))
        flags = message.headers.get(FLAGS)
        if flags is not None:
            out.headers[FLAGS] = flags
        self.sdk.channel.relay(out, source)
        if source is self.sdk.channel:  # a connection to a bind of the same channel: nothing to hold
            self.sdk.check_unread()

    def end(self, reason: str) -> None:
        if self.state is State.CLOSED:
            return
        was = self.state
        self.state = State.CLOSED
        self.peer = None
        self.sdk.forget(self.conn_id, self)
        if was is State.CONNECTING:
            self.close_reason = reason  # the Connect's own answer says it
            return
        message = Message(STATE_CLOSED, reason.encode())
        message.set_u32(CONN_ID, self.conn_id).set_u32(SEQ, next(self._seq))
        self.sdk.send(message)

    def connected(self, peer: End) -> None:
        self.state = State.CONNECTED
        self.peer = peer

    def closed_by_sdk(self, reason: str) -> None:
        """The SDK sent StateClosed (or its channel went): the other end ends too."""
        if self.state is State.CLOSED:
            return
        peer = self.peer
        self.state = State.CLOSED
        self.peer = None
        self.sdk.forget(self.conn_id, self)
        if peer is not None:
            peer.end(reason)

    def end_both(self, reason: str) -> None:
        """The router ends this connection and its far end."""
        peer = self.peer
        self.end(reason)
        if peer is not None:
            peer.end(reason)


class Bind:
    """An SDK's Bind on one of its channels: the terminator the controller made for it, and what
    the SDK asked for (its cost, precedence and instance id)."""

    __slots__ = (
        "conn_id",
        "cost",
        "instance_id",
        "precedence",
        "public_key",
        "sdk",
        "service_id",
        "session_id",
        "state",
        "terminator_id",
        "token",
    )

    def __init__(
        self,
        sdk: SdkChannel,
        conn_id: int,
        token: str,
        public_key: bytes | None,
        *,
        cost: int = 0,
        precedence: str = "default",
        instance_id: str = "",
    ) -> None:
        self.sdk = sdk
        self.conn_id = conn_id
        self.token = token
        self.public_key = public_key
        self.cost = cost
        self.precedence = precedence
        self.instance_id = instance_id
        self.terminator_id = ""
        self.session_id = ""
        self.service_id = ""
        self.state = State.CONNECTING

    def __repr__(self) -> str:
        return f"<bind {self.sdk.name}/{self.conn_id} {self.terminator_id or '-'} {self.state.value}>"


class Phase(enum.Enum):
    """Where an SDK channel stands."""

    NEW = "new"  # no message yet
    HELLO = "hello"  # the hello is being checked
    OPEN = "open"
    CLOSED = "closed"


class SdkChannel:
    """One SDK channel's state and message handling (the :class:`Channel`'s handler)."""

    def __init__(self, listener: EdgeListener, number: int) -> None:
        self.listener = listener
        self.number = number
        self.name = f"sdk#{number}"
        self.channel: Channel = Channel(
            self,
            name=self.name,
            first_body_limit=MAX_HELLO_BODY_BYTES,
            first_message_timeout=listener.hello_seconds,
            on_connected=listener._channel_made,
        )
        self.phase = Phase.NEW
        self.api_session: ApiSession | None = None
        #: The claims of the OIDC access token the channel was opened or last updated with (None:
        #: opened with a legacy API-session token).
        self.bearer: AccessClaims | None = None
        #: Fingerprints of the certificates the SDK presented, leaf first.
        self.fingerprints: list[str] = []
        self.conns: dict[int, SdkConnection | Bind] = {}
        self._early: list[Message] = []
        self._early_bytes = 0
        self._hello_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<{self.name} {self.phase.value} conns={len(self.conns)}>"

    @property
    def is_open(self) -> bool:
        return self.phase is Phase.OPEN and self.channel.is_open

    @property
    def held(self) -> int:
        """Messages held until the hello is answered."""
        return len(self._early)

    # -- Handler -------------------------------------------------------------------------------
    def on_message(self, channel: Channel, message: Message) -> None:
        if self.phase is Phase.OPEN:
            self.dispatch(message)
        elif self.phase is Phase.NEW:
            if message.content_type != HELLO:
                log.info(
                    "%s: first message of content type %d, not a hello: closing",
                    self.name,
                    message.content_type,
                )
                channel.close()
                return
            self.phase = Phase.HELLO
            self._hello_task = self.listener._spawn(self.listener._hello(self, message))
        elif self.phase is Phase.HELLO:
            self._early.append(message)
            self._early_bytes += len(message.body) + sum(len(v) for v in message.headers.values())
            if len(self._early) > MAX_EARLY_MESSAGES or self._early_bytes > MAX_EARLY_BYTES:
                log.info("%s: too much sent before the hello was answered: closing", self.name)
                channel.abort()

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        phase, self.phase = self.phase, Phase.CLOSED
        self._early.clear()
        task = self._hello_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        log.log(
            logging.INFO if phase is Phase.OPEN else logging.DEBUG,
            "%s: closed (%s)%s",
            self.name,
            phase.value,
            f": {error}" if error is not None else "",
        )
        self.listener._channel_gone(self)

    # -- after the hello -----------------------------------------------------------------------
    def opened(self, session: ApiSession) -> list[Message]:
        """The hello was accepted; what arrived meanwhile, to handle now."""
        self.phase = Phase.OPEN
        self.api_session = session
        early, self._early = self._early, []
        self._early_bytes = 0
        return early

    def dispatch(self, message: Message) -> None:
        kind = message.content_type
        if kind == LATENCY:
            self.send(result(message))
            return
        if kind == UPDATE_TOKEN:
            self.send(self.listener.update_token(self, message))
            return
        handler = _HANDLERS.get(kind)
        if handler is None:
            log.debug("%s: ignoring %r", self.name, message)
            return
        conn_id = message.u32(CONN_ID)
        if conn_id is None:
            log.debug("%s: ignoring %r: no connection id", self.name, message)
            return
        handler(self, message, conn_id)

    def send(self, message: Message) -> None:
        """Send one of the router's own messages (not relayed data)."""
        channel = self.channel
        if not channel.is_open:
            return
        channel.send(message)
        self.check_unread()

    def check_unread(self) -> None:
        """Close the channel if its peer leaves more than :data:`MAX_UNREAD_BYTES` unread that no
        back-pressure holds back (the router's own answers; data it sent to itself)."""
        transport = self.channel.transport
        if transport is not None and transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            log.info("%s: the peer does not read what it is sent: closing", self.name)
            self.channel.abort()

    def forget(self, conn_id: int, conn: SdkConnection | Bind) -> None:
        """``conn`` is over (a dialer's circuit is reported ended)."""
        if self.conns.get(conn_id) is conn:
            del self.conns[conn_id]
        if isinstance(conn, SdkConnection) and conn.circuit_id:
            self.listener._circuit_over(conn)

    def _room_for(self, message: Message, conn_id: int) -> bool:
        """Whether ``conn_id`` is free for a new connection or bind; if not, the refusal is sent."""
        reason = None
        if conn_id in self.conns:
            reason = f"connection id {conn_id} is in use"
        elif len(self.conns) >= MAX_CONNECTIONS:
            reason = f"too many connections on this channel (at most {MAX_CONNECTIONS})"
        if reason is None:
            return True
        log.info("%s: refusing content type %d: %s", self.name, message.content_type, reason)
        self.send(_state_closed(conn_id, reason, code=ERROR_INTERNAL, answering=message))
        return False

    # -- edge messages (conn id known) ---------------------------------------------------------
    def _on_connect(self, message: Message, conn_id: int) -> None:
        if not self._room_for(message, conn_id):
            return
        dialer = SdkConnection(self, conn_id, dialer=True, session_token=_token(message.body))
        self.conns[conn_id] = dialer
        self.listener._spawn(self.listener._connect(self, dialer, message))

    def _on_bind(self, message: Message, conn_id: int) -> None:
        old = self.conns.get(conn_id)
        if isinstance(old, Bind):  # an SDK whose Bind went unanswered binds again on the same id
            self.listener._unbound(old)
        if not self._room_for(message, conn_id):
            return
        raw = message.headers.get(PRECEDENCE)
        precedence = PRECEDENCES.get(raw[0]) if raw else "default"
        if precedence is None:
            self.send(
                _state_closed(conn_id, "invalid precedence", code=ERROR_INVALID_PRECEDENCE, answering=message)
            )
            return
        raw = message.headers.get(COST)
        cost = int.from_bytes(raw[:2], "little") if raw else 0  # 0.29.3 sends 4 bytes: the first 2 count
        bind = Bind(
            self,
            conn_id,
            _token(message.body),
            message.headers.get(PUBLIC_KEY),
            cost=cost,
            precedence=precedence,
            instance_id=message.text(TERMINATOR_IDENTITY) or "",
        )
        self.conns[conn_id] = bind
        self.listener._spawn(self.listener._bind(self, bind, message, cost, precedence))

    def _on_data(self, message: Message, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if not isinstance(conn, SdkConnection) or conn.state is not State.CONNECTED or conn.peer is None:
            log.debug("%s: dropping data for connection %d (%r)", self.name, conn_id, conn)
            return
        conn.peer.deliver(message, self.channel)

    def _on_state_closed(self, message: Message, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is None:
            log.debug("%s: StateClosed for unknown connection %d", self.name, conn_id)
        elif isinstance(conn, Bind):
            self.listener._unbound(conn)
        else:
            conn.closed_by_sdk(_text(message.body, MAX_REASON_CHARS))

    def _on_unbind(self, message: Message, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if isinstance(conn, Bind):
            self.listener._unbound(conn)
            self.send(_state_closed(conn_id, "unbind successful", answering=message))
        else:
            log.debug("%s: Unbind for connection %d that is no bind", self.name, conn_id)

    def _on_dial_reply(self, message: Message, conn_id: int) -> None:
        """A DialSuccess or DialFailed nobody waits for (any more): the binder's new connection
        is told it will not be used."""
        if message.content_type == DIAL_SUCCESS and message.reply_for is not None:
            self.send(_state_closed(conn_id, "the dial is over", answering=message))
        log.debug("%s: unexpected %r", self.name, message)

    def _on_ignored(self, message: Message, conn_id: int) -> None:
        log.debug("%s: ignoring %r (not handled yet)", self.name, message)


_HANDLERS = {
    CONNECT: SdkChannel._on_connect,
    BIND: SdkChannel._on_bind,
    DATA: SdkChannel._on_data,
    STATE_CLOSED: SdkChannel._on_state_closed,
    UNBIND: SdkChannel._on_unbind,
    DIAL_SUCCESS: SdkChannel._on_dial_reply,
    DIAL_FAILED: SdkChannel._on_dial_reply,
    UPDATE_BIND: SdkChannel._on_ignored,
    HEALTH_EVENT: SdkChannel._on_ignored,
}


class EdgeListener:
    """The edge listener: SDK channels, their binds and connections (implements
    :class:`~router.ports.EdgePort`).

    ``ssl_context`` is the router's server context taking client certificates of any issuer
    (:func:`pki.tls.accept_any_client_certificate`); ``version`` goes into the hello answer
    (:func:`router.ports.version_text` completes it to five fields)."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext,
        controller: ControllerPort,
        api_sessions: ApiSessions,
        router_id: str,
        version: str,
        hello_seconds: float = HELLO_SECONDS,
        api_session_wait: float = API_SESSION_WAIT_SECONDS,
        dial_seconds: float = DIAL_SECONDS,
    ) -> None:
        self.ssl_context = ssl_context
        self.controller = controller
        self.api_sessions = api_sessions
        self.router_id = router_id
        self.version = version_text(version)
        self.hello_seconds = hello_seconds
        self.api_session_wait = api_session_wait
        self.dial_seconds = dial_seconds
        self._server: asyncio.Server | None = None
        self._numbers = itertools.count(1)
        #: Every channel past its TLS handshake, and those past their hello by API session id.
        self._channels: set[SdkChannel] = set()
        self._by_api_session: dict[str, set[SdkChannel]] = {}
        self._terminators: dict[str, Bind] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: API sessions whose first channel opened or last closed since the controller was told.
        self._touched: set[str] = set()
        #: The dialers of the circuits the controller granted here, by circuit id, and the ids of
        #: those that ended since the controller was told.
        self._circuits: dict[str, SdkConnection] = {}
        self._ended: list[str] = []
        #: The links to other routers (:mod:`router.links`; set once made), None: no links.
        self.links: RouterLinks | None = None
        #: The services this router hosts itself (:mod:`router.hosting`; set once made), None: none.
        self.hosting: HostedServices | None = None
        #: What the router decides alone while no controller can be asked (:mod:`router.offline`;
        #: settable later), None: nothing.
        self.offline: Offline | None = None

    # -- life ----------------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> None:
        """Listen on ``host``:``port`` (0: any free port, see :attr:`port`)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_channel, host, port, ssl=self.ssl_context, ssl_handshake_timeout=HANDSHAKE_SECONDS
        )
        log.info("edge listener on %s", ", ".join(str(s.getsockname()) for s in self._server.sockets))

    @property
    def port(self) -> int:
        """The port listened on (after :meth:`start`)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the edge listener is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, grace: float = 2.0) -> None:
        """Stop listening and close every channel; give the terminator removals this causes up to
        ``grace`` seconds, then cancel what is left."""
        if self._server is not None:
            self._server.close()
        for sdk in list(self._channels):
            sdk.channel.close()
        pending = {t for t in self._tasks if not t.done()}
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- EdgePort ------------------------------------------------------------------------------
    def end_sessions(self, session_ids: Iterable[str], tokens: Iterable[str]) -> None:
        ids = {i for i in session_ids if i}
        toks = {t for t in tokens if t}
        if not ids and not toks:
            return
        if self.offline is not None:
            self.offline.forget_sessions(ids, toks)
        for sdk in list(self._by_api_session_channels()):
            for conn in list(sdk.conns.values()):
                if isinstance(conn, Bind):
                    if conn.session_id in ids or conn.token in toks:
                        self._end_bind(conn, "session ended")
                elif conn.dialer and (conn.session_id in ids or conn.session_token in toks):
                    conn.end_both("session ended")

    def close_api_sessions(self, api_session_ids: Iterable[str]) -> None:
        api_session_ids = list(api_session_ids)
        if self.offline is not None:
            self.offline.forget_api_sessions(api_session_ids)
        for session_id in api_session_ids:
            for sdk in list(self._by_api_session.get(session_id, ())):
                log.info("%s: API session %s is gone: closing", sdk.name, session_id)
                sdk.channel.close()

    def terminator_ids(self) -> list[str]:
        hosted = self.hosting.terminator_ids() if self.hosting is not None else []
        return [*self._terminators, *hosted]

    def drop_terminators(self, terminator_ids: Iterable[str]) -> None:
        terminator_ids = list(terminator_ids)
        for terminator_id in terminator_ids:
            bind = self._terminators.get(terminator_id)
            if bind is not None:
                self._end_bind(bind, "terminator unknown to the controller")
        if self.hosting is not None:  # the services hosted here ask for new ones
            self.hosting.drop_terminators(terminator_ids)

    def api_session_ids(self) -> list[str]:
        return list(self._by_api_session)

    def circuit_ids(self) -> list[str]:
        return list(self._circuits)

    def close_circuits(self, circuit_ids: Iterable[str], reason: str) -> None:
        for circuit_id in circuit_ids:
            dialer = self._circuits.get(circuit_id)
            if dialer is not None:
                log.info("%s: closing circuit %s: %s", dialer.sdk.name, circuit_id, reason)
                dialer.end_both(reason)

    # -- looking in (tests, diagnostics) -------------------------------------------------------
    def channels(self) -> list[SdkChannel]:
        """The channels past their TLS handshake."""
        return list(self._channels)

    def binds(self) -> dict[str, Bind]:
        """The binds holding a terminator, by terminator id."""
        return dict(self._terminators)

    # -- channels ------------------------------------------------------------------------------
    def _new_channel(self) -> Channel:
        return SdkChannel(self, next(self._numbers)).channel

    def _channel_made(self, channel: Channel) -> None:
        sdk = channel.handler
        if isinstance(sdk, SdkChannel):
            self._channels.add(sdk)

    def _by_api_session_channels(self) -> Iterable[SdkChannel]:
        for channels in self._by_api_session.values():
            yield from channels

    async def _hello(self, sdk: SdkChannel, hello: Message) -> None:
        token = hello.text(SESSION_TOKEN) or ""
        chain = sdk.channel.peer_chain
        fingerprints = [fingerprint(der) for der in chain]
        session: ApiSession | None = None
        claims: AccessClaims | None = None
        problem = None
        if not token:
            problem = "no API-session token"
        elif not chain:
            problem = "no client certificate"
        elif is_bearer(token):
            session, claims, problem = await self._bearer_session(token, fingerprints[0])
        else:
            session = await self.api_sessions.wait_for_token(token, self.api_session_wait)
            if session is None:
                problem = "unknown API session"
            elif fingerprints[0] not in session.fingerprints:
                problem = f"certificate {fingerprints[0]} is not one of API session {session.id}'s"
        if sdk.phase is not Phase.HELLO or not sdk.channel.is_open:
            return
        if problem is None and self.offline is not None and not self.offline.admits_hellos():
            problem = (
                f"no controller for {self.offline.absent_for():.0f} s (the grace is "
                f"{self.offline.grace_seconds:g} s): held API sessions open no new channel"
            )
        if problem is not None or session is None:
            log.info("%s: hello refused: %s", sdk.name, problem)
            sdk.channel.close()
            return
        sdk.bearer = claims
        sdk.fingerprints = fingerprints
        early = sdk.opened(session)
        holders = self._by_api_session.setdefault(session.id, set())
        holders.add(sdk)
        if len(holders) == 1:
            self._touch(session.id)
        answer = result(hello)
        answer.set_text(HELLO_VERSION, self.version).set_text(CONNECTION_ID, str(sdk.number))
        sdk.send(answer)
        log.info(
            "%s: hello of %s (API session %s%s) accepted",
            sdk.name,
            session.identity_name,
            session.id,
            ", OIDC" if claims is not None else "",
        )
        try:
            for message in early:
                if not sdk.is_open:
                    break
                sdk.dispatch(message)
        except Exception as ex:
            log.exception("%s: handling early messages failed: closing", sdk.name)
            sdk.channel.abort(ex)

    async def _bearer_session(
        self, token: str, leaf: str
    ) -> tuple[ApiSession | None, AccessClaims | None, str | None]:
        """A JWT hello's API session (docs/dataplane.md §4): the token verified here, then the
        session as the controllers pushed it (waited for), or, while no controller's state is
        held, the token's claims alone; else ``(None, None, why)``."""
        sessions = self.api_sessions
        try:
            claims = self._verify_bearer(token)
        except TokenRefused as ex:
            if sessions.synced.is_set() or sessions.signing_keys.get(_kid(token)) is not None:
                return None, None, f"bearer token refused: {ex}"
            try:  # the keys come with the controllers' state: wait for it, then try once more
                await asyncio.wait_for(sessions.synced.wait(), self.api_session_wait)
                claims = self._verify_bearer(token)
            except (TimeoutError, TokenRefused) as again:
                return None, None, f"bearer token refused: {again}"
        session = await sessions.wait_for_id(claims.api_session_id, self.api_session_wait)
        if claims.api_session_id in sessions.revoked:
            return None, None, f"API session {claims.api_session_id} has ended"
        if session is None and sessions.synced.is_set():
            return None, None, f"API session {claims.api_session_id} is unknown to the controllers"
        if session is None:  # no controller's state to go by: the token alone
            session = ApiSession(
                id=claims.api_session_id,
                token_hash="",
                identity_id=claims.identity_id,
                identity_name=claims.identity_id,
                fingerprints=claims.fingerprints,
            )
        if session.identity_id != claims.identity_id:
            return None, None, f"the token's identity is not API session {session.id}'s"
        if leaf not in session.fingerprints:
            return None, None, f"certificate {leaf} is not one of API session {session.id}'s"
        return session, claims, None

    def _verify_bearer(self, token: str) -> AccessClaims:
        claims = self.api_sessions.signing_keys.verify(token)
        if claims.api_session_id in self.api_sessions.revoked:
            raise TokenRefused(f"API session {claims.api_session_id} has ended")
        return claims

    def update_token(self, sdk: SdkChannel, request: Message) -> Message:
        """UpdateToken (60803) on an open channel: a fresh access token of the channel's identity
        (after a refresh) replaces the one the channel was opened or last updated with. The answer
        is UpdateTokenSuccess (60801), or UpdateTokenFailure (60802) with the reason, and the
        channel stays as it was."""
        current, session = sdk.bearer, sdk.api_session
        problem = None
        claims = None
        if current is None or session is None:
            problem = "the channel was not opened with a bearer token"
        else:
            try:
                claims = self._verify_bearer(_text(request.body, MAX_TOKEN_CHARS + 1))
            except TokenRefused as ex:
                problem = f"bearer token refused: {ex}"
            else:
                if claims.identity_id != current.identity_id:
                    problem = "the token is another identity's"
                elif claims.api_session_id != session.id:
                    problem = self._move(sdk, claims)
        if problem is not None or claims is None:
            log.info("%s: token update refused: %s", sdk.name, problem)
            return Message(UPDATE_TOKEN_FAILURE, (problem or "").encode()).reply_to(request)
        sdk.bearer = claims
        log.info(
            "%s: token updated (API session %s, expires in %.0f s)",
            sdk.name,
            claims.api_session_id,
            claims.expires_at - time.time(),
        )
        return Message(UPDATE_TOKEN_SUCCESS).reply_to(request)

    def _move(self, sdk: SdkChannel, claims: AccessClaims) -> str | None:
        """The SDK logged in again: its channel now belongs to the new API session (which the
        controllers must have pushed; the channel's certificate must be one of its)."""
        session = self.api_sessions.by_id(claims.api_session_id)
        if session is None:
            return f"API session {claims.api_session_id} is unknown to the controllers"
        if session.identity_id != claims.identity_id or (
            sdk.fingerprints and sdk.fingerprints[0] not in session.fingerprints
        ):
            return f"the channel's certificate is not one of API session {session.id}'s"
        self._release(sdk)
        sdk.api_session = session
        holders = self._by_api_session.setdefault(session.id, set())
        holders.add(sdk)
        if len(holders) == 1:
            self._touch(session.id)
        return None

    def _release(self, sdk: SdkChannel) -> None:
        """``sdk`` no longer counts among its API session's channels."""
        if sdk.api_session is not None:
            holders = self._by_api_session.get(sdk.api_session.id)
            if holders is not None:
                holders.discard(sdk)
                if not holders:
                    del self._by_api_session[sdk.api_session.id]
                    self._touch(sdk.api_session.id)

    def _channel_gone(self, sdk: SdkChannel) -> None:
        self._channels.discard(sdk)
        self._release(sdk)
        removed = []
        for conn in list(sdk.conns.values()):
            if isinstance(conn, Bind):
                if conn.state is State.CONNECTED and self._terminators.get(conn.terminator_id) is conn:
                    del self._terminators[conn.terminator_id]
                    removed.append(conn.terminator_id)
                conn.state = State.CLOSED
            else:
                conn.closed_by_sdk("the SDK's channel closed")
        sdk.conns.clear()
        if removed:
            self._remove_at_controller(removed)

    def _touch(self, api_session_id: str) -> None:
        """An API session's first channel opened or its last closed: the controller is told
        (once per turn of the event loop, of what holds then)."""
        if not self._touched:
            try:
                asyncio.get_running_loop().call_soon(self._tell_channels)
            except RuntimeError:  # the loop is gone: so is the control connection
                return
        self._touched.add(api_session_id)

    def _circuit_over(self, dialer: SdkConnection) -> None:
        """A granted circuit's dialer is closed: the controller is told (once per turn of the
        event loop, of every circuit that ended in it)."""
        if self._circuits.get(dialer.circuit_id) is not dialer:
            return
        del self._circuits[dialer.circuit_id]
        if not self._ended:
            try:
                asyncio.get_running_loop().call_soon(self._tell_ended)
            except RuntimeError:  # the loop is gone: so is the control connection
                return
        self._ended.append(dialer.circuit_id)

    def _tell_ended(self) -> None:
        ended, self._ended = self._ended, []
        try:
            self.controller.circuits_ended(ended)
        except Exception:
            log.exception("telling the controller of ended circuits failed")

    def _tell_channels(self) -> None:
        touched, self._touched = self._touched, set()
        opened = sorted(i for i in touched if i in self._by_api_session)
        closed = sorted(i for i in touched if i not in self._by_api_session)
        try:
            self.controller.api_session_channels(opened, closed)
        except Exception:
            log.exception("telling the controller of SDK channels failed")

    # -- binds ---------------------------------------------------------------------------------
    async def _bind(self, sdk: SdkChannel, bind: Bind, request: Message, cost: int, precedence: str) -> None:
        assert sdk.api_session is not None
        try:
            terminator = await self._ask(
                NO_CONTROLLER_TERMINATOR,
                self.controller.create_terminator(
                    session_token=bind.token,
                    api_session_id=sdk.api_session.id,
                    fingerprints=list(sdk.fingerprints),
                    instance_id=request.text(TERMINATOR_IDENTITY) or "",
                    cost=cost,
                    precedence=precedence,
                    has_public_key=bind.public_key is not None,
                    address=HOSTED_PREFIX + bind.token,
                    terminator_id=secrets.token_urlsafe(12),
                ),
            )
        except _Refusal as refusal:
            if bind.state is State.CONNECTING:
                bind.state = State.CLOSED
                sdk.forget(bind.conn_id, bind)
                log.info("%s: bind %d refused: %s", sdk.name, bind.conn_id, refusal.reason)
                sdk.send(_state_closed(bind.conn_id, refusal.reason, code=refusal.code, answering=request))
            return
        if bind.state is not State.CONNECTING or not sdk.is_open:
            self._remove_at_controller([terminator.terminator_id])  # unbound meanwhile
            return
        if terminator.terminator_id in self._terminators:  # the controller's mistake: keep the first
            log.error("the controller gave terminator %s twice", terminator.terminator_id)
            bind.state = State.CLOSED
            sdk.forget(bind.conn_id, bind)
            sdk.send(
                _state_closed(bind.conn_id, "duplicate terminator", code=ERROR_INTERNAL, answering=request)
            )
            return
        bind.terminator_id = terminator.terminator_id
        bind.session_id = terminator.session_id
        bind.service_id = terminator.service_id
        bind.state = State.CONNECTED
        self._terminators[terminator.terminator_id] = bind
        answer = Message(STATE_CONNECTED).reply_to(request)
        for key in (CONN_ID, SEQ):
            if key in request.headers:
                answer.headers[key] = request.headers[key]
        sdk.send(answer)
        log.info("%s: bind %d holds terminator %s", sdk.name, bind.conn_id, terminator.terminator_id)

    def _unbound(self, bind: Bind) -> None:
        """The SDK ended its bind (StateClosed on the bind, Unbind)."""
        was = bind.state
        bind.state = State.CLOSED
        bind.sdk.forget(bind.conn_id, bind)
        if was is State.CONNECTED and self._terminators.get(bind.terminator_id) is bind:
            del self._terminators[bind.terminator_id]
            log.info(
                "%s: bind %d ended: removing terminator %s", bind.sdk.name, bind.conn_id, bind.terminator_id
            )
            self._remove_at_controller([bind.terminator_id])

    def _end_bind(self, bind: Bind, reason: str) -> None:
        """The router ends a bind whose terminator the controller no longer has (its session
        ended, or it is unknown): the SDK is sent StateClosed on it, and binds again if it can."""
        was = bind.state
        bind.state = State.CLOSED
        bind.sdk.forget(bind.conn_id, bind)
        if was is State.CLOSED:
            return
        if was is State.CONNECTING:
            return  # its task removes the terminator it gets
        if self._terminators.get(bind.terminator_id) is bind:
            del self._terminators[bind.terminator_id]
        log.info("%s: ending bind %d (%s): %s", bind.sdk.name, bind.conn_id, bind.terminator_id, reason)
        bind.sdk.send(_state_closed(bind.conn_id, reason))

    def _remove_at_controller(self, terminator_ids: list[str]) -> None:
        async def remove() -> None:
            try:
                await self.controller.remove_terminators(terminator_ids)
            except (Refused, Unavailable) as ex:
                # After a reconnect the hello lists the terminators held; the controller drops the rest.
                log.info("terminators %s not removed at the controller: %s", terminator_ids, ex)

        self._spawn(remove())

    # -- connections ---------------------------------------------------------------------------
    async def _connect(self, sdk: SdkChannel, dialer: SdkConnection, request: Message) -> None:
        assert sdk.api_session is not None
        try:
            if not dialer.session_token:
                raise _Refusal(INVALID_SESSION_TEXT, ERROR_INVALID_SESSION)
            circuit = await self._ask(NO_CONTROLLER_CIRCUIT, self._circuit(sdk, dialer, request))
            dialer.session_id = circuit.session_id
            if circuit.circuit_id:
                dialer.circuit_id = circuit.circuit_id
                self._circuits[circuit.circuit_id] = dialer
                if dialer.state is State.CLOSED:  # closed while the controller was asked
                    self._circuit_over(dialer)
            if dialer.state is not State.CONNECTING:
                raise _Refusal(dialer.close_reason or "closed")
            far, key = await self._open_far_end(circuit, dialer, request)
        except _Refusal as refusal:
            self._refuse(sdk, dialer, request, refusal)
            return
        # No await since the far end was made: the dialer is still connecting.
        dialer.connected(far)
        answer = Message(STATE_CONNECTED).reply_to(request)
        answer.set_u32(CONN_ID, dialer.conn_id).set_u32(SEQ, 0)
        if key is not None and PUBLIC_KEY in request.headers:
            answer.headers[PUBLIC_KEY] = key
        sdk.send(answer)
        log.debug("%s: connection %d to %s connected", sdk.name, dialer.conn_id, circuit.service_name)

    async def _circuit(self, sdk: SdkChannel, dialer: SdkConnection, request: Message) -> Circuit:
        """The controller's answer to a Connect; when no controller can be asked, the router's own
        (:mod:`router.offline`), or :class:`~router.ports.Unavailable`."""
        api_session = sdk.api_session
        assert api_session is not None
        instance_id = request.text(TERMINATOR_IDENTITY) or ""
        has_key = PUBLIC_KEY in request.headers
        try:
            circuit = await self.controller.create_circuit(
                session_token=dialer.session_token,
                api_session_id=api_session.id,
                fingerprints=list(sdk.fingerprints),
                terminator_instance_id=instance_id,
                has_public_key=has_key,
            )
        except Unavailable as ex:
            alone = self._decide_alone(api_session, dialer.session_token, instance_id, has_key)
            if alone is None:
                log.info(
                    "%s: connect %d: no controller to ask (%s), and no decision alone",
                    sdk.name,
                    dialer.conn_id,
                    ex,
                )
                raise
            log.info(
                "%s: connect %d: no controller to ask (%s): granted alone, service %s, terminator %s",
                sdk.name,
                dialer.conn_id,
                ex,
                alone.service_name,
                alone.terminator_id,
            )
            return alone
        if self.offline is not None:
            self.offline.remember(
                dialer.session_token, api_session.id, circuit, with_key=has_key, router_id=self.router_id
            )
        return circuit

    def _decide_alone(
        self, api_session: ApiSession, token: str, instance_id: str, has_key: bool
    ) -> Circuit | None:
        """The circuit the router grants alone to a Dial with ``token`` from ``api_session``, or
        None when it cannot decide (docs/dataplane.md §9)."""
        offline = self.offline
        if offline is None or not token or not offline.within_grace():
            return None
        grant = offline.grant(token)
        if grant is None or grant.api_session_id != api_session.id:
            return None
        if self.api_sessions.by_id(api_session.id) is None:
            return None
        if grant.with_key and not has_key:
            return None  # the service may require end-to-end encryption: only the controller knows
        # (whether on another router, precedence rank, cost, terminator id, binding, address, instance, router)
        found: list[tuple[int, int, int, str, str, str, str, str]] = []
        for bind in self._terminators.values():
            if (
                bind.service_id == grant.service_id
                and bind.state is State.CONNECTED
                and bind.sdk.is_open
                and instance_id in ("", bind.instance_id)
            ):
                rank = PRECEDENCE_RANK.get(bind.precedence, 1)
                found.append(
                    (
                        0,
                        rank,
                        bind.cost,
                        bind.terminator_id,
                        "edge",
                        bind.terminator_id,
                        bind.instance_id,
                        self.router_id,
                    )
                )
        if self.hosting is not None:
            service = self.hosting.services().get(grant.service_id)
            terminator_id = self.hosting.terminators().get(grant.service_id)
            if service is not None and terminator_id and instance_id in ("", service.instance_id):
                rank = PRECEDENCE_RANK.get(service.precedence, 1)
                found.append(
                    (
                        0,
                        rank,
                        service.cost,
                        terminator_id,
                        "tunnel",
                        f"tunnel:{service.id}",
                        service.instance_id,
                        self.router_id,
                    )
                )
        if not found and self.links is not None:
            for far in offline.far_terminators(grant.service_id):
                if self.links.link(far.router_id) is not None and instance_id in ("", far.instance_id):
                    found.append((1, 1, 0, far.id, far.binding, far.address, far.instance_id, far.router_id))
        if not found:
            return None
        best = min(entry[:3] for entry in found)
        chosen = random.choice([entry for entry in found if entry[:3] == best])
        _, _, _, terminator_id, binding, address, instance, router_id = chosen
        return Circuit(
            session_id=grant.session_id,
            service_id=grant.service_id,
            service_name=grant.service_name,
            caller_id=grant.caller_id,
            terminator_id=terminator_id,
            router_id=router_id,
            binding=binding,
            address=address,
            instance_id=instance,
            path=(self.router_id,) if router_id == self.router_id else (self.router_id, router_id),
        )

    def _refuse(self, sdk: SdkChannel, dialer: SdkConnection, request: Message, refusal: _Refusal) -> None:
        closed_by_sdk = dialer.state is State.CLOSED and dialer.close_reason is None
        if dialer.state is not State.CLOSED:
            dialer.state = State.CLOSED
            sdk.forget(dialer.conn_id, dialer)
        if closed_by_sdk:
            return
        log.info("%s: connect %d refused: %s", sdk.name, dialer.conn_id, refusal.reason)
        sdk.send(_state_closed(dialer.conn_id, refusal.reason, code=refusal.code, answering=request))

    async def _open_far_end(
        self, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """The end ``dialer`` is to be joined to, set up, and the public key to show the dialer.
        Returns with the dialer still connecting (else :class:`_Refusal`)."""
        if circuit.router_id != self.router_id:
            return await self._open_link_end(circuit, dialer, request)
        bind = self._terminators.get(circuit.terminator_id)
        if bind is not None:
            return await self._dial_bind(bind, circuit, dialer, request)
        if circuit.binding == "edge" or circuit.address.startswith(HOSTED_PREFIX):
            raise _Refusal(
                f"terminator {circuit.terminator_id} is not bound on this router", ERROR_INVALID_TERMINATOR
            )
        return await self._open_hosted_end(circuit, dialer, request)

    async def _open_link_end(
        self, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """A terminator on another router: a circuit over the link to it (:mod:`router.links`)."""
        if self.links is None:
            raise _Refusal(
                f"service {circuit.service_name} is hosted on router {circuit.router_id}: "
                "this router makes no links",
                ERROR_INVALID_TERMINATOR,
            )
        try:
            return await self.links.open_circuit(circuit, dialer, request)
        except Refused as ex:
            raise _Refusal(ex.reason, ex.code) from None

    async def open_link_circuit(
        self, circuit: Circuit, far: End, request: Message
    ) -> tuple[End, bytes | None]:
        """For :mod:`router.links`: the end on this router of a circuit another router opens over a
        link to ``circuit``'s terminator here (an SDK's bind, or one the router hosts), joined to
        ``far``, the link's end, and the public key to show the dialer. ``far`` stands in for the
        dialer: the dials read its ``state``, ``close_reason`` and ``peer`` and join it as an
        :class:`End`. ``request`` carries the dialer's PublicKey and AppData headers.
        :class:`~router.ports.Refused` when it cannot be made."""
        try:
            return await self._open_far_end(circuit, cast(SdkConnection, far), request)
        except _Refusal as refusal:
            raise Refused(refusal.code or ERROR_INTERNAL, refusal.reason) from None

    async def _open_hosted_end(
        self, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """A server this router dials itself: a service it hosts (``host.v1``, :mod:`router.hosting`)."""
        if self.hosting is None or not self.hosting.hosts(circuit.terminator_id):
            raise _Refusal(
                f"terminator {circuit.terminator_id} ({circuit.binding}) is not hosted by this router",
                ERROR_INVALID_TERMINATOR,
            )
        try:
            return await self.hosting.open(circuit, dialer, request)
        except Refused as ex:
            raise _Refusal(ex.reason, ex.code) from None

    async def _dial_bind(
        self, bind: Bind, circuit: Circuit, dialer: SdkConnection, request: Message
    ) -> tuple[End, bytes | None]:
        """Dial an SDK's bind on this router: its new connection is the far end."""
        binder = bind.sdk
        dial = Message(DIAL, bind.token.encode())
        # CallerId always: the C SDK 0.29.3 binder crashes on a Dial without it.
        dial.set_u32(CONN_ID, bind.conn_id).set_u32(SEQ, 0).set_text(CALLER_ID, circuit.caller_id)
        for key in (PUBLIC_KEY, APP_DATA):
            if key in request.headers:
                dial.headers[key] = request.headers[key]
        try:
            reply = await binder.channel.request(dial, self.dial_seconds)
        except TimeoutError:
            raise _Refusal("the hosting application did not accept in time") from None
        except ChannelClosed:
            raise _Refusal("the hosting application went away") from None
        answer_id = reply.u32(CONN_ID)
        if answer_id is None:
            answer_id = bind.conn_id
        if reply.content_type == DIAL_FAILED:
            raise _Refusal(f"the hosting application refused: {_text(reply.body, MAX_REASON_CHARS)}")
        if reply.content_type != DIAL_SUCCESS or len(reply.body) != 4:
            binder.send(_state_closed(answer_id, "unexpected answer to a dial", answering=reply))
            raise _Refusal("the hosting application answered the dial oddly")
        new_id = int.from_bytes(reply.body, "little")
        if dialer.state is not State.CONNECTING:
            binder.send(_state_closed(answer_id, "the dialer went away", answering=reply))
            raise _Refusal(dialer.close_reason or "closed")
        if not binder.is_open or new_id in binder.conns or len(binder.conns) >= MAX_CONNECTIONS:
            binder.send(_state_closed(answer_id, f"connection id {new_id} is in use", answering=reply))
            raise _Refusal("the hosting application answered with a connection id in use")
        accepted = SdkConnection(binder, new_id, dialer=False, session_token=bind.token)
        accepted.session_id = bind.session_id
        accepted.connected(dialer)
        binder.conns[new_id] = accepted
        answer = Message(STATE_CONNECTED).reply_to(reply)
        answer.set_u32(CONN_ID, answer_id).set_u32(SEQ, 0)
        binder.send(answer)
        return accepted, bind.public_key

    # -- helpers -------------------------------------------------------------------------------
    async def _ask(self, unavailable: str, call: Awaitable[T]) -> T:
        """A controller call; its refusals as :class:`_Refusal` (``Invalid Session`` for codes 2-5);
        no controller to ask, as OpenZiti's router says it: ``unavailable``, with no error code."""
        try:
            return await call
        except Refused as ex:
            if 2 <= ex.code <= 5:
                raise _Refusal(INVALID_SESSION_TEXT, ex.code) from None
            raise _Refusal(ex.reason or "refused by the controller", ex.code) from None
        except Unavailable as ex:
            log.debug("no controller to ask: %s", ex or "unavailable")
            raise _Refusal(unavailable, None) from None
        except _Refusal:
            raise
        except Exception as ex:
            log.exception("asking the controller failed")
            raise _Refusal("internal error") from ex

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("edge task failed", exc_info=task.exception())
