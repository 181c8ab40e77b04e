"""The policy graph: OpenZiti's policy resolution with incremental updates and provenance.

Representation (docs/architecture.md §4): per entity kind an attribute -> bitset index
(:class:`~engine.policy.slots.EntityTable`); per policy kind and role field a
:class:`~engine.policy.sides.Side` holding each policy's member bitset and each entity's policy
bitset (its provenance); for service policies a Dial and a Bind mask over policy slots.

What is derived from that, and how:

- **Permissions** of (identity, service): ``policies(identity) & policies(service) & type mask``, an
  AND of two policy bitsets: O(1) in the number of entities, and the set bits *are* the linking
  policies (provenance, :meth:`PolicyGraph.link_policies`). OpenZiti's per-pair reference count is the
  popcount of that AND, so "access is lost only when the last linking policy goes" holds by
  construction.
- **Routers** of an identity (through edge router policies) and of a service (through service edge
  router policies): unions over the entity's policies, cached per entity
  (:class:`~engine.policy.cache.UnionCache`) and invalidated precisely, so advice is a few ANDs.
- **Listings** (services of an identity, identities of a service, ...): the union of the member
  bitsets of the entity's policies, computed per call; the cost follows the entity's policy count
  and the size of the answer, never the population.

Incremental rules: an entity's attribute change evaluates that one entity against the policy index of
each side of its kind (only policies naming one of its attributes, ``@`` its id, can answer) and
flips its bit in the policies whose verdict changed. A policy change recomputes that policy's member
bitsets from the attribute index and flips the policy's bit in the changed members' provenance only.
A semantic-only change *is* re-evaluated (OpenZiti keeps links computed under the old semantic, §3.2;
this engine deliberately does not). ``@id`` roles naming an entity that does not exist yet start
matching when it is created. Removing an entity drops it; stripping ``@id`` references from policies
is the caller's job (followed by :meth:`PolicyGraph.upsert_policy`).

Every query returns plain ids, sorted by id. Unknown entities raise
:class:`~engine.policy.model.UnknownEntityError`, unknown policies
:class:`~engine.policy.model.UnknownPolicyError` (both ``KeyError``).

Not thread-safe: the caller serialises writes and must not read concurrently with a write.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

from engine.policy.advice import Advice
from engine.policy.bitset import from_slots, select, slots
from engine.policy.cache import EntityCache
from engine.policy.model import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    ENTITY_KINDS,
    IDENTITY,
    POLICY_FIELDS,
    POLICY_KINDS,
    POSTURE_CHECK,
    ROLE_FIELD,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityKind,
    EntityLike,
    PolicyKind,
    PolicyLike,
    PolicyRecord,
    PolicyType,
    UnknownEntityError,
    UnknownPolicyError,
    make_record,
    normalize_type,
)
from engine.policy.selector import EMPTY, Selector, Semantic, normalize_semantic, parse_roles
from engine.policy.sides import Side
from engine.policy.slots import EntityTable, PolicyTable

__all__ = ["PolicyGraph"]


#: How many identities' service lists :meth:`PolicyGraph.services_for_identity` keeps at most.
REACH_ENTRIES = 4096
#: How many (identity, service) answers :meth:`PolicyGraph.grant` keeps at most.
PAIR_ENTRIES = 65536
PairGrant = tuple[tuple[str, ...], dict[str, tuple[str, tuple[str, ...]]]]
"""``(permissions, posture policies)`` of an (identity, service) pair."""


class PolicyGraph:
    """Entities, policies and everything they imply; see the module docstring."""

    __slots__ = (
        "_bind",
        "_dial",
        "_entity_sides",
        "_erp_identity",
        "_erp_router",
        "_identities",
        "_identity_cache",
        "_pairs",
        "_policies",
        "_reach",
        "_routers",
        "_serp_router",
        "_serp_service",
        "_service_cache",
        "_services",
        "_sides",
        "_sp_identity",
        "_sp_posture",
        "_sp_service",
        "_tables",
    )

    def __init__(self) -> None:
        self._tables: dict[str, EntityTable] = {kind: EntityTable(kind) for kind in ENTITY_KINDS}
        self._policies: dict[str, PolicyTable] = {kind: PolicyTable(kind) for kind in POLICY_KINDS}
        self._sides: dict[tuple[str, str], Side] = {
            (policy_kind, entity_kind): Side(policy_kind, self._tables[entity_kind])
            for policy_kind, entity_kinds in POLICY_FIELDS.items()
            for entity_kind in entity_kinds
        }
        self._dial = 0
        self._bind = 0
        self._wire()
        self._identity_cache = EntityCache(self._sp_identity, self._erp_identity, self._erp_router)
        self._service_cache = EntityCache(self._sp_service, self._serp_service, self._serp_router)
        #: ``services_for_identity`` answers, until the next change of any kind (a client lists
        #: its services page after page; each page would otherwise resolve them all again).
        self._reach: dict[tuple[str, str | None], list[str]] = {}
        #: ``grant`` answers, likewise (each page of a client's services asks for its services').
        self._pairs: dict[tuple[str, str], PairGrant] = {}

    def _wire(self) -> None:
        tables, sides = self._tables, self._sides
        self._identities = tables[IDENTITY]
        self._services = tables[SERVICE]
        self._routers = tables[EDGE_ROUTER]
        self._sp_identity = sides[SERVICE_POLICY, IDENTITY]
        self._sp_service = sides[SERVICE_POLICY, SERVICE]
        self._sp_posture = sides[SERVICE_POLICY, POSTURE_CHECK]
        self._erp_identity = sides[EDGE_ROUTER_POLICY, IDENTITY]
        self._erp_router = sides[EDGE_ROUTER_POLICY, EDGE_ROUTER]
        self._serp_service = sides[SERVICE_EDGE_ROUTER_POLICY, SERVICE]
        self._serp_router = sides[SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER]
        self._entity_sides: dict[str, tuple[Side, ...]] = {
            kind: tuple(side for (_, entity_kind), side in sides.items() if entity_kind == kind)
            for kind in ENTITY_KINDS
        }

    # -- bulk -------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        identities: Iterable[EntityLike] = (),
        services: Iterable[EntityLike] = (),
        edge_routers: Iterable[EntityLike] = (),
        posture_checks: Iterable[EntityLike] = (),
        service_policies: Iterable[PolicyLike] = (),
        edge_router_policies: Iterable[PolicyLike] = (),
        service_edge_router_policies: Iterable[PolicyLike] = (),
    ) -> PolicyGraph:
        """A graph resolved from scratch; a repeated id keeps its last row.

        Rows are :class:`~engine.policy.model.EntityRow` / :class:`~engine.policy.model.PolicyRow`
        or any objects with the same attribute names.
        """
        graph = cls()
        for kind, entity_rows in (
            (IDENTITY, identities),
            (SERVICE, services),
            (EDGE_ROUTER, edge_routers),
            (POSTURE_CHECK, posture_checks),
        ):
            rows = entity_rows if isinstance(entity_rows, list) else list(entity_rows)
            ids = [row.id for row in rows]
            attributes = [tuple(row.attributes) for row in rows]
            if len(set(ids)) != len(ids):
                unique = dict(zip(ids, attributes, strict=True))
                ids, attributes = list(unique), list(unique.values())
            graph._tables[kind].load_rows(ids, attributes)
        loads: tuple[tuple[PolicyKind, Iterable[PolicyLike]], ...] = (
            (SERVICE_POLICY, service_policies),
            (EDGE_ROUTER_POLICY, edge_router_policies),
            (SERVICE_EDGE_ROUTER_POLICY, service_edge_router_policies),
        )
        for policy_kind, policy_rows in loads:
            graph._load_policies(policy_kind, policy_rows)
        return graph

    def _load_policies(self, kind: PolicyKind, rows: Iterable[PolicyLike]) -> None:
        fields = [(entity_kind, ROLE_FIELD[entity_kind]) for entity_kind in POLICY_FIELDS[kind]]
        typed = kind == SERVICE_POLICY
        records: dict[str, PolicyRecord] = {}
        for row in rows:
            policy_type: PolicyType | None = None
            if typed:
                raw = getattr(row, "type", None)
                if raw is None:
                    raise ValueError(f"service-policy {row.id!r} needs a type (Dial or Bind)")
                policy_type = "Dial" if raw == "Dial" else "Bind" if raw == "Bind" else normalize_type(raw)
            roles = {entity_kind: tuple(getattr(row, name, ()) or ()) for entity_kind, name in fields}
            records[row.id] = PolicyRecord(kind, row.id, row.semantic, policy_type, roles)
        table = self._policies[kind]
        table.load(list(records))
        table.records = list(records.values())
        semantics = [normalize_semantic(record.semantic) for record in table.records if record]
        for entity_kind in POLICY_FIELDS[kind]:
            selectors = [parse_roles(record.roles[entity_kind]) for record in table.records if record]
            self._sides[kind, entity_kind].load(list(zip(selectors, semantics, strict=True)))
        if kind == SERVICE_POLICY:
            self._dial = from_slots(
                slot for slot, record in enumerate(table.records) if record and record.type == "Dial"
            )
            self._bind = from_slots(
                slot for slot, record in enumerate(table.records) if record and record.type == "Bind"
            )

    def copy(self) -> PolicyGraph:
        """An independent graph with the same state, for what-if evaluation.

        Structural: the lists and dicts are copied, the bitsets (immutable ints) and frozensets are
        shared. Router caches start empty.
        """
        other = PolicyGraph.__new__(PolicyGraph)
        other._tables = {kind: table.copy() for kind, table in self._tables.items()}
        other._policies = {kind: table.copy() for kind, table in self._policies.items()}
        other._sides = {key: side.copy(other._tables[key[1]]) for key, side in self._sides.items()}
        other._dial = self._dial
        other._bind = self._bind
        other._wire()
        other._identity_cache = self._identity_cache.copy(
            other._sp_identity, other._erp_identity, other._erp_router
        )
        other._service_cache = self._service_cache.copy(
            other._sp_service, other._serp_service, other._serp_router
        )
        other._reach = {}
        other._pairs = {}
        return other

    # -- entity mutations -------------------------------------------------------------------------

    def _forget_answers(self) -> None:
        """Drop the memoised answers: something changed (they are cheap to recompute)."""
        if self._reach:
            self._reach.clear()
        if self._pairs:
            self._pairs.clear()

    def _entity_changed(self, side: Side, entity: int, policies: int) -> None:
        """Invalidate the advice caches after ``entity``'s policy set on ``side`` changed."""
        self._forget_answers()
        if side is self._sp_identity or side is self._erp_identity:
            self._identity_cache.forget(entity)
        elif side is self._sp_service or side is self._serp_service:
            self._service_cache.forget(entity)
        elif side is self._erp_router:
            self._identity_cache.forget_policies(policies)
        elif side is self._serp_router:
            self._service_cache.forget_policies(policies)

    def upsert_entity(self, kind: EntityKind, entity_id: str, attributes: Iterable[str] = ()) -> None:
        """Create an entity, or replace its role attributes."""
        table = self._table(kind)
        new = frozenset(attributes)
        slot = table.slot_of.get(entity_id)
        if slot is None:
            slot = table.add(entity_id, new)
            for side in self._entity_sides[kind]:
                found = side.add_entity(slot, entity_id, new)
                self._entity_changed(side, slot, found | side.all_policies)
            return
        if table.change(slot, new) == new:
            return
        for side in self._entity_sides[kind]:
            changed = side.change_entity(slot, entity_id, new)
            if changed:
                self._entity_changed(side, slot, changed)

    def remove_entity(self, kind: EntityKind, entity_id: str) -> None:
        """Delete an entity (policies naming it by ``@id`` keep the id until the caller strips it)."""
        table = self._table(kind)
        slot = self._slot(kind, entity_id)
        for side in self._entity_sides[kind]:
            found = side.remove_entity(slot)
            self._entity_changed(side, slot, found | side.all_policies)
        table.remove(entity_id)

    # -- policy mutations -------------------------------------------------------------------------

    def _side_changed(self, side: Side, policy: int, entities: int) -> None:
        """Invalidate the advice caches after ``policy``'s members on ``side`` changed."""
        self._forget_answers()
        if side is self._sp_identity or side is self._erp_identity:
            self._identity_cache.forget_members(entities)
        elif side is self._sp_service or side is self._serp_service:
            self._service_cache.forget_members(entities)
        elif side is self._erp_router:
            self._identity_cache.forget_policies(1 << policy)
        elif side is self._serp_router:
            self._service_cache.forget_policies(1 << policy)

    def upsert_policy(
        self,
        kind: PolicyKind,
        policy_id: str,
        *,
        semantic: str,
        type: str | None = None,
        identity_roles: Sequence[str] = (),
        service_roles: Sequence[str] = (),
        edge_router_roles: Sequence[str] = (),
        posture_check_roles: Sequence[str] = (),
    ) -> None:
        """Create a policy, or apply any change (roles, semantic, type) to it.

        ``type`` (Dial or Bind, any case) is required for service policies. Only the sides whose
        selector or semantic changed are re-evaluated, and only their changed members are touched.
        """
        record = make_record(
            kind,
            policy_id,
            semantic,
            type,
            {
                "identity_roles": identity_roles,
                "service_roles": service_roles,
                "edge_router_roles": edge_router_roles,
                "posture_check_roles": posture_check_roles,
            },
        )
        table = self._policy_table(kind)
        slot = table.slot_of.get(policy_id)
        if slot is None:
            slot = table.allocate(policy_id)
            if slot == len(table.records):
                table.records.append(record)
            else:
                table.records[slot] = record
        else:
            table.records[slot] = record
        normalized = normalize_semantic(semantic)
        for entity_kind in POLICY_FIELDS[kind]:
            side = self._sides[kind, entity_kind]
            changed = side.set_policy(slot, parse_roles(record.roles[entity_kind]), normalized)
            if changed:
                self._side_changed(side, slot, changed)
        if kind == SERVICE_POLICY:
            self._forget_answers()  # its type may have changed without its members
            bit = 1 << slot
            if record.type == "Dial":
                self._dial |= bit
                self._bind &= ~bit
            else:
                self._bind |= bit
                self._dial &= ~bit

    def remove_policy(self, kind: PolicyKind, policy_id: str) -> None:
        """Delete a policy: every link it made goes."""
        table = self._policy_table(kind)
        slot = self._policy_slot(kind, policy_id)
        for entity_kind in POLICY_FIELDS[kind]:
            side = self._sides[kind, entity_kind]
            changed = side.set_policy(slot, EMPTY, "none")
            if changed:
                self._side_changed(side, slot, changed)
        if kind == SERVICE_POLICY:
            keep = ~(1 << slot)
            self._dial &= keep
            self._bind &= keep
        table.release(policy_id)
        table.records[slot] = None
        self._forget_answers()

    # -- lookups ----------------------------------------------------------------------------------

    def _table(self, kind: str) -> EntityTable:
        table = self._tables.get(kind)
        if table is None:
            raise ValueError(f"unknown entity kind {kind!r}")
        return table

    def _policy_table(self, kind: str) -> PolicyTable:
        table = self._policies.get(kind)
        if table is None:
            raise ValueError(f"unknown policy kind {kind!r}")
        return table

    def _slot(self, kind: str, entity_id: str) -> int:
        slot = self._table(kind).slot_of.get(entity_id)
        if slot is None:
            raise UnknownEntityError(f"no {kind} with id {entity_id!r}")
        return slot

    def _policy_slot(self, kind: str, policy_id: str) -> int:
        slot = self._policy_table(kind).slot_of.get(policy_id)
        if slot is None:
            raise UnknownPolicyError(f"no {kind} with id {policy_id!r}")
        return slot

    def _side(self, policy_kind: str, entity_kind: str) -> Side:
        side = self._sides.get((policy_kind, entity_kind))
        if side is None:
            raise ValueError(f"a {policy_kind} does not select {entity_kind} entities")
        return side

    def _type_mask(self, policy_type: str | None) -> int:
        if policy_type is None:
            return self._dial | self._bind
        return self._dial if normalize_type(policy_type) == "Dial" else self._bind

    def _entity_ids(self, table: EntityTable, bits: int) -> list[str]:
        return sorted(cast(list[str], select(bits, table.ids)))

    def _policy_ids(self, kind: str, bits: int) -> list[str]:
        return sorted(cast(list[str], select(bits, self._policies[kind].ids)))

    def has_entity(self, kind: EntityKind, entity_id: str) -> bool:
        """Whether the entity exists."""
        return entity_id in self._table(kind).slot_of

    def has_policy(self, kind: PolicyKind, policy_id: str) -> bool:
        """Whether the policy exists."""
        return policy_id in self._policy_table(kind).slot_of

    def entity_ids(self, kind: EntityKind) -> list[str]:
        """Every entity id of a kind, sorted."""
        return sorted(self._table(kind).slot_of)

    def policy_ids(self, kind: PolicyKind) -> list[str]:
        """Every policy id of a kind, sorted."""
        return sorted(self._policy_table(kind).slot_of)

    def entity_attributes(self, kind: EntityKind, entity_id: str) -> frozenset[str]:
        """The role attributes of an entity."""
        return frozenset(self._table(kind).attributes[self._slot(kind, entity_id)])

    def policy(self, kind: PolicyKind, policy_id: str) -> PolicyRecord:
        """A policy as last upserted (semantic and role lists as given, type normalized)."""
        record = self._policy_table(kind).records[self._policy_slot(kind, policy_id)]
        assert record is not None
        return record

    def selector(
        self, kind: PolicyKind, policy_id: str, entity_kind: EntityKind
    ) -> tuple[Selector, Semantic]:
        """One side of a policy, parsed, with the policy's normalized semantic."""
        side = self._side(kind, entity_kind)
        slot = self._policy_slot(kind, policy_id)
        return side.selectors[slot], side.semantics[slot]

    def attribute_names(self, kind: EntityKind) -> list[str]:
        """The distinct role attributes carried by entities of a kind, sorted (§7)."""
        return sorted(self._table(kind).attribute_bits)

    def role_filter(self, kind: EntityKind, roles: Iterable[str], semantic: str = "AllOf") -> list[str]:
        """The list endpoints' ``roleFilter``/``roleSemantic`` (§1.5), sorted ids.

        Unlike policies: unknown ``@ids`` are dropped silently and ``#all`` is the attribute ``all``.
        """
        table = self._table(kind)
        attributes: set[str] = set()
        ids: list[str] = []
        for role in roles:
            if role.startswith("#"):
                attributes.add(role[1:])
            elif role.startswith("@"):
                ids.append(role[1:])
        bits = table.bits_of_ids(ids)
        normalized = normalize_semantic(semantic)
        if attributes and normalized != "none":
            index = table.attribute_bits
            if normalized == "anyof":
                for attribute in attributes:
                    bits |= index.get(attribute, 0)
            else:
                common = -1
                for attribute in attributes:
                    common &= index.get(attribute, 0)
                bits |= common
        return self._entity_ids(table, bits)

    # -- access queries ---------------------------------------------------------------------------

    def services_for_identity(self, identity_id: str, type: str | None = None) -> list[str]:
        """Services the identity may Dial, Bind or (``None``) either, sorted (a new list)."""
        key = (identity_id, type)
        known = self._reach.get(key)
        if known is None:
            policies = self._sp_identity.effective_links(self._slot(IDENTITY, identity_id))
            bits = self._sp_service.union_of_members(policies & self._type_mask(type))
            known = self._entity_ids(self._services, bits)
            if len(self._reach) >= REACH_ENTRIES:
                self._reach.clear()
            self._reach[key] = known
        return list(known)

    def identities_for_service(self, service_id: str, type: str | None = None) -> list[str]:
        """Identities that may Dial, Bind or (``None``) either the service."""
        policies = self._sp_service.effective_links(self._slot(SERVICE, service_id))
        bits = self._sp_identity.union_of_members(policies & self._type_mask(type))
        return self._entity_ids(self._identities, bits)

    def edge_routers_for_identity(self, identity_id: str) -> list[str]:
        """Edge routers linked to the identity by edge router policies."""
        return self._entity_ids(self._routers, self._identity_cache.get(identity_id)[2])

    def identities_for_edge_router(self, edge_router_id: str) -> list[str]:
        """Identities linked to the edge router by edge router policies."""
        policies = self._erp_router.effective_links(self._slot(EDGE_ROUTER, edge_router_id))
        return self._entity_ids(self._identities, self._erp_identity.union_of_members(policies))

    def edge_routers_for_service(self, service_id: str) -> list[str]:
        """Edge routers linked to the service by service edge router policies."""
        return self._entity_ids(self._routers, self._service_cache.get(service_id)[2])

    def common_edge_routers(self, identity_id: str, service_id: str) -> list[str]:
        """Edge routers linked to both the identity (edge router policies) and the service
        (service edge router policies), sorted: one intersection of the two cached router sets."""
        mine = self._identity_cache.get(identity_id)[2]
        theirs = self._service_cache.get(service_id)[2]
        return self._entity_ids(self._routers, mine & theirs)

    def services_for_edge_router(self, edge_router_id: str) -> list[str]:
        """Services linked to the edge router by service edge router policies."""
        policies = self._serp_router.effective_links(self._slot(EDGE_ROUTER, edge_router_id))
        return self._entity_ids(self._services, self._serp_service.union_of_members(policies))

    def policies_for_entity(
        self, entity_kind: EntityKind, entity_id: str, policy_kind: PolicyKind
    ) -> list[str]:
        """Policies of ``policy_kind`` whose ``entity_kind`` side selects the entity."""
        side = self._side(policy_kind, entity_kind)
        return self._policy_ids(policy_kind, side.effective_links(self._slot(entity_kind, entity_id)))

    def policy_members(self, policy_kind: PolicyKind, policy_id: str, entity_kind: EntityKind) -> list[str]:
        """Entities of ``entity_kind`` the policy's side selects."""
        side = self._side(policy_kind, entity_kind)
        return self._entity_ids(side.table, side.member_bits(self._policy_slot(policy_kind, policy_id)))

    def policy_selects(
        self, policy_kind: PolicyKind, policy_id: str, entity_kind: EntityKind, entity_id: str
    ) -> bool:
        """Whether the policy's side selects the entity (one bit test; False when either is
        unknown)."""
        side = self._side(policy_kind, entity_kind)
        policy = self._policy_table(policy_kind).slot_of.get(policy_id)
        entity = side.table.slot_of.get(entity_id)
        if policy is None or entity is None:
            return False
        return bool((side.member_bits(policy) >> entity) & 1)

    def policy_member_count(self, policy_kind: PolicyKind, policy_id: str, entity_kind: EntityKind) -> int:
        """How many entities :meth:`policy_members` names, without listing them (0 for an
        unknown policy)."""
        side = self._side(policy_kind, entity_kind)
        policy = self._policy_table(policy_kind).slot_of.get(policy_id)
        return 0 if policy is None else side.member_bits(policy).bit_count()

    # -- bitset reads (for analyses that compare graphs without listing ids) --------------------
    # Entity bitsets are over a kind's slots (``entity_slot``, ``entity_slot_ids``), policy bitsets
    # over a policy kind's slots (``policy_slot``, ``policy_slot_ids``). A fork (``copy``) keeps
    # every slot; slots of entities or policies created or deleted since may differ. Read only:
    # nothing here changes the graph or its caches.

    def entity_slot(self, kind: EntityKind, entity_id: str) -> int | None:
        """The entity's slot (None when it does not exist)."""
        return self._table(kind).slot_of.get(entity_id)

    def entity_slot_ids(self, kind: EntityKind) -> Sequence[str | None]:
        """Slot -> id (None for a free slot) as of now; later changes do not alter it."""
        return self._table(kind).id_snapshot()

    def entity_bits(self, kind: EntityKind) -> int:
        """Every live entity slot of a kind."""
        return self._table(kind).all_bits

    def policy_slot(self, kind: PolicyKind, policy_id: str) -> int | None:
        """The policy's slot (None when it does not exist)."""
        return self._policy_table(kind).slot_of.get(policy_id)

    def policy_slot_ids(self, kind: PolicyKind) -> Sequence[str | None]:
        """Policy slot -> id (None for a free slot), as of now."""
        return self._policy_table(kind).id_snapshot()

    def policy_member_bits(self, policy_kind: PolicyKind, policy_id: str, entity_kind: EntityKind) -> int:
        """The entity slots the policy's side selects, ``#all`` resolved (0 for an unknown policy)."""
        side = self._side(policy_kind, entity_kind)
        policy = self._policy_table(policy_kind).slot_of.get(policy_id)
        return 0 if policy is None else side.member_bits(policy)

    def entity_policy_bits(
        self, policy_kind: PolicyKind, entity_kind: EntityKind, entity_id: str, type: str | None = None
    ) -> int:
        """The policy slots whose ``entity_kind`` side selects the entity (0 when it does not
        exist); for service policies, only those of ``type`` when given."""
        side = self._side(policy_kind, entity_kind)
        slot = side.table.slot_of.get(entity_id)
        if slot is None:
            return 0
        bits = side.effective_links(slot)
        return bits & self._type_mask(type) if type is not None else bits

    def policy_bits_selecting(self, policy_kind: PolicyKind, entity_kind: EntityKind, entities: int) -> int:
        """The policy slots whose ``entity_kind`` side selects at least one of ``entities``."""
        if not entities:
            return 0
        side = self._side(policy_kind, entity_kind)
        links = side.links
        found = side.all_policies
        for entity in slots(entities):
            found |= links[entity]
        return found

    def member_union_bits(self, policy_kind: PolicyKind, entity_kind: EntityKind, policies: int) -> int:
        """The union of the ``entity_kind`` members of the policy slots ``policies``."""
        return self._side(policy_kind, entity_kind).union_of_members(policies) if policies else 0

    def type_bits(self, type: str) -> int:
        """The service policy slots of a type (``Dial`` or ``Bind``)."""
        return self._type_mask(type)

    def selector_bits(self, entity_kind: EntityKind, selector: Selector, semantic: Semantic) -> int:
        """The entity slots a (parsed) role list selects under ``semantic``, ``#all`` resolved."""
        table = self._table(entity_kind)
        if selector.all:
            return table.all_bits
        side = next(side for side in self._entity_sides[entity_kind])
        return side.compute_members(selector, semantic)

    def _pair_policies(self, identity_id: str, service_id: str) -> int:
        return self._identity_cache.get(identity_id)[1] & self._service_cache.get(service_id)[1]

    def permissions(self, identity_id: str, service_id: str) -> set[str]:
        """The subset of ``{"Dial", "Bind"}`` the identity holds on the service (posture ignored)."""
        policies = self._pair_policies(identity_id, service_id)
        granted: set[str] = set()
        if policies & self._dial:
            granted.add("Dial")
        if policies & self._bind:
            granted.add("Bind")
        return granted

    def link_policies(self, identity_id: str, service_id: str, type: str | None = None) -> list[str]:
        """The service policies (of ``type``, or of either) linking the pair: the provenance."""
        policies = self._pair_policies(identity_id, service_id) & self._type_mask(type)
        return self._policy_ids(SERVICE_POLICY, policies)

    def edge_router_link_policies(self, identity_id: str, edge_router_id: str) -> list[str]:
        """The edge router policies linking an identity and an edge router (provenance)."""
        identity = self._slot(IDENTITY, identity_id)
        router = self._slot(EDGE_ROUTER, edge_router_id)
        policies = self._erp_identity.effective_links(identity) & self._erp_router.effective_links(router)
        return self._policy_ids(EDGE_ROUTER_POLICY, policies)

    def service_edge_router_link_policies(self, service_id: str, edge_router_id: str) -> list[str]:
        """The service edge router policies linking a service and an edge router (provenance)."""
        service = self._slot(SERVICE, service_id)
        router = self._slot(EDGE_ROUTER, edge_router_id)
        policies = self._serp_service.effective_links(service) & self._serp_router.effective_links(router)
        return self._policy_ids(SERVICE_EDGE_ROUTER_POLICY, policies)

    def posture_checks_for(
        self,
        identity_id: str,
        service_id: str,
        type: str,
    ) -> dict[str, tuple[str, ...]]:
        """Per service policy of ``type`` granting the pair, its posture check ids (§6 gating input).

        Keys in policy id order; a policy with no posture checks maps to ``()`` (it passes).
        """
        policies = self._pair_policies(identity_id, service_id) & self._type_mask(type)
        side = self._sp_posture
        ids = self._policies[SERVICE_POLICY].ids
        result: dict[str, tuple[str, ...]] = {}
        for policy in slots(policies):
            result[cast(str, ids[policy])] = tuple(self._entity_ids(side.table, side.member_bits(policy)))
        return dict(sorted(result.items()))

    def posture_gated_services(self) -> list[str]:
        """The services some service policy with posture checks selects (either type). A session
        on any other service is granted only by policies without checks, which pass (§6): posture
        can end only sessions on these."""
        side = self._sp_posture
        gated = side.all_policies if side.table.all_bits else 0
        for policy, members in enumerate(side.members):
            if members:
                gated |= 1 << policy
        if not gated:
            return []
        return self._entity_ids(self._services, self._sp_service.union_of_members(gated))

    def posture_policies(self, identity_id: str, service_id: str) -> dict[str, tuple[str, tuple[str, ...]]]:
        """Per service policy of either type granting the pair: its type and its posture check
        ids (:meth:`posture_checks_for` of Dial and Bind in one pass), in policy id order."""
        policies = self._pair_policies(identity_id, service_id) & (self._dial | self._bind)
        side = self._sp_posture
        ids = self._policies[SERVICE_POLICY].ids
        result: dict[str, tuple[str, tuple[str, ...]]] = {}
        for policy in slots(policies):
            policy_type = "Dial" if (self._dial >> policy) & 1 else "Bind"
            checks = tuple(self._entity_ids(side.table, side.member_bits(policy)))
            result[cast(str, ids[policy])] = (policy_type, checks)
        return dict(sorted(result.items()))

    def grant(self, identity_id: str, service_id: str) -> PairGrant:
        """:meth:`permissions` (sorted) and :meth:`posture_policies` of the pair, memoised until
        the next change. The answer is shared: do not change it."""
        key = (identity_id, service_id)
        known = self._pairs.get(key)
        if known is None:
            known = (tuple(sorted(self.permissions(identity_id, service_id))), self.posture_policies(*key))
            if len(self._pairs) >= PAIR_ENTRIES:
                self._pairs.clear()
            self._pairs[key] = known
        return known

    def advice(self, identity_id: str, service_id: str) -> Advice:
        """Policy advice for the pair (§4): permissions without posture, router sets unfiltered."""
        cache = self._identity_cache
        mine = cache.entries.get(identity_id)
        if mine is None or mine[0] != cache.epoch:
            mine = cache.fill(identity_id)
        cache = self._service_cache
        theirs = cache.entries.get(service_id)
        if theirs is None or theirs[0] != cache.epoch:
            theirs = cache.fill(service_id)
        policies = mine[1] & theirs[1]
        routers = self._routers
        routers.ids_shared = True
        if not policies:
            return Advice(False, False, mine[2], theirs[2], routers.ids)
        return Advice(
            bool(policies & self._dial), bool(policies & self._bind), mine[2], theirs[2], routers.ids
        )

    def size(self, kind: EntityKind) -> int:
        """How many entities of ``kind`` the graph holds."""
        return len(self._tables[kind])

    def counts(self) -> dict[str, int]:
        """How many entities and policies of each kind."""
        result = {kind: len(table) for kind, table in self._tables.items()}
        result.update({kind: len(table) for kind, table in self._policies.items()})
        return result
