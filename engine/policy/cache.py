"""Per-entity answers for the advice path, computed on first use and invalidated precisely.

For an identity, advice needs its effective service policy set (to AND with the service's) and the
union of the edge routers of its edge router policies; for a service, its effective service policy
set and the union of the routers of its service edge router policies. :class:`EntityCache` keeps,
per entity id, ``(epoch, links, routers)``:

- ``links``: ``links_side.effective_links(slot)`` (``#all`` policies included);
- ``routers``: ``OR of target.members(p) for p in source.effective_links(slot)``.

An entry is stale when the entity's policy sets change (:meth:`EntityCache.forget`,
:meth:`EntityCache.forget_members`) or the router members of one of its policies change
(:meth:`EntityCache.forget_policies`). Forgetting walks the affected entities when there are few;
past ``threshold`` it bumps the epoch instead, which invalidates every entry in O(1) (only entries of
the current epoch are trusted). Entries are keyed by id so that a hit costs one dict lookup.
"""

from __future__ import annotations

from engine.policy.bitset import slots
from engine.policy.model import UnknownEntityError
from engine.policy.sides import Side

__all__ = ["EntityCache"]

Entry = tuple[int, int, int]
"""``(epoch, effective policy links, router union)``."""


class EntityCache:
    """Entity id -> (epoch, effective ``links_side`` policies, union of ``target`` over ``source``)."""

    __slots__ = ("entries", "epoch", "links_side", "source", "target", "threshold")

    def __init__(self, links_side: Side, source: Side, target: Side, threshold: int = 256) -> None:
        if links_side.table is not source.table or source.policy_kind != target.policy_kind:
            raise ValueError(
                "links_side and source must share the entity kind; source and target the policy kind"
            )
        self.links_side = links_side
        self.source = source
        self.target = target
        self.threshold = threshold
        self.entries: dict[str, Entry] = {}
        self.epoch = 0

    def get(self, entity_id: str) -> Entry:
        """The entry for a live entity (computed when missing or stale)."""
        entry = self.entries.get(entity_id)
        if entry is not None and entry[0] == self.epoch:
            return entry
        return self.fill(entity_id)

    def fill(self, entity_id: str) -> Entry:
        """Compute and store the entry for ``entity_id``."""
        slot = self.source.table.slot_of.get(entity_id)
        if slot is None:
            raise UnknownEntityError(f"no {self.source.entity_kind} with id {entity_id!r}")
        entry = (
            self.epoch,
            self.links_side.effective_links(slot),
            self.target.union_of_members(self.source.effective_links(slot)),
        )
        self.entries[entity_id] = entry
        return entry

    def forget(self, slot: int) -> None:
        """The policy sets of one entity changed (call while its slot is still allocated)."""
        entity_id = self.source.table.ids[slot]
        if entity_id is not None:
            self.entries.pop(entity_id, None)

    def forget_all(self) -> None:
        """Invalidate every entry (O(1))."""
        self.epoch += 1

    def forget_members(self, entities: int) -> None:
        """The policy sets of these entities (a bitset of slots) changed."""
        if not entities or not self.entries:
            return
        if entities.bit_length() > self.threshold and entities.bit_count() > self.threshold:
            self.epoch += 1
            return
        pop = self.entries.pop
        ids = self.source.table.ids
        for slot in slots(entities):
            entity_id = ids[slot] if slot < len(ids) else None
            if entity_id is not None:
                pop(entity_id, None)

    def forget_policies(self, policies: int) -> None:
        """The router members of these ``source`` policies (a bitset) changed."""
        if not policies or not self.entries:
            return
        if policies & self.source.all_policies:
            self.epoch += 1
            return
        members = self.source.members
        affected = 0
        for policy in slots(policies):
            affected |= members[policy]
        self.forget_members(affected)

    def copy(self, links_side: Side, source: Side, target: Side) -> EntityCache:
        """An empty cache over the copied sides (entries are recomputed on demand)."""
        return EntityCache(links_side, source, target, self.threshold)
