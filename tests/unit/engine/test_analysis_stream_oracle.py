"""The access-change stream against the brute-force oracle (docs/analysis.md §15): on random
networks and random sequences of committed batches (AllOf/AnyOf, ``#all``, ``@id``, posture
checks, deletes), the stream read from the start, record after record, is exactly the oracle's
before/after pair differences of each batch that changed a pair, in commit order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.analysis.stream import AccessChangeStream, Cursor, decode_record, encode_record
from engine.entities import Entity
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.managers.access import AccessManager
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
)
from engine.ports import AccessChangeRow, Change, Delete, Put
from engine.testing import FixedClock
from storage.memory import MemoryStore
from tests.unit.engine.test_analysis_oracle import SETTINGS, apply, batches, grants, networks
from tests.unit.engine.test_policy_oracle import FIELD, Oracle, OraclePolicy, rebuild

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CLASSES: dict[str, type[Entity]] = {
    IDENTITY: Identity,
    SERVICE: Service,
    EDGE_ROUTER: EdgeRouter,
    POSTURE_CHECK: PostureCheck,
    SERVICE_POLICY: ServicePolicy,
    EDGE_ROUTER_POLICY: EdgeRouterPolicy,
    SERVICE_EDGE_ROUTER_POLICY: ServiceEdgeRouterPolicy,
}
POLICY_SIDES = {
    SERVICE_POLICY: (IDENTITY, SERVICE, POSTURE_CHECK),
    EDGE_ROUTER_POLICY: (IDENTITY, EDGE_ROUTER),
    SERVICE_EDGE_ROUTER_POLICY: (SERVICE, EDGE_ROUTER),
}


def entity(kind: str, item_id: str, value: object) -> Entity:
    """The store entity of an oracle entity (its attributes) or policy (its spec)."""
    base: dict[str, Any] = {"id": item_id, "created_at": NOW, "updated_at": NOW, "name": item_id}
    if isinstance(value, OraclePolicy):
        fields = {FIELD[side]: list(value.roles.get(side, [])) for side in POLICY_SIDES[kind]}
        if kind == SERVICE_POLICY:
            fields["type"] = value.type or "Dial"
        return CLASSES[kind](**base, semantic=value.semantic, **fields)
    assert isinstance(value, set)
    extra: dict[str, Any] = {"type_id": "OS"} if kind == POSTURE_CHECK else {}
    return CLASSES[kind](**base, role_attributes=sorted(value), **extra)


def changes(batch: list[tuple[str, str, str, object]], store: MemoryStore) -> list[Change]:
    """The batch as store changes, the last of each key (as a unit of work commits it)."""
    last: dict[tuple[str, str], object] = {}
    for _, kind, item_id, value in batch:
        last.pop((kind, item_id), None)
        last[(kind, item_id)] = value
    out: list[Change] = []
    for (kind, item_id), value in last.items():
        if value is not None:
            out.append(Put(entity(kind, item_id, value)))
        elif store.get(CLASSES[kind], item_id) is not None:
            out.append(Delete(CLASSES[kind], item_id))
    return out


def initial(oracle: Oracle) -> list[Change]:
    puts: list[Change] = []
    for kind, members in oracle.entities.items():
        puts += [Put(entity(kind, i, set(attrs))) for i, attrs in members.items()]
    for kind, policies in oracle.policies.items():
        puts += [Put(entity(kind, i, spec)) for i, spec in policies.items()]
    return puts


Pairs = tuple[
    set[tuple[str, str, str]], set[tuple[str, str, str]], set[tuple[str, str]], set[tuple[str, str]]
]


@SETTINGS
@given(oracle=networks(), data=st.data(), limit=st.integers(1, 7))
def test_the_stream_is_the_oracles_pair_differences_batch_by_batch(
    oracle: Oracle, data: st.DataObject, limit: int
) -> None:
    store = MemoryStore()
    if initial(oracle):
        store.commit(initial(oracle))
    access = AccessManager(store)
    store.subscribe(access.on_commit)
    stream = AccessChangeStream(store, access, FixedClock(NOW), retain=timedelta(days=7))
    stream.attach([])
    start = store.last_seq
    scratch = rebuild(oracle)
    expected: list[tuple[int, Pairs]] = []
    for _ in range(data.draw(st.integers(1, 5), label="batches")):
        batch = data.draw(batches(oracle))
        before = grants(oracle)
        apply(scratch, oracle, batch)
        after = grants(oracle)
        committed = changes(batch, store)
        if not committed:
            continue
        store.commit(committed)
        pairs = (after[0] - before[0], before[0] - after[0], after[1] - before[1], before[1] - after[1])
        if any(pairs):
            expected.append((store.last_seq, pairs))
    stream.close(timeout=60)  # records everything queued first

    got: dict[int, Pairs] = {}
    cursor = Cursor(start)
    while True:
        parts, cursor = stream.read(cursor, limit)
        if not parts:
            break
        for part in parts:
            sa, sr, ra, rr = got.setdefault(part["revision"], (set(), set(), set(), set()))
            services, routers = part["services"], part["routers"]
            for into, items in ((sa, services["added"]), (sr, services["removed"])):
                into.update((p["identityId"], p["serviceId"], p["type"]) for p in items)
            for into_r, items in ((ra, routers["added"]), (rr, routers["removed"])):
                into_r.update((p["identityId"], p["edgeRouterId"]) for p in items)
    assert list(got.items()) == expected
    assert cursor == (Cursor(expected[-1][0]) if expected else Cursor(start))


def test_a_record_survives_encoding() -> None:
    from engine.analysis.stream import ChangeRecord

    record = ChangeRecord(
        9,
        4,
        NOW,
        "changes",
        [{"actor": None, "changes": [{"kind": "identities", "id": "é", "op": "put"}]}],
        1,
        [("i1", "s1", "Dial"), ("i1", "s2", "Bind")],
        [("i2", "s1", "Bind")],
        [("i1", "r1")],
        [],
    )
    row = AccessChangeRow(9, 4, NOW, record.total, encode_record(record))
    assert decode_record(row) == record
    assert record.part(1, 2)["services"] == {
        "added": [{"identityId": "i1", "serviceId": "s2", "type": "Bind"}],
        "removed": [{"identityId": "i2", "serviceId": "s1", "type": "Bind"}],
    }
