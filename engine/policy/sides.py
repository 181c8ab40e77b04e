"""One role field of one policy kind (e.g. the ``identityRoles`` of service policies), both ways.

A :class:`Side` links the policies of one kind to the entities of one kind:

- ``members[p]``: the bitset of entity slots policy ``p`` selects *explicitly*: ``@id`` hits and
  attribute matches. A policy whose field is ``#all`` keeps ``0`` here and its bit in
  ``all_policies`` instead, so creating an entity, or an ``#all`` policy, costs nothing per ``#all``
  policy or per entity.
- ``links[e]``: the bitset of policy slots selecting entity ``e`` explicitly. The effective set is
  ``links[e] | all_policies`` (:meth:`Side.effective_links`); this is the per-entity provenance.
- A policy-side index for matching one entity against every policy at once: ``any_of[attribute]``
  (AnyOf policies naming it, and AllOf policies naming only it, which is the same test),
  ``all_of[attribute]`` and ``all_of_sizes[k]`` (AllOf policies of ``k >= 2`` attributes, matched by
  counting hits with bit-sliced counters), ``by_id[id]`` (policies naming ``@id``, whether the entity
  exists yet or not).

Entity-side changes (:meth:`Side.add_entity`, :meth:`Side.change_entity`,
:meth:`Side.remove_entity`) evaluate that one entity against the index and flip the entity's bit in
the member bitsets of the policies whose verdict changed. Policy-side changes
(:meth:`Side.set_policy`) recompute the policy's member bitset from the entity attribute index and
flip the policy's bit in the links of the changed members only.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.policy.bitset import slots
from engine.policy.selector import EMPTY, Selector, Semantic
from engine.policy.slots import EntityTable

__all__ = ["Side"]


def _toggle(index: dict[str, int], key: str, bit: int) -> None:
    value = index.get(key, 0) ^ bit
    if value:
        index[key] = value
    else:
        del index[key]


def _toggle_size(index: dict[int, int], key: int, bit: int) -> None:
    value = index.get(key, 0) ^ bit
    if value:
        index[key] = value
    else:
        del index[key]


class Side:
    """The policies of one kind against the entities of one kind, through one role field."""

    sparse_floor = 64
    """Bulk load: AllOf policies with at most ``max(sparse_floor, capacity / 64)`` members are
    transposed member by member instead of matched entity by entity."""

    __slots__ = (
        "all_of",
        "all_of_sizes",
        "all_policies",
        "any_of",
        "by_id",
        "entity_kind",
        "links",
        "members",
        "policy_kind",
        "selectors",
        "semantics",
        "table",
    )

    def __init__(self, policy_kind: str, table: EntityTable) -> None:
        self.policy_kind = policy_kind
        self.entity_kind = table.kind
        self.table = table
        self.members: list[int] = []
        self.selectors: list[Selector] = []
        self.semantics: list[Semantic] = []
        self.links: list[int] = []
        self.all_policies = 0
        self.any_of: dict[str, int] = {}
        self.all_of: dict[str, int] = {}
        self.all_of_sizes: dict[int, int] = {}
        self.by_id: dict[str, int] = {}

    # -- reading ----------------------------------------------------------------------------------

    def member_bits(self, policy: int) -> int:
        """The entity slots ``policy`` selects, ``#all`` resolved."""
        if (self.all_policies >> policy) & 1:
            return self.table.all_bits
        return self.members[policy]

    def effective_links(self, entity: int) -> int:
        """The policy slots selecting ``entity`` (a live slot)."""
        return self.links[entity] | self.all_policies

    def union_of_members(self, policies: int) -> int:
        """The union of the member sets of ``policies``."""
        if policies & self.all_policies:
            return self.table.all_bits
        members = self.members
        union = 0
        for policy in slots(policies):
            union |= members[policy]
        return union

    def selects(self, policy: int, entity: int) -> bool:
        """Whether ``policy`` selects ``entity`` (a bit test on the entity's narrow link bitset)."""
        return bool((self.effective_links(entity) >> policy) & 1)

    # -- the policy index -------------------------------------------------------------------------

    def _toggle_index(self, policy: int, selector: Selector, semantic: Semantic) -> None:
        bit = 1 << policy
        if selector.all:
            self.all_policies ^= bit
            return
        for entity_id in selector.ids:
            _toggle(self.by_id, entity_id, bit)
        attributes = selector.attributes
        if not attributes or semantic == "none":
            return
        if semantic == "anyof" or len(attributes) == 1:
            for attribute in attributes:
                _toggle(self.any_of, attribute, bit)
        else:
            for attribute in attributes:
                _toggle(self.all_of, attribute, bit)
            _toggle_size(self.all_of_sizes, len(attributes), bit)

    def _all_of_match(self, hits: list[int]) -> int:
        """AllOf policies (2+ attributes) all of whose attributes are among the hits' attributes.

        Each hit is the bitset of AllOf policies naming one of the entity's attributes; a policy of
        ``k`` attributes matches iff exactly ``k`` hits contain it. The hit count per policy is kept
        in bit planes (a ripple-carry adder over ints), then compared with each size class.
        """
        planes: list[int] = []
        for hit in hits:
            carry = hit
            for j, plane in enumerate(planes):
                planes[j] = plane ^ carry
                carry &= plane
                if not carry:
                    break
            else:
                planes.append(carry)
        found = 0
        depth = len(planes)
        for size, mask in self.all_of_sizes.items():
            if size.bit_length() > depth:
                continue
            candidates = mask
            for j, plane in enumerate(planes):
                candidates &= plane if (size >> j) & 1 else ~plane
                if not candidates:
                    break
            found |= candidates
        return found

    def match(self, entity_id: str, attributes: frozenset[str]) -> int:
        """The policies selecting an entity explicitly (``@id`` or attributes; not ``#all``)."""
        found = self.by_id.get(entity_id, 0)
        if attributes:
            found |= self.match_attributes(attributes)
        return found

    def match_attributes(self, attributes: frozenset[str]) -> int:
        """The policies selecting any entity that carries exactly ``attributes`` (ids aside)."""
        found = 0
        any_of = self.any_of
        all_of = self.all_of
        hits: list[int] = []
        for attribute in attributes:
            bits = any_of.get(attribute)
            if bits is not None:
                found |= bits
            bits = all_of.get(attribute)
            if bits is not None:
                hits.append(bits)
        if len(hits) > 1:
            found |= self._all_of_match(hits)
        return found

    def compute_members(self, selector: Selector, semantic: Semantic) -> int:
        """The entity slots a selector picks explicitly (0 for ``#all``), from the attribute index."""
        if selector.all:
            return 0
        table = self.table
        bits = table.bits_of_ids(selector.ids) if selector.ids else 0
        attributes = selector.attributes
        if not attributes or semantic == "none":
            return bits
        index = table.attribute_bits
        if semantic == "anyof":
            for attribute in attributes:
                bits |= index.get(attribute, 0)
            return bits
        common = -1
        for attribute in attributes:
            common &= index.get(attribute, 0)
            if not common:
                return bits
        return bits | common

    # -- growth -----------------------------------------------------------------------------------

    def ensure_policy(self, policy: int) -> None:
        """Make room for policy slot ``policy``."""
        while len(self.members) <= policy:
            self.members.append(0)
            self.selectors.append(EMPTY)
            self.semantics.append("none")

    def ensure_entity(self, entity: int) -> None:
        """Make room for entity slot ``entity``."""
        links = self.links
        while len(links) <= entity:
            links.append(0)

    # -- entity-side changes ----------------------------------------------------------------------

    def add_entity(self, entity: int, entity_id: str, attributes: frozenset[str]) -> int:
        """A new entity: returns the policies now selecting it explicitly."""
        self.ensure_entity(entity)
        found = self.match(entity_id, attributes)
        self.links[entity] = found
        if found:
            bit = 1 << entity
            members = self.members
            for policy in slots(found):
                members[policy] |= bit
        return found

    def change_entity(self, entity: int, entity_id: str, attributes: frozenset[str]) -> int:
        """New attributes for an entity: returns the policies whose verdict changed."""
        found = self.match(entity_id, attributes)
        changed = self.links[entity] ^ found
        if changed:
            self.links[entity] = found
            bit = 1 << entity
            members = self.members
            for policy in slots(changed):
                members[policy] ^= bit
        return changed

    def remove_entity(self, entity: int) -> int:
        """A deleted entity: returns the policies that selected it explicitly."""
        found = self.links[entity]
        if found:
            self.links[entity] = 0
            bit = 1 << entity
            members = self.members
            for policy in slots(found):
                members[policy] ^= bit
        return found

    # -- policy-side changes ----------------------------------------------------------------------

    def set_policy(self, policy: int, selector: Selector, semantic: Semantic) -> int:
        """Create, change or (with :data:`EMPTY`) clear one policy's field.

        Returns the entity slots whose membership changed, ``#all`` resolved (so a switch to or from
        ``#all`` reports the whole difference even though no per-entity link is written for it).
        """
        self.ensure_policy(policy)
        old_selector = self.selectors[policy]
        old_semantic = self.semantics[policy]
        if old_selector == selector and (old_semantic == semantic or not selector.attributes):
            self.semantics[policy] = semantic
            return 0
        self._toggle_index(policy, old_selector, old_semantic)
        self._toggle_index(policy, selector, semantic)
        self.selectors[policy] = selector
        self.semantics[policy] = semantic
        old = self.members[policy]
        new = self.compute_members(selector, semantic)
        if old != new:
            bit = 1 << policy
            links = self.links
            for entity in slots(old ^ new):
                links[entity] ^= bit
            self.members[policy] = new
        if old_selector.all == selector.all:
            return 0 if selector.all else old ^ new
        everything = self.table.all_bits
        return (everything if old_selector.all else old) ^ (everything if selector.all else new)

    # -- bulk -------------------------------------------------------------------------------------

    def load(self, policies: Sequence[tuple[Selector, Semantic]]) -> None:
        """Bulk: index ``policies`` (slot order) and resolve both directions against the table."""
        table = self.table
        self.selectors = [selector for selector, _ in policies]
        self.semantics = [semantic for _, semantic in policies]
        self.members = [self.compute_members(s, m) for s, m in policies]
        for policy, (selector, semantic) in enumerate(policies):
            self._toggle_index(policy, selector, semantic)
        # AllOf policies with few members are cheaper to transpose member by member than to match
        # entity by entity; take them out of the entity-major pass.
        threshold = max(self.sparse_floor, table.capacity >> 6)
        sparse = 0
        for size_mask in self.all_of_sizes.values():
            for policy in slots(size_mask):
                if self.members[policy].bit_count() <= threshold:
                    sparse |= 1 << policy
        full_all_of, full_sizes = self.all_of, self.all_of_sizes
        if sparse:
            keep = ~sparse
            self.all_of = {a: b & keep for a, b in full_all_of.items() if b & keep}
            self.all_of_sizes = {k: b & keep for k, b in full_sizes.items() if b & keep}
        try:
            links = self._match_all(table)
        finally:
            self.all_of, self.all_of_sizes = full_all_of, full_sizes
        for policy in slots(sparse):
            bit = 1 << policy
            for entity in slots(self.members[policy]):
                links[entity] |= bit
        self.links = links

    def _match_all(self, table: EntityTable) -> list[int]:
        """Bulk, entity by entity: AnyOf hits, then (dense) AllOf hits, then ``@id`` hits."""
        any_get = self.any_of.get
        links: list[int] = []
        append = links.append
        for attributes in table.attributes:
            found = 0
            for attribute in attributes:
                bits = any_get(attribute)
                if bits:
                    found |= bits
            append(found)
        if self.all_of:
            all_get = self.all_of.get
            for slot, attributes in enumerate(table.attributes):
                if len(attributes) > 1 and sum(1 for a in set(attributes) if all_get(a) is not None) > 1:
                    links[slot] |= self.match_attributes(frozenset(attributes))
        slot_of = table.slot_of
        for entity_id, policies in self.by_id.items():
            target = slot_of.get(entity_id)
            if target is not None:
                links[target] |= policies
        return links

    def copy(self, table: EntityTable) -> Side:
        """A structural copy bound to (the copy of) the entity table."""
        other = Side(self.policy_kind, table)
        other.members = list(self.members)
        other.selectors = list(self.selectors)
        other.semantics = list(self.semantics)
        other.links = list(self.links)
        other.all_policies = self.all_policies
        other.any_of = dict(self.any_of)
        other.all_of = dict(self.all_of)
        other.all_of_sizes = dict(self.all_of_sizes)
        other.by_id = dict(self.by_id)
        return other
