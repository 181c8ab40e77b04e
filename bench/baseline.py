"""The straightforward baseline: OpenZiti's denormalized store, in Python sets and dicts.

This is what docs/policy.md §3.2 describes, transcribed without an index:

- policy <-> entity link collections: per policy and side a ``set`` of entity ids, per entity a
  ``set`` of policy ids;
- entity <-> entity reference-counted collections: identity <-> service per Dial and Bind,
  identity <-> edge router, service <-> edge router, as ``dict[id, dict[id, count]]`` both ways;
- a policy role change **scans every entity of the side's kind** and evaluates the §1.2 predicate
  (§3.2 a); a new link increments the count of every pair it creates with the other side's
  members, a removed link decrements them;
- an entity attribute change evaluates the entity against **every policy** of each relevant kind
  (§3.2 b); a type change removes the counts as the old type and adds them as the new one (§3.2 c);
- advice is §4: walk the identity's service policies and keep those linked to the service; union the
  routers of the identity's edge router policies and of the service's service edge router policies.

Unlike OpenZiti (quirk §3.2), a semantic change re-evaluates, as the engine does, so both compute
the same links.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    ENTITY_KINDS,
    IDENTITY,
    POLICY_FIELDS,
    POLICY_KINDS,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityRow,
    PolicyRow,
)
from engine.policy.selector import Selector, Semantic, normalize_semantic, parse_roles

__all__ = ["BaselineAdvice", "BaselineGraph"]

Counts = dict[str, dict[str, int]]

PAIRS: dict[str, tuple[str, str]] = {
    SERVICE_POLICY: (IDENTITY, SERVICE),
    EDGE_ROUTER_POLICY: (IDENTITY, EDGE_ROUTER),
    SERVICE_EDGE_ROUTER_POLICY: (SERVICE, EDGE_ROUTER),
}
"""Policy kind -> the two entity kinds whose pairs it reference-counts."""

_ROLE_FIELD = {
    IDENTITY: "identity_roles",
    SERVICE: "service_roles",
    EDGE_ROUTER: "edge_router_roles",
    "posture-check": "posture_check_roles",
}


@dataclass
class _Policy:
    semantic: Semantic
    type: str | None
    selectors: dict[str, Selector]


@dataclass(frozen=True)
class BaselineAdvice:
    """§4's fields, computed the OpenZiti way."""

    is_dial_allowed: bool
    is_bind_allowed: bool
    identity_router_count: int
    service_router_count: int
    common_router_ids: frozenset[str]


@dataclass
class BaselineGraph:
    """See the module docstring. ``timings`` accumulates seconds spent per phase during scans."""

    entities: dict[str, dict[str, frozenset[str]]] = field(
        default_factory=lambda: {kind: {} for kind in ENTITY_KINDS}
    )
    policies: dict[str, dict[str, _Policy]] = field(
        default_factory=lambda: {kind: {} for kind in POLICY_KINDS}
    )
    policy_links: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    entity_links: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    counts: dict[tuple[str, str | None], tuple[Counts, Counts]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for policy_kind, entity_kinds in POLICY_FIELDS.items():
            for entity_kind in entity_kinds:
                self.policy_links[policy_kind, entity_kind] = {}
                self.entity_links[policy_kind, entity_kind] = {}
        for key in ((SERVICE_POLICY, "Dial"), (SERVICE_POLICY, "Bind"), (EDGE_ROUTER_POLICY, None)):
            self.counts[key] = ({}, {})
        self.counts[SERVICE_EDGE_ROUTER_POLICY, None] = ({}, {})

    # -- reference counts ---------------------------------------------------------------------

    def _count(self, policy_kind: str, policy: _Policy, a: str, b: str, delta: int) -> None:
        forward, backward = self.counts[policy_kind, policy.type]
        for table, x, y in ((forward, a, b), (backward, b, a)):
            row = table.get(x)
            if row is None:
                row = table[x] = {}
            value = row.get(y, 0) + delta
            if value:
                row[y] = value
            else:
                del row[y]
                if not row:
                    del table[x]

    def _link(self, policy_kind: str, policy_id: str, entity_kind: str, entity_id: str, add: bool) -> None:
        policy = self.policies[policy_kind][policy_id]
        members = self.policy_links[policy_kind, entity_kind].setdefault(policy_id, set())
        owned = self.entity_links[policy_kind, entity_kind].setdefault(entity_id, set())
        if add:
            members.add(entity_id)
            owned.add(policy_id)
        else:
            members.discard(entity_id)
            owned.discard(policy_id)
        kind_a, kind_b = PAIRS[policy_kind]
        if entity_kind not in (kind_a, kind_b):
            return
        other = kind_b if entity_kind == kind_a else kind_a
        delta = 1 if add else -1
        for partner in self.policy_links[policy_kind, other].get(policy_id, ()):
            if entity_kind == kind_a:
                self._count(policy_kind, policy, entity_id, partner, delta)
            else:
                self._count(policy_kind, policy, partner, entity_id, delta)

    # -- §3.2 (a): evaluate one policy side by scanning every entity --------------------------

    def evaluate(self, policy_kind: str, policy_id: str, entity_kind: str) -> None:
        """Scan every entity of ``entity_kind`` against the policy's side; link and count changes."""
        policy = self.policies[policy_kind][policy_id]
        selector = policy.selectors[entity_kind]
        linked = self.policy_links[policy_kind, entity_kind].get(policy_id, set())
        for entity_id, attributes in self.entities[entity_kind].items():
            matched = selector.matches(policy.semantic, entity_id, attributes)
            if matched != (entity_id in linked):
                self._link(policy_kind, policy_id, entity_kind, entity_id, matched)

    # -- §3.2 (b): evaluate one entity against every policy -----------------------------------

    def _evaluate_entity(self, entity_kind: str, entity_id: str, attributes: frozenset[str] | None) -> None:
        for policy_kind, entity_kinds in POLICY_FIELDS.items():
            if entity_kind not in entity_kinds:
                continue
            owned = self.entity_links[policy_kind, entity_kind].get(entity_id, set())
            for policy_id, policy in self.policies[policy_kind].items():
                matched = attributes is not None and policy.selectors[entity_kind].matches(
                    policy.semantic, entity_id, attributes
                )
                if matched != (policy_id in owned):
                    self._link(policy_kind, policy_id, entity_kind, entity_id, matched)

    def upsert_entity(self, kind: str, entity_id: str, attributes: Iterable[str]) -> None:
        """Create or change an entity, then evaluate it against every policy of its kinds."""
        value = frozenset(attributes)
        self.entities[kind][entity_id] = value
        self._evaluate_entity(kind, entity_id, value)

    def remove_entity(self, kind: str, entity_id: str) -> None:
        """Unlink an entity from every policy and drop it."""
        self._evaluate_entity(kind, entity_id, None)
        del self.entities[kind][entity_id]

    # -- policies -----------------------------------------------------------------------------

    def upsert_policy(self, kind: str, row: PolicyRow) -> None:
        """Create or change a policy: re-scan each changed side, recount on a type change."""
        new = _Policy(
            normalize_semantic(row.semantic),
            None if kind != SERVICE_POLICY else ("Dial" if (row.type or "").lower() == "dial" else "Bind"),
            {ek: parse_roles(getattr(row, _ROLE_FIELD[ek])) for ek in POLICY_FIELDS[kind]},  # type: ignore[index]
        )
        old = self.policies[kind].get(row.id)
        if old is not None and old.type != new.type:
            self.remove_policy(kind, row.id)
            old = None
        self.policies[kind][row.id] = new
        for entity_kind in POLICY_FIELDS[kind]:  # type: ignore[index]
            if (
                old is None
                or old.selectors[entity_kind] != new.selectors[entity_kind]
                or old.semantic != new.semantic
            ):
                self.evaluate(kind, row.id, entity_kind)

    def remove_policy(self, kind: str, policy_id: str) -> None:
        """Unlink everything the policy linked, then drop it."""
        for entity_kind in POLICY_FIELDS[kind]:  # type: ignore[index]
            for entity_id in list(self.policy_links[kind, entity_kind].get(policy_id, ())):
                self._link(kind, policy_id, entity_kind, entity_id, False)
            self.policy_links[kind, entity_kind].pop(policy_id, None)
        del self.policies[kind][policy_id]

    @classmethod
    def build(
        cls,
        identities: Sequence[EntityRow],
        services: Sequence[EntityRow],
        edge_routers: Sequence[EntityRow],
        posture_checks: Sequence[EntityRow],
        service_policies: Sequence[PolicyRow],
        edge_router_policies: Sequence[PolicyRow],
        service_edge_router_policies: Sequence[PolicyRow],
        *,
        deadline: float | None = None,
    ) -> tuple[BaselineGraph, float]:
        """Entities first, then each policy created and evaluated as OpenZiti does.

        Returns the graph and the fraction of policies resolved: with ``deadline`` (a
        ``time.perf_counter()`` value) the build stops early and the caller extrapolates.
        """
        graph = cls()
        for kind, rows in (
            (IDENTITY, identities),
            (SERVICE, services),
            (EDGE_ROUTER, edge_routers),
            ("posture-check", posture_checks),
        ):
            graph.entities[kind] = {row.id: frozenset(row.attributes) for row in rows}
        work = [
            (kind, row)
            for kind, rows in (
                (SERVICE_POLICY, service_policies),
                (EDGE_ROUTER_POLICY, edge_router_policies),
                (SERVICE_EDGE_ROUTER_POLICY, service_edge_router_policies),
            )
            for row in rows
        ]
        for done, (kind, row) in enumerate(work):
            if deadline is not None and time.perf_counter() > deadline:
                return graph, done / len(work)
            graph.upsert_policy(kind, row)
        return graph, 1.0

    # -- queries ------------------------------------------------------------------------------

    def advice(self, identity_id: str, service_id: str) -> BaselineAdvice:
        """§4, step by step."""
        service_members = self.policy_links[SERVICE_POLICY, SERVICE]
        permissions = set()
        for policy_id in self.entity_links[SERVICE_POLICY, IDENTITY].get(identity_id, ()):
            if service_id in service_members.get(policy_id, ()):
                permissions.add(self.policies[SERVICE_POLICY][policy_id].type)
        identity_routers: set[str] = set()
        erp_routers = self.policy_links[EDGE_ROUTER_POLICY, EDGE_ROUTER]
        for policy_id in self.entity_links[EDGE_ROUTER_POLICY, IDENTITY].get(identity_id, ()):
            identity_routers |= erp_routers.get(policy_id, set())
        service_routers: set[str] = set()
        serp_routers = self.policy_links[SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER]
        for policy_id in self.entity_links[SERVICE_EDGE_ROUTER_POLICY, SERVICE].get(service_id, ()):
            service_routers |= serp_routers.get(policy_id, set())
        return BaselineAdvice(
            "Dial" in permissions,
            "Bind" in permissions,
            len(identity_routers),
            len(service_routers),
            frozenset(identity_routers & service_routers),
        )

    def services_for_identity(self, identity_id: str, type: str) -> list[str]:
        """The denormalized Dial or Bind collection of an identity, sorted."""
        return sorted(self.counts[SERVICE_POLICY, type][0].get(identity_id, {}))
