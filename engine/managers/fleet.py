"""The fleet: which edge routers are connected to this controller right now, and what they said.

A router is *online* while its control connection is up (``controller.control``). Its hello tells the
controller its hostname, the addresses SDKs reach it at (``{"tls": "tls://host:port"}``), where it
takes links from other routers, its version and whether it runs a tunneler; the REST models show
these while it is online (``isOnline``, ``supportedProtocols``, ``hostname``, ``versionInfo``,
``syncStatus``) and sessions name only online routers. Routers also report which API sessions have
an SDK channel open on them, which identities' ``hasEdgeRouterConnection`` shows, and the links
they have to one another (:class:`LinkReport`; ``/fabric/v1/links`` lists them as :class:`Link`):
a link is listed while one of its routers reports it and both are online.

Nothing here is persisted: the record lives as long as the controller process and starts empty.
It is one object (built once with the managers, no globals), safe to use from any thread.

A store several processes share (PostgreSQL: several workers, several controllers) has routers
connected to one process each; the fleet then shares its own connections through the store's
:class:`~engine.ports.FleetBoard` (:meth:`Fleet.export`) and takes the other processes' in
(:meth:`Fleet.absorb`), and every read answers for all of them: a router is online while any
process holds its control connection (this one's record wins where both do), an identity has an
edge connection while an SDK of it has a channel on any router, and a link is listed while a
router at one of its ends reports it to any process and both ends are online. Listeners added
with :meth:`Fleet.add_listener` hear when the routers online elsewhere change.

The controllers of the network are shared the same way: each process says what its controller is
(:meth:`Fleet.set_member`: an opaque JSON object with an ``id``, which the REST layer makes and
reads) and :meth:`Fleet.members` lists every controller some live process serves.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from engine.ports import Clock, FleetBoard, FleetState, NoFleetBoard

log = logging.getLogger(__name__)

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

    def __init__(self, clock: Clock, board: FleetBoard | None = None) -> None:
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
        #: What the other processes sharing the store report (:meth:`absorb`), in the same shapes.
        self._remote = _Remote()
        self._listeners: list[Callable[[], None]] = []
        #: What this process's controller says of itself (:meth:`set_member`), shared with the rest.
        self._member: dict[str, Any] | None = None
        #: Set once the other processes' fleets were read (:meth:`absorb`) the first time.
        self._absorbed = threading.Event()
        self._board = board if board is not None else NoFleetBoard()
        self._board.attach(self.export, self.absorb)

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
        self._board.changed()
        return presence

    def mark_synced(self, router_id: str, connection: int) -> None:
        """The connection's router has the full API-session state (``SYNC_DONE``)."""
        with self._lock:
            current = self._online.get(router_id)
            if current is None or current.connection != connection:
                return
            self._online[router_id] = replace(current, sync_status=SYNC_DONE)
        self._board.changed()

    def disconnect(self, router_id: str, connection: int) -> bool:
        """The connection closed; False when a later connection of the router had replaced it."""
        with self._lock:
            current = self._online.get(router_id)
            if current is None or current.connection != connection:
                return False
            del self._online[router_id]
            self._drop_edge(router_id)
            self._drop_links(router_id)
        self._board.changed()
        return True

    # -- reads ------------------------------------------------------------------------------------
    def presence(self, router_id: str) -> Presence | None:
        with self._lock:
            return self._presence(router_id)

    def is_online(self, router_id: str) -> bool:
        with self._lock:
            return router_id in self._online or router_id in self._remote.online

    def online(self) -> list[Presence]:
        """Every online router, by id."""
        with self._lock:
            return sorted(self._all_online().values(), key=lambda p: p.router_id)

    def sync_status(self, router_id: str) -> str:
        with self._lock:
            current = self._presence(router_id)
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
        self._board.changed()

    def links(self) -> list[Link]:
        """Every link reported by a router at one of its ends while both are online, by id."""
        with self._lock:
            ids = sorted(self._link_reporters.keys() | self._remote.link_reporters.keys())
            found = (self._link(link_id) for link_id in ids)
            return [link for link in found if link is not None]

    def link(self, link_id: str) -> Link | None:
        with self._lock:
            return self._link(link_id)

    def link_between(self, a: str, b: str) -> Link | None:
        """A link between routers ``a`` and ``b`` (either way; the one ``a`` reports first, by
        id); None when there is none, or one of them is offline."""
        with self._lock:
            for peers in (self._link_peers, self._remote.link_peers):
                for reporter, peer in ((a, b), (b, a)):
                    link_id = peers.get(reporter, {}).get(peer)
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
        self._board.changed()

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
        self._board.changed()

    def edge_sessions_closed(self, router_id: str, connection: int, session_ids: Iterable[str]) -> None:
        """API sessions whose last SDK channel on the router closed."""
        with self._lock:
            held = self._edge.get(router_id)
            if held is None or held.connection != connection:
                return
            for session_id in session_ids:
                self._forget(held, session_id)
        self._board.changed()

    def forget_api_sessions(self, session_ids: Iterable[str]) -> None:
        """These API sessions ended: their channels are being closed on every router."""
        with self._lock:
            ids = list(session_ids)
            for held in self._edge.values():
                for session_id in ids:
                    self._forget(held, session_id)
        self._board.changed()

    def has_edge_connection(self, identity_id: str) -> bool:
        """Whether an SDK of the identity has a channel open on some online router."""
        with self._lock:
            return self._identities.get(identity_id, 0) > 0 or self._remote.identities.get(identity_id, 0) > 0

    # -- sharing with the other processes of the store ----------------------------------------------
    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the board's thread) when the routers online elsewhere, or where
        they take links, change."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def set_member(self, member: Mapping[str, Any]) -> None:
        """What this process's controller is (JSON, with a string ``id``), for the others."""
        with self._lock:
            self._member = dict(member)
        self._board.changed()

    def members(self) -> list[dict[str, Any]]:
        """Every controller a live process serves: this one's first, then :meth:`peers`."""
        with self._lock:
            own = [dict(self._member)] if self._member is not None else []
        return own + self.peers()

    def peers(self) -> list[dict[str, Any]]:
        """The other controllers a live process serves, by id (a controller several processes
        serve once, as the one of them that joined first says)."""
        with self._lock:
            own_id = self._member.get("id") if self._member is not None else None
            others = self._remote.members
            return [dict(others[k]) for k in sorted(others) if k != own_id]

    def wait_shared(self, timeout: float) -> bool:
        """Wait until what the other processes share has been read once (at most ``timeout``
        seconds); whether it was (never, for a store no other process shares)."""
        return self._absorbed.wait(timeout)

    def export(self) -> FleetState:
        """This process's own connections, as JSON, for the other processes."""
        with self._lock:
            return {
                "member": self._member,
                "online": [_presence_to_json(p) for p in self._online.values()],
                "identities": dict(self._identities),
                "links": {
                    router_id: [_report_to_json(r) for r in reports.values()]
                    for router_id, reports in self._links.items()
                },
                "linkSeen": {link_id: at.isoformat() for link_id, at in self._link_seen.items()},
            }

    def absorb(self, states: list[FleetState]) -> None:
        """What the other processes share now (each one's :meth:`export`): it replaces what they
        shared before. A malformed part is left out (and logged), not the rest."""
        remote = _Remote()
        for state in states:
            try:
                remote.add(state)
            except (KeyError, TypeError, ValueError) as ex:
                log.warning("fleet: a process shared a state that cannot be read: %s", ex)
        with self._lock:
            before = self._topology()
            self._remote = remote
            self._seen.update(remote.online)
            changed = self._topology() != before
        self._absorbed.set()
        if changed:
            for listener in list(self._listeners):
                try:
                    listener()
                except Exception:
                    log.exception("fleet: a listener failed")

    # -- internals (under the lock) ---------------------------------------------------------------
    def _presence(self, router_id: str) -> Presence | None:
        return self._online.get(router_id) or self._remote.online.get(router_id)

    def _all_online(self) -> dict[str, Presence]:
        merged = dict(self._remote.online)
        merged.update(self._online)
        return merged

    def _topology(self) -> list[tuple[str, str]]:
        """The online routers and where they take links: what routers are told of each other."""
        return sorted((p.router_id, p.link_listener) for p in self._all_online().values())

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
        local = self._link_reporters.get(link_id, set())
        reports = [(r, self._links[r][link_id]) for r in sorted(local)]
        reports += [
            (r, self._remote.links[r][link_id])
            for r in sorted(self._remote.link_reporters.get(link_id, ()))
            if r not in local
        ]
        reports.sort(key=lambda rr: not rr[1].dialed)
        for reporter, report in reports:
            source, dest = (reporter, report.peer_id) if report.dialed else (report.peer_id, reporter)
            dest_presence = self._presence(dest)
            if dest_presence is None or self._presence(source) is None:
                continue
            return Link(
                id=report.id,
                source_id=source,
                dest_id=dest,
                protocol=report.protocol,
                dial_address=dest_presence.link_listener,
                created_at=self._link_seen.get(link_id)
                or self._remote.link_seen.get(link_id)
                or self._clock.now(),
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


class _Remote:
    """The fleets of the other processes, merged: what :meth:`Fleet.absorb` was last given."""

    def __init__(self) -> None:
        self.online: dict[str, Presence] = {}
        self.identities: Counter[str] = Counter()
        self.links: dict[str, dict[str, LinkReport]] = {}
        self.link_reporters: dict[str, set[str]] = {}
        self.link_peers: dict[str, dict[str, str]] = {}
        self.link_seen: dict[str, datetime] = {}
        self.members: dict[str, dict[str, Any]] = {}

    def add(self, state: FleetState) -> None:
        """One process's state: a router two processes hold is shown as its latest connection."""
        member = state.get("member")
        if isinstance(member, dict) and isinstance(member.get("id"), str):
            held_member = self.members.get(member["id"])
            if held_member is None or str(member.get("joinedAt", "")) < str(held_member.get("joinedAt", "")):
                self.members[member["id"]] = member
        for item in state.get("online") or []:
            presence = _presence_from_json(item)
            held = self.online.get(presence.router_id)
            if held is None or held.connected_at < presence.connected_at:
                self.online[presence.router_id] = presence
        for identity_id, count in (state.get("identities") or {}).items():
            self.identities[str(identity_id)] += int(count)
        for router_id, items in (state.get("links") or {}).items():
            reports = self.links.setdefault(str(router_id), {})
            peers = self.link_peers.setdefault(str(router_id), {})
            for item in items:
                report = _report_from_json(item)
                if not report.id or not report.peer_id or report.peer_id == router_id:
                    continue
                reports[report.id] = report
                self.link_reporters.setdefault(report.id, set()).add(str(router_id))
                peers.setdefault(report.peer_id, report.id)
        for link_id, at in (state.get("linkSeen") or {}).items():
            seen = datetime.fromisoformat(str(at))
            held_at = self.link_seen.get(str(link_id))
            if held_at is None or seen < held_at:
                self.link_seen[str(link_id)] = seen


def _presence_to_json(p: Presence) -> dict[str, Any]:
    return {
        "routerId": p.router_id,
        "name": p.name,
        "connection": p.connection,
        "fingerprint": p.fingerprint,
        "hostname": p.hostname,
        "protocols": dict(p.protocols),
        "linkListener": p.link_listener,
        "version": [
            p.version.version,
            p.version.revision,
            p.version.build_date,
            p.version.os,
            p.version.arch,
        ],
        "tunneler": p.tunneler,
        "connectedAt": p.connected_at.isoformat(),
        "syncStatus": p.sync_status,
    }


def _presence_from_json(item: Mapping[str, Any]) -> Presence:
    version = [str(v) for v in item.get("version") or []]
    connected_at = datetime.fromisoformat(str(item["connectedAt"]))
    if connected_at.tzinfo is None:
        raise ValueError(f"connectedAt has no time zone: {item['connectedAt']!r}")
    return Presence(
        router_id=str(item["routerId"]),
        name=str(item.get("name") or ""),
        connection=int(item.get("connection") or 0),
        fingerprint=str(item.get("fingerprint") or ""),
        hostname=str(item.get("hostname") or ""),
        protocols={str(k): str(v) for k, v in (item.get("protocols") or {}).items()},
        link_listener=str(item.get("linkListener") or ""),
        version=VersionInfo(*version) if len(version) == 5 else EMPTY_VERSION,
        tunneler=bool(item.get("tunneler")),
        connected_at=connected_at,
        sync_status=str(item.get("syncStatus") or SYNC_IN_PROGRESS),
    )


def _report_to_json(r: LinkReport) -> dict[str, Any]:
    return {"id": r.id, "peerId": r.peer_id, "dialed": r.dialed, "protocol": r.protocol}


def _report_from_json(item: Mapping[str, Any]) -> LinkReport:
    return LinkReport(
        id=str(item["id"]),
        peer_id=str(item["peerId"]),
        dialed=bool(item.get("dialed")),
        protocol=str(item.get("protocol") or "tls"),
    )
