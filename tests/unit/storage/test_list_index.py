"""The store's list indexes (``list_index``): lookups by id, unique, indexed and multi-valued
fields, list order, and copy-on-write per published batch."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.entities.identities import Authenticator, Identity
from engine.entities.services import Service
from engine.ports import Delete, Put
from engine.query import ListIndex
from storage.memory import MemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def identity(n: int, roles: Sequence[str] = (), **fields: Any) -> Identity:
    return Identity(
        id=f"i{n}", created_at=NOW, updated_at=NOW, name=f"name-{n}", role_attributes=list(roles), **fields
    )


def ids(found: Any) -> set[str]:
    assert found is not None
    return set(found)


def test_multi_valued_fields_are_indexed_by_each_value() -> None:
    store = MemoryStore()
    store.commit([Put(identity(1, ["a", "b", "a"])), Put(identity(2, ["b"])), Put(identity(3))])
    index = store.list_index(Identity)

    assert ids(index.holding("role_attributes", "a")) == {"i1"}
    assert ids(index.holding("role_attributes", "b")) == {"i1", "i2"}
    assert ids(index.holding("role_attributes", "c")) == set()


def test_updates_and_deletes_move_ids_between_buckets() -> None:
    store = MemoryStore()
    store.commit([Put(identity(1, ["a"])), Put(identity(2, ["a", "b"]))])

    store.commit([Put(identity(1, ["b"])), Delete(Identity, "i2")])
    index = store.list_index(Identity)

    assert ids(index.holding("role_attributes", "a")) == set()
    assert ids(index.holding("role_attributes", "b")) == {"i1"}


def test_a_published_state_keeps_its_index_after_later_batches() -> None:
    store = MemoryStore()
    store.commit([Put(identity(1, ["a"])), Put(identity(2, ["a"]))])
    before = store.view().list_index(Identity)
    before.in_order({"i2"})  # its caches are built

    store.commit([Put(identity(1, ["b"])), Delete(Identity, "i2"), Put(identity(3, ["a"]))])

    assert ids(before.holding("role_attributes", "a")) == {"i1", "i2"}
    assert [e.id for e in before.items()] == ["i1", "i2"]
    assert [e.id for e in before.in_order({"i2", "i1"})] == ["i1", "i2"]
    after = store.list_index(Identity)
    assert ids(after.holding("role_attributes", "a")) == {"i3"}
    assert [e.id for e in after.items()] == ["i1", "i3"]


def test_an_update_that_keeps_an_indexed_value_copies_no_bucket() -> None:
    store = MemoryStore()
    store.commit([Put(identity(n, ["shared"])) for n in range(50)])
    bucket = store.list_index(Identity).holding("role_attributes", "shared")

    store.commit([Put(identity(7, ["shared"], is_admin=True))])

    index = store.list_index(Identity)
    assert index.holding("role_attributes", "shared") is bucket
    # indexes are sparse: no bucket holds the 50 identities without overrides (None)
    assert index.equal("overrides_configs", None) is None
    updated = store.get(Identity, "i7")
    assert updated is not None
    assert updated.is_admin


def test_indexed_fields_follow_their_values() -> None:
    store = MemoryStore()
    store.commit([Put(identity(1)), Put(identity(2))])

    store.commit([Put(identity(1, service_configs={"s": {"t": "c"}}))])

    assert [e.id for e in store.find_by(Identity, "overrides_configs", True)] == ["i1"]
    assert [e.id for e in store.find_by(Identity, "overrides_configs", None)] == ["i2"]  # by a scan
    store.commit([Put(identity(1))])
    assert store.find_by(Identity, "overrides_configs", True) == []


def test_equality_lookups_by_id_unique_and_indexed_fields() -> None:
    store = MemoryStore()
    store.commit([Put(identity(1, external_id="x")), Put(identity(2))])
    index = store.list_index(Identity)

    assert ids(index.equal("id", "i2")) == {"i2"}
    assert ids(index.equal("id", "nope")) == set()
    assert ids(index.equal("name", "name-1")) == {"i1"}
    assert ids(index.equal("external_id", "x")) == {"i1"}
    assert ids(index.equal("external_id", "y")) == set()
    assert index.equal("overrides_configs", None) is None  # sparse: not answered by the index
    assert index.equal("type_id", "Default") is None  # not indexed
    assert index.holding("name", "name-1") is None


def test_items_are_in_list_order_and_in_order_skips_unknown_ids() -> None:
    store = MemoryStore()
    store.commit([Put(identity(n)) for n in (4, 2, 9, 1, 5, 6, 7, 8, 3, 0)])
    store.commit([Delete(Identity, "i9")])
    store.commit([Put(identity(9))])
    index: ListIndex[Identity] = store.list_index(Identity)

    assert [e.id for e in index.items()] == [e.id for e in store.all(Identity)]
    assert [e.id for e in index.in_order(["i9", "i4", "gone", "i1"])] == ["i4", "i1", "i9"]
    assert [e.id for e in index.in_order({e.id for e in store.all(Identity)})] == [
        e.id for e in store.all(Identity)
    ]
    assert len(index) == 10


def test_a_kind_with_nothing_stored_has_an_empty_index() -> None:
    index = MemoryStore().list_index(Service)

    assert len(index) == 0
    assert list(index.items()) == []
    assert ids(index.holding("role_attributes", "a")) == set()
    assert ids(index.equal("name", "x")) == set()


def test_writers_list_what_they_staged() -> None:
    store = MemoryStore(background=True)
    store.commit([Put(identity(1, ["a"])), Put(identity(3, ["a"]))])

    with store.write_lock():  # the committer cannot publish while it is held
        store.commit([Put(identity(2, ["a"])), Put(identity(3, ["b"]))], wait=False)
        index = store.list_index(Identity)
        staged = ids(index.holding("role_attributes", "a"))
        order = [e.id for e in index.in_order({"i3", "i2", "i1"})]
    store.close()

    assert staged == {"i1", "i2"}
    assert order == ["i1", "i3", "i2"]


def test_kinds_without_multi_valued_fields_still_look_up_by_their_indexes() -> None:
    store = MemoryStore()
    store.commit(
        [
            Put(
                Authenticator(
                    id=f"a{n}", created_at=NOW, updated_at=NOW, identity_id=f"i{n % 2}", method="updb"
                )
            )
            for n in range(4)
        ]
    )
    index = store.list_index(Authenticator)

    assert ids(index.equal("identity_id", "i1")) == {"a1", "a3"}
    assert index.holding("identity_id", "i1") is None


@pytest.mark.parametrize("seed", range(12))
def test_lookups_come_back_in_list_order_after_any_history_of_batches(seed: int) -> None:
    """Places in list order are carried from batch to batch (ids added in a batch: at the end, in
    the order added; deleted: gone; created again: at the end); a small lookup is put in order by
    them, so it must agree with the order of ``all`` after every batch."""
    rng = random.Random(seed)
    pool = [f"i{n}" for n in range(200)]
    store = MemoryStore()
    for _ in range(15):
        changes: list[Put | Delete] = []
        for entity_id in rng.sample(pool, rng.randint(1, 60)):
            if rng.random() < 0.3:
                changes.append(Delete(Identity, entity_id))
            else:
                changes.append(Put(identity(int(entity_id[1:]), rng.sample(["a", "b"], rng.randint(0, 2)))))
        store.commit(changes)
        index = store.list_index(Identity)
        listed = [e.id for e in store.all(Identity)]
        for _ in range(5):
            wanted = set(rng.sample(pool, 8))
            assert [e.id for e in index.in_order(wanted)] == [i for i in listed if i in wanted]


@pytest.mark.parametrize("seed", range(8))
def test_a_page_of_a_bucket_is_in_list_order_after_any_history_of_batches(seed: int) -> None:
    """The first rows of a large bucket (an ``anyOf`` page) come from the bucket's order, kept
    while the bucket is unchanged: batches that touch it, and batches that only add rows that
    hold neither value (its order kept, the table's places changed), both agree with a scan."""
    rng = random.Random(seed)
    pool = [f"i{n}" for n in range(300)]
    store = MemoryStore()
    extra = 1000
    for _ in range(20):
        changes: list[Put | Delete] = []
        if rng.random() < 0.4:  # rows that hold neither value: every bucket stays the object it was
            for _ in range(rng.randint(1, 5)):
                changes.append(Put(identity(extra, [])))
                extra += 1
        else:
            for entity_id in rng.sample(pool, rng.randint(1, 40)):
                if rng.random() < 0.2:
                    changes.append(Delete(Identity, entity_id))
                else:
                    roles = rng.sample(["a", "b"], rng.randint(0, 2))
                    changes.append(Put(identity(int(entity_id[1:]), roles)))
        store.commit(changes)
        index = store.list_index(Identity)
        listed = list(store.all(Identity))
        for role in ("a", "b"):
            holders = [e.id for e in listed if role in e.role_attributes]
            bucket = index.holding("role_attributes", role)
            assert bucket is not None
            for count in (1, 3, 10):
                assert [e.id for e in index.first_in_order(bucket, count)] == holders[:count]


def _lookups(store: MemoryStore) -> dict[str, Any]:
    """Everything a list can ask of the identities and authenticators, in list order."""
    identities = store.list_index(Identity)
    authenticators = store.list_index(Authenticator)
    roles = {r for i in store.all(Identity) for r in i.role_attributes}
    return {
        "rows": [e.id for e in identities.items()],
        "names": {i.name: list(identities.equal("name", i.name) or ()) for i in store.all(Identity)},
        "roles": {r: list(identities.holding("role_attributes", r) or ()) for r in roles},
        "by identity": {
            a.identity_id: list(authenticators.equal("identity_id", a.identity_id) or ())
            for a in store.all(Authenticator)
        },
        "usernames": {
            a.username: store.find_unique(Authenticator, "username", a.username)
            for a in store.all(Authenticator)
        },
        # put in order by each row's place (worked out at load for a built table)
        "in order": [e.id for e in identities.in_order({f"i{n}" for n in range(0, 300, 7)})],
        "first holders": {
            r: [e.id for e in identities.first_in_order(identities.holding("role_attributes", r) or (), 3)]
            for r in roles
        },
    }


def test_loading_at_start_builds_what_committing_the_same_entities_builds() -> None:
    rng = random.Random(7)
    entities: list[Any] = []
    for n in range(300):
        entities.append(identity(n, rng.sample(["a", "b", "c", "d"], rng.randint(0, 3))))
        if n % 3 == 0:
            entities.append(
                Authenticator(
                    id=f"au{n}", created_at=NOW, updated_at=NOW, identity_id=f"i{n % 50}", method="updb",
                    username=f"user-{n}",
                )
            )  # fmt: skip
    loaded, committed = MemoryStore(), MemoryStore()
    loaded.load(entities[:200])  # kinds memory does not hold yet: built in one pass
    loaded.load(entities[200:])  # then the kinds it holds: puts
    committed.commit([Put(e) for e in entities])

    assert _lookups(loaded) == _lookups(committed)
    loaded.commit([Put(identity(5, ["z"])), Delete(Identity, "i7")])  # a built table changes as any
    committed.commit([Put(identity(5, ["z"])), Delete(Identity, "i7")])
    assert _lookups(loaded) == _lookups(committed)
