"""Dense slots for entities and policies: id <-> int slot; for entities, attribute -> bitset index.

Every entity of a kind gets a small int *slot*; a set of entities is an int bitset over those slots
(:mod:`engine.policy.bitset`). Freed slots are reused lowest first, so bitsets stay as narrow as the
live population allows. Per kind the table keeps:

- ``slot_of`` (id -> slot) and ``ids`` (slot -> id, ``None`` for a free slot);
- ``attributes`` (slot -> the role attributes: a frozenset, or the tuple given to the bulk load, which
  may repeat an attribute; read them through ``frozenset(...)``, free for a frozenset);
- ``attribute_bits`` (attribute -> bitset of the slots carrying it) and ``all_bits`` (every live slot).

``ids`` is copy-on-write: :meth:`EntityTable.id_snapshot` hands out the current list and marks it
shared, and the next mutation copies it first. Results that resolve slots to ids later (the router
lists of :class:`engine.policy.advice.Advice`) stay correct after the table changes.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Sequence

from engine.policy.model import PolicyKind, PolicyRecord

__all__ = ["EntityTable", "PolicyTable", "SlotTable"]

_NO_ATTRIBUTES: frozenset[str] = frozenset()


class SlotTable:
    """Ids <-> dense slots with a lowest-first free list (shared by entity and policy tables)."""

    __slots__ = ("_free", "ids", "ids_shared", "slot_of")

    def __init__(self) -> None:
        self.slot_of: dict[str, int] = {}
        self.ids: list[str | None] = []
        self._free: list[int] = []
        self.ids_shared = False

    def __len__(self) -> int:
        return len(self.slot_of)

    @property
    def capacity(self) -> int:
        """One more than the highest slot ever used (the length of per-slot lists)."""
        return len(self.ids)

    def id_snapshot(self) -> Sequence[str | None]:
        """The slot -> id list as of now; later mutations do not change it."""
        self.ids_shared = True
        return self.ids

    def _own_ids(self) -> list[str | None]:
        if self.ids_shared:
            self.ids = list(self.ids)
            self.ids_shared = False
        return self.ids

    def allocate(self, entity_id: str) -> int:
        """A slot for a new id (the lowest free one, else a new one at the end)."""
        ids = self._own_ids()
        if self._free:
            slot = heapq.heappop(self._free)
            ids[slot] = entity_id
        else:
            slot = len(ids)
            ids.append(entity_id)
        self.slot_of[entity_id] = slot
        return slot

    def release(self, entity_id: str) -> int:
        """Free the slot of ``entity_id`` and return it."""
        slot = self.slot_of.pop(entity_id)
        self._own_ids()[slot] = None
        heapq.heappush(self._free, slot)
        return slot

    def load(self, ids: Sequence[str]) -> None:
        """Bulk: slots 0..n-1 in the given order (the table must be empty)."""
        if self.ids:
            raise ValueError("load into a non-empty table")
        self.ids = list(ids)
        self.slot_of = {entity_id: slot for slot, entity_id in enumerate(ids)}
        if len(self.slot_of) != len(ids):
            raise ValueError("duplicate ids")

    def _copy_into(self, other: SlotTable) -> None:
        other.slot_of = dict(self.slot_of)
        other.ids = self.ids
        other.ids_shared = True
        self.ids_shared = True
        other._free = list(self._free)


class EntityTable(SlotTable):
    """The entities of one kind: slots, attributes and the attribute -> bitset index."""

    __slots__ = ("all_bits", "attribute_bits", "attributes", "kind")

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.attributes: list[Collection[str]] = []
        self.attribute_bits: dict[str, int] = {}
        self.all_bits = 0

    def add(self, entity_id: str, attributes: frozenset[str]) -> int:
        """Create an entity; returns its slot."""
        slot = self.allocate(entity_id)
        if slot == len(self.attributes):
            self.attributes.append(attributes)
        else:
            self.attributes[slot] = attributes
        bit = 1 << slot
        index = self.attribute_bits
        for attribute in attributes:
            index[attribute] = index.get(attribute, 0) | bit
        self.all_bits |= bit
        return slot

    def change(self, slot: int, attributes: frozenset[str]) -> frozenset[str]:
        """Replace the attributes of ``slot``; returns the previous ones."""
        old = frozenset(self.attributes[slot])
        if old == attributes:
            return old
        self.attributes[slot] = attributes
        bit = 1 << slot
        index = self.attribute_bits
        for attribute in old - attributes:
            remaining = index[attribute] ^ bit
            if remaining:
                index[attribute] = remaining
            else:
                del index[attribute]
        for attribute in attributes - old:
            index[attribute] = index.get(attribute, 0) | bit
        return old

    def remove(self, entity_id: str) -> tuple[int, frozenset[str]]:
        """Delete an entity; returns (its former slot, its attributes)."""
        slot = self.slot_of[entity_id]
        old = self.change(slot, _NO_ATTRIBUTES)
        self.release(entity_id)
        self.all_bits ^= 1 << slot
        return slot, old

    def load_rows(self, ids: Sequence[str], attributes: list[tuple[str, ...]]) -> None:
        """Bulk: slots in row order; the attribute index built in one pass over per-attribute buffers."""
        self.load(ids)
        self.attributes = list(attributes)
        size = (len(ids) + 7) >> 3
        buffers: dict[str, bytearray] = {}
        get = buffers.get
        for slot, carried in enumerate(attributes):
            byte = slot >> 3
            mask = 1 << (slot & 7)
            for attribute in carried:
                buffer = get(attribute)
                if buffer is None:
                    buffer = buffers[attribute] = bytearray(size)
                buffer[byte] |= mask
        self.attribute_bits = {a: int.from_bytes(buffer, "little") for a, buffer in buffers.items()}
        self.all_bits = (1 << len(ids)) - 1

    def bits_of_ids(self, ids: Iterable[str]) -> int:
        """The bitset of those ids that exist (unknown ids are skipped)."""
        slot_of = self.slot_of
        bits = 0
        for entity_id in ids:
            slot = slot_of.get(entity_id)
            if slot is not None:
                bits |= 1 << slot
        return bits

    def copy(self) -> EntityTable:
        """A structural copy; bitsets and frozensets are immutable and shared."""
        other = EntityTable(self.kind)
        self._copy_into(other)
        other.attributes = list(self.attributes)
        other.attribute_bits = dict(self.attribute_bits)
        other.all_bits = self.all_bits
        return other


class PolicyTable(SlotTable):
    """The policies of one kind: slots and records."""

    __slots__ = ("kind", "records")

    def __init__(self, kind: PolicyKind) -> None:
        super().__init__()
        self.kind = kind
        self.records: list[PolicyRecord | None] = []

    def copy(self) -> PolicyTable:
        """A structural copy (records are immutable and shared)."""
        other = PolicyTable(self.kind)
        self._copy_into(other)
        other.records = list(self.records)
        return other
