"""The policy engine against a rebuild from the database (see the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from engine.managers.access import ENTITY_KINDS, POLICY_KINDS
from engine.managers.integrity._core import Problem, listed, singular
from engine.policy import EDGE_ROUTER, IDENTITY, SERVICE, EntityKind, PolicyGraph
from engine.policy.model import POLICY_FIELDS

_PLURAL: dict[str, str] = {
    "identity": "identities",
    "service": "services",
    "edge-router": "edge routers",
    "posture-check": "posture checks",
}


def _diff(what: str, engine: Iterable[str], database: Iterable[str]) -> str | None:
    """``None`` when equal, else which ids only the engine and only the database have."""
    ours, theirs = set(engine), set(database)
    if ours == theirs:
        return None
    parts = []
    if ours - theirs:
        parts.append(f"engine only: {listed(ours - theirs)}")
    if theirs - ours:
        parts.append(f"database only: {listed(theirs - ours)}")
    return f"{what} differ ({'; '.join(parts)})"


def engine_links(live: PolicyGraph, rebuilt: PolicyGraph) -> Iterator[Problem]:
    """The policy engine against a rebuild from the database (fixed by rebuilding it)."""
    label = "policy engine"
    for kind, cls in ENTITY_KINDS.values():
        what = singular(cls)
        ours, theirs = set(live.entity_ids(kind)), set(rebuilt.entity_ids(kind))
        for id in sorted(ours - theirs):
            yield Problem(f"{label}: {what} {id} is in the engine, not in the database", rebuild=True)
        for id in sorted(theirs - ours):
            yield Problem(f"{label}: {what} {id} is in the database, not in the engine", rebuild=True)
        for id in sorted(ours & theirs):
            diff = _diff(
                "role attributes", live.entity_attributes(kind, id), rebuilt.entity_attributes(kind, id)
            )
            if diff:
                yield Problem(f"{label}: {what} {id}: {diff}", rebuild=True)
    for policy_name, (policy_kind, _) in POLICY_KINDS.items():
        what = policy_name.removesuffix("-policies").replace("-", " ") + " policy"
        ours, theirs = set(live.policy_ids(policy_kind)), set(rebuilt.policy_ids(policy_kind))
        for id in sorted(ours - theirs):
            yield Problem(f"{label}: {what} {id} is in the engine, not in the database", rebuild=True)
        for id in sorted(theirs - ours):
            yield Problem(f"{label}: {what} {id} is in the database, not in the engine", rebuild=True)
        for id in sorted(ours & theirs):
            if live.policy(policy_kind, id) != rebuilt.policy(policy_kind, id):
                yield Problem(f"{label}: {what} {id}: its roles, semantic or type differ", rebuild=True)
            for member_kind in POLICY_FIELDS[policy_kind]:
                diff = _diff(
                    f"selected {_PLURAL[member_kind]}",
                    live.policy_members(policy_kind, id, member_kind),
                    rebuilt.policy_members(policy_kind, id, member_kind),
                )
                if diff:
                    yield Problem(f"{label}: {what} {id}: {diff}", rebuild=True)
    yield from _link_sets(live, rebuilt)


def _link_sets(live: PolicyGraph, rebuilt: PolicyGraph) -> Iterator[Problem]:
    """Dial/Bind services and edge routers of every identity, edge routers of every service
    (among the entities both graphs hold: the others are reported on their own)."""
    label = "policy engine"

    def common(kind: EntityKind) -> set[str]:
        return set(live.entity_ids(kind)) & set(rebuilt.entity_ids(kind))

    identities, services, routers = common(IDENTITY), common(SERVICE), common(EDGE_ROUTER)
    for id in sorted(identities):
        for policy_type in ("Dial", "Bind"):
            diff = _diff(
                f"{policy_type} services",
                services.intersection(live.services_for_identity(id, policy_type)),
                services.intersection(rebuilt.services_for_identity(id, policy_type)),
            )
            if diff:
                yield Problem(f"{label}: identity {id}: {diff}", rebuild=True, identities=(id,))
        diff = _diff(
            "edge routers",
            routers.intersection(live.edge_routers_for_identity(id)),
            routers.intersection(rebuilt.edge_routers_for_identity(id)),
        )
        if diff:
            yield Problem(f"{label}: identity {id}: {diff}", rebuild=True, identities=(id,))
    for id in sorted(services):
        diff = _diff(
            "edge routers",
            routers.intersection(live.edge_routers_for_service(id)),
            routers.intersection(rebuilt.edge_routers_for_service(id)),
        )
        if diff:
            yield Problem(f"{label}: service {id}: {diff}", rebuild=True)
