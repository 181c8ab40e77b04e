"""The circuit table (engine.managers.circuits): circuits from their grant to their end, a
router's hello, an administrator's delete, and the bound per router."""

from __future__ import annotations

import pytest

from engine.entities.services import Terminator
from engine.errors import NotFoundError
from engine.managers.circuits import CircuitManager, CloseCircuits
from engine.managers.fleet import Fleet, LinkReport, VersionInfo
from engine.testing import CountingIds, FixedClock

TERMINATOR = Terminator(
    id="t1",
    created_at=FixedClock().now(),
    updated_at=FixedClock().now(),
    service_id="s1",
    router_id="r2",
    binding="edge",
    address="x",
    host_id="h1",
)


def online(fleet: Fleet, router_id: str) -> int:
    presence = fleet.connect(
        router_id,
        name=router_id,
        fingerprint="",
        hostname="",
        protocols={},
        link_listener=f"tls://{router_id}:4022",
        version=VersionInfo(),
        tunneler=False,
    )
    return presence.connection


def table(per_router: int = 100) -> tuple[CircuitManager, Fleet]:
    clock = FixedClock()
    fleet = Fleet(clock)
    return CircuitManager(clock, CountingIds("c"), fleet, per_router=per_router), fleet


def test_a_circuit_names_its_path_and_the_link_between_its_routers() -> None:
    circuits, fleet = table()
    connection = online(fleet, "r1")
    online(fleet, "r2")
    fleet.set_links("r1", connection, [LinkReport("l1", "r2", dialed=True)])

    circuit = circuits.open(
        "r1", session_id="sess", identity_id="who", terminator=TERMINATOR, path=["r1", "r2"]
    )

    assert circuits.get(circuit.id) == circuit
    assert (circuit.router_id, circuit.path, circuit.links) == ("r1", ("r1", "r2"), ("l1",))
    assert (circuit.client_id, circuit.service_id, circuit.terminator_id) == ("sess", "s1", "t1")
    assert circuit.tags == {"serviceId": "s1", "clientId": "who", "hostId": "h1"}
    alone = circuits.open("r1", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r1", "r3"])
    assert alone.links == ("",)  # no link known between them


def test_only_the_router_that_opened_a_circuit_ends_it() -> None:
    circuits, _ = table()
    circuit = circuits.open("r1", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r1"])

    assert circuits.ended("r2", [circuit.id]) == 0
    assert circuits.ended("r1", [circuit.id, "unknown"]) == 1
    assert circuits.list() == []


def test_a_hello_keeps_only_the_circuits_it_lists() -> None:
    circuits, _ = table()
    kept, lost = (
        circuits.open("r1", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r1"])
        for _ in range(2)
    )
    other = circuits.open("r2", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r2"])

    assert circuits.held("r1", [kept.id, "unknown"]) == 1

    assert circuits.list() == sorted([kept, other], key=lambda c: c.id)
    assert circuits.get(lost.id) is None


def test_a_delete_forgets_the_circuit_and_tells_its_router() -> None:
    circuits, _ = table()
    told: list[CloseCircuits] = []
    circuits.add_sink(told.append)
    circuit = circuits.open("r1", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r1", "r2"])

    circuits.remove(circuit.id)

    assert told == [CloseCircuits("r1", (circuit.id,), "circuit deleted by an administrator")]
    assert circuits.list() == []
    with pytest.raises(NotFoundError):
        circuits.remove(circuit.id)


def test_a_router_keeps_at_most_its_bound_its_oldest_forgotten_first() -> None:
    circuits, _ = table(per_router=2)
    first, second, third = (
        circuits.open("r1", session_id="s", identity_id="w", terminator=TERMINATOR, path=["r1"])
        for _ in range(3)
    )
    assert [c.id for c in circuits.list()] == sorted([second.id, third.id])
    assert circuits.get(first.id) is None
