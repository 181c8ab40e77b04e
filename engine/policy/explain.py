"""Why an identity may, or may not, reach a service; and the policy neighbourhood of an entity.

:func:`explain` answers for one (identity, service, type):

- the granting service policies, and for each side which role entries matched: ``@id``, ``#all`` or
  the matched ``#attributes`` (:class:`SideMatch`);
- for a denied pair, the *nearest misses*: policies of that type that select the service and would
  select the identity if it carried the missing attributes, and policies that select the identity
  but not the service (missing service attributes). An AllOf side needs every missing attribute;
  an AnyOf side needs any one of its attributes. Misses are ordered by how many attributes they need
  (fewest first), then policy id. A side that selects only by ``@id`` cannot be fixed by attributes
  and is not reported.

:func:`neighbourhood` returns a :class:`networkx.DiGraph` of entities, policies and attributes around
one entity or policy, for presenting an explanation as paths. networkx is used for analysis and
presentation only; the hot path never touches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.policy.bitset import select
from engine.policy.graph import PolicyGraph
from engine.policy.model import (
    ENTITY_KINDS,
    IDENTITY,
    POLICY_FIELDS,
    POLICY_KINDS,
    SERVICE,
    SERVICE_POLICY,
    EntityKind,
    PolicyKind,
    PolicyType,
    normalize_type,
)
from engine.policy.selector import Selector, Semantic

__all__ = ["Explanation", "Grant", "Miss", "SideMatch", "explain", "neighbourhood"]


@dataclass(frozen=True, slots=True)
class SideMatch:
    """How one side of a policy selects one entity (any combination may hold)."""

    by_id: bool
    by_all: bool
    attributes: tuple[str, ...]

    @property
    def roles(self) -> tuple[str, ...]:
        """The matching role entries as written in a policy: ``#all``, ``@<id>`` marker, ``#attr``."""
        found: list[str] = []
        if self.by_all:
            found.append("#all")
        if self.by_id:
            found.append("@id")
        found.extend(f"#{attribute}" for attribute in self.attributes)
        return tuple(found)

    @property
    def matched(self) -> bool:
        """Whether the side selects the entity at all."""
        return self.by_id or self.by_all or bool(self.attributes)


@dataclass(frozen=True, slots=True)
class Grant:
    """A service policy linking the pair, with what matched on each side."""

    policy_id: str
    identity: SideMatch
    service: SideMatch


@dataclass(frozen=True, slots=True)
class Miss:
    """A policy that would link the pair if one entity carried more attributes."""

    policy_id: str
    side: Literal["identity", "service"]
    missing_attributes: tuple[str, ...]
    any_of: bool
    """True: any one of ``missing_attributes`` suffices (AnyOf); False: all are needed (AllOf)."""

    @property
    def cost(self) -> int:
        """How many attributes must be added."""
        return 1 if self.any_of else len(self.missing_attributes)


@dataclass(frozen=True, slots=True)
class Explanation:
    """The answer of :func:`explain`."""

    identity_id: str
    service_id: str
    type: PolicyType
    grants: tuple[Grant, ...]
    misses: tuple[Miss, ...]

    @property
    def allowed(self) -> bool:
        """Whether some policy of the type links the pair (posture not considered)."""
        return bool(self.grants)


def side_match(
    selector: Selector, semantic: Semantic, entity_id: str, attributes: frozenset[str]
) -> SideMatch:
    """Which entries of one side select an entity."""
    return SideMatch(
        entity_id in selector.ids,
        selector.all,
        tuple(sorted(selector.matched_attributes(semantic, attributes))),
    )


def _missing(
    policy_id: str,
    side: Literal["identity", "service"],
    selector: Selector,
    semantic: Semantic,
    attributes: frozenset[str],
) -> Miss | None:
    if selector.all or not selector.attributes or semantic == "none":
        return None
    if semantic == "allof":
        missing = selector.attributes - attributes
        return Miss(policy_id, side, tuple(sorted(missing)), any_of=False) if missing else None
    if selector.attributes & attributes:
        return None
    return Miss(policy_id, side, tuple(sorted(selector.attributes)), any_of=True)


def explain(
    graph: PolicyGraph,
    identity_id: str,
    service_id: str,
    type: str,
    *,
    max_misses: int = 10,
) -> Explanation:
    """Why ``identity_id`` may (or may not) ``type`` ``service_id``; see the module docstring."""
    policy_type = normalize_type(type)
    identity_attributes = graph.entity_attributes(IDENTITY, identity_id)
    service_attributes = graph.entity_attributes(SERVICE, service_id)

    def sides(policy_id: str) -> tuple[tuple[Selector, Semantic], tuple[Selector, Semantic]]:
        return (
            graph.selector(SERVICE_POLICY, policy_id, IDENTITY),
            graph.selector(SERVICE_POLICY, policy_id, SERVICE),
        )

    grants: list[Grant] = []
    for policy_id in graph.link_policies(identity_id, service_id, policy_type):
        (identity_selector, semantic), (service_selector, _) = sides(policy_id)
        grants.append(
            Grant(
                policy_id,
                side_match(identity_selector, semantic, identity_id, identity_attributes),
                side_match(service_selector, semantic, service_id, service_attributes),
            )
        )
    misses: list[Miss] = []
    if not grants:
        # the policies of the type selecting each side, as bitsets: those selecting one side only
        # could grant the pair if the other entity carried more attributes
        by_identity = graph.entity_policy_bits(SERVICE_POLICY, IDENTITY, identity_id, policy_type)
        by_service = graph.entity_policy_bits(SERVICE_POLICY, SERVICE, service_id, policy_type)
        ids = graph.policy_slot_ids(SERVICE_POLICY)
        for found in select(by_service & ~by_identity, ids):
            assert found is not None
            selector, semantic = graph.selector(SERVICE_POLICY, found, IDENTITY)
            miss = _missing(found, "identity", selector, semantic, identity_attributes)
            if miss is not None:
                misses.append(miss)
        for found in select(by_identity & ~by_service, ids):
            assert found is not None
            selector, semantic = graph.selector(SERVICE_POLICY, found, SERVICE)
            miss = _missing(found, "service", selector, semantic, service_attributes)
            if miss is not None:
                misses.append(miss)
        misses.sort(key=lambda m: (m.cost, m.policy_id, m.side))
    return Explanation(identity_id, service_id, policy_type, tuple(grants), tuple(misses[:max_misses]))


# -- neighbourhood ------------------------------------------------------------------------------

Node = tuple[str, str]
"""``(entity kind, id)``, ``(policy kind, id)`` or ``("<entity kind>-attribute", name)``."""


def _attribute_node(entity_kind: str, name: str) -> Node:
    return (f"{entity_kind}-attribute", name)


def neighbourhood(
    graph: PolicyGraph,
    kind: str,
    node_id: str,
    depth: int = 1,
    *,
    member_limit: int = 50,
) -> Any:
    """The entities, policies and attributes within ``depth`` policy hops of one entity or policy.

    Hops alternate entity -> policies selecting it -> their members (at most ``member_limit`` per
    policy side, by id). Nodes are ``(kind, id)`` tuples with ``node_type`` (``entity``, ``policy``,
    ``attribute``), ``kind`` and ``label``; policies also carry ``semantic`` and ``type``. Edges:

    - entity -> attribute, ``relation="has"``;
    - policy -> attribute, ``relation="requires"`` with ``semantic`` (the policy's ``#`` roles);
    - policy -> entity, ``relation="selects"`` with ``roles`` (the matching entries, as
      :attr:`SideMatch.roles`), between every policy and member present.

    Returns a ``networkx.DiGraph``.
    """
    # networkx is imported on first use: it is a seventh of the server's import time (~0.15 s of
    # every start) and only an explanation needs it.
    import networkx as nx  # type: ignore[import-untyped]

    if kind not in ENTITY_KINDS and kind not in POLICY_KINDS:
        raise ValueError(f"unknown kind {kind!r}")
    result = nx.DiGraph()
    entities: set[Node] = set()
    policies: set[Node] = set()

    def add_entity(entity_kind: str, entity_id: str) -> Node:
        node = (entity_kind, entity_id)
        if node not in entities:
            entities.add(node)
            result.add_node(node, node_type="entity", kind=entity_kind, label=entity_id)
            for attribute in sorted(graph.entity_attributes(_entity(entity_kind), entity_id)):
                target = _attribute_node(entity_kind, attribute)
                result.add_node(target, node_type="attribute", kind=entity_kind, label=f"#{attribute}")
                result.add_edge(node, target, relation="has")
        return node

    def add_policy(policy_kind: str, policy_id: str) -> Node:
        node = (policy_kind, policy_id)
        if node not in policies:
            policies.add(node)
            record = graph.policy(_policy(policy_kind), policy_id)
            result.add_node(
                node,
                node_type="policy",
                kind=policy_kind,
                label=policy_id,
                semantic=record.semantic,
                type=record.type,
            )
            for entity_kind in POLICY_FIELDS[_policy(policy_kind)]:
                selector, semantic = graph.selector(_policy(policy_kind), policy_id, entity_kind)
                for attribute in sorted(selector.attributes):
                    target = _attribute_node(entity_kind, attribute)
                    result.add_node(target, node_type="attribute", kind=entity_kind, label=f"#{attribute}")
                    result.add_edge(node, target, relation="requires", semantic=semantic)
        return node

    start = add_entity(kind, node_id) if kind in ENTITY_KINDS else add_policy(kind, node_id)
    frontier = [start]
    for _ in range(depth):
        following: list[Node] = []
        for node_kind, identifier in frontier:
            if node_kind in ENTITY_KINDS:
                for policy_kind, entity_kinds in POLICY_FIELDS.items():
                    if node_kind not in entity_kinds:
                        continue
                    for policy_id in graph.policies_for_entity(_entity(node_kind), identifier, policy_kind):
                        if (policy_kind, policy_id) not in policies:
                            following.append(add_policy(policy_kind, policy_id))
            else:
                for entity_kind in POLICY_FIELDS[_policy(node_kind)]:
                    members = graph.policy_members(_policy(node_kind), identifier, entity_kind)
                    for entity_id in members[:member_limit]:
                        if (entity_kind, entity_id) not in entities:
                            following.append(add_entity(entity_kind, entity_id))
        frontier = following
    for member_kind, entity_id in sorted(entities):
        attributes = graph.entity_attributes(_entity(member_kind), entity_id)
        for policy_kind, entity_kinds in POLICY_FIELDS.items():
            if member_kind not in entity_kinds:
                continue
            for policy_id in graph.policies_for_entity(_entity(member_kind), entity_id, policy_kind):
                if (policy_kind, policy_id) in policies:
                    selector, semantic = graph.selector(policy_kind, policy_id, _entity(member_kind))
                    match = side_match(selector, semantic, entity_id, attributes)
                    result.add_edge(
                        (policy_kind, policy_id),
                        (member_kind, entity_id),
                        relation="selects",
                        roles=match.roles,
                    )
    return result


def _entity(kind: str) -> EntityKind:
    if kind not in ENTITY_KINDS:
        raise ValueError(f"unknown entity kind {kind!r}")
    return kind


def _policy(kind: str) -> PolicyKind:
    if kind not in POLICY_KINDS:
        raise ValueError(f"unknown policy kind {kind!r}")
    return kind
