"""What SQL over access reads of the policy graph (docs/analysis.md §13), without materialising pairs.

An :class:`AccessSnapshot` is taken of a graph once per revision: the live entities and policies
(slot, id, name, attributes, role lists) and, per policy side, its member bitset, per service its
service policies, per identity its edge router policies. Those are Python ints (immutable, shared
with the graph: taking a snapshot copies no bitset), so the snapshot may be read from any thread
while the graph moves on.

Pairs are never listed here: they are computed on demand, per service (``service_identities``: the
union of the identity sides of the service's Dial or Bind policies), per identity
(``identity_routers``) or per policy (``policy_members``), each a bitset over the entity slots. The
SQL layer (``api/analysis_sql.py``) turns those into rows only for what a query asks: "who can Dial
service X" unions X's policies and nothing else.

Pure engine code: no database, no Arrow; the SQL layer does the columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

__all__ = ["ENTITY_ORDER", "POLICY_ORDER", "AccessSnapshot", "EntityRows", "PolicyRows", "snapshot_of"]

#: The entity kinds, in the order of the SQL layer's codes (0 identities, 1 services, ...).
ENTITY_ORDER: tuple[EntityKind, ...] = (IDENTITY, SERVICE, EDGE_ROUTER, POSTURE_CHECK)
#: The policy kinds, in the order of the SQL layer's codes.
POLICY_ORDER: tuple[PolicyKind, ...] = (SERVICE_POLICY, EDGE_ROUTER_POLICY, SERVICE_EDGE_ROUTER_POLICY)

Names = Callable[[str, str], str]


def _ids(kind: str, entity_id: str) -> str:
    return entity_id


@dataclass(frozen=True)
class EntityRows:
    """The live entities of one kind, by slot (slots of deleted entities are left out)."""

    kind: str
    slots: list[int]
    ids: list[str]
    names: list[str]
    attributes: list[list[str]]


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


@dataclass
class AccessSnapshot:
    """The graph's entities, policies and bitsets at one revision (see the module docstring)."""

    revision: int
    entities: dict[str, EntityRows]
    policies: dict[str, PolicyRows]
    #: (policy kind, entity kind) -> member bitset per policy slot (``#all`` resolved)
    members: dict[tuple[str, str], list[int]]
    #: per service slot: the service policy slots selecting it
    service_policy_bits: list[int]
    #: per identity slot: the edge router policy slots selecting it
    identity_erp_bits: list[int]
    #: per service slot: the service edge router policy slots selecting it
    service_serp_bits: list[int]
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
        if not 0 <= service < len(self.service_policy_bits):
            return 0
        return self.service_policy_bits[service] & self.type_mask(policy_type)

    def service_identities(self, service: int, policy_type: str | None = None) -> int:
        """The identity slots that may ``type`` (Dial, Bind, None: either) the service slot."""
        policies = self.service_policies(service, policy_type)
        members = self.members[SERVICE_POLICY, IDENTITY]
        bits = 0
        while policies:
            low = policies & -policies
            bits |= members[low.bit_length() - 1]
            policies ^= low
        return bits

    def identity_routers(self, identity: int) -> int:
        """The edge router slots edge router policies give the identity slot."""
        if not 0 <= identity < len(self.identity_erp_bits):
            return 0
        return self._union(self.identity_erp_bits[identity], EDGE_ROUTER_POLICY, EDGE_ROUTER)

    def service_routers(self, service: int) -> int:
        """The edge router slots service edge router policies give the service slot."""
        if not 0 <= service < len(self.service_serp_bits):
            return 0
        return self._union(self.service_serp_bits[service], SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER)

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
    slots, ids, labels, attributes = [], [], [], []
    for slot, entity_id in enumerate(table.ids):
        if entity_id is None:
            continue
        slots.append(slot)
        ids.append(str(entity_id))
        labels.append(names(kind, str(entity_id)))
        attributes.append(sorted(table.attributes[slot]))
    return EntityRows(kind, slots, ids, labels, attributes)


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


def _link_bits(side: Any, table: Any) -> list[int]:
    links = side.links
    return [
        (links[slot] if slot < len(links) else 0) | side.all_policies if entity_id is not None else 0
        for slot, entity_id in enumerate(table.ids)
    ]


def snapshot_of(graph: PolicyGraph, revision: int = 0, names: Names = _ids) -> AccessSnapshot:
    """Take the :class:`AccessSnapshot` of ``graph`` (a fork nobody writes, or the live graph under
    its lock: the snapshot keeps no reference to anything the graph changes in place but the graph
    itself, for findings)."""
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
        service_policy_bits=_link_bits(g._sp_service, g._services),
        identity_erp_bits=_link_bits(g._erp_identity, g._identities),
        service_serp_bits=_link_bits(g._serp_service, g._services),
        dial=g._dial,
        bind=g._bind,
        graph=graph,
    )
