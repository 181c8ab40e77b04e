"""Circuits: the relayed connections routers carry now (OpenZiti's fabric circuits).

A circuit begins when the controller grants a Dial (``CREATE_CIRCUIT``: the Dial session, the
terminator it reaches and the routers on the way, ``engine.managers.edge_control``) and is kept
here, in memory, until the router that asked for it reports it ended (``CIRCUITS_ENDED``), leaves
it out of the circuits its hello lists (it restarted, or lost the end report while disconnected),
or an administrator deletes it (``DELETE /fabric/v1/circuits/{id}``: the router is told to close
it, :class:`CloseCircuits`). Nothing is persisted: a controller that restarts lists only the
circuits granted since, while those granted before go on carrying traffic.

A circuit's path names the routers from the dialer's to the terminator's and, between two of them,
the link that joined them when it was granted (``Fleet.link_between``; "" when none was known).
Each router keeps at most :data:`MAX_PER_ROUTER` circuits here; past that its oldest are forgotten
(a router that never reports its ends cannot grow the table without bound).

One object, built once with the managers, safe to use from any thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from engine.entities.services import Terminator
from engine.errors import NotFoundError
from engine.managers.fleet import Fleet
from engine.ports import Clock, IdGenerator

log = logging.getLogger(__name__)

#: Circuits kept per router that opened them.
MAX_PER_ROUTER = 100_000
#: The reason a deleted circuit's SDK is given.
DELETED_REASON = "circuit deleted by an administrator"


@dataclass(frozen=True, slots=True)
class Circuit:
    id: str
    #: The Dial session the circuit was granted with (OpenZiti's ``clientId``).
    client_id: str
    service_id: str
    terminator_id: str
    #: Router ids from the dialer's (the router that asked, which reports the end) to the terminator's.
    path: tuple[str, ...]
    #: The link between each two routers of the path ("" where none was known).
    links: tuple[str, ...]
    created_at: datetime
    #: OpenZiti's circuit tags: ``serviceId``, ``clientId`` (the dialing identity), ``hostId``.
    tags: Mapping[str, str] = field(default_factory=dict)

    @property
    def router_id(self) -> str:
        return self.path[0]


@dataclass(frozen=True, slots=True)
class CloseCircuits:
    """Router ``router_id`` is to close these circuits (an administrator deleted them)."""

    router_id: str
    ids: tuple[str, ...]
    reason: str


Sink = Callable[[CloseCircuits], None]


class CircuitManager:
    """The circuits routers carry now (see the module docstring)."""

    def __init__(
        self, clock: Clock, ids: IdGenerator, fleet: Fleet, *, per_router: int = MAX_PER_ROUTER
    ) -> None:
        self.clock = clock
        self.ids = ids
        self.fleet = fleet
        self.per_router = per_router
        self._lock = threading.Lock()
        self._circuits: dict[str, Circuit] = {}
        #: Circuit ids by the router that opened them, oldest first.
        self._by_router: dict[str, dict[str, None]] = {}
        self._sinks: tuple[Sink, ...] = ()

    # -- subscriptions -------------------------------------------------------------------------
    def add_sink(self, sink: Sink) -> None:
        """Call ``sink`` (on the deleting thread; it must not block) with circuits to close."""
        with self._lock:
            self._sinks = (*self._sinks, sink)

    def remove_sink(self, sink: Sink) -> None:
        with self._lock:
            self._sinks = tuple(s for s in self._sinks if s is not sink)

    # -- what routers say ----------------------------------------------------------------------
    def open(
        self,
        router_id: str,
        *,
        session_id: str,
        identity_id: str,
        terminator: Terminator,
        path: Iterable[str],
    ) -> Circuit:
        """A circuit granted to ``router_id`` for a Dial with ``session_id`` to ``terminator``."""
        hops = tuple(path) or (router_id,)
        links = tuple(self._link(a, b) for a, b in itertools.pairwise(hops))
        circuit = Circuit(
            id=self.ids.new_id(),
            client_id=session_id,
            service_id=terminator.service_id,
            terminator_id=terminator.id,
            path=hops,
            links=links,
            created_at=self.clock.now(),
            tags={"serviceId": terminator.service_id, "clientId": identity_id, "hostId": terminator.host_id},
        )
        with self._lock:
            self._circuits[circuit.id] = circuit
            mine = self._by_router.setdefault(circuit.router_id, {})
            mine[circuit.id] = None
            while len(mine) > self.per_router:
                oldest = next(iter(mine))
                del mine[oldest]
                self._circuits.pop(oldest, None)
        return circuit

    def ended(self, router_id: str, circuit_ids: Iterable[str]) -> int:
        """The router's circuits ``circuit_ids`` ended (others' ids are ignored); how many went."""
        with self._lock:
            return sum(1 for circuit_id in circuit_ids if self._drop(router_id, circuit_id))

    def held(self, router_id: str, circuit_ids: Iterable[str]) -> int:
        """The router (its hello) holds these circuits: its others are forgotten; how many went."""
        keep = set(circuit_ids)
        with self._lock:
            gone = [c for c in self._by_router.get(router_id, {}) if c not in keep]
            for circuit_id in gone:
                self._drop(router_id, circuit_id)
            return len(gone)

    # -- reads ---------------------------------------------------------------------------------
    def list(self) -> list[Circuit]:
        """Every circuit, by id."""
        with self._lock:
            return [self._circuits[k] for k in sorted(self._circuits)]

    def get(self, circuit_id: str) -> Circuit | None:
        with self._lock:
            return self._circuits.get(circuit_id)

    def require(self, circuit_id: str) -> Circuit:
        circuit = self.get(circuit_id)
        if circuit is None:
            raise NotFoundError()
        return circuit

    # -- an administrator's delete ---------------------------------------------------------------
    def remove(self, circuit_id: str, reason: str = DELETED_REASON) -> Circuit:
        """Forget the circuit and tell its router to close it (:class:`NotFoundError` if unknown)."""
        with self._lock:
            circuit = self._circuits.get(circuit_id)
            if circuit is None:
                raise NotFoundError()
            self._drop(circuit.router_id, circuit_id)
            sinks = self._sinks
        event = CloseCircuits(circuit.router_id, (circuit.id,), reason)
        for sink in sinks:
            try:
                sink(event)
            except Exception:
                log.exception("a circuit sink failed")
        return circuit

    # -- internals -----------------------------------------------------------------------------
    def _link(self, a: str, b: str) -> str:
        link = self.fleet.link_between(a, b)
        return link.id if link is not None else ""

    def _drop(self, router_id: str, circuit_id: str) -> bool:
        """Under the lock: forget ``router_id``'s circuit ``circuit_id``; whether it was there."""
        circuit = self._circuits.get(circuit_id)
        if circuit is None or circuit.router_id != router_id:
            return False
        del self._circuits[circuit_id]
        mine = self._by_router.get(router_id)
        if mine is not None:
            mine.pop(circuit_id, None)
            if not mine:
                del self._by_router[router_id]
        return True
