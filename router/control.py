"""The router's control connection: :class:`ControlClient`, the controller as the edge side asks it.

This is one connection to one controller; a router keeps one to each of its controllers, and
:class:`router.controllers.Controllers` asks and tells them as one (its docstring says how).

The router dials the controller's control address over mutual TLS (its enrolled client
certificate; the controller's certificate checked against the CA bundle of the enrollment and
against the host name), says hello (its version, host name, the edge listener's advertised
address, the terminators its binds hold) and then keeps the connection until it breaks, when it
dials again after a growing, jittered pause (0.5 s doubling up to 30 s; back to 0.5 s once a
hello is accepted). Messages and bodies are those of :mod:`channel.control`.

Over the connection:

- the router asks (:class:`~router.ports.ControllerPort`): create a circuit for a Connect, a
  terminator for a Bind, remove terminators; and, for the services it hosts itself
  (:mod:`router.hosting`), their tunnel terminators. An ``ERROR`` answer becomes
  :class:`~router.ports.Refused`; no connection or no answer in time,
  :class:`~router.ports.Unavailable`.
- the controller pushes the API sessions SDK hellos are checked against (a full state after
  every hello, then single changes) into :class:`~router.ports.ApiSessions`, and tells of ended
  sessions and API sessions, which the edge side (:class:`~router.ports.EdgePort`) acts on.
- both send heartbeats; a connection silent for too long is closed. The router reports the API
  sessions with an open SDK channel: the whole set once connected and every minute (their
  activity), and an API session's first channel opening or last closing as it happens.
- the controller tells the router every controller of the network (``UPDATE_CTRL_ADDRESSES``),
  which :class:`~router.controllers.Controllers` follows.
- the router reports its links to other routers (the whole set after every hello and whenever it
  changes: :meth:`ControlClient.links_changed`) and the circuits it opened that ended
  (:meth:`~ControlClient.circuits_ended`); the controller may ask it to close circuits
  (``CLOSE_CIRCUITS``, which the edge side acts on).

After a reconnect nothing is lost that matters: the API sessions held stay usable until the new
full state replaces them (and the channels of sessions gone are then closed), and the hello's
terminator list lets the controller drop what the router no longer holds while its answer names
the terminators it does not know (the router ends those binds, and the SDKs bind again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from channel import control
from channel.connection import Channel, ChannelClosed
from channel.control import (
    ACTIVITY_SECONDS,
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
    CREATE_TUNNEL_TERMINATOR,
    CREATE_TUNNEL_TERMINATOR_REPLY,
    ERROR,
    HEARTBEAT_SECONDS,
    HOSTED_SERVICES,
    LINKS,
    MAX_HELLO_CIRCUITS,
    MAX_LINKS,
    REMOVE_TERMINATORS,
    REMOVE_TERMINATORS_REPLY,
    REQUEST_SECONDS,
    ROUTER_LINKS,
    SESSION_REMOVED,
    SIGNING_KEYS,
    SILENT_SECONDS,
    UPDATE_CTRL_ADDRESSES,
    BadBody,
    body_of,
    strings,
    text,
)
from channel.edge import ERROR_CODE, ERROR_INTERNAL
from channel.frames import (
    HEARTBEAT,
    HEARTBEAT_REQUEST,
    HEARTBEAT_RESPONSE,
    HELLO,
    HELLO_VERSION,
    RESULT,
    RESULT_SUCCESS,
    Message,
)
from router.ports import (
    ApiSession,
    ApiSessions,
    Circuit,
    EdgePort,
    HostedService,
    Refused,
    Terminator,
    Unavailable,
    version_text,
)

log = logging.getLogger(__name__)

#: When this router's process started (milliseconds since the epoch), in every hello: a controller
#: then keeps the terminators made since that the hello could not list yet.
STARTED_AT_MS = int(time.time() * 1000)

#: Reconnect pauses: the first, and the most they grow to (doubling).
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0


def client_context(cert_file: str | Path, key_file: str | Path, ca_file: str | Path) -> ssl.SSLContext:
    """The router's TLS client context for the control connection: its enrolled certificate and
    key, the controller's certificate verified against ``ca_file`` and the host name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cafile=str(ca_file))
    ctx.load_cert_chain(str(cert_file), str(key_file))
    return ctx


def parse_address(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port``, ``tls:host:port`` or ``tls://host:port`` -> (host, port)."""
    rest = address.strip()
    for prefix in ("tls://", "tls:"):
        if rest.startswith(prefix):
            rest = rest[len(prefix) :]
            break
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


@dataclass(frozen=True, slots=True)
class RouterLink:
    """Another online router and where it takes links (``ROUTER_LINKS``)."""

    id: str
    name: str
    link_listener: str
    #: SHA-1 of the router's current client certificate: the one it must present when it dials a
    #: link ("" from a controller that does not say).
    fingerprint: str = ""


class _ControlChannel(Channel):
    """A channel that notes when it last heard anything (for the silence check)."""

    last_received = 0.0

    def data_received(self, data: bytes) -> None:
        self.last_received = time.monotonic()
        super().data_received(data)


class _Pushes:
    """The control channel's handler: what the controller sends unasked."""

    def __init__(self, client: ControlClient) -> None:
        self.client = client

    def on_message(self, channel: Channel, message: Message) -> None:
        self.client._on_push(channel, message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        log.info(
            "control %s: connection closed%s", self.client.address, f": {error}" if error is not None else ""
        )


class ControlClient:
    """The router's side of the control connection (implements :class:`~router.ports.ControllerPort`).

    ``address`` is the controller's control address (``host:port``); ``ssl_context`` a client
    context (:func:`client_context`); ``protocols`` the edge listener's advertised addresses
    (``{"tls": "tls://host:port"}``); ``version`` the router's version (:func:`router.ports.
    version_text` completes it). ``edge`` (settable later, the edge listener needs this client
    first) is told of ended sessions and API sessions. :meth:`run` keeps the connection up until
    :meth:`stop`."""

    def __init__(
        self,
        *,
        address: str,
        ssl_context: ssl.SSLContext,
        hostname: str,
        protocols: Mapping[str, str],
        version: str,
        api_sessions: ApiSessions,
        edge: EdgePort | None = None,
        link_listener: str = "",
        tunneler: bool = False,
        server_hostname: str | None = None,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
        silent_seconds: float = SILENT_SECONDS,
        activity_seconds: float = ACTIVITY_SECONDS,
        request_seconds: float = REQUEST_SECONDS,
        backoff_first: float = BACKOFF_FIRST,
        backoff_max: float = BACKOFF_MAX,
    ) -> None:
        self.address = address
        self.host, self.port = parse_address(address)
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname or self.host
        self.hostname = hostname
        self.protocols = dict(protocols)
        self.version = version_text(version)
        self.api_sessions = api_sessions
        self.edge = edge
        self.link_listener = link_listener
        self.tunneler = tunneler
        self.heartbeat_seconds = heartbeat_seconds
        self.silent_seconds = silent_seconds
        self.activity_seconds = activity_seconds
        self.request_seconds = request_seconds
        self.backoff_first = backoff_first
        self.backoff_max = backoff_max
        #: What the controller said of this router in its last hello answer.
        self.router_id = ""
        self.router_name = ""
        #: The other routers, as the controller last listed them.
        self.router_links: list[RouterLink] = []
        #: Told of every new list (the router's links, :mod:`router.links`; settable later).
        self.on_router_links: Callable[[list[RouterLink]], None] | None = None
        #: The services the controller last said this router hosts (``HOSTED_SERVICES``), and who
        #: is told of every new list (``router.hosting.Hosting``; settable later).
        self.hosted_services: list[HostedService] = []
        self.on_hosted_services: Callable[[list[HostedService]], None] | None = None
        #: Told of every list of the network's controllers (``UPDATE_CTRL_ADDRESSES``: their
        #: control addresses as sent, ``tls:host:port``): the router's
        #: :class:`router.controllers.Controllers` (settable later).
        self.on_ctrl_addresses: Callable[[list[str]], None] | None = None
        #: The links up on this router, as last reported (:meth:`links_changed`).
        self.links: list[dict[str, Any]] = []
        #: Set while a hello is accepted and the connection is up.
        self.connected = asyncio.Event()
        #: Hellos accepted so far (1 after the first connection, 2 after a reconnect, ...).
        self.sessions = 0
        #: Told when a hello is accepted (True) and when that connection ends (False): the
        #: router's :class:`router.controllers.Controllers` (settable later).
        self.on_connection: Callable[[ControlClient, bool], None] | None = None
        self._channel: _ControlChannel | None = None
        self._stopping = asyncio.Event()

    # -- life ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Keep the control connection up (reconnecting with back-off) until :meth:`stop`."""
        delay = self.backoff_first
        stopping = asyncio.ensure_future(self._stopping.wait())
        session: asyncio.Future[bool] | None = None
        try:
            while not self._stopping.is_set():
                session = asyncio.ensure_future(self._session())
                await asyncio.wait({session, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not session.done():
                    session.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await session
                    break
                accepted = False
                try:
                    accepted = session.result()
                except Exception:
                    log.exception("control %s: the connection failed", self.address)
                if self._stopping.is_set():
                    break
                if accepted:
                    delay = self.backoff_first
                pause = random.uniform(delay / 2, delay)
                log.info("control %s: connecting again in %.1f s", self.address, pause)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stopping), pause)
                if not accepted:
                    delay = min(delay * 2, self.backoff_max)
        finally:
            stopping.cancel()
            if session is not None and not session.done():  # run() itself was cancelled
                session.cancel()

    def stop(self) -> None:
        """End :meth:`run` and close the connection."""
        self._stopping.set()
        if self._channel is not None:
            self._channel.close()

    # -- ControllerPort ------------------------------------------------------------------------
    async def create_circuit(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        terminator_instance_id: str,
        has_public_key: bool,
    ) -> Circuit:
        body = await self._request(
            control.message(
                CREATE_CIRCUIT,
                {
                    "sessionToken": session_token,
                    "apiSessionId": api_session_id,
                    "fingerprints": fingerprints,
                    "terminatorInstanceId": terminator_instance_id,
                    "hasPublicKey": has_public_key,
                },
            ),
            CREATE_CIRCUIT_REPLY,
        )
        try:
            terminator = body.get("terminator")
            if not isinstance(terminator, dict):
                raise BadBody("terminator must be an object")
            return Circuit(
                session_id=text(body, "sessionId"),
                service_id=text(body, "serviceId"),
                service_name=text(body, "serviceName"),
                caller_id=text(body, "callerId"),
                terminator_id=text(terminator, "id"),
                router_id=text(terminator, "routerId"),
                binding=text(terminator, "binding"),
                address=text(terminator, "address"),
                instance_id=text(terminator, "instanceId"),
                path=tuple(strings(body, "path")),
                circuit_id=text(body, "circuitId"),
            )
        except BadBody as ex:
            raise Unavailable(f"the controller's circuit answer is not understood: {ex}") from None

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
        body = await self._request(
            control.message(
                CREATE_TERMINATOR,
                {
                    "sessionToken": session_token,
                    "apiSessionId": api_session_id,
                    "fingerprints": fingerprints,
                    "instanceId": instance_id,
                    "cost": cost,
                    "precedence": precedence,
                    "hasPublicKey": has_public_key,
                    "address": address,
                    **({"terminatorId": terminator_id} if terminator_id else {}),
                },
            ),
            CREATE_TERMINATOR_REPLY,
        )
        try:
            terminator_id = text(body, "terminatorId")
            if not terminator_id:
                raise BadBody("terminatorId is empty")
            return Terminator(
                terminator_id=terminator_id,
                session_id=text(body, "sessionId"),
                service_id=text(body, "serviceId"),
            )
        except BadBody as ex:
            raise Unavailable(f"the controller's terminator answer is not understood: {ex}") from None

    async def remove_terminators(self, terminator_ids: list[str]) -> None:
        if terminator_ids:
            await self._request(
                control.message(REMOVE_TERMINATORS, {"terminatorIds": list(terminator_ids)}),
                REMOVE_TERMINATORS_REPLY,
            )

    async def create_tunnel_terminator(
        self, *, service_id: str, cost: int, precedence: str, instance_id: str
    ) -> str:
        """The terminator of a service this router hosts (``CREATE_TUNNEL_TERMINATOR``): its id."""
        body = await self._request(
            control.message(
                CREATE_TUNNEL_TERMINATOR,
                {"serviceId": service_id, "cost": cost, "precedence": precedence, "instanceId": instance_id},
            ),
            CREATE_TUNNEL_TERMINATOR_REPLY,
        )
        try:
            terminator_id = text(body, "terminatorId")
        except BadBody as ex:
            raise Unavailable(f"the controller's terminator answer is not understood: {ex}") from None
        if not terminator_id:
            raise Unavailable("the controller's terminator answer names no terminator")
        return terminator_id

    def api_session_channels(self, opened: list[str], closed: list[str]) -> None:
        channel = self._channel
        if (opened or closed) and channel is not None and channel.is_open:
            channel.send(control.message(API_SESSION_CHANNELS, {"opened": opened, "closed": closed}))

    def circuits_ended(self, circuit_ids: list[str]) -> None:
        channel = self._channel
        if circuit_ids and channel is not None and channel.is_open:
            channel.send(control.message(CIRCUITS_ENDED, {"circuitIds": list(circuit_ids)}))

    def links_changed(self, links: list[dict[str, Any]]) -> None:
        """The links up on this router (``router.links.Links.state``): the controller is told now
        if connected, and after every hello."""
        self.links = list(links[:MAX_LINKS])
        channel = self._channel
        if channel is not None and channel.is_open:
            channel.send(control.message(LINKS, {"links": self.links}))

    async def _request(self, message: Message, answer_type: int) -> dict[str, Any]:
        channel = self._channel
        if channel is None or not channel.is_open:
            raise Unavailable("no control connection")
        try:
            reply = await channel.request(message, self.request_seconds)
        except TimeoutError:
            raise Unavailable("the controller did not answer in time") from None
        except ChannelClosed:
            raise Unavailable("the control connection closed") from None
        reason = reply.body.decode("utf-8", "replace")
        if reply.content_type == ERROR:
            raise Refused(reply.u32(ERROR_CODE) or ERROR_INTERNAL, reason)
        if reply.content_type == RESULT:  # a plain yes or no
            if not reply.flag(RESULT_SUCCESS):
                raise Refused(reply.u32(ERROR_CODE) or ERROR_INTERNAL, reason)
            return {}
        if reply.content_type != answer_type:
            raise Unavailable(f"the controller answered with content type {reply.content_type}")
        try:
            return body_of(reply)
        except BadBody as ex:
            raise Unavailable(str(ex)) from None

    # -- one connection ------------------------------------------------------------------------
    async def _session(self) -> bool:
        """Connect, say hello, serve until the connection ends; whether the hello was accepted."""
        loop = asyncio.get_running_loop()
        pushes = _Pushes(self)
        try:
            _, channel = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _ControlChannel(pushes, name="control"),
                    self.host,
                    self.port,
                    ssl=self.ssl_context,
                    server_hostname=self.server_hostname,
                    ssl_handshake_timeout=self.request_seconds,
                ),
                self.request_seconds * 2,
            )
        except (OSError, TimeoutError) as ex:
            log.warning("control %s: cannot connect: %s", self.address, ex or type(ex).__name__)
            return False
        channel.last_received = time.monotonic()
        self.api_sessions.begin_full_state(self)
        loops: list[asyncio.Task[None]] = []
        try:
            if not await self._hello(channel):
                return False
            self._channel = channel
            self.sessions += 1
            self.connected.set()
            self._tell(True)
            channel.send(control.message(LINKS, {"links": self.links}))
            loops = [
                asyncio.ensure_future(self._heartbeats(channel)),
                asyncio.ensure_future(self._activity(channel)),
            ]
            assert channel.closed is not None
            await channel.closed.wait()
            return True
        finally:
            for task in loops:
                task.cancel()
            was_up = self._channel is channel
            self._channel = None
            self.connected.clear()
            self.api_sessions.unsynced(self)
            channel.close()
            if was_up:
                self._tell(False)

    def _tell(self, up: bool) -> None:
        if self.on_connection is not None:
            try:
                self.on_connection(self, up)
            except Exception:
                log.exception("control %s: telling of the connection failed", self.address)

    async def _hello(self, channel: _ControlChannel) -> bool:
        edge = self.edge
        hello = control.message(
            HELLO,
            {
                "hostname": self.hostname,
                "protocols": self.protocols,
                "linkListener": self.link_listener,
                "tunneler": self.tunneler,
                "terminators": edge.terminator_ids() if edge is not None else [],
                "circuits": edge.circuit_ids()[:MAX_HELLO_CIRCUITS] if edge is not None else [],
                # a terminator made since, through another controller, is not one to drop
                "startedAt": STARTED_AT_MS,
            },
        )
        hello.set_text(HELLO_VERSION, self.version)
        try:
            reply = await channel.request(hello, self.request_seconds)
        except TimeoutError:
            log.warning("control %s: the controller did not answer the hello in time", self.address)
            return False
        except ChannelClosed:
            log.warning(
                "control %s: the controller closed the connection before answering the hello", self.address
            )
            return False
        if reply.content_type != RESULT or not reply.flag(RESULT_SUCCESS):
            log.warning(
                "control %s: the controller refused the hello: %s",
                self.address,
                reply.body.decode("utf-8", "replace") or "no reason",
            )
            return False
        try:
            body = body_of(reply)
            self.router_id = text(body, "routerId")
            self.router_name = text(body, "routerName")
            unknown = strings(body, "unknownTerminators")
            every = body.get("heartbeatSeconds")
        except BadBody as ex:
            log.warning("control %s: the hello answer is not understood: %s", self.address, ex)
            return False
        if isinstance(every, int | float) and not isinstance(every, bool) and every > 0:
            self.heartbeat_seconds = float(every)
        log.info("control %s: connected as router %s (%s)", self.address, self.router_name, self.router_id)
        if unknown and edge is not None:
            log.info(
                "control %s: the controller does not know terminators %s: ending their binds",
                self.address,
                unknown,
            )
            edge.drop_terminators(unknown)
        return True

    async def _heartbeats(self, channel: _ControlChannel) -> None:
        tick = min(1.0, self.heartbeat_seconds, self.silent_seconds / 2)
        last_sent = time.monotonic()
        while channel.is_open:
            await asyncio.sleep(tick)
            now = time.monotonic()
            if now - channel.last_received > self.silent_seconds:
                log.warning(
                    "control %s: nothing heard for %.0f s: closing", self.address, self.silent_seconds
                )
                channel.abort(TimeoutError("control connection silent"))
                return
            if now - last_sent >= self.heartbeat_seconds:
                beat = Message(HEARTBEAT)
                beat.set_u64(HEARTBEAT_REQUEST, time.time_ns())
                channel.send(beat)
                last_sent = now

    async def _activity(self, channel: _ControlChannel) -> None:
        """The whole set of API sessions with SDK channels here: at once (a new connection), then
        every :attr:`activity_seconds`."""
        while channel.is_open:
            ids = self.edge.api_session_ids() if self.edge is not None else []
            channel.send(control.message(API_SESSION_HEARTBEAT, {"apiSessionIds": ids}))
            await asyncio.sleep(self.activity_seconds)

    # -- pushes --------------------------------------------------------------------------------
    def _on_push(self, channel: Channel, message: Message) -> None:
        kind = message.content_type
        try:
            if kind == HEARTBEAT:
                self._on_heartbeat(channel, message)
            elif kind in (API_SESSION_ADDED, API_SESSION_UPDATED):
                self._on_api_sessions(control.body_of(message))
            elif kind == API_SESSION_REMOVED:
                ids = strings(body_of(message), "ids")
                self.api_sessions.remove(ids)
                if self.edge is not None:
                    self.edge.close_api_sessions(ids)
            elif kind == SESSION_REMOVED:
                body = body_of(message)
                ids, tokens = strings(body, "ids"), strings(body, "tokens")
                if self.edge is not None:
                    self.edge.end_sessions(ids, tokens)
            elif kind == ROUTER_LINKS:
                self._on_router_links(body_of(message))
            elif kind == HOSTED_SERVICES:
                self._on_hosted_services(body_of(message))
            elif kind == UPDATE_CTRL_ADDRESSES:
                self._on_ctrl_addresses(body_of(message))
            elif kind == SIGNING_KEYS:
                self._on_signing_keys(body_of(message))
            elif kind == CLOSE_CIRCUITS:
                body = body_of(message)
                ids, reason = strings(body, "circuitIds"), text(body, "reason")
                if self.edge is not None:
                    self.edge.close_circuits(ids, reason or "closed by an administrator")
            else:
                log.debug("control %s: ignoring %r", self.address, message)
        except BadBody as ex:
            log.warning("control %s: ignoring a message of content type %d: %s", self.address, kind, ex)

    def _on_heartbeat(self, channel: Channel, message: Message) -> None:
        value = message.headers.get(HEARTBEAT_REQUEST)
        if value is None:
            return  # the answer to ours: hearing it is what counts
        answer = Message(HEARTBEAT)
        answer.headers[HEARTBEAT_RESPONSE] = value
        channel.send(answer.reply_to(message))

    def _on_api_sessions(self, body: dict[str, Any]) -> None:
        wire = body.get("apiSessions", [])
        if not isinstance(wire, list):
            raise BadBody("apiSessions must be a list")
        sessions = []
        for value in wire:
            try:
                sessions.append(ApiSession.from_wire(value))
            except ValueError as ex:
                log.warning("control %s: skipping an API session: %s", self.address, ex)
        if body.get("fullState") is True:
            gone = self.api_sessions.add_full_state(sessions, body.get("isLast") is True, self)
            if body.get("isLast") is True:
                log.info("control %s: %d API sessions in sync", self.address, len(self.api_sessions))
            if gone and self.edge is not None:
                self.edge.close_api_sessions([s.id for s in gone])
        else:
            for session in sessions:
                self.api_sessions.put(session)

    def _on_signing_keys(self, body: dict[str, Any]) -> None:
        keys = body.get("keys", [])
        if not isinstance(keys, list):
            raise BadBody("keys must be a list")
        taken = self.api_sessions.signing_keys.put([k for k in keys if isinstance(k, dict)], self)
        log.info("control %s: %d signing keys of the controllers", self.address, taken)

    def _on_hosted_services(self, body: dict[str, Any]) -> None:
        wire = body.get("services", [])
        if not isinstance(wire, list):
            raise BadBody("services must be a list")
        services = []
        for value in wire:
            try:
                services.append(HostedService.from_wire(value))
            except ValueError as ex:
                log.warning("control %s: skipping a hosted service: %s", self.address, ex)
        self.hosted_services = services
        if self.on_hosted_services is not None:
            try:
                self.on_hosted_services(list(services))
            except Exception:
                log.exception("control %s: taking the list of hosted services failed", self.address)

    def _on_ctrl_addresses(self, body: dict[str, Any]) -> None:
        addresses = strings(body, "addresses")
        if not addresses:  # a controller that lists them per controller only
            controllers = body.get("controllers", [])
            if not isinstance(controllers, list):
                raise BadBody("controllers must be a list")
            addresses = [
                c["address"] for c in controllers if isinstance(c, dict) and isinstance(c.get("address"), str)
            ]
        log.info("control %s: the network's controllers are at %s", self.address, ", ".join(addresses))
        if self.on_ctrl_addresses is not None:
            try:
                self.on_ctrl_addresses(list(addresses))
            except Exception:
                log.exception("control %s: taking the list of controllers failed", self.address)

    def _on_router_links(self, body: dict[str, Any]) -> None:
        routers = body.get("routers", [])
        if not isinstance(routers, list):
            raise BadBody("routers must be a list")
        links = []
        for value in routers:
            if isinstance(value, dict) and isinstance(value.get("id"), str):
                links.append(
                    RouterLink(
                        id=value["id"],
                        name=str(value.get("name") or ""),
                        link_listener=str(value.get("linkListener") or ""),
                        fingerprint=str(value.get("fingerprint") or "").lower(),
                    )
                )
        self.router_links = links
        if self.on_router_links is not None:
            try:
                self.on_router_links(list(links))
            except Exception:
                log.exception("control %s: taking the list of routers failed", self.address)
