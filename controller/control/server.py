"""The control listener: edge routers connect here (``TRELLIS_CTRL_BIND``) and stay connected.

One :class:`ControlServer` runs on the serving worker's event loop, beside the HTTP server
(``TrellisApp.serve_alongside``). Connections are TLS with the controller's server certificate;
a client certificate of any issuer gets through the handshake (``pki.tls``) and is judged once
the router's hello arrives: it must be the current certificate of a verified, enabled edge router
and come from our CA (``engine.managers.edge_control``), else the hello is answered ``RESULT``
failure with the reason and the connection closed. Then (``channel.control`` is the protocol):

1. the router is online in the fleet with what its hello said, its terminators are reconciled,
   and the hello is answered; a connection the same router had before is closed;
2. the full API-session state is sent in chunks; the pushes made meanwhile are held and follow
   it, so the router's copy ends up as the controller's; the router is then ``SYNC_DONE``;
3. requests (Dial, Bind, terminators ended, API-session activity) are answered as they come,
   each on the worker's thread pool (the engine's writes block until they are durable); reports
   of the router's links and of its circuits that ended update the in-memory tables
   ``/fabric/v1`` lists (``Fleet``, ``CircuitManager``) on the loop; pushes
   go to every connected router as batches are committed (the commit listener runs on the
   committer's thread and hands them to the loop); routers learn of each other
   (``ROUTER_LINKS``) whenever one comes or goes; a tunneler router is told the services it
   hosts (``HOSTED_SERVICES``) after its hello and whenever a batch changes that list; a
   router is asked to close circuits an administrator deleted (``CLOSE_CIRCUITS``); every
   router is told the network's controllers (``UPDATE_CTRL_ADDRESSES``) after its hello and
   whenever a batch changes them;
4. heartbeats both ways; a connection silent for :data:`~channel.control.SILENT_SECONDS` is
   closed, and so is a router's connection as soon as it is deleted, disabled, re-enrolled or
   given a new certificate.

A malformed request is answered ``ERROR`` (code 1) and the connection goes on; frames beyond the
channel's bounds close it (``channel.connection``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import enum
import functools
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any, TypeVar

from api.controller import Controller
from channel import control
from channel.connection import Channel
from channel.control import BadBody, body_of, strings, text
from channel.edge import ERROR_INTERNAL
from channel.frames import (
    HEARTBEAT,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    HELLO,
    Message,
    result,
)
from controller.control import wire
from engine.entities.routers import EdgeRouter
from engine.errors import CommitFailedError
from engine.managers.circuits import CloseCircuits
from engine.managers.edge_control import (
    ApiSessionsAdded,
    ApiSessionsRemoved,
    ControllersChanged,
    ControlRefused,
    Event,
    HostedServicesChanged,
    RouterHello,
    RouterRefused,
    RouterRevoked,
    SessionsRemoved,
)
from engine.managers.fleet import Presence
from pki import PkiPaths
from pki.tls import ServerContext, accept_any_client_certificate

log = logging.getLogger("trellis.control")

T = TypeVar("T")

#: Seconds a new connection has for its TLS handshake, then for its hello.
HANDSHAKE_SECONDS = 10.0
HELLO_SECONDS = 10.0


def control_context(paths: PkiPaths, ca_bundle_pem: str) -> ServerContext:
    """TLS 1.2-1.3 with the controller's server certificate; a client certificate is asked for and
    let through from any issuer (judged at the hello). Should that not be possible, the handshake
    verifies it against our own CA, which issues every router's certificate."""
    ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(paths.server_cert), str(paths.server_key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata=ca_bundle_pem)
    problem = accept_any_client_certificate(ctx)
    if problem is not None:
        log.info("control listener: router certificates are verified in the TLS handshake (%s)", problem)
    return ctx


def listen_address(address: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` (as ``TRELLIS_CTRL_BIND`` takes it) to listen on; port 0
    asks for any free port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"not a host:port address: {address!r}")
    return host.removeprefix("[").removesuffix("]"), int(port)


class State(enum.Enum):
    HELLO = "awaiting the hello"
    CONNECTING = "checking the hello"
    SYNCING = "sending the API-session state"
    READY = "ready"
    CLOSED = "closed"


class RouterConnection:
    """One control connection, from its hello to its close (the channel's handler)."""

    def __init__(self, server: ControlServer) -> None:
        self.server = server
        self.loop = server.loop
        self.channel: Channel | None = None
        self.state = State.HELLO
        self.router: EdgeRouter | None = None
        self.presence: Presence | None = None
        self.last_heard = self.loop.time()
        #: Pushes held while the full state is being sent; requests that came before the hello's answer.
        self._held: list[Message] = []
        self._early: list[Message] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._reports = asyncio.Lock()
        #: Whether the router's hello said it runs a tunneler, and the last ``HOSTED_SERVICES``
        #: body it was sent (None: none yet).
        self.tunneler = False
        self.hosted: bytes | None = None
        #: The last ``UPDATE_CTRL_ADDRESSES`` body the router was sent (None: none yet).
        self.ctrls: bytes | None = None
        #: The last ``SIGNING_KEYS`` body the router was sent (None: none yet).
        self.keys: bytes | None = None

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def name(self) -> str:
        return self.router.id if self.router is not None else "(not identified)"

    # -- the channel's handler -----------------------------------------------------------------
    def on_message(self, channel: Channel, message: Message) -> None:
        self.last_heard = self.loop.time()
        if self.state is State.HELLO:
            if message.content_type != HELLO:
                log.info(
                    "control: a connection's first message is not a hello (type %d): closing",
                    message.content_type,
                )
                self.close()
                return
            self.state = State.CONNECTING
            self._spawn(self._hello(message))
        elif self.state is State.CONNECTING:
            self._early.append(message)
        elif self.state is not State.CLOSED:
            self._dispatch(message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        if self.state is not State.CLOSED:
            self.state = State.CLOSED
            if error is not None:
                log.info("control: router %s disconnected: %s", self.name, error)
        for task in self._tasks:
            task.cancel()
        self._held.clear()
        self._early.clear()
        self.server._detach(self)

    # -- sending -------------------------------------------------------------------------------
    def push(self, content_type: int, body: bytes) -> None:
        """A controller -> router message: held while the full state is being sent."""
        if self.state is State.SYNCING:
            self._held.append(Message(content_type, body))
        elif self.state is State.READY and self.channel is not None:
            self.channel.send(Message(content_type, body))

    def send(self, message: Message) -> None:
        if self.channel is not None and self.state is not State.CLOSED:
            self.channel.send(message)

    def close(self, reason: str | None = None) -> None:
        if reason:
            log.info("control: closing router %s's connection: %s", self.name, reason)
        if self.channel is not None:
            self.channel.close()

    # -- the hello -----------------------------------------------------------------------------
    async def _hello(self, message: Message) -> None:
        channel = self.channel
        assert channel is not None
        try:
            hello = wire.read_hello(message)
            circuits_held = wire.hello_circuits(message)
        except BadBody as ex:
            self._refuse(message, f"bad hello: {ex}")
            return
        chain = [ssl.DER_cert_to_PEM_cert(der) for der in channel.peer_chain]
        try:
            router, unknown = await self.server.run(lambda: self.server.admit(chain, hello))
        except RouterRefused as ex:
            self._refuse(message, ex.reason)
            return
        except Exception:
            log.exception("control: a router's hello could not be handled")
            self._refuse(message, "the controller could not handle the hello")
            return
        if self.closed:
            return
        self.tunneler = hello.tunneler
        presence = self.server._attach(self, router, hello)
        if self.closed:  # changed meanwhile
            return
        self.server.ctrl.managers.circuits.held(router.id, circuits_held)
        heartbeat = self.server.heartbeat_seconds
        self.send(
            wire.hello_result(
                message, router_id=router.id, router_name=router.name, heartbeat=heartbeat, unknown=unknown
            )
        )
        log.info(
            "control: edge router %s (%s) connected from %s, version %s",
            router.name,
            router.id,
            hello.hostname or "?",
            hello.version.version or "?",
        )
        keys = self.server.signing_keys()
        if keys is not None:  # before the state: a hello its sessions' tokens name can be verified
            self.keys = keys
            self.send(Message(control.SIGNING_KEYS, keys))
        self.state = State.SYNCING
        early, self._early = self._early, []
        for request in early:
            self._dispatch(request)
        self.server.links_changed()
        self.server.hosted_changed()
        self.server.controllers_changed()
        try:
            entries = await self.server.run(self.server.ctrl.managers.edge_control.api_session_state)
            for body in wire.api_sessions_added(entries, full_state=True, chunk=control.SYNC_CHUNK):
                if self.closed:
                    return
                channel.send(Message(control.API_SESSION_ADDED, body))
                await self._drained()
        except Exception:
            log.exception("control: the API-session state could not be sent to router %s", self.name)
            self.close()
            return
        if self.state is not State.SYNCING:
            return
        self.state = State.READY
        held, self._held = self._held, []
        for pushed in held:
            channel.send(pushed)
        self.server.ctrl.managers.fleet.mark_synced(router.id, presence.connection)

    def _refuse(self, request: Message, reason: str) -> None:
        log.info("control: refused a router connection: %s", reason)
        if self.channel is not None:
            self.channel.send(result(request, False, reason))
        self.state = State.CLOSED
        self.close()

    async def _drained(self) -> None:
        """Let the loop serve others between chunks, and wait while the channel's buffer is full
        (a slow router holds its full state back, not the controller's memory)."""
        await asyncio.sleep(0)
        channel = self.channel
        while channel is not None and channel.is_open and not channel.writable:
            await asyncio.sleep(0.05)

    # -- messages after the hello --------------------------------------------------------------
    def _dispatch(self, message: Message) -> None:
        kind = message.content_type
        if kind == HEARTBEAT:
            stamp = message.u64(HEARTBEAT_REQUEST)
            if stamp is not None:
                answer = Message(HEARTBEAT).set_u64(HEARTBEAT_RESPONSE, stamp)
                self.send(answer.reply_to(message))
            return
        report = self._REPORTS.get(kind)
        if report is not None:  # cheap: handled at once, in the order the router sent them
            report(self, message)
            return
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            self._spawn(handler(self, message))
        elif message.reply_for is None:  # an answer nobody waits for is dropped
            self.send(control.error(message, ERROR_INTERNAL, f"unhandled content type {kind}"))

    async def _create_circuit(self, message: Message) -> None:
        router_id = self._router_id()

        def work() -> Message:
            body = body_of(message)
            request = wire.read_session_request(body)
            grant = self.server.ctrl.managers.edge_control.create_circuit(
                router_id,
                token=request.token,
                api_session_id=request.api_session_id,
                fingerprints=request.fingerprints,
                terminator_instance_id=text(body, "terminatorInstanceId"),
                has_public_key=request.has_public_key,
            )
            circuit = self.server.ctrl.managers.circuits.open(
                router_id,
                session_id=grant.session.id,
                identity_id=grant.session.identity_id,
                terminator=grant.terminator,
                path=grant.path,
            )
            return wire.circuit_reply(message, grant, circuit.id)

        await self._answer(message, work)

    async def _create_terminator(self, message: Message) -> None:
        router_id = self._router_id()

        def work() -> Message:
            body = body_of(message)
            request = wire.read_session_request(body)
            terminator = self.server.ctrl.managers.edge_control.create_terminator(
                router_id,
                token=request.token,
                api_session_id=request.api_session_id,
                fingerprints=request.fingerprints,
                instance_id=text(body, "instanceId"),
                cost=wire.integer(body, "cost"),
                precedence=text(body, "precedence", "default") or "default",
                has_public_key=request.has_public_key,
                terminator_id=text(body, "terminatorId"),
            )
            return wire.terminator_reply(message, terminator)

        await self._answer(message, work)

    async def _create_tunnel_terminator(self, message: Message) -> None:
        router_id = self._router_id()

        def work() -> Message:
            request = wire.read_tunnel_terminator_request(body_of(message))
            terminator = self.server.ctrl.managers.edge_control.create_tunnel_terminator(
                router_id,
                service_id=request.service_id,
                cost=request.cost,
                precedence=request.precedence,
                instance_id=request.instance_id,
            )
            return wire.tunnel_terminator_reply(message, terminator)

        await self._answer(message, work)

    async def _remove_terminators(self, message: Message) -> None:
        router_id = self._router_id()

        def work() -> Message:
            ids = strings(body_of(message), "terminatorIds")
            self.server.ctrl.managers.edge_control.remove_terminators(router_id, ids)
            return result(message, True)

        await self._answer(message, work)

    def _links(self, message: Message) -> None:
        """The links up on the router (the whole set): kept while the connection lasts."""
        try:
            reports = wire.read_links(body_of(message))
        except BadBody as ex:
            log.info("control: router %s: a bad links report: %s", self.name, ex)
            return
        self.server.ctrl.managers.fleet.set_links(self._router_id(), self._connection(), reports)

    def _circuits_ended(self, message: Message) -> None:
        """Circuits the router opened ended: no longer listed."""
        try:
            ids = strings(body_of(message), "circuitIds")
        except BadBody as ex:
            log.info("control: router %s: a bad report of ended circuits: %s", self.name, ex)
            return
        self.server.ctrl.managers.circuits.ended(self._router_id(), ids)

    async def _api_session_heartbeat(self, message: Message) -> None:
        await self._report(message, whole=True)

    async def _api_session_channels(self, message: Message) -> None:
        await self._report(message, whole=False)

    async def _report(self, message: Message, *, whole: bool) -> None:
        """SDK channels on the router: their API sessions' activity, ``hasEdgeRouterConnection``;
        the ids the controller does not know are told back as removed. In order, per connection."""
        router_id, connection = self._router_id(), self._connection()
        managers = self.server.ctrl.managers

        def work() -> list[str]:
            body = body_of(message)
            opened = strings(body, "apiSessionIds" if whole else "opened")
            closed = [] if whole else strings(body, "closed")
            live = managers.edge_control.api_session_activity(opened)
            if whole:
                managers.fleet.set_edge_sessions(router_id, connection, live)
            else:
                managers.fleet.edge_sessions_opened(router_id, connection, live)
                managers.fleet.edge_sessions_closed(router_id, connection, closed)
            return [i for i in dict.fromkeys(opened) if i not in live]

        async with self._reports:
            try:
                unknown = await self.server.run(work)
            except BadBody as ex:
                self.send(control.error(message, ERROR_INTERNAL, str(ex)))
                return
            except Exception:
                log.exception("control: router %s's report of SDK channels could not be handled", router_id)
                return
        if unknown:
            self.push(control.API_SESSION_REMOVED, wire.encode({"ids": unknown}))

    async def _answer(self, request: Message, work: Callable[[], Message]) -> None:
        """Run ``work`` on the pool and send what it answers (an ``ERROR`` when it fails)."""
        try:
            reply = await self.server.run(work)
        except ControlRefused as ex:
            log.info("control: router %s: refused (%s): %s", self.name, ex.refusal.value, ex.reason)
            reply = wire.refusal(request, ex.refusal, ex.reason)
        except BadBody as ex:
            reply = control.error(request, ERROR_INTERNAL, str(ex))
        except CommitFailedError:
            reply = control.error(request, ERROR_INTERNAL, "the controller could not commit the change")
        except Exception:
            log.exception("control: router %s: a request of type %d failed", self.name, request.content_type)
            reply = control.error(request, ERROR_INTERNAL, "internal error")
        self.send(reply)

    _HANDLERS: dict[int, Callable[[RouterConnection, Message], Any]] = {
        control.CREATE_CIRCUIT: _create_circuit,
        control.CREATE_TERMINATOR: _create_terminator,
        control.REMOVE_TERMINATORS: _remove_terminators,
        control.CREATE_TUNNEL_TERMINATOR: _create_tunnel_terminator,
        control.API_SESSION_HEARTBEAT: _api_session_heartbeat,
        control.API_SESSION_CHANNELS: _api_session_channels,
    }
    #: Reports that only update in-memory tables: handled on the loop as they arrive.
    _REPORTS: dict[int, Callable[[RouterConnection, Message], None]] = {
        control.LINKS: _links,
        control.CIRCUITS_ENDED: _circuits_ended,
    }

    # -- internals -----------------------------------------------------------------------------
    def _router_id(self) -> str:
        assert self.router is not None
        return self.router.id

    def _connection(self) -> int:
        assert self.presence is not None
        return self.presence.connection

    def _spawn(self, work: Any) -> None:
        task = self.loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("control: router %s: a task failed", self.name, exc_info=task.exception())


class ControlServer:
    """The control listener and the routers connected to it (see the module docstring)."""

    def __init__(
        self,
        ctrl: Controller,
        paths: PkiPaths,
        *,
        loop: asyncio.AbstractEventLoop,
        executor: concurrent.futures.Executor,
        address: str,
        heartbeat_seconds: float = control.HEARTBEAT_SECONDS,
        silent_seconds: float = control.SILENT_SECONDS,
    ) -> None:
        self.ctrl = ctrl
        self.paths = paths
        self.loop = loop
        self.executor = executor
        self.address = address
        self.heartbeat_seconds = heartbeat_seconds
        self.silent_seconds = silent_seconds
        self._server: asyncio.Server | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._connections: set[RouterConnection] = set()
        #: The connection of each router past its hello.
        self._routers: dict[str, RouterConnection] = {}
        #: The pass telling tunneler routers what they host, and whether another is due after it.
        self._hosted_task: asyncio.Task[None] | None = None
        self._hosted_again = False

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the one given for port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Listen (``OSError`` when the address cannot be bound) and take the engine's pushes."""
        host, port = listen_address(self.address)
        ctx = control_context(self.paths, self.ctrl.env.ca.ca_bundle_pem())
        self._server = await self.loop.create_server(
            self._new_connection,
            host,
            port,
            family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            ssl=ctx,
            ssl_handshake_timeout=HANDSHAKE_SECONDS,
            reuse_address=True,
        )
        self.ctrl.managers.edge_control.add_sink(self._on_events)
        self.ctrl.managers.circuits.add_sink(self._on_close_circuits)
        self.ctrl.managers.fleet.add_listener(self._on_fleet_elsewhere)
        self._ticker = self.loop.create_task(self._heartbeats())

    async def stop(self) -> None:
        """Stop listening and close every router's connection."""
        self.ctrl.managers.edge_control.remove_sink(self._on_events)
        self.ctrl.managers.circuits.remove_sink(self._on_close_circuits)
        self.ctrl.managers.fleet.remove_listener(self._on_fleet_elsewhere)
        if self._ticker is not None:
            self._ticker.cancel()
        if self._hosted_task is not None:
            self._hosted_task.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), 5.0)
            except TimeoutError:
                log.info("control: connections still closing at stop")

    async def run(self, work: Callable[[], T]) -> T:
        """``work`` on the worker's thread pool (engine calls that write, or may block)."""
        return await self.loop.run_in_executor(self.executor, work)

    def admit(self, chain: list[str], hello: RouterHello) -> tuple[EdgeRouter, list[str]]:
        """On the pool: who the router is, and what its hello changes (its unknown terminators)."""
        edge_control = self.ctrl.managers.edge_control
        router = edge_control.authenticate_router(chain)
        return router, edge_control.router_hello(router, hello)

    # -- connections ---------------------------------------------------------------------------
    def _new_connection(self) -> Channel:
        connection = RouterConnection(self)
        channel = Channel(
            connection,
            name="control",
            first_body_limit=wire.MAX_HELLO_BODY_BYTES,
            first_message_timeout=HELLO_SECONDS,
            # Counted once its TLS handshake is done: asyncio makes the protocol at the TCP
            # accept and never tells it of a handshake that fails or times out (no
            # connection_lost without a connection_made), so one counted here would stay.
            on_connected=lambda _: self._connections.add(connection),
        )
        connection.channel = channel
        return channel

    def _attach(self, connection: RouterConnection, router: EdgeRouter, hello: RouterHello) -> Presence:
        """The router is online over ``connection``; an earlier connection of it is closed."""
        assert connection.channel is not None
        fingerprint = router.fingerprint or ""
        presence = self.ctrl.managers.fleet.connect(
            router.id,
            name=router.name,
            fingerprint=fingerprint,
            hostname=hello.hostname,
            protocols=hello.protocols,
            link_listener=hello.link_listener,
            version=hello.version,
            tunneler=hello.tunneler,
        )
        connection.router, connection.presence = router, presence
        earlier = self._routers.get(router.id)
        self._routers[router.id] = connection
        if earlier is not None and earlier is not connection:
            earlier.close("the router connected again")
        # a change committed while the hello was checked found no connection to close: look again
        current = self.ctrl.env.store.get(EdgeRouter, router.id)
        if current is None or current.disabled or current.fingerprint != fingerprint:
            connection.state = State.CLOSED
            connection.close("the edge router changed while it connected")
        return presence

    def _detach(self, connection: RouterConnection) -> None:
        self._connections.discard(connection)
        router, presence = connection.router, connection.presence
        if router is None or presence is None:
            return
        if self._routers.get(router.id) is connection:
            del self._routers[router.id]
        if self.ctrl.managers.fleet.disconnect(router.id, presence.connection):
            log.info("control: edge router %s (%s) disconnected", router.name, router.id)
            self.links_changed()

    def _on_fleet_elsewhere(self) -> None:
        """The routers online at the other processes of a shared store changed (on the fleet
        board's thread): the routers connected here are told, on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is connected any more
            self.loop.call_soon_threadsafe(self.links_changed)
            self.loop.call_soon_threadsafe(self.controllers_changed)  # one without a record yet

    def links_changed(self) -> None:
        """Tell every router the other online routers and where they take links."""
        online = self.ctrl.managers.fleet.online()
        for router_id, connection in list(self._routers.items()):
            others = [p for p in online if p.router_id != router_id]
            connection.push(control.ROUTER_LINKS, wire.router_links(others))

    def signing_keys(self) -> bytes | None:
        """The ``SIGNING_KEYS`` body: the keys ``/oidc/keys`` lists (None when there are none)."""
        try:
            jwks = self.ctrl.managers.oidc.jwks().get("keys") or []
        except Exception:
            log.exception("control: the signing keys could not be listed")
            return None
        return wire.signing_keys(jwks) if jwks else None

    def controllers_changed(self) -> None:
        """Tell every router the network's controllers (``UPDATE_CTRL_ADDRESSES``) and their
        signing keys (``SIGNING_KEYS``) when either differs from the last it was sent."""
        keys = self.signing_keys()
        if keys is not None:
            for connection in list(self._routers.values()):
                if connection.keys != keys and not connection.closed:
                    connection.keys = keys
                    connection.push(control.SIGNING_KEYS, keys)
        try:
            body = wire.ctrl_addresses(self.ctrl.managers.controllers.endpoints())
        except Exception:
            log.exception("control: the controllers could not be listed")
            return
        if body == wire.ctrl_addresses([]):
            return  # nothing to say: a router ignores an empty list
        for connection in list(self._routers.values()):
            if connection.ctrls != body and not connection.closed:
                connection.ctrls = body
                connection.push(control.UPDATE_CTRL_ADDRESSES, body)

    def hosted_changed(self) -> None:
        """What tunneler routers host may have changed: each one's list is computed again (on the
        pool) and pushed when it differs from the last it was sent. One pass at a time; a change
        during a pass makes another follow it."""
        if self._hosted_task is not None and not self._hosted_task.done():
            self._hosted_again = True
            return
        self._hosted_again = False
        self._hosted_task = self.loop.create_task(self._push_hosted())

    async def _push_hosted(self) -> None:
        edge_control = self.ctrl.managers.edge_control
        while True:
            for connection in list(self._routers.values()):
                if not connection.tunneler or connection.closed or connection.router is None:
                    continue
                work = functools.partial(edge_control.hosted_services, connection.router.id)
                try:
                    body = wire.hosted_services(await self.run(work))
                except Exception:
                    log.exception(
                        "control: the services router %s hosts could not be listed", connection.name
                    )
                    continue
                if body != connection.hosted and not connection.closed:
                    connection.hosted = body
                    connection.push(control.HOSTED_SERVICES, body)
            if not self._hosted_again:
                return
            self._hosted_again = False

    # -- pushes --------------------------------------------------------------------------------
    def _on_events(self, events: list[Event]) -> None:
        """A commit listener's events (on the committer's thread): handled on the loop."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is connected any more
            self.loop.call_soon_threadsafe(self._deliver, events)

    def _deliver(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, RouterRevoked):
                connection = self._routers.get(event.router_id)
                presence = connection.presence if connection is not None else None
                if (
                    connection is not None
                    and presence is not None
                    and presence.connection == event.connection
                ):
                    connection.state = State.CLOSED
                    connection.close(event.reason)
                continue
            if isinstance(event, HostedServicesChanged):
                self.hosted_changed()
                continue
            if isinstance(event, ControllersChanged):
                self.controllers_changed()
                continue
            if isinstance(event, ApiSessionsAdded):
                bodies = list(
                    wire.api_sessions_added(event.sessions, full_state=False, chunk=control.SYNC_CHUNK)
                )
                kind = control.API_SESSION_ADDED
            elif isinstance(event, ApiSessionsRemoved):
                bodies, kind = [wire.encode({"ids": list(event.ids)})], control.API_SESSION_REMOVED
            elif isinstance(event, SessionsRemoved):
                body = {"ids": list(event.ids), "tokens": list(event.tokens)}
                bodies, kind = [wire.encode(body)], control.SESSION_REMOVED
            else:
                continue
            for connection in list(self._routers.values()):
                for body_bytes in bodies:
                    connection.push(kind, body_bytes)

    def _on_close_circuits(self, event: CloseCircuits) -> None:
        """Circuits an administrator deleted (on the deleting thread): their router is told, on
        the loop (a router that is not connected has nothing to close: its next hello leaves the
        circuits out or lists ids the controller no longer knows)."""
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is connected any more
            self.loop.call_soon_threadsafe(self._close_circuits, event)

    def _close_circuits(self, event: CloseCircuits) -> None:
        connection = self._routers.get(event.router_id)
        if connection is not None:
            connection.push(control.CLOSE_CIRCUITS, wire.close_circuits(event.ids, event.reason))

    # -- liveness ------------------------------------------------------------------------------
    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_seconds)
            try:
                self.beat()
            except Exception:  # the ticker must outlive a bug
                log.exception("control: heartbeats failed")

    def beat(self) -> None:
        """One heartbeat to each router; a router silent too long is disconnected."""
        now = self.loop.time()
        for connection in list(self._routers.values()):
            if now - connection.last_heard > self.silent_seconds:
                connection.state = State.CLOSED
                connection.close(f"silent for more than {self.silent_seconds:.0f} s")
                continue
            connection.send(Message(HEARTBEAT).set_u64(HEARTBEAT_REQUEST, time.time_ns()))
