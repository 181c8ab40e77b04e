"""The controllers of the network as durable members (engine.managers.controllers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.json_schemas import JsonSchemaChecker
from engine.entities.controllers import ControllerMember
from engine.errors import EntityCanNotBeDeletedError, NotFoundError
from engine.managers._base import Env
from engine.managers.controllers import ControllerManager, Joining
from engine.managers.fleet import Fleet
from engine.testing import CheapHasher, CountingIds, FixedClock
from storage.memory import MemoryStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture
def env(authority: Any, signer: Any, clock: FixedClock) -> Env:
    return Env(
        store=MemoryStore(),
        clock=clock,
        ids=CountingIds(),
        hasher=CheapHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=signer,
    )


@pytest.fixture
def fleet(clock: FixedClock) -> Fleet:
    return Fleet(clock)


@pytest.fixture
def controllers(env: Env, fleet: Fleet) -> ControllerManager:
    return ControllerManager(env, fleet)


def joining(id: str, address: str = "", **kw: Any) -> Joining:
    return Joining(
        id=id,
        name=id,
        ctrl_address=address or f"tls:{id}.example.test:6262",
        api_addresses={
            "edge-client": [{"url": f"https://{id}.example.test/edge/client/v1", "version": "v1"}]
        },
        cert_pem="PEM",
        fingerprint="ab" * 20,
        **kw,
    )


def test_a_controller_joins_once_and_its_record_stays(controllers: ControllerManager, env: Env) -> None:
    created_at = NOW - timedelta(days=3)

    first = controllers.join(joining("c1", created_at=created_at))
    stored = env.store.get(ControllerMember, "c1")

    assert stored == first
    assert first.created_at == created_at
    assert first.last_joined_at == NOW
    assert first.ctrl_address == "tls:c1.example.test:6262"
    assert first.api_addresses["edge-client"][0]["version"] == "v1"


def test_a_sibling_process_of_the_same_start_writes_nothing(
    controllers: ControllerManager, clock: FixedClock
) -> None:
    first = controllers.join(joining("c1"))
    clock.advance(timedelta(seconds=5))

    again = controllers.join(joining("c1", joined_at=clock.now()))

    assert again is first


def test_a_later_start_or_a_new_address_updates_the_record(
    controllers: ControllerManager, clock: FixedClock
) -> None:
    first = controllers.join(joining("c1"))
    clock.advance(timedelta(seconds=5))
    moved = controllers.join(joining("c1", "tls:elsewhere.example.test:7262"))
    clock.advance(timedelta(hours=1))
    restarted = controllers.join(joining("c1", "tls:elsewhere.example.test:7262"))

    assert moved.ctrl_address == "tls:elsewhere.example.test:7262"
    assert moved.created_at == first.created_at
    assert restarted.last_joined_at == NOW + timedelta(hours=1, seconds=5)


def test_online_is_what_the_fleet_says(controllers: ControllerManager, fleet: Fleet) -> None:
    controllers.join(joining("c1"))
    controllers.join(joining("c2"))
    fleet.set_member({"id": "c1", "ctrlAddress": "tls:c1.example.test:6262"})

    assert controllers.online_ids() == {"c1"}


def test_every_member_address_once_records_first_then_live_ones(
    controllers: ControllerManager, fleet: Fleet
) -> None:
    controllers.join(joining("c2"))
    controllers.join(joining("c1"))
    fleet.set_member({"id": "old", "ctrlAddress": "tls:old.example.test:6262"})

    assert controllers.ctrl_addresses() == [
        "tls:c1.example.test:6262",
        "tls:c2.example.test:6262",
        "tls:old.example.test:6262",
    ]


def test_a_controller_gone_for_good_is_removed(controllers: ControllerManager, env: Env) -> None:
    controllers.join(joining("c1"))
    controllers.join(joining("c2"))

    removed = controllers.remove("c2", own_id="c1")

    assert removed.id == "c2"
    assert env.store.get(ControllerMember, "c2") is None
    assert controllers.ctrl_addresses() == ["tls:c1.example.test:6262"]


def test_removing_the_own_an_online_or_an_unknown_controller_is_refused(
    controllers: ControllerManager, fleet: Fleet, env: Env
) -> None:
    controllers.join(joining("c1"))
    controllers.join(joining("c2"))
    fleet.set_member({"id": "c2"})

    with pytest.raises(EntityCanNotBeDeletedError, match="own"):
        controllers.remove("c1", own_id="c1")
    with pytest.raises(EntityCanNotBeDeletedError, match="online"):
        controllers.remove("c2", own_id="c1")
    with pytest.raises(NotFoundError):
        controllers.remove("c3", own_id="c1")
    assert {m.id for m in env.store.all(ControllerMember)} == {"c1", "c2"}


class LateBoard:
    """A fleet board that shares the other processes' state when told to (:meth:`share`)."""

    def __init__(self) -> None:
        self.absorb: Any = None

    def attach(self, export: Any, absorb: Any) -> None:
        self.absorb = absorb

    def changed(self) -> None:
        return None

    def share(self, states: list[dict[str, Any]]) -> None:
        self.absorb(states)


def test_which_controllers_are_online_is_known_once_the_board_was_read(clock: FixedClock) -> None:
    board = LateBoard()
    fleet = Fleet(clock, board)
    alone = Fleet(clock)

    before = fleet.wait_shared(0.01)
    board.share([{"member": {"id": "c2", "ctrlAddress": "tls:c2.example.test:6262"}}])

    assert before is False
    assert fleet.wait_shared(0.01) is True
    assert [m["id"] for m in fleet.members()] == ["c2"]
    assert alone.wait_shared(0.01) is False  # nothing is shared: nothing to wait for
