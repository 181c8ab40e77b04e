"""What SQL over access reads of the policy graph (docs/analysis.md §13), without materialising pairs.

An :class:`AccessSnapshot` is taken of a graph once per revision: the live entities and policies
(slot, id, name, attributes, role lists) and, per policy side, its member bitset, per service its
service policies, per identity its edge router policies. Those are Python ints (immutable, shared
with the graph: taking a snapshot copies no bitset), so the snapshot may be read from any thread
while the graph moves on.

Pairs are never listed here: they are computed on demand, per service (``service_identities``: the
union of the identity sides of the service's Dial or Bind policies), per identity
(``identity_services``: the union of the service sides of the identity's policies;
``identity_routers``) or per policy (``policy_members``), each a bitset over the entity slots. The
SQL layer (``api/analysis_sql.py``) turns those into rows only for what a query asks: "who can Dial
service X" unions X's policies and nothing else, "what can identity Y Dial" Y's.

The entity and policy rows are what the SQL layer copies into its tables once; it may drop them
afterwards (:meth:`AccessSnapshot.drop_rows`): the functions read only the bitsets.

Pure engine code: no database, no Arrow; the SQL layer does the columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.policy.graph import PolicyGraph
from engine.policy.model import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityKind,
    PolicyKind,
)

__all__ = [
    "ENTITY_ORDER",
    "POLICY_ORDER",
    "AccessSnapshot",
    "EntityRows",
    "Links",
    "PolicyRows",
    "snapshot_of",
]

#: The entity kinds, in the order of the SQL layer's codes (0 identities, 1 services, ...).
ENTITY_ORDER: tuple[EntityKind, ...] = (IDENTITY, SERVICE, EDGE_ROUTER, POSTURE_CHECK)
#: The policy kinds, in the order of the SQL layer's codes.
POLICY_ORDER: tuple[PolicyKind, ...] = (SERVICE_POLICY, EDGE_ROUTER_POLICY, SERVICE_EDGE_ROUTER_POLICY)

Names = Callable[[str, str], str]


def _ids(kind: str, entity_id: str) -> str:
    return entity_id


@dataclass(frozen=True)
class EntityRows:
    """The live entities of one kind, by slot (slots of deleted entities are left out).

    Compact, as columns (no list or int object per entity): ``slots`` an int32 array, the
    attributes of row ``n`` ``attribute_values[attribute_offsets[n]:attribute_offsets[n + 1]]``,
    sorted."""

    kind: str
    slots: np.ndarray[Any, np.dtype[np.int32]]
    ids: list[str]
    names: list[str]
    attribute_offsets: np.ndarray[Any, np.dtype[np.int32]]
    attribute_values: list[str]


@dataclass(frozen=True)
class PolicyRows:
    """The live policies of one kind, by slot, with their role lists as given."""

    kind: str
    slots: list[int]
    ids: list[str]
    names: list[str]
    types: list[str | None]
    semantics: list[str]
    roles: dict[str, list[list[str]]]  # entity kind -> per policy its role list (sorted)


class Links:
    """Per entity slot, the policy slots of one kind selecting it (``#all`` policies included).

    A copy of the side's link list (references to the graph's immutable ints: 8 bytes a slot), the
    side's ``#all`` policies and which slots are live; the union with ``#all`` is made when a slot
    is asked for, not stored (stored, it was a new int per entity: about 20 MB at tier L)."""

    __slots__ = ("all_policies", "links", "live")

    def __init__(self, side: Any, table: Any) -> None:
        self.links: list[int] = list(side.links)
        self.all_policies: int = side.all_policies
        self.live = np.fromiter((entity_id is not None for entity_id in table.ids), dtype=np.bool_)

    def __len__(self) -> int:
        return len(self.live)

    def of(self, slot: int) -> int:
        """The policy slots selecting the entity slot (0 for a dead or unknown slot)."""
        if not 0 <= slot < len(self.live) or not self.live[slot]:
            return 0
        links = self.links
        return (links[slot] if slot < len(links) else 0) | self.all_policies


@dataclass
class AccessSnapshot:
    """The graph's entities, policies and bitsets at one revision (see the module docstring)."""

    revision: int
    entities: dict[str, EntityRows]
    policies: dict[str, PolicyRows]
    #: (policy kind, entity kind) -> member bitset per policy slot (``#all`` resolved)
    members: dict[tuple[str, str], list[int]]
    #: per service slot: the service policy slots selecting it
    service_policy_bits: Links
    #: per identity slot: the service policy slots selecting it
    identity_policy_bits: Links
    #: per identity slot: the edge router policy slots selecting it
    identity_erp_bits: Links
    #: per service slot: the service edge router policy slots selecting it
    service_serp_bits: Links
    dial: int
    bind: int
    graph: PolicyGraph | None = field(default=None, repr=False)

    # -- bitsets on demand ------------------------------------------------------------------------
    def type_mask(self, policy_type: str | None) -> int:
        if policy_type == "Dial":
            return self.dial
        if policy_type == "Bind":
            return self.bind
        return self.dial | self.bind

    def service_policies(self, service: int, policy_type: str | None = None) -> int:
        """The service policy slots of ``type`` selecting the service slot (0 if none or unknown)."""
        return self.service_policy_bits.of(service) & self.type_mask(policy_type)

    def service_identities(self, service: int, policy_type: str | None = None) -> int:
        """The identity slots that may ``type`` (Dial, Bind, None: either) the service slot."""
        return self._union(self.service_policies(service, policy_type), SERVICE_POLICY, IDENTITY)

    def identity_policies(self, identity: int, policy_type: str | None = None) -> int:
        """The service policy slots of ``type`` selecting the identity slot (0 if none or unknown)."""
        return self.identity_policy_bits.of(identity) & self.type_mask(policy_type)

    def identity_services(self, identity: int, policy_type: str | None = None) -> int:
        """The service slots the identity slot may ``type`` (Dial, Bind, None: either)."""
        return self._union(self.identity_policies(identity, policy_type), SERVICE_POLICY, SERVICE)

    def identity_routers(self, identity: int) -> int:
        """The edge router slots edge router policies give the identity slot."""
        return self._union(self.identity_erp_bits.of(identity), EDGE_ROUTER_POLICY, EDGE_ROUTER)

    def service_routers(self, service: int) -> int:
        """The edge router slots service edge router policies give the service slot."""
        return self._union(self.service_serp_bits.of(service), SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER)

    def drop_rows(self) -> None:
        """Forget the entity and policy rows, once they are copied elsewhere: the bitsets are all
        the functions above read."""
        self.entities = {}
        self.policies = {}

    def policy_members(self, policy_kind: str, policy: int, entity_kind: str) -> int:
        """The ``entity_kind`` slots a policy slot's side selects (0 for no such side or slot)."""
        members = self.members.get((policy_kind, entity_kind))
        if members is None or not 0 <= policy < len(members):
            return 0
        return members[policy]

    def _union(self, policies: int, policy_kind: str, entity_kind: str) -> int:
        members = self.members[policy_kind, entity_kind]
        bits = 0
        while policies:
            low = policies & -policies
            bits |= members[low.bit_length() - 1]
            policies ^= low
        return bits


def _entity_rows(graph: Any, kind: str, names: Names) -> EntityRows:
    table = graph._tables[kind]
    live = [slot for slot, entity_id in enumerate(table.ids) if entity_id is not None]
    ids = [str(table.ids[slot]) for slot in live]
    labels = [names(kind, entity_id) for entity_id in ids]
    values: list[str] = []
    counts = np.zeros(len(live) + 1, dtype=np.int32)
    attributes = table.attributes
    for row, slot in enumerate(live):
        held = sorted(attributes[slot])
        values.extend(held)
        counts[row + 1] = len(held)
    return EntityRows(
        kind, np.array(live, dtype=np.int32), ids, labels, np.cumsum(counts, dtype=np.int32), values
    )


def _policy_rows(graph: Any, kind: PolicyKind, names: Names) -> PolicyRows:
    table = graph._policies[kind]
    fields = POLICY_FIELDS[kind]
    rows = PolicyRows(kind, [], [], [], [], [], {entity_kind: [] for entity_kind in fields})
    for slot, policy_id in enumerate(table.ids):
        record = table.records[slot] if slot < len(table.records) else None
        if policy_id is None or record is None:
            continue
        rows.slots.append(slot)
        rows.ids.append(str(policy_id))
        rows.names.append(names(kind, str(policy_id)))
        rows.types.append(record.type)
        rows.semantics.append(record.semantic)
        for entity_kind in fields:
            rows.roles[entity_kind].append(sorted(set(record.roles.get(entity_kind, ()))))
    return rows


def _member_bits(graph: Any, policy_kind: str, entity_kind: str) -> list[int]:
    side = graph._sides[policy_kind, entity_kind]
    count = len(graph._policies[policy_kind].ids)
    return [side.member_bits(slot) if slot < len(side.members) else 0 for slot in range(count)]


def snapshot_of(graph: PolicyGraph, revision: int = 0, names: Names = _ids) -> AccessSnapshot:
    """Take the :class:`AccessSnapshot` of ``graph`` (a fork nobody writes, or the live graph under
    its lock: the snapshot keeps no reference to anything the graph changes in place but the graph
    itself, for findings; the link lists are copied)."""
    g: Any = graph  # the graph's private representation, read only
    entities: dict[str, EntityRows] = {kind: _entity_rows(g, kind, names) for kind in ENTITY_ORDER}
    policies: dict[str, PolicyRows] = {kind: _policy_rows(g, kind, names) for kind in POLICY_ORDER}
    members: dict[tuple[str, str], list[int]] = {
        (policy_kind, entity_kind): _member_bits(g, policy_kind, entity_kind)
        for policy_kind in POLICY_ORDER
        for entity_kind in POLICY_FIELDS[policy_kind]
    }
    return AccessSnapshot(
        revision=revision,
        entities=entities,
        policies=policies,
        members=members,
        service_policy_bits=Links(g._sp_service, g._services),
        identity_policy_bits=Links(g._sp_identity, g._identities),
        identity_erp_bits=Links(g._erp_identity, g._identities),
        service_serp_bits=Links(g._serp_service, g._services),
        dial=g._dial,
        bind=g._bind,
        graph=graph,
    )
