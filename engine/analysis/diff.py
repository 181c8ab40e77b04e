"""The exact access difference between two policy graphs (docs/analysis.md §3).

Access is two relations: (identity, service, Dial|Bind), granted when some service policy of that
type selects both, and (identity, edge router), granted when some edge router policy selects both
(policy advice's counts; posture and online status are not part of it). :func:`access_diff`
compares a graph ``before`` with a graph ``after`` (a fork of it with changes applied) without
enumerating every pair: a pair can change only through a policy whose members, type or existence
changed, and a policy's members change only when the policy itself or one of the entities it
selects (before or after) was touched. So the candidates are the members of those policies, and
only their answers are compared.

The result names every added and removed pair, and summarises them per policy (what the policy's
own links gained and lost, and how many of the access changes it accounts for) and per identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.managers.access import ENTITY_KINDS as ENTITY_NAMES
from engine.managers.access import POLICY_KINDS as POLICY_NAMES
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from engine.ports import Change, Delete, Put

__all__ = ["AccessDiff", "IdentityChange", "PolicyChange", "Touched", "access_diff", "touched_by"]

#: What a batch touched: engine kind (entity or policy kind) -> ids.
Touched = dict[str, set[str]]

ServicePair = tuple[str, str, str]
"""(identity id, service id, ``Dial`` or ``Bind``)."""
RouterPair = tuple[str, str]
"""(identity id, edge router id)."""


@dataclass
class PolicyChange:
    """One policy whose definition or members changed, and what that did."""

    kind: str
    id: str
    #: ``created``, ``updated``, ``deleted`` (its own definition) or ``members`` (only the
    #: entities it selects changed).
    change: str
    links_added: int = 0
    links_removed: int = 0
    #: Added (removed) access pairs this policy grants after (granted before).
    access_added: int = 0
    access_removed: int = 0


@dataclass
class IdentityChange:
    """What one identity gains and loses."""

    id: str
    dial_added: list[str] = field(default_factory=list)
    dial_removed: list[str] = field(default_factory=list)
    bind_added: list[str] = field(default_factory=list)
    bind_removed: list[str] = field(default_factory=list)
    routers_added: list[str] = field(default_factory=list)
    routers_removed: list[str] = field(default_factory=list)


@dataclass
class AccessDiff:
    """The answer of :func:`access_diff`; lists sorted."""

    services_added: list[ServicePair] = field(default_factory=list)
    services_removed: list[ServicePair] = field(default_factory=list)
    routers_added: list[RouterPair] = field(default_factory=list)
    routers_removed: list[RouterPair] = field(default_factory=list)
    policies: list[PolicyChange] = field(default_factory=list)
    identities: list[IdentityChange] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.services_added or self.services_removed or self.routers_added or self.routers_removed
        )


def touched_by(changes: Iterable[Change]) -> Touched:
    """The engine kinds and ids a batch of store changes touches (other kinds are left out)."""
    out: Touched = {}
    for change in changes:
        name = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        entity_id = change.entity.id if isinstance(change, Put) else change.id
        assert isinstance(change, Put | Delete)
        kind = ENTITY_NAMES.get(name, POLICY_NAMES.get(name, (None, None)))[0]
        if kind is not None:
            out.setdefault(kind, set()).add(entity_id)
    return out


def _policies_of(graph: PolicyGraph, entity_kind: str, entity_id: str, policy_kind: str) -> list[str]:
    if not graph.has_entity(entity_kind, entity_id):  # type: ignore[arg-type]
        return []
    return graph.policies_for_entity(entity_kind, entity_id, policy_kind)  # type: ignore[arg-type]


def _members(graph: PolicyGraph, policy_kind: str, policy_id: str, entity_kind: str) -> list[str]:
    if not graph.has_policy(policy_kind, policy_id):  # type: ignore[arg-type]
        return []
    return graph.policy_members(policy_kind, policy_id, entity_kind)  # type: ignore[arg-type]


def _changed_policies(
    before: PolicyGraph, after: PolicyGraph, touched: Touched, policy_kind: str, sides: Sequence[str]
) -> set[str]:
    changed = set(touched.get(policy_kind, ()))
    for entity_kind in sides:
        for entity_id in touched.get(entity_kind, ()):
            for graph in (before, after):
                changed.update(_policies_of(graph, entity_kind, entity_id, policy_kind))
    return changed


def _status(before: PolicyGraph, after: PolicyGraph, kind: str, policy_id: str, touched: Touched) -> str:
    was = before.has_policy(kind, policy_id)  # type: ignore[arg-type]
    now = after.has_policy(kind, policy_id)  # type: ignore[arg-type]
    if not was:
        return "created"
    if not now:
        return "deleted"
    return "updated" if policy_id in touched.get(kind, ()) else "members"


def _links(graph: PolicyGraph, kind: str, policy_id: str, sides: tuple[str, str]) -> set[tuple[str, str]]:
    left = _members(graph, kind, policy_id, sides[0])
    right = _members(graph, kind, policy_id, sides[1])
    return {(a, b) for a in left for b in right}


def access_diff(before: PolicyGraph, after: PolicyGraph, touched: Touched) -> AccessDiff:
    """Every (identity, service, type) and (identity, router) pair granted in one graph and not
    the other, given what was ``touched`` between them (:func:`touched_by`)."""
    diff = AccessDiff()
    identities: dict[str, IdentityChange] = {}

    def person(identity_id: str) -> IdentityChange:
        found = identities.get(identity_id)
        if found is None:
            found = identities[identity_id] = IdentityChange(identity_id)
        return found

    # -- services ---------------------------------------------------------------------------------
    service_policies = _changed_policies(before, after, touched, SERVICE_POLICY, (IDENTITY, SERVICE))
    candidate_identities: set[str] = set()
    candidate_services: set[str] = set()
    for policy_id in service_policies:
        for graph in (before, after):
            candidate_identities.update(_members(graph, SERVICE_POLICY, policy_id, IDENTITY))
            candidate_services.update(_members(graph, SERVICE_POLICY, policy_id, SERVICE))
    for identity_id in sorted(candidate_identities):
        for policy_type in ("Dial", "Bind"):
            old = _reach(before, identity_id, policy_type) & candidate_services
            new = _reach(after, identity_id, policy_type) & candidate_services
            if old == new:
                continue
            added, removed = sorted(new - old), sorted(old - new)
            diff.services_added.extend((identity_id, s, policy_type) for s in added)
            diff.services_removed.extend((identity_id, s, policy_type) for s in removed)
            entry = person(identity_id)
            if policy_type == "Dial":
                entry.dial_added, entry.dial_removed = added, removed
            else:
                entry.bind_added, entry.bind_removed = added, removed
    diff.services_added.sort()
    diff.services_removed.sort()

    # -- routers ----------------------------------------------------------------------------------
    router_policies = _changed_policies(before, after, touched, EDGE_ROUTER_POLICY, (IDENTITY, EDGE_ROUTER))
    router_identities: set[str] = set()
    candidate_routers: set[str] = set()
    for policy_id in router_policies:
        for graph in (before, after):
            router_identities.update(_members(graph, EDGE_ROUTER_POLICY, policy_id, IDENTITY))
            candidate_routers.update(_members(graph, EDGE_ROUTER_POLICY, policy_id, EDGE_ROUTER))
    for identity_id in sorted(router_identities):
        old = _routers(before, identity_id) & candidate_routers
        new = _routers(after, identity_id) & candidate_routers
        if old == new:
            continue
        added, removed = sorted(new - old), sorted(old - new)
        diff.routers_added.extend((identity_id, r) for r in added)
        diff.routers_removed.extend((identity_id, r) for r in removed)
        entry = person(identity_id)
        entry.routers_added, entry.routers_removed = added, removed

    # -- per policy -------------------------------------------------------------------------------
    serp = _changed_policies(before, after, touched, SERVICE_EDGE_ROUTER_POLICY, (SERVICE, EDGE_ROUTER))
    kinds: tuple[tuple[str, set[str], tuple[str, str]], ...] = (
        (SERVICE_POLICY, service_policies, (IDENTITY, SERVICE)),
        (EDGE_ROUTER_POLICY, router_policies, (IDENTITY, EDGE_ROUTER)),
        (SERVICE_EDGE_ROUTER_POLICY, serp, (SERVICE, EDGE_ROUTER)),
    )
    for kind, policy_ids, sides in kinds:
        for policy_id in sorted(policy_ids):
            old_links = _links(before, kind, policy_id, sides)
            new_links = _links(after, kind, policy_id, sides)
            status = _status(before, after, kind, policy_id, touched)
            if (
                status == "members"
                and old_links == new_links
                and not _type_changed(before, after, kind, policy_id)
            ):
                continue
            change = PolicyChange(
                kind, policy_id, status, len(new_links - old_links), len(old_links - new_links)
            )
            if kind == SERVICE_POLICY:
                change.access_added = sum(
                    1 for i, s, t in diff.services_added if _grants(after, policy_id, i, s, t)
                )
                change.access_removed = sum(
                    1 for i, s, t in diff.services_removed if _grants(before, policy_id, i, s, t)
                )
            elif kind == EDGE_ROUTER_POLICY:
                change.access_added = sum(1 for i, r in diff.routers_added if (i, r) in new_links)
                change.access_removed = sum(1 for i, r in diff.routers_removed if (i, r) in old_links)
            diff.policies.append(change)
    diff.identities = [identities[i] for i in sorted(identities)]
    return diff


def _type_changed(before: PolicyGraph, after: PolicyGraph, kind: str, policy_id: str) -> bool:
    if kind != SERVICE_POLICY or not before.has_policy(SERVICE_POLICY, policy_id):
        return False
    if not after.has_policy(SERVICE_POLICY, policy_id):
        return False
    return before.policy(SERVICE_POLICY, policy_id).type != after.policy(SERVICE_POLICY, policy_id).type


def _grants(graph: PolicyGraph, policy_id: str, identity_id: str, service_id: str, policy_type: str) -> bool:
    if not graph.has_policy(SERVICE_POLICY, policy_id):
        return False
    record = graph.policy(SERVICE_POLICY, policy_id)
    return (
        record.type == policy_type
        and graph.policy_selects(SERVICE_POLICY, policy_id, IDENTITY, identity_id)
        and graph.policy_selects(SERVICE_POLICY, policy_id, SERVICE, service_id)
    )


def _reach(graph: PolicyGraph, identity_id: str, policy_type: str) -> set[str]:
    if not graph.has_entity(IDENTITY, identity_id):
        return set()
    return set(graph.services_for_identity(identity_id, policy_type))


def _routers(graph: PolicyGraph, identity_id: str) -> set[str]:
    if not graph.has_entity(IDENTITY, identity_id):
        return set()
    return set(graph.edge_routers_for_identity(identity_id))
