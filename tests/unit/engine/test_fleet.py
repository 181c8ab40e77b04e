"""The fleet (engine.managers.fleet): which routers are online, their sync status, SDK channels."""

from __future__ import annotations

from engine.managers.fleet import (
    SYNC_DISCONNECTED,
    SYNC_DONE,
    SYNC_IN_PROGRESS,
    SYNC_UNKNOWN,
    Fleet,
    LinkReport,
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


# -- links ------------------------------------------------------------------------------------------
def test_a_link_is_listed_from_its_dialer_once_whoever_reports_it() -> None:
    fleet = Fleet(FixedClock())
    one, two = connect(fleet, "r1"), connect(fleet, "r2")

    fleet.set_links("r2", two.connection, [LinkReport("l1", "r1", dialed=False)])
    only_listener = fleet.links()
    fleet.set_links("r1", one.connection, [LinkReport("l1", "r2", dialed=True)])

    assert [(k.id, k.source_id, k.dest_id) for k in only_listener] == [("l1", "r1", "r2")]
    [link] = fleet.links()
    assert (link.id, link.source_id, link.dest_id, link.state, link.cost) == (
        "l1",
        "r1",
        "r2",
        "Connected",
        1,
    )
    assert fleet.link_between("r2", "r1") == link
    assert fleet.link("l1") == link
    assert fleet.link("l2") is None


def test_links_go_with_a_disconnect_and_a_report_of_another_connection_is_ignored() -> None:
    fleet = Fleet(FixedClock())
    one, two = connect(fleet, "r1"), connect(fleet, "r2")
    fleet.set_links("r1", one.connection, [LinkReport("l1", "r2", dialed=True)])

    fleet.set_links("r1", one.connection + 100, [])  # not the router's current connection
    kept = fleet.links()
    fleet.disconnect("r2", two.connection)  # the other end went: not listed
    other_end_gone = fleet.links()
    again = connect(fleet, "r2")
    fleet.disconnect("r1", one.connection)  # the reporter went: its report with it
    connect(fleet, "r1")

    assert [k.id for k in kept] == ["l1"]
    assert other_end_gone == []
    assert fleet.presence("r2") == again
    assert fleet.links() == []


def test_a_router_reporting_a_link_to_itself_is_not_believed() -> None:
    fleet = Fleet(FixedClock())
    one = connect(fleet, "r1")
    fleet.set_links("r1", one.connection, [LinkReport("l1", "r1", dialed=True), LinkReport("", "r2", True)])
    assert fleet.links() == []


def test_a_link_keeps_when_it_was_first_reported() -> None:
    clock = FixedClock()
    fleet = Fleet(clock)
    one, _ = connect(fleet, "r1"), connect(fleet, "r2")
    fleet.set_links("r1", one.connection, [LinkReport("l1", "r2", dialed=True)])
    first = fleet.links()[0].created_at

    clock.advance(minutes=5)
    fleet.set_links("r1", one.connection, [LinkReport("l1", "r2", dialed=True), LinkReport("l2", "r2", True)])

    assert [(k.id, k.created_at) for k in fleet.links()] == [("l1", first), ("l2", clock.now())]
    assert fleet.link_between("r1", "r2") == fleet.link("l1")


# -- several processes: each shares its own connections, every one answers for all -------------------
def test_a_router_connected_elsewhere_is_online_here_with_what_its_hello_said() -> None:
    here, there = Fleet(FixedClock()), Fleet(FixedClock())
    presence = connect(there, "r2")
    there.mark_synced("r2", presence.connection)
    there.set_edge_sessions("r2", presence.connection, {"as1": "id1"})

    here.absorb([there.export()])

    seen = here.presence("r2")
    assert seen is not None
    assert (seen.hostname, dict(seen.protocols), seen.version) == (
        "r2.example.test",
        {"tls": "tls://r2.example.test:3022"},
        VersionInfo("v1", "rev", "date", "linux", "amd64"),
    )
    assert here.is_online("r2")
    assert here.sync_status("r2") == SYNC_DONE
    assert [p.router_id for p in here.online()] == ["r2"]
    assert here.has_edge_connection("id1")
    assert here.export()["online"] == []  # shares only its own connections

    here.absorb([])  # the other process's router went away (or the process)

    assert not here.is_online("r2")
    assert here.sync_status("r2") == SYNC_DISCONNECTED
    assert not here.has_edge_connection("id1")


def test_a_link_between_routers_of_two_processes_is_listed_by_both() -> None:
    clock = FixedClock()
    here, there = Fleet(clock), Fleet(clock)
    a = here.connect(
        "ra",
        name="ra",
        fingerprint="",
        hostname="a",
        protocols={},
        link_listener="tls://a:4000",
        version=VersionInfo(),
        tunneler=False,
    )
    b = there.connect(
        "rb",
        name="rb",
        fingerprint="",
        hostname="b",
        protocols={},
        link_listener="tls://b:4000",
        version=VersionInfo(),
        tunneler=False,
    )
    here.set_links("ra", a.connection, [LinkReport("l1", peer_id="rb", dialed=True)])
    there.set_links("rb", b.connection, [LinkReport("l1", peer_id="ra", dialed=False)])
    heard: list[str] = []
    here.add_listener(lambda: heard.append("here"))
    there.add_listener(lambda: heard.append("there"))

    here.absorb([there.export()])
    there.absorb([here.export()])

    for fleet in (here, there):
        [link] = fleet.links()
        assert (link.id, link.source_id, link.dest_id, link.dial_address) == (
            "l1",
            "ra",
            "rb",
            "tls://b:4000",
        )
        assert fleet.link_between("rb", "ra") == link
    assert heard == ["here", "there"]  # each learnt of a router online elsewhere
    here.absorb([there.export()])
    assert heard == ["here", "there"]  # nothing new: no one is told again


def test_a_router_held_here_and_elsewhere_shows_this_connection() -> None:
    here, there = Fleet(FixedClock()), Fleet(FixedClock())
    connect(there, "r1")
    mine = connect(here, "r1")
    here.absorb([there.export()])

    assert here.presence("r1") == mine
    here.disconnect("r1", mine.connection)
    assert here.is_online("r1")  # still connected to the other process


def test_a_state_that_cannot_be_read_is_left_out_not_the_others() -> None:
    here, there = Fleet(FixedClock()), Fleet(FixedClock())
    connect(there, "r2")

    here.absorb([{"online": [{"routerId": "bad", "connectedAt": "yesterday"}]}, there.export()])

    assert [p.router_id for p in here.online()] == ["r2"]


def test_the_controllers_of_the_network_are_this_one_then_the_others_once_each() -> None:
    here, worker_1, worker_2, other = (Fleet(FixedClock()) for _ in range(4))
    here.set_member({"id": "a", "joinedAt": "2026-01-01T00:00:00+00:00"})
    worker_1.set_member({"id": "b", "joinedAt": "2026-01-02T00:00:00+00:00", "name": "later"})
    worker_2.set_member({"id": "b", "joinedAt": "2026-01-01T12:00:00+00:00", "name": "first"})
    other.set_member({"id": "0", "joinedAt": "2026-01-03T00:00:00+00:00"})

    here.absorb([worker_1.export(), worker_2.export(), other.export(), here.export()])

    assert [m["id"] for m in here.members()] == ["a", "0", "b"]
    assert [m.get("name") for m in here.peers()] == [None, "first"]  # b as its first process says
    here.absorb([])
    assert [m["id"] for m in here.members()] == ["a"]
