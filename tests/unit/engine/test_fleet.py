"""The fleet (engine.managers.fleet): which routers are online, their sync status, SDK channels."""

from __future__ import annotations

from engine.managers.fleet import (
    SYNC_DISCONNECTED,
    SYNC_DONE,
    SYNC_IN_PROGRESS,
    SYNC_UNKNOWN,
    Fleet,
    Presence,
    VersionInfo,
)
from engine.testing import FixedClock


def connect(fleet: Fleet, router_id: str = "r1") -> Presence:
    return fleet.connect(
        router_id,
        name=f"{router_id}-name",
        fingerprint="ab" * 20,
        hostname=f"{router_id}.example.test",
        protocols={"tls": f"tls://{router_id}.example.test:3022"},
        link_listener="",
        version=VersionInfo("v1", "rev", "date", "linux", "amd64"),
        tunneler=False,
    )


def test_a_router_is_online_from_its_connection_to_its_end() -> None:
    fleet = Fleet(FixedClock())
    assert fleet.sync_status("r1") == SYNC_UNKNOWN

    presence = connect(fleet)
    syncing = fleet.sync_status("r1")
    fleet.mark_synced("r1", presence.connection)
    synced = fleet.sync_status("r1")
    gone = fleet.disconnect("r1", presence.connection)

    assert (syncing, synced) == (SYNC_IN_PROGRESS, SYNC_DONE)
    assert gone is True
    assert not fleet.is_online("r1")
    assert fleet.sync_status("r1") == SYNC_DISCONNECTED


def test_a_replaced_connections_end_leaves_the_router_online() -> None:
    fleet = Fleet(FixedClock())
    first = connect(fleet)
    second = connect(fleet)

    assert fleet.disconnect("r1", first.connection) is False
    fleet.mark_synced("r1", first.connection)

    assert fleet.presence("r1") == second
    assert fleet.sync_status("r1") == SYNC_IN_PROGRESS


def test_version_info_needs_five_fields() -> None:
    assert VersionInfo.parse("v1|rev|date|linux|amd64") == VersionInfo("v1", "rev", "date", "linux", "amd64")
    assert VersionInfo.parse("v1|rev") is None


def test_an_identity_is_connected_while_one_of_its_api_sessions_has_a_channel() -> None:
    fleet = Fleet(FixedClock())
    one, two = connect(fleet, "r1"), connect(fleet, "r2")

    fleet.edge_sessions_opened("r1", one.connection, {"s1": "alice"})
    fleet.set_edge_sessions("r2", two.connection, {"s2": "alice", "s3": "bob"})
    fleet.edge_sessions_closed("r1", one.connection, ["s1"])
    alice_after_r1 = fleet.has_edge_connection("alice")
    fleet.forget_api_sessions(["s2"])
    alice_after_logout = fleet.has_edge_connection("alice")
    fleet.disconnect("r2", two.connection)

    assert alice_after_r1 is True
    assert alice_after_logout is False
    assert fleet.has_edge_connection("bob") is False


def test_reports_of_a_replaced_connection_are_ignored() -> None:
    fleet = Fleet(FixedClock())
    old = connect(fleet)
    connect(fleet)

    fleet.edge_sessions_opened("r1", old.connection, {"s1": "alice"})

    assert fleet.has_edge_connection("alice") is False
