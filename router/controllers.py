"""The router's control plane over every controller: :class:`Controllers`.

Several Trellis controllers may share one PostgreSQL database (the same data, change log and CA).
The router keeps a control connection to each of them (:class:`~router.control.ControlClient`,
one per address of ``router.json``'s ``ctrls``), each dialing, saying hello and reconnecting with
its own back-off, all at once; :class:`Controllers` is the
:class:`~router.ports.ControllerPort` the edge side and hosting ask, over all of them.

Requests (create a circuit, a terminator, a tunnel terminator; remove terminators) go to one
connected controller: the one that answered last, else the first connected one in the order of
the addresses. When it is :class:`~router.ports.Unavailable` (no connection, the connection lost
while asking, no answer in time) the request is asked of the next connected controller not asked
yet, and :class:`~router.ports.Unavailable` is raised only when none is left. A
:class:`~router.ports.Refused` answer is final: every controller reads the same database, so
another would refuse as well. (A request that timed out may have been granted by the controller
that did not answer in time: a circuit it opened is forgotten at the router's next hello to it,
which lists the circuits still up; a terminator it made, at the router's next hello, which lists
the terminators the router holds.)

Reports go to every connected controller, as each keeps its own view of the router in memory:

- the API sessions with an SDK channel here (every connection sends the whole set once connected
  and every minute; a first channel opening or last closing goes to all),
- the circuits this router opened that ended (only the controller that granted a circuit knows
  it; the others ignore the ids; the router does not keep who granted what),
- the links up on this router (each controller lists them in ``/fabric/v1/links``; every
  connection also sends them after its hello).

Pushes from any controller act as they did with one:

- API sessions: each controller sends a full state after its hello, then single changes, into
  the one :class:`~router.ports.ApiSessions` (each connection's full state is gathered on its own
  and replaces what the router holds once complete; an addition or removal from any controller
  applies at once). They read one database, so their states agree up to a small lag. A removal
  from any controller closes the SDK channels of the sessions it names; so do ended sessions and
  ``CLOSE_CIRCUITS``.
- hosted services: the latest list from any controller is the list (it comes from the database,
  the same for all).
- other routers (``ROUTER_LINKS``): each controller lists the routers connected to *it* (that is
  kept in its memory, not in the database), so the router takes the union of the latest lists of
  its connected controllers (for a router listed by two, the entry that came last). A controller
  whose connection drops takes its list with it, unless it was the last one: with no controller
  connected the router keeps what it had, as it did when its one connection was down.

The controllers themselves change: each controller tells the router the control address of every
controller of the network (``UPDATE_CTRL_ADDRESSES``, after its hello and whenever a controller
joins, moves or is removed), as OpenZiti's controllers update their routers' endpoints. The router
follows the latest list any controller sent (they read one database, so their lists agree up to a
small lag, and each sends its list again when it changes): a connection is added for each new
address and, once it is no longer listed, a controller's connection is closed and not tried again;
an empty list is ignored. :attr:`Controllers.on_addresses` is told each new list (the router keeps
it in its directory, so that its next start begins with it). A router whose addresses the operator
chose (``TRELLIS_ROUTER_CTRL``; the embedded router) keeps them: ``follow`` is False.

The router is connected (:attr:`Controllers.connected`) while any control connection is up; with
none up, established connections keep flowing and requests fail with ``Unavailable``.
:attr:`Controllers.on_reachable` is told when the first connection comes up and when the last
goes: the router's :class:`~router.offline.Offline` counts its grace from then (what the router
decides alone while no controller can be asked).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from router.control import ControlClient, RouterLink, parse_address
from router.ports import Circuit, EdgePort, HostedService, Refused, Terminator, Unavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


class Controllers:
    """One :class:`~router.control.ControlClient` per controller, as one
    :class:`~router.ports.ControllerPort` (see the module's docstring). The clients share the
    router's :class:`~router.ports.ApiSessions`; ``edge``, :attr:`on_router_links` and
    :attr:`on_hosted_services` are set here (later, as for one client) and reach them all.
    :meth:`run` keeps every connection up until :meth:`stop`."""

    def __init__(
        self,
        clients: Sequence[ControlClient],
        *,
        make_client: Callable[[str], ControlClient] | None = None,
        follow: bool = True,
    ) -> None:
        if not clients:
            raise ValueError("a router needs at least one controller")
        self.clients: list[ControlClient] = []
        #: Builds the client of a controller address a controller names (``host:port``); None:
        #: the router keeps the controllers it has.
        self.make_client = make_client
        #: Whether the router follows the controllers' list of controllers (see the docstring).
        self.follow = follow
        #: Told each new list of control addresses (``host:port``) taken from a controller.
        self.on_addresses: Callable[[list[str]], None] | None = None
        #: Set while any control connection is up.
        self.connected = asyncio.Event()
        #: Told of every new union of the other routers (:mod:`router.links`; settable later).
        self.on_router_links: Callable[[list[RouterLink]], None] | None = None
        #: The other routers, as the connected controllers last listed them (their union).
        self.router_links: list[RouterLink] = []
        #: The services this router hosts, as a controller last listed them, and who is told of
        #: every new list (``router.hosting.Hosting``; settable later).
        self.hosted_services: list[HostedService] = []
        self.on_hosted_services: Callable[[list[HostedService]], None] | None = None
        #: Told True when a first control connection comes up (none was), False when the last
        #: goes (:class:`router.offline.Offline`; settable later).
        self.on_reachable: Callable[[bool], None] | None = None
        self._edge: EdgePort | None = None
        self._answered: ControlClient | None = None
        #: Each client's latest list of the other routers, while its connection is up.
        self._listed: dict[ControlClient, list[RouterLink]] = {}
        #: The links up on this router, as last reported (what a client added later starts with).
        self._links: list[dict[str, Any]] = []
        #: Each running client's task, once :meth:`run` runs; set by :meth:`stop`.
        self._tasks: dict[ControlClient, asyncio.Future[None]] = {}
        self._running = False
        self._stopped = asyncio.Event()
        for client in clients:
            self._adopt(client)
            if client.edge is not None:
                self._edge = client.edge

    def _adopt(self, client: ControlClient) -> None:
        client.on_connection = self._on_connection
        client.on_router_links = self._router_links_of(client)
        client.on_hosted_services = self._take_hosted_services
        client.on_ctrl_addresses = self._take_ctrl_addresses
        self.clients.append(client)

    # -- life ----------------------------------------------------------------------------------
    @property
    def addresses(self) -> list[str]:
        return [client.address for client in self.clients]

    @property
    def edge(self) -> EdgePort | None:
        return self._edge

    @edge.setter
    def edge(self, edge: EdgePort | None) -> None:
        self._edge = edge
        for client in self.clients:
            client.edge = edge

    def up(self) -> list[ControlClient]:
        """The clients whose control connection is up, in the order of the addresses."""
        return [client for client in self.clients if client.connected.is_set()]

    async def run(self) -> None:
        """Keep a control connection to every controller (each reconnecting on its own, and
        those added meanwhile too) until :meth:`stop`."""
        self._running = True
        for client in list(self.clients):
            self._start(client)
        try:
            await self._stopped.wait()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        finally:
            self._running = False
            tasks = list(self._tasks.values())
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _start(self, client: ControlClient) -> None:
        if self._running and client not in self._tasks:
            task = asyncio.ensure_future(client.run())
            self._tasks[client] = task
            task.add_done_callback(lambda _: self._forget_task(client, task))

    def _forget_task(self, client: ControlClient, task: asyncio.Future[None]) -> None:
        if self._tasks.get(client) is task and client not in self.clients:
            del self._tasks[client]  # a client removed: its task has ended

    def stop(self) -> None:
        """End :meth:`run` and close every connection."""
        self._stopped.set()
        for client in self.clients:
            client.stop()

    # -- the controllers' list of controllers ----------------------------------------------------
    def _take_ctrl_addresses(self, sent: list[str]) -> None:
        """A controller's list of every controller's control address: connect to the new ones,
        stop connecting to those no longer listed (see the module's docstring)."""
        wanted: dict[tuple[str, int], str] = {}
        for entry in sent:
            address = entry.strip().removeprefix("tls://").removeprefix("tls:")
            try:
                wanted.setdefault(_key(address), address)
            except ValueError:
                log.warning("control: ignoring a controller address that is not host:port: %r", entry)
        if not wanted:
            log.info("control: ignoring an empty list of controllers")
            return
        held = {_key(client.address): client for client in self.clients}
        if held.keys() == wanted.keys():
            return
        if not self.follow or self.make_client is None:
            log.info(
                "control: the controllers are at %s; keeping %s (TRELLIS_ROUTER_CTRL chose them)",
                ", ".join(wanted.values()),
                ", ".join(self.addresses),
            )
            return
        added = [address for key, address in wanted.items() if key not in held]
        removed = [client for key, client in held.items() if key not in wanted]
        for address in added:
            client = self.make_client(address)
            client.edge = self._edge
            client.links_changed(self._links)
            self._adopt(client)
            self._start(client)
        for client in removed:
            self.clients.remove(client)
            self._listed.pop(client, None)
            if self._answered is client:
                self._answered = None
            client.stop()  # its connection's end is told as any (``_on_connection``)
            client.api_sessions.signing_keys.forget(client)  # its keys, unless the others list them
        log.info(
            "control: controllers now %s (added %s; removed %s)",
            ", ".join(self.addresses),
            ", ".join(added) or "none",
            ", ".join(c.address for c in removed) or "none",
        )
        if removed and self._listed:
            self._tell_router_links()
        if self.on_addresses is not None:
            try:
                self.on_addresses(self.addresses)
            except Exception:
                log.exception("control: keeping the list of controllers failed")

    def _on_connection(self, client: ControlClient, up: bool) -> None:
        if up:
            first = not self.connected.is_set()
            self.connected.set()
            log.info(
                "control %s: up (%d of %d controllers connected)",
                client.address,
                len(self.up()),
                len(self.clients),
            )
            if first:
                self._tell_reachable(True)
            return
        connected = self.up()
        if not connected and self.connected.is_set():
            self.connected.clear()
            self._tell_reachable(False)
        log.info(
            "control %s: down (%d of %d controllers connected)",
            client.address,
            len(connected),
            len(self.clients),
        )
        if self._listed.pop(client, None) is not None and self._listed:
            self._tell_router_links()

    def _tell_reachable(self, reachable: bool) -> None:
        if self._stopped.is_set():  # connections closed by our own stop: not the controllers gone
            return
        if self.on_reachable is not None:
            try:
                self.on_reachable(reachable)
            except Exception:
                log.exception("control: telling whether a controller is reachable failed")

    # -- pushes --------------------------------------------------------------------------------
    def _router_links_of(self, client: ControlClient) -> Callable[[list[RouterLink]], None]:
        def take(links: list[RouterLink]) -> None:
            self._listed.pop(client, None)
            self._listed[client] = list(links)  # last in: its entries win
            self._tell_router_links()

        return take

    def _tell_router_links(self) -> None:
        union: dict[str, RouterLink] = {}
        for links in self._listed.values():
            for link in links:
                union.pop(link.id, None)
                union[link.id] = link
        merged = list(union.values())
        self.router_links = merged
        if self.on_router_links is not None:
            try:
                self.on_router_links(list(merged))
            except Exception:
                log.exception("control: taking the list of routers failed")

    def _take_hosted_services(self, services: list[HostedService]) -> None:
        self.hosted_services = list(services)
        if self.on_hosted_services is not None:
            self.on_hosted_services(list(services))  # the client logs what this raises

    # -- ControllerPort: requests --------------------------------------------------------------
    async def _ask(self, what: str, call: Callable[[ControlClient], Awaitable[T]]) -> T:
        """``call`` on the controller that answered last, else the first connected one; on
        :class:`Unavailable`, on the next connected one not asked yet."""
        asked: set[ControlClient] = set()
        problem: Unavailable | None = None
        while True:
            client = self._pick(asked)
            if client is None:
                if problem is not None and len(asked) > 1:
                    raise Unavailable(f"no controller answered ({len(asked)} asked; the last: {problem})")
                raise problem if problem is not None else Unavailable("no control connection")
            asked.add(client)
            try:
                answer = await call(client)
            except Unavailable as ex:
                if self._answered is client:
                    self._answered = None
                problem = ex
                if len(self.clients) > 1:
                    log.info("control %s: %s: %s", client.address, what, ex)
                continue
            except Refused:
                self._answered = client
                raise
            self._answered = client
            return answer

    def _pick(self, asked: set[ControlClient]) -> ControlClient | None:
        last = self._answered
        if last is not None and last not in asked and last.connected.is_set():
            return last
        for client in self.clients:
            if client not in asked and client.connected.is_set():
                return client
        if not asked and len(self.clients) == 1:
            return self.clients[0]  # it says why it cannot be asked, as it did alone
        return None

    async def create_circuit(
        self,
        *,
        session_token: str,
        api_session_id: str,
        fingerprints: list[str],
        terminator_instance_id: str,
        has_public_key: bool,
    ) -> Circuit:
        return await self._ask(
            "no circuit",
            lambda client: client.create_circuit(
                session_token=session_token,
                api_session_id=api_session_id,
                fingerprints=fingerprints,
                terminator_instance_id=terminator_instance_id,
                has_public_key=has_public_key,
            ),
        )

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
        # every controller asked gets the same id: one that committed before its answer was lost
        # hands the same terminator to the next
        return await self._ask(
            "no terminator",
            lambda client: client.create_terminator(
                session_token=session_token,
                api_session_id=api_session_id,
                fingerprints=fingerprints,
                instance_id=instance_id,
                cost=cost,
                precedence=precedence,
                has_public_key=has_public_key,
                address=address,
                terminator_id=terminator_id,
            ),
        )

    async def remove_terminators(self, terminator_ids: list[str]) -> None:
        if terminator_ids:
            await self._ask(
                "terminators not removed", lambda client: client.remove_terminators(terminator_ids)
            )

    async def create_tunnel_terminator(
        self, *, service_id: str, cost: int, precedence: str, instance_id: str
    ) -> str:
        return await self._ask(
            "no tunnel terminator",
            lambda client: client.create_tunnel_terminator(
                service_id=service_id, cost=cost, precedence=precedence, instance_id=instance_id
            ),
        )

    # -- ControllerPort: reports ---------------------------------------------------------------
    def api_session_channels(self, opened: list[str], closed: list[str]) -> None:
        for client in self.clients:
            client.api_session_channels(opened, closed)

    def circuits_ended(self, circuit_ids: list[str]) -> None:
        for client in self.clients:
            client.circuits_ended(circuit_ids)

    def links_changed(self, links: list[dict[str, Any]]) -> None:
        """The links up on this router: every connected controller is told now, and each after
        its every hello."""
        self._links = list(links)
        for client in self.clients:
            client.links_changed(links)


def _key(address: str) -> tuple[str, int]:
    """What makes two control addresses the same (``host:port``; ValueError for neither)."""
    host, port = parse_address(address)
    return host.lower(), port
