"""The published state of a store: every entity per kind with its lookups, as of one batch.

A :class:`State` is never changed in place: :meth:`State.apply` makes a new one that shares what
the batch did not touch (the touched kinds' maps and index buckets are new versions of
:class:`~storage.layered.Layered` maps, sharing all but the changes). Each kind's table keeps a
lookup per unique field, per indexed field and per value of each multi-valued field
(``MULTI_INDEXED``: what lists' ``anyOf(roleAttributes)`` filters use, through ``list_index``).
The group commit (:mod:`storage.group_commit`) swaps a new state in with one assignment, so a
reader sees whole batches only.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Collection, Sequence
from itertools import islice
from typing import Any, TypeVar, cast

from engine.entities import Entity
from engine.memo import PerObject
from engine.ports import (
    Change,
    Put,
)
from engine.query import ListIndex
from engine.query.plan import HEAP_SHARE
from storage.layered import Layered

E = TypeVar("E", bound=Entity)


def change_key(change: Change) -> tuple[str, str]:
    """The (entity kind name, id) a change touches."""
    if isinstance(change, Put):
        return change.entity.ENTITY, change.entity.id
    return change.kind.ENTITY, change.id


def coalesce(entries: Sequence[tuple[int, Change]]) -> list[Change]:
    """The last change per key of ``entries``, in the order of those last changes."""
    final: dict[tuple[str, str], Change] = {}
    for _, change in entries:
        key = change_key(change)
        final.pop(key, None)
        final[key] = change
    return list(final.values())


#: The ids an index holds for one value: an ordered set (values None) whose versions share ids.
Bucket = Layered[str, None]
#: Index buckets whose list order a kind's tables keep (``_Table.orders``) before starting afresh.
ORDERS_KEPT = 64


class _Table:
    """One kind's entities and lookups, in one published state (never changed once published).

    ``unique``: field -> value -> id; ``indexed``: field -> value (not None) -> ids; ``multi``: collection
    field -> each value held -> ids. Each row's place in list order (what a list's index lookups
    are put in order by) is worked out when a table is built at load, else on first use, and kept
    with the table: from the previous table's, when that one had them, and the ids the batch
    added and removed."""

    __slots__ = ("_derive", "_positions", "indexed", "multi", "orders", "rows", "unique")

    #: One table's positions are worked out once, not by every request that finds them missing
    #: at once (at 1M rows each would take a second, all of them under the GIL).
    _positions_lock = threading.Lock()

    def __init__(
        self,
        rows: Layered[str, Entity],
        unique: dict[str, Layered[object, str]],
        indexed: dict[str, Layered[object, Bucket]],
        multi: dict[str, Layered[object, Bucket]],
        orders: PerObject[Bucket, list[str]] | None = None,
    ) -> None:
        self.rows = rows
        self.unique = unique
        self.indexed = indexed
        self.multi = multi
        #: Index buckets put in list order (:meth:`in_list_order`), kept by the bucket object and
        #: shared by every version of the kind's table. A published bucket never changes, and the
        #: rows it names keep their places relative to each other from one version to the next
        #: (new rows go last, a row changed in place stays, and removing or re-adding a row
        #: changes its buckets): so one bucket's order holds for as long as the bucket does. A
        #: page of ``anyOf(roleAttributes) = "x"`` then costs its rows, not a heap over every
        #: holder of ``x`` (6,000 of them at 1M identities: 10 ms a request).
        self.orders: PerObject[Bucket, list[str]] = (
            orders if orders is not None else PerObject(None, ORDERS_KEPT)
        )
        #: (positions, the next free position), once worked out
        self._positions: tuple[dict[str, int], int] | None = None
        #: (the previous table's positions, the ids the batch added, those it removed), or None
        self._derive: tuple[tuple[dict[str, int], int], list[str], list[str]] | None = None

    def in_list_order(self, ids: Collection[str]) -> list[str]:
        """``ids`` (rows') in list order."""
        position = self.positions()
        return sorted((i for i in ids if i in position), key=position.__getitem__)

    def positions(self) -> dict[str, int]:
        """Each row's place in list order (increasing along the list, not necessarily 0..n-1)."""
        worked = self._positions
        if worked is not None:
            return worked[0]
        with self._positions_lock:
            return self._work_out_positions()

    def _work_out_positions(self) -> dict[str, int]:
        worked = self._positions
        if worked is None:
            derive = self._derive
            if derive is None:
                worked = ({row_id: n for n, row_id in enumerate(self.rows)}, len(self.rows))
            else:
                (before, following), added, removed = derive
                positions = before.copy()
                for row_id in removed:
                    positions.pop(row_id, None)
                for row_id in added:  # appended to the rows in this order (a re-added id: last)
                    if row_id in self.rows:
                        positions[row_id] = following
                        following += 1
                worked = (positions, following)
            self._positions = worked
            self._derive = None
        return worked[0]


def _built(rows: dict[str, Entity]) -> _Table:
    """A table holding ``rows`` (id -> entity, in list order), each index and each row's place
    built in one pass (the start-up load: what putting them one by one would build, without a
    version per change)."""
    unique: dict[str, dict[object, str]] = {}
    indexed: dict[str, dict[object, dict[str, None]]] = {}
    multi: dict[str, dict[object, dict[str, None]]] = {}
    for entity in rows.values():
        entity_id = entity.id
        for name in entity.UNIQUE:
            value = getattr(entity, name)
            if value is not None:
                unique.setdefault(name, {})[value] = entity_id
        for name in entity.INDEXED:
            value = getattr(entity, name)
            if value is not None:
                indexed.setdefault(name, {}).setdefault(value, {})[entity_id] = None
        for name in entity.MULTI_INDEXED:
            for value in set(getattr(entity, name) or ()):
                multi.setdefault(name, {}).setdefault(value, {})[entity_id] = None
    table = _Table(
        Layered(rows),
        {name: Layered(index) for name, index in unique.items()},
        {name: Layered({v: Layered(ids) for v, ids in index.items()}) for name, index in indexed.items()},
        {name: Layered({v: Layered(ids) for v, ids in index.items()}) for name, index in multi.items()},
    )
    # Each row's place, now rather than at the first list that puts a lookup in order: that list
    # waited for it (0.6 s at 1M identities, a dict of a million entries whatever the method).
    table._positions = (dict(zip(rows, range(len(rows)), strict=True)), len(rows))
    return table


_EMPTY = _Table(Layered(), {}, {}, {})


_NO_INDEX: Layered[object, Any] = Layered()


class _TableBuilder:
    """A new version of a table being changed by one batch: its maps derived once (sharing what
    the batch does not change, :class:`~storage.layered.Layered`), index buckets derived on touch
    (and only for values that change: an update that keeps a field's value touches no bucket)."""

    def __init__(self, base: _Table) -> None:
        self.table = _Table(
            base.rows.derive(),
            {name: index.derive() for name, index in base.unique.items()},
            {name: index.derive() for name, index in base.indexed.items()},
            {name: index.derive() for name, index in base.multi.items()},
            None if base is _EMPTY else base.orders,
        )
        self._owned: set[tuple[str, object]] = set()
        self._owned_multi: set[tuple[str, object]] = set()
        self._added: list[str] = []
        self._removed: list[str] = []
        before = base._positions
        if before is not None:
            self.table._derive = (before, self._added, self._removed)

    def put(self, entity: Entity) -> None:
        rows = self.table.rows
        old = rows.get(entity.id)
        if old is not None:
            self._unindex_unique(old)
        else:
            self._added.append(entity.id)
        rows[entity.id] = entity
        for name in entity.UNIQUE:
            value = getattr(entity, name)
            if value is not None:
                self.table.unique.setdefault(name, Layered())[value] = entity.id
        for name in entity.INDEXED:
            value = getattr(entity, name)
            if old is not None:
                before = getattr(old, name)
                if before == value:
                    continue
                self._discard(name, before, entity.id)
            if value is not None:  # sparse: no bucket holds every entity without a value
                self._bucket(name, value)[entity.id] = None
        for name in entity.MULTI_INDEXED:
            values = set(getattr(entity, name) or ())
            if old is not None:
                held = set(getattr(old, name) or ())
                for value in held - values:
                    self._discard_multi(name, value, entity.id)
                values -= held
            for value in values:
                self._multi_bucket(name, value)[entity.id] = None

    def delete(self, id: str) -> None:
        old = self.table.rows.pop(id, None)
        if old is not None:
            self._removed.append(id)
            self._unindex_unique(old)
            for name in old.INDEXED:
                self._discard(name, getattr(old, name), id)
            for name in old.MULTI_INDEXED:
                for value in set(getattr(old, name) or ()):
                    self._discard_multi(name, value, id)

    def _unindex_unique(self, entity: Entity) -> None:
        for name in entity.UNIQUE:
            value = getattr(entity, name)
            index = self.table.unique.get(name)
            if value is not None and index is not None and index.get(value) == entity.id:
                del index[value]

    def _discard(self, name: str, value: object, id: str) -> None:
        if value is not None:
            self._drop(self.table.indexed, self._owned, name, value, id)

    def _bucket(self, name: str, value: object) -> Bucket:
        return self._own(self.table.indexed, self._owned, name, value)

    def _discard_multi(self, name: str, value: object, id: str) -> None:
        self._drop(self.table.multi, self._owned_multi, name, value, id)

    def _multi_bucket(self, name: str, value: object) -> Bucket:
        return self._own(self.table.multi, self._owned_multi, name, value)

    @staticmethod
    def _own(
        indexes: dict[str, Layered[object, Bucket]], owned: set[tuple[str, object]], name: str, value: object
    ) -> Bucket:
        """``value``'s bucket of index ``name``, a version of this batch's own (derived once)."""
        index = indexes.setdefault(name, Layered())
        if (name, value) not in owned:
            held = index.get(value)
            index[value] = Layered() if held is None else held.derive()
            owned.add((name, value))
        return index[value]

    @classmethod
    def _drop(
        cls,
        indexes: dict[str, Layered[object, Bucket]],
        owned: set[tuple[str, object]],
        name: str,
        value: object,
        id: str,
    ) -> None:
        bucket = cls._own(indexes, owned, name, value)
        bucket.pop(id, None)
        if not bucket:
            del indexes[name][value]
            owned.discard((name, value))


class _ListIndex:
    """One kind's collection in one published state as lists read it (a ``ListIndex``)."""

    __slots__ = ("_kind", "_table")

    def __init__(self, kind: type[Entity], table: _Table) -> None:
        self._kind = kind
        self._table = table

    def __len__(self) -> int:
        return len(self._table.rows)

    def items(self) -> Collection[Entity]:
        return self._table.rows.values()

    def page(self, start: int, stop: int | None) -> list[Entity]:
        return list(islice(self._table.rows.values(), start, stop))

    def equal(self, field: str, value: Any) -> Collection[str] | None:
        table, kind = self._table, self._kind
        if field == "id":
            return (value,) if value in table.rows else ()
        if field in kind.UNIQUE:
            found = table.unique.get(field, _NO_INDEX).get(value)
            return () if found is None else (found,)
        if field in kind.INDEXED:
            if value is None:  # sparse indexes hold no None bucket
                return None
            return table.indexed.get(field, _NO_INDEX).get(value, ())
        return None

    def holding(self, field: str, value: Any) -> Collection[str] | None:
        if field not in self._kind.MULTI_INDEXED:
            return None
        return self._table.multi.get(field, _NO_INDEX).get(value, ())

    def first_in_order(self, ids: Collection[str], count: int) -> list[Entity]:
        rows = self._table.rows
        if count * HEAP_SHARE > len(ids):
            return self.in_order(ids)[:count]
        if isinstance(ids, Layered):  # an index bucket, as a lookup gave it: ordered once
            table = self._table
            return [rows[i] for i in table.orders.get(ids, table.in_list_order)[:count]]
        position = self._table.positions()
        try:  # an index's ids are all rows'
            first = heapq.nsmallest(count, ids, key=position.__getitem__)
        except KeyError:
            first = heapq.nsmallest(count, (i for i in ids if i in rows), key=position.__getitem__)
        return [rows[i] for i in first]

    def in_order(self, ids: Collection[str]) -> list[Entity]:
        table = self._table
        rows = table.rows
        if len(ids) * 4 >= len(rows):  # most of the collection: one pass in list order
            wanted = ids if isinstance(ids, (set, frozenset)) else set(ids)
            return [e for e in rows.values() if e.id in wanted]
        found = [i for i in ids if i in rows]
        if len(found) > 1:
            found.sort(key=table.positions().__getitem__)
        return [rows[i] for i in found]


class State:
    """The published state after batch ``seq``: an immutable :class:`~engine.ports.StoreView`."""

    __slots__ = ("_tables", "seq")

    def __init__(self, tables: dict[str, _Table], seq: int) -> None:
        self._tables = tables
        self.seq = seq

    def get(self, kind: type[E], id: str) -> E | None:
        entity = self._tables.get(kind.ENTITY, _EMPTY).rows.get(id)
        if entity is None:
            return None
        assert isinstance(entity, kind)
        return entity

    def all(self, kind: type[E]) -> list[E]:
        return list(self._tables.get(kind.ENTITY, _EMPTY).rows.values())  # type: ignore[arg-type]

    def count(self, kind: type[Entity]) -> int:
        return len(self._tables.get(kind.ENTITY, _EMPTY).rows)

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        entity_id = self._tables.get(kind.ENTITY, _EMPTY).unique.get(field, _NO_INDEX).get(value)
        return None if entity_id is None else self.get(kind, entity_id)

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        table = self._tables.get(kind.ENTITY, _EMPTY)
        if value is None:  # indexes are sparse: the entities without a value are found by a scan
            return [e for e in table.rows.values() if getattr(e, field) is None]  # type: ignore[misc]
        ids = table.indexed.get(field, _NO_INDEX).get(value, ())
        return [e for e in (table.rows.get(i) for i in ids) if e is not None]  # type: ignore[misc]

    def holds(self, kind_name: str, id: str) -> bool:
        """Whether an entity of the kind named ``kind_name`` (``Entity.ENTITY``) has this id."""
        return id in self._tables.get(kind_name, _EMPTY).rows

    def ids(self, kind: type[Entity]) -> set[str]:
        return set(self._tables.get(kind.ENTITY, _EMPTY).rows)

    def list_index(self, kind: type[E]) -> ListIndex[E]:
        return cast("ListIndex[E]", _ListIndex(kind, self._tables.get(kind.ENTITY, _EMPTY)))

    def apply(self, changes: Sequence[Change], seq: int) -> State:
        """A new state: this one with ``changes`` applied (untouched kinds are shared)."""
        builders: dict[str, _TableBuilder] = {}
        for change in changes:
            name = change_key(change)[0]
            builder = builders.get(name)
            if builder is None:
                builder = builders[name] = _TableBuilder(self._tables.get(name, _EMPTY))
            if isinstance(change, Put):
                builder.put(change.entity)
            else:
                builder.delete(change.id)
        tables = dict(self._tables)
        tables.update((name, builder.table) for name, builder in builders.items())
        return State(tables, seq)

    def with_kinds(self, fresh: dict[str, dict[str, Entity]], held: Sequence[Change], seq: int) -> State:
        """This state with the kinds of ``fresh`` built in one pass (kinds it does not hold yet)
        and then ``held`` applied: how a store fills from durable storage at start-up."""
        tables = dict(self._tables)
        tables.update((name, _built(rows)) for name, rows in fresh.items())
        return State(tables, seq).apply(held, seq)
