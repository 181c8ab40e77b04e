"""The fleet: which edge routers are connected to this controller right now, and what they said.

A router is *online* while its control connection is up (``api.control``). Its hello tells the
controller its hostname, the addresses SDKs reach it at (``{"tls": "tls://host:port"}``), where it
takes links from other routers, its version and whether it runs a tunneler; the REST models show
these while it is online (``isOnline``, ``supportedProtocols``, ``hostname``, ``versionInfo``,
``syncStatus``) and sessions name only online routers. Routers also report which API sessions have
an SDK channel open on them, which identities' ``hasEdgeRouterConnection`` shows, and the links
they have to one another (:class:`LinkReport`; ``/fabric/v1/links`` lists them as :class:`Link`):
a link is listed while one of its routers reports it and both are online.

Nothing here is persisted: the record lives as long as the controller process and starts empty.
It is one object (built once with the managers, no globals), safe to use from any thread, so a
controller that shares its fleet with others (HA) can replace it behind the same methods.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from engine.ports import Clock

#: ``syncStatus`` values (OpenZiti's ``env/sync.go`` names): never connected to this controller
#: since it started; connected, the API-session state being sent; state sent; connection lost.
SYNC_UNKNOWN = "SYNC_UNKNOWN"
SYNC_IN_PROGRESS = "SYNC_IN_PROGRESS"
SYNC_DONE = "SYNC_DONE"
SYNC_DISCONNECTED = "SYNC_DISCONNECTED"


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """What a router reports of its build (``versionInfo`` in the REST models)."""

    version: str = ""
    revision: str = ""
    build_date: str = ""
    os: str = ""
    arch: str = ""

    @classmethod
    def parse(cls, text: str) -> VersionInfo | None:
        """``version|revision|buildDate|os|arch`` (the channel hello's version header); None
        unless it has exactly five fields."""
        parts = text.split("|")
        if len(parts) != 5:
            return None
        return cls(*parts)

    def as_wire(self) -> dict[str, str]:
        return {
            "arch": self.arch,
            "buildDate": self.build_date,
            "os": self.os,
            "revision": self.revision,
            "version": self.version,
        }


EMPTY_VERSION = VersionInfo()


@dataclass(frozen=True, slots=True)
class Presence:
    """One connected router: what its hello said and how far its synchronisation got."""

    router_id: str
    #: The router's name when it connected.
    name: str
    #: Which connection of the router this is (a later one replaces it; numbers never repeat).
    connection: int
    #: The fingerprint of the certificate the connection was opened with.
    fingerprint: str
    hostname: str
    #: Protocol -> address SDKs reach the router at, e.g. ``{"tls": "tls://er1.example.com:3022"}``.
    protocols: Mapping[str, str]
    #: Where the router takes links from other routers (``tls://host:port``), "" when it does not.
    link_listener: str
    version: VersionInfo
    tunneler: bool
    connected_at: datetime
    sync_status: str = SYNC_IN_PROGRESS


@dataclass(frozen=True, slots=True)
class LinkReport:
    """One link as the router at one end reports it."""

    id: str
    #: The router at the other end.
    peer_id: str
    #: Whether the reporting router dialed the link.
    dialed: bool
    protocol: str = "tls"


#: What every link shows that Trellis does not measure or set: OpenZiti's default static cost,
#: and its state for a link that is up.
LINK_STATIC_COST = 1
LINK_CONNECTED = "Connected"


@dataclass(frozen=True, slots=True)
class Link:
    """A link between two online routers (OpenZiti's fabric link): ``source_id`` dialed it."""

    id: str
    source_id: str
    dest_id: str
    protocol: str
    #: Where the source dialed: the destination's link listener ("" when not known).
    dial_address: str
    #: When a router first reported it (to this controller).
    created_at: datetime
    state: str = LINK_CONNECTED
    down: bool = False
    static_cost: int = LINK_STATIC_COST
    #: Round-trip figures Trellis does not measure (nanoseconds in OpenZiti's model).
    source_latency: int = 0
    dest_latency: int = 0
    iteration: int = 1

    @property
    def cost(self) -> int:
        return self.static_cost + (self.source_latency + self.dest_latency) // 1_000_000

    def joins(self, a: str, b: str) -> bool:
        return {self.source_id, self.dest_id} == {a, b}


@dataclass
class _EdgeChannels:
    """The API sessions with an SDK channel open on one router connection: id -> identity id."""

    connection: int
    sessions: dict[str, str] = field(default_factory=dict)


class Fleet:
    """The routers online now (see the module docstring). Every method takes the one lock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._online: dict[str, Presence] = {}
        self._seen: set[str] = set()
        self._connections = 0
        self._edge: dict[str, _EdgeChannels] = {}
        self._identities: Counter[str] = Counter()
        #: Each online router's last link report (link id -> report), and when each link id was
        #: first reported.
        self._links: dict[str, dict[str, LinkReport]] = {}
        self._link_seen: dict[str, datetime] = {}
        #: The routers reporting each link id, and each reporter's link to each peer (by id).
        self._link_reporters: dict[str, set[str]] = {}
        self._link_peers: dict[str, dict[str, str]] = {}

    # -- connections ------------------------------------------------------------------------------
    def connect(
        self,
        router_id: str,
        *,
        name: str,
        fingerprint: str,
        hostname: str,
        protocols: Mapping[str, str],
        link_listener: str,
        version: VersionInfo,
        tunneler: bool,
    ) -> Presence:
        """The router is online over a new connection (replacing any earlier one's record)."""
        with self._lock:
            self._connections += 1
            presence = Presence(
                router_id=router_id,
                name=name,
                connection=self._connections,
                fingerprint=fingerprint,
                hostname=hostname,
                protocols=dict(protocols),
                link_listener=link_listener,
                version=version,
                tunneler=tunneler,
                connected_at=self._clock.now(),
            )
            self._online[router_id] = presence
            self._seen.add(router_id)
            self._drop_edge(router_id)
            self._drop_links(router_id)
            return presence

    def mark_synced(self, router_id: str, connection: int) -> None:
        """The connection's router has the full API-session state (``SYNC_DONE``)."""
        with self._lock:
            current = self._online.get(router_id)
            if current is not None and current.connection == connection:
                self._online[router_id] = replace(current, sync_status=SYNC_DONE)

    def disconnect(self, router_id: str, connection: int) -> bool:
        """The connection closed; False when a later connection of the router had replaced it."""
        with self._lock:
            current = self._online.get(router_id)
            if current is None or current.connection != connection:
                return False
            del self._online[router_id]
            self._drop_edge(router_id)
            self._drop_links(router_id)
            return True

    # -- reads ------------------------------------------------------------------------------------
    def presence(self, router_id: str) -> Presence | None:
        with self._lock:
            return self._online.get(router_id)

    def is_online(self, router_id: str) -> bool:
        with self._lock:
            return router_id in self._online

    def online(self) -> list[Presence]:
        """Every online router, by id."""
        with self._lock:
            return sorted(self._online.values(), key=lambda p: p.router_id)

    def sync_status(self, router_id: str) -> str:
        with self._lock:
            current = self._online.get(router_id)
            if current is not None:
                return current.sync_status
            return SYNC_DISCONNECTED if router_id in self._seen else SYNC_UNKNOWN

    # -- links between routers --------------------------------------------------------------------
    def set_links(self, router_id: str, connection: int, reports: Iterable[LinkReport]) -> None:
        """The links up on the router now, as it reports them: all of them."""
        with self._lock:
            if not self._is_current(router_id, connection):
                return
            held = {r.id: r for r in reports if r.id and r.peer_id and r.peer_id != router_id}
            seen = {link_id: self._link_seen[link_id] for link_id in held if link_id in self._link_seen}
            self._drop_links(router_id)
            now = self._clock.now()
            self._links[router_id] = held
            peers: dict[str, str] = {}
            for link_id in sorted(held):
                peers.setdefault(held[link_id].peer_id, link_id)
                self._link_reporters.setdefault(link_id, set()).add(router_id)
                self._link_seen.setdefault(link_id, seen.get(link_id, now))
            self._link_peers[router_id] = peers

    def links(self) -> list[Link]:
        """Every link reported by a router at one of its ends while both are online, by id."""
        with self._lock:
            found = (self._link(link_id) for link_id in sorted(self._link_reporters))
            return [link for link in found if link is not None]

    def link(self, link_id: str) -> Link | None:
        with self._lock:
            return self._link(link_id)

    def link_between(self, a: str, b: str) -> Link | None:
        """A link between routers ``a`` and ``b`` (either way; the one ``a`` reports first, by
        id); None when there is none, or one of them is offline."""
        with self._lock:
            for reporter, peer in ((a, b), (b, a)):
                link_id = self._link_peers.get(reporter, {}).get(peer)
                if link_id is not None:
                    return self._link(link_id)
            return None

    # -- SDK channels on routers ------------------------------------------------------------------
    def set_edge_sessions(self, router_id: str, connection: int, sessions: Mapping[str, str]) -> None:
        """The API sessions (id -> identity id) with an SDK channel open on the router: all of them."""
        with self._lock:
            if not self._is_current(router_id, connection):
                return
            self._drop_edge(router_id)
            self._edge[router_id] = _EdgeChannels(connection, dict(sessions))
            self._identities.update(sessions.values())

    def edge_sessions_opened(self, router_id: str, connection: int, sessions: Mapping[str, str]) -> None:
        """API sessions (id -> identity id) that opened an SDK channel on the router."""
        with self._lock:
            if not self._is_current(router_id, connection):
                return
            held = self._edge.setdefault(router_id, _EdgeChannels(connection))
            for session_id, identity_id in sessions.items():
                if session_id not in held.sessions:
                    held.sessions[session_id] = identity_id
                    self._identities[identity_id] += 1

    def edge_sessions_closed(self, router_id: str, connection: int, session_ids: Iterable[str]) -> None:
        """API sessions whose last SDK channel on the router closed."""
        with self._lock:
            held = self._edge.get(router_id)
            if held is None or held.connection != connection:
                return
            for session_id in session_ids:
                self._forget(held, session_id)

    def forget_api_sessions(self, session_ids: Iterable[str]) -> None:
        """These API sessions ended: their channels are being closed on every router."""
        with self._lock:
            ids = list(session_ids)
            for held in self._edge.values():
                for session_id in ids:
                    self._forget(held, session_id)

    def has_edge_connection(self, identity_id: str) -> bool:
        """Whether an SDK of the identity has a channel open on some online router."""
        with self._lock:
            return self._identities.get(identity_id, 0) > 0

    # -- internals (under the lock) ---------------------------------------------------------------
    def _is_current(self, router_id: str, connection: int) -> bool:
        current = self._online.get(router_id)
        return current is not None and current.connection == connection

    def _drop_edge(self, router_id: str) -> None:
        held = self._edge.pop(router_id, None)
        if held is not None:
            self._identities.subtract(held.sessions.values())
            self._identities = +self._identities  # drop the zero counts

    def _link(self, link_id: str) -> Link | None:
        """The link ``link_id`` from its reports (the dialer's first), if both ends are online."""
        reports = [(r, self._links[r][link_id]) for r in sorted(self._link_reporters.get(link_id, ()))]
        reports.sort(key=lambda rr: not rr[1].dialed)
        for reporter, report in reports:
            if reporter not in self._online or report.peer_id not in self._online:
                continue
            source, dest = (reporter, report.peer_id) if report.dialed else (report.peer_id, reporter)
            return Link(
                id=report.id,
                source_id=source,
                dest_id=dest,
                protocol=report.protocol,
                dial_address=self._online[dest].link_listener,
                created_at=self._link_seen.get(link_id) or self._clock.now(),
            )
        return None

    def _drop_links(self, router_id: str) -> None:
        """Forget the router's link report (and when its links were first seen, if no one else
        reports them)."""
        self._link_peers.pop(router_id, None)
        for link_id in self._links.pop(router_id, {}):
            reporters = self._link_reporters.get(link_id)
            if reporters is not None:
                reporters.discard(router_id)
                if not reporters:
                    del self._link_reporters[link_id]
                    self._link_seen.pop(link_id, None)

    def _forget(self, held: _EdgeChannels, session_id: str) -> None:
        identity_id = held.sessions.pop(session_id, None)
        if identity_id is not None:
            self._identities[identity_id] -= 1
            if self._identities[identity_id] <= 0:
                del self._identities[identity_id]
