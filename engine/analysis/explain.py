"""Why an identity may or may not Dial/Bind a service, or reach an edge router (docs/analysis.md §2).

:func:`explain_service` builds on :func:`engine.policy.explain.explain` (granting service policies
with the role entries that matched on each side, and the nearest policy misses) and adds what a
session and a connection also need:

- the **routers**: every edge router both an edge router policy gives the identity and a service
  edge router policy gives the service, with the policies that give it on each side and whether
  the router is online now;
- **posture**: for each granting policy, its posture checks and whether the identity's current
  posture data passes each (docs/policy.md §6: OR over policies, AND within one; a policy with no
  check passes; with no posture check in the system nothing is evaluated);
- whether the identity is disabled.

``allowed`` is all of them: a granting policy, posture passing for one of them, a common router,
one of those online, the identity not disabled. On a denial the **misses** name each missing piece
and are ranked by how much must change (``cost``: attributes to add, checks to pass; 1 for a
router to bring online or a policy of the other type), then by kind and policy id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityKind,
    PolicyGraph,
    PolicyKind,
)
from engine.policy.bitset import select
from engine.policy.explain import explain as policy_explain
from engine.policy.model import normalize_type
from engine.policy.selector import Selector, Semantic

__all__ = [
    "GrantPath",
    "Miss",
    "PostureVerdict",
    "RouterExplanation",
    "RouterGrant",
    "RouterPath",
    "ServiceExplanation",
    "explain_router",
    "explain_service",
]

#: Misses of equal cost are listed in this order of kind.
KIND_ORDER = (
    "identity-disabled",
    "attribute",
    "policy-type",
    "no-policy",
    "posture",
    "router-attribute",
    "no-common-router",
    "router-offline",
)

Names = Callable[[str, str], str]
"""(engine kind, id) -> what to call it in a message (the name, or the id)."""


def _ids(kind: str, entity_id: str) -> str:
    return entity_id


@dataclass(frozen=True)
class PostureVerdict:
    """One posture check against the identity's current posture data."""

    check_id: str
    passes: bool
    #: What fails, in words ("" when it passes).
    what: str = ""


@dataclass(frozen=True)
class GrantPath:
    """A service policy granting the pair: the roles that matched on each side, its posture."""

    policy_id: str
    semantic: str
    identity_roles: tuple[str, ...]
    service_roles: tuple[str, ...]
    posture: tuple[PostureVerdict, ...]

    @property
    def posture_passes(self) -> bool:
        return all(v.passes for v in self.posture)


@dataclass(frozen=True)
class RouterPath:
    """A router common to the identity and the service, with the policies that give it."""

    router_id: str
    online: bool
    edge_router_policies: tuple[str, ...]
    service_edge_router_policies: tuple[str, ...]


@dataclass(frozen=True)
class Miss:
    """One missing piece, and what would supply it."""

    kind: str
    cost: int
    message: str
    policy_kind: str | None = None
    policy_id: str | None = None
    #: Whose attributes are missing (``identity``, ``service``, ``edge-router``).
    entity: str | None = None
    missing: tuple[str, ...] = ()
    #: True: any one of ``missing`` suffices; False: all are needed.
    any_of: bool = False

    def key(self) -> tuple[int, int, str, str]:
        return (self.cost, KIND_ORDER.index(self.kind), self.policy_id or "", self.message)


@dataclass(frozen=True)
class ServiceExplanation:
    """The answer of :func:`explain_service`."""

    identity_id: str
    service_id: str
    type: str
    allowed: bool
    policy: bool
    posture: bool
    common_router: bool
    online_router: bool
    identity_disabled: bool
    grants: tuple[GrantPath, ...]
    routers: tuple[RouterPath, ...]
    identity_routers: tuple[str, ...]
    service_routers: tuple[str, ...]
    misses: tuple[Miss, ...]


@dataclass(frozen=True)
class RouterGrant:
    """An edge router policy linking an identity and a router, with what matched on each side."""

    policy_id: str
    semantic: str
    identity_roles: tuple[str, ...]
    router_roles: tuple[str, ...]


@dataclass(frozen=True)
class RouterExplanation:
    """The answer of :func:`explain_router`."""

    identity_id: str
    router_id: str
    allowed: bool
    policy: bool
    online: bool
    identity_disabled: bool
    grants: tuple[RouterGrant, ...]
    misses: tuple[Miss, ...]


# -- role matching --------------------------------------------------------------------------------


def matched_roles(
    selector: Selector, semantic: Semantic, entity_id: str, attributes: frozenset[str]
) -> tuple[str, ...]:
    """The role entries of one side that select an entity, as written: ``#all``, ``@<id>``, ``#attr``."""
    found: list[str] = []
    if selector.all:
        found.append("#all")
    if entity_id in selector.ids:
        found.append(f"@{entity_id}")
    found.extend(f"#{a}" for a in sorted(selector.matched_attributes(semantic, attributes)))
    return tuple(found)


def missing_attributes(
    selector: Selector, semantic: Semantic, attributes: frozenset[str]
) -> tuple[tuple[str, ...], bool] | None:
    """What an entity with ``attributes`` must add to be selected by attribute: (attributes, any
    one suffices); None when attributes cannot help (``#all`` / ``@id`` only / invalid semantic)
    or it is selected already."""
    if selector.all or not selector.attributes or semantic == "none":
        return None
    if semantic == "allof":
        missing = selector.attributes - attributes
        return (tuple(sorted(missing)), False) if missing else None
    if selector.attributes & attributes:
        return None
    return tuple(sorted(selector.attributes)), True


def _lacks(whose: str, name: str, missing: Sequence[str], any_of: bool) -> str:
    listed = ", ".join(f"#{a}" for a in missing)
    if any_of and len(missing) > 1:
        return f"{whose} {name} lacks one of the attributes {listed}"
    plural = "attributes" if len(missing) > 1 else "attribute"
    return f"{whose} {name} lacks {plural} {listed}"


# -- identity, service, type ----------------------------------------------------------------------


def explain_service(
    graph: PolicyGraph,
    identity_id: str,
    service_id: str,
    type: str,
    *,
    online: Callable[[str], bool],
    posture: Callable[[Sequence[str]], Mapping[str, PostureVerdict]],
    identity_disabled: bool = False,
    names: Names = _ids,
    max_misses: int = 10,
) -> ServiceExplanation:
    """Why ``identity_id`` may (or may not) ``type`` ``service_id``; see the module docstring.

    ``online(router_id)`` says whether a router is connected now; ``posture(check_ids)`` evaluates
    checks against the identity's current posture data. Both entities must exist in ``graph``
    (``UnknownEntityError`` otherwise).
    """
    policy_type = normalize_type(type)
    base = policy_explain(graph, identity_id, service_id, policy_type, max_misses=max_misses)
    identity_attributes = graph.entity_attributes(IDENTITY, identity_id)
    service_attributes = graph.entity_attributes(SERVICE, service_id)
    evaluate_posture = graph.size(POSTURE_CHECK) > 0
    checks_of = graph.posture_checks_for(identity_id, service_id, policy_type) if base.grants else {}
    verdicts: Mapping[str, PostureVerdict] = {}
    if evaluate_posture:
        wanted = sorted({c for ids in checks_of.values() for c in ids})
        verdicts = posture(wanted) if wanted else {}
    grants: list[GrantPath] = []
    for grant in base.grants:
        identity_selector, semantic = graph.selector(SERVICE_POLICY, grant.policy_id, IDENTITY)
        service_selector, _ = graph.selector(SERVICE_POLICY, grant.policy_id, SERVICE)
        checks = checks_of.get(grant.policy_id, ()) if evaluate_posture else ()
        grants.append(
            GrantPath(
                grant.policy_id,
                graph.policy(SERVICE_POLICY, grant.policy_id).semantic,
                matched_roles(identity_selector, semantic, identity_id, identity_attributes),
                matched_roles(service_selector, semantic, service_id, service_attributes),
                tuple(verdicts.get(c, PostureVerdict(c, False, "not evaluated")) for c in checks),
            )
        )
    identity_routers = tuple(graph.edge_routers_for_identity(identity_id))
    service_routers = tuple(graph.edge_routers_for_service(service_id))
    common = sorted(set(identity_routers) & set(service_routers))
    routers = _router_paths(graph, identity_id, service_id, common, online)
    has_policy = bool(grants)
    posture_ok = has_policy and any(g.posture_passes for g in grants)
    has_router = bool(routers)
    has_online = any(r.online for r in routers)
    allowed = has_policy and posture_ok and has_router and has_online and not identity_disabled

    misses: list[Miss] = []
    identity_name = names(IDENTITY, identity_id)
    service_name = names(SERVICE, service_id)
    if identity_disabled:
        misses.append(Miss("identity-disabled", 1, f"identity {identity_name} is disabled", entity=IDENTITY))
    if not has_policy:
        for miss in base.misses:
            whose, name = (
                ("identity", identity_name) if miss.side == "identity" else ("service", service_name)
            )
            text = _lacks(whose, name, miss.missing_attributes, miss.any_of)
            policy_name = names(SERVICE_POLICY, miss.policy_id)
            misses.append(
                Miss(
                    "attribute",
                    miss.cost,
                    f"{text} (service policy {policy_name} would grant {policy_type})",
                    SERVICE_POLICY,
                    miss.policy_id,
                    IDENTITY if miss.side == "identity" else SERVICE,
                    miss.missing_attributes,
                    miss.any_of,
                )
            )
        other = "Bind" if policy_type == "Dial" else "Dial"
        for policy_id in graph.link_policies(identity_id, service_id, other):
            misses.append(
                Miss(
                    "policy-type",
                    1,
                    f"service policy {names(SERVICE_POLICY, policy_id)} grants {other}, not {policy_type}",
                    SERVICE_POLICY,
                    policy_id,
                )
            )
        if not any(m.kind in ("attribute", "policy-type") for m in misses):
            misses.append(
                Miss(
                    "no-policy",
                    1,
                    f"no {policy_type} service policy could select identity {identity_name} and "
                    f"service {service_name} by their attributes: a policy must be created or changed",
                    SERVICE_POLICY,
                )
            )
    elif not posture_ok:
        for path in grants:
            failing = [v for v in path.posture if not v.passes]
            text = "; ".join(
                f"posture check {names(POSTURE_CHECK, v.check_id)} fails: {v.what}" for v in failing
            )
            misses.append(
                Miss(
                    "posture",
                    len(failing),
                    f"{text} (service policy {names(SERVICE_POLICY, path.policy_id)})",
                    SERVICE_POLICY,
                    path.policy_id,
                    missing=tuple(v.check_id for v in failing),
                )
            )
    if not has_router:
        misses.extend(
            _router_misses(graph, identity_id, service_id, identity_routers, service_routers, names)
        )
    elif not has_online:
        offline = ", ".join(names(EDGE_ROUTER, r.router_id) for r in routers)
        misses.append(Miss("router-offline", 1, f"no common router online: {offline} offline"))
    misses.sort(key=Miss.key)
    return ServiceExplanation(
        identity_id,
        service_id,
        policy_type,
        allowed,
        has_policy,
        posture_ok,
        has_router,
        has_online,
        identity_disabled,
        tuple(grants),
        routers,
        identity_routers,
        service_routers,
        tuple(misses[:max_misses]),
    )


def _router_paths(
    graph: PolicyGraph,
    identity_id: str,
    service_id: str,
    common: Sequence[str],
    online: Callable[[str], bool],
) -> tuple[RouterPath, ...]:
    """Each common router with the edge router policies linking it to the identity and the
    service edge router policies linking it to the service (as ``edge_router_link_policies`` and
    ``service_edge_router_link_policies`` name them): one AND of policy bitsets per router and
    side, each distinct set of policies named once (routers mostly share them)."""
    sides: list[tuple[PolicyKind, int, Sequence[str | None]]] = []
    pairs: tuple[tuple[PolicyKind, EntityKind, str], ...] = (
        (EDGE_ROUTER_POLICY, IDENTITY, identity_id),
        (SERVICE_EDGE_ROUTER_POLICY, SERVICE, service_id),
    )
    for kind, entity_kind, entity_id in pairs:
        sides.append(
            (kind, graph.entity_policy_bits(kind, entity_kind, entity_id), graph.policy_slot_ids(kind))
        )
    named: dict[tuple[str, int], tuple[str, ...]] = {}
    out = []
    for router_id in common:
        found = []
        for kind, links, ids in sides:
            policies = links & graph.entity_policy_bits(kind, EDGE_ROUTER, router_id)
            key = (kind, policies)
            names_ = named.get(key)
            if names_ is None:
                names_ = named[key] = tuple(sorted(str(p) for p in select(policies, ids)))
            found.append(names_)
        out.append(RouterPath(router_id, online(router_id), found[0], found[1]))
    return tuple(out)


def _router_misses(
    graph: PolicyGraph,
    identity_id: str,
    service_id: str,
    identity_routers: Iterable[str],
    service_routers: Iterable[str],
    names: Names,
) -> list[Miss]:
    """Edge router policies that would give the identity one of the service's routers, and
    service edge router policies that would give the service one of the identity's, if the
    identity (the service) carried more attributes; and the plain statement of the gap."""
    out: list[Miss] = []
    theirs, mine = set(service_routers), set(identity_routers)
    identity_name, service_name = names(IDENTITY, identity_id), names(SERVICE, service_id)
    sides: tuple[tuple[PolicyKind, EntityKind, str, set[str], str, str, str], ...] = (
        (EDGE_ROUTER_POLICY, IDENTITY, identity_id, theirs, "identity", identity_name, "service"),
        (SERVICE_EDGE_ROUTER_POLICY, SERVICE, service_id, mine, "service", service_name, "identity"),
    )
    for policy_kind, entity_kind, entity_id, wanted, whose, name, other in sides:
        if not wanted:
            continue
        attributes = graph.entity_attributes(entity_kind, entity_id)
        for policy_id in graph.policy_ids(policy_kind):
            if graph.policy_selects(policy_kind, policy_id, entity_kind, entity_id):
                continue
            reachable = wanted.intersection(graph.policy_members(policy_kind, policy_id, EDGE_ROUTER))
            if not reachable:
                continue
            selector, semantic = graph.selector(policy_kind, policy_id, entity_kind)
            found = missing_attributes(selector, semantic, attributes)
            if found is None:
                continue
            missing, any_of = found
            routers = ", ".join(names(EDGE_ROUTER, r) for r in sorted(reachable))
            label = policy_kind.replace("-", " ")
            out.append(
                Miss(
                    "router-attribute",
                    1 if any_of else len(missing),
                    f"{_lacks(whose, name, missing, any_of)} ({label} {names(policy_kind, policy_id)} "
                    f"would give it {routers}, which the {other} has)",
                    policy_kind,
                    policy_id,
                    entity_kind,
                    missing,
                    any_of,
                )
            )
    out.append(
        Miss(
            "no-common-router",
            1,
            f"no common router: no edge router is given to identity {identity_name} by an edge router "
            f"policy and to service {service_name} by a service edge router policy",
        )
    )
    return out


# -- identity, router -----------------------------------------------------------------------------


def explain_router(
    graph: PolicyGraph,
    identity_id: str,
    router_id: str,
    *,
    online: bool,
    identity_disabled: bool = False,
    names: Names = _ids,
    max_misses: int = 10,
) -> RouterExplanation:
    """Why ``identity_id`` may (or may not) use edge router ``router_id``: the edge router policies
    linking them, the router online, the identity not disabled; misses as for services."""
    identity_attributes = graph.entity_attributes(IDENTITY, identity_id)
    router_attributes = graph.entity_attributes(EDGE_ROUTER, router_id)
    grants: list[RouterGrant] = []
    for policy_id in graph.edge_router_link_policies(identity_id, router_id):
        identity_selector, semantic = graph.selector(EDGE_ROUTER_POLICY, policy_id, IDENTITY)
        router_selector, _ = graph.selector(EDGE_ROUTER_POLICY, policy_id, EDGE_ROUTER)
        grants.append(
            RouterGrant(
                policy_id,
                graph.policy(EDGE_ROUTER_POLICY, policy_id).semantic,
                matched_roles(identity_selector, semantic, identity_id, identity_attributes),
                matched_roles(router_selector, semantic, router_id, router_attributes),
            )
        )
    misses: list[Miss] = []
    identity_name, router_name = names(IDENTITY, identity_id), names(EDGE_ROUTER, router_id)
    if identity_disabled:
        misses.append(Miss("identity-disabled", 1, f"identity {identity_name} is disabled", entity=IDENTITY))
    if not grants:
        by_identity = set(graph.policies_for_entity(IDENTITY, identity_id, EDGE_ROUTER_POLICY))
        by_router = set(graph.policies_for_entity(EDGE_ROUTER, router_id, EDGE_ROUTER_POLICY))
        checks: tuple[tuple[set[str], EntityKind, frozenset[str], str, str], ...] = (
            (by_router - by_identity, IDENTITY, identity_attributes, "identity", identity_name),
            (by_identity - by_router, EDGE_ROUTER, router_attributes, "edge router", router_name),
        )
        for policy_ids, entity_kind, attributes, whose, name in checks:
            for policy_id in sorted(policy_ids):
                selector, semantic = graph.selector(EDGE_ROUTER_POLICY, policy_id, entity_kind)
                found = missing_attributes(selector, semantic, attributes)
                if found is None:
                    continue
                missing, any_of = found
                misses.append(
                    Miss(
                        "attribute",
                        1 if any_of else len(missing),
                        f"{_lacks(whose, name, missing, any_of)} "
                        f"(edge router policy {names(EDGE_ROUTER_POLICY, policy_id)} would link them)",
                        EDGE_ROUTER_POLICY,
                        policy_id,
                        entity_kind,
                        missing,
                        any_of,
                    )
                )
        if not any(m.kind == "attribute" for m in misses):
            misses.append(
                Miss(
                    "no-policy",
                    1,
                    f"no edge router policy could link identity {identity_name} and edge router "
                    f"{router_name} by their attributes: a policy must be created or changed",
                    EDGE_ROUTER_POLICY,
                )
            )
    if not online:
        misses.append(Miss("router-offline", 1, f"edge router {router_name} is offline"))
    misses.sort(key=Miss.key)
    allowed = bool(grants) and online and not identity_disabled
    return RouterExplanation(
        identity_id,
        router_id,
        allowed,
        bool(grants),
        online,
        identity_disabled,
        tuple(grants),
        tuple(misses[:max_misses]),
    )
