"""Access: the policy graph kept in step with the store, and the questions asked of it.

The graph is built from the store when the controller starts and updated by every committed
batch of changes (an ``Env`` listener that runs under the store's write lock, right after the
commit), so storage and engine never disagree. Queries answer with entities, not ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from engine.entities import Entity
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.errors import NotFoundError
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    EntityKind,
    EntityRow,
    PolicyGraph,
    PolicyKind,
    PolicyRow,
    UnknownEntityError,
    UnknownPolicyError,
)
from engine.ports import Change, Delete, Put, Store, StoreView

E = TypeVar("E", bound=Entity)

log = logging.getLogger("trellis.access")

ENTITY_KINDS: dict[str, tuple[EntityKind, type[Entity]]] = {
    Identity.ENTITY: (IDENTITY, Identity),
    Service.ENTITY: (SERVICE, Service),
    EdgeRouter.ENTITY: (EDGE_ROUTER, EdgeRouter),
    PostureCheck.ENTITY: (POSTURE_CHECK, PostureCheck),
}
POLICY_KINDS: dict[str, tuple[PolicyKind, type[Entity]]] = {
    ServicePolicy.ENTITY: (SERVICE_POLICY, ServicePolicy),
    EdgeRouterPolicy.ENTITY: (EDGE_ROUTER_POLICY, EdgeRouterPolicy),
    ServiceEdgeRouterPolicy.ENTITY: (SERVICE_EDGE_ROUTER_POLICY, ServiceEdgeRouterPolicy),
}
#: Entity class -> engine kind, for callers holding an entity class.
KIND_OF: dict[type[Entity], EntityKind | PolicyKind] = {
    cls: kind for kind, cls in (*ENTITY_KINDS.values(), *POLICY_KINDS.values())
}


def _attributes(entity: Entity) -> Sequence[str]:
    return getattr(entity, "role_attributes", ())


def _policy_row(policy: Entity) -> PolicyRow:
    return PolicyRow(
        id=policy.id,
        semantic=getattr(policy, "semantic", "AllOf"),
        type=getattr(policy, "type", None),
        identity_roles=getattr(policy, "identity_roles", ()),
        service_roles=getattr(policy, "service_roles", ()),
        edge_router_roles=getattr(policy, "edge_router_roles", ()),
        posture_check_roles=getattr(policy, "posture_check_roles", ()),
    )


def build_graph(store: StoreView) -> PolicyGraph:
    """The graph resolved from everything in ``store`` (the start-up bulk load)."""

    def rows(kind: type[Entity]) -> list[EntityRow]:
        return [EntityRow(e.id, _attributes(e)) for e in store.all(kind)]

    return PolicyGraph.build(
        identities=rows(Identity),
        services=rows(Service),
        edge_routers=rows(EdgeRouter),
        posture_checks=rows(PostureCheck),
        service_policies=[_policy_row(p) for p in store.all(ServicePolicy)],
        edge_router_policies=[_policy_row(p) for p in store.all(EdgeRouterPolicy)],
        service_edge_router_policies=[_policy_row(p) for p in store.all(ServiceEdgeRouterPolicy)],
    )


def apply_changes(graph: PolicyGraph, changes: Sequence[Change]) -> None:
    """Replay a committed batch on the graph (entities first, so ``@id`` roles resolve)."""
    for change in changes:
        if isinstance(change, Put) and change.entity.ENTITY in ENTITY_KINDS:
            kind = ENTITY_KINDS[change.entity.ENTITY][0]
            graph.upsert_entity(kind, change.entity.id, _attributes(change.entity))
    for change in changes:
        if isinstance(change, Put) and change.entity.ENTITY in POLICY_KINDS:
            row = _policy_row(change.entity)
            graph.upsert_policy(
                POLICY_KINDS[change.entity.ENTITY][0],
                row.id,
                semantic=row.semantic,
                type=row.type,
                identity_roles=row.identity_roles,
                service_roles=row.service_roles,
                edge_router_roles=row.edge_router_roles,
                posture_check_roles=row.posture_check_roles,
            )
    for change in changes:
        if not isinstance(change, Delete):
            continue
        name = change.kind.ENTITY
        if name in POLICY_KINDS and graph.has_policy(POLICY_KINDS[name][0], change.id):
            graph.remove_policy(POLICY_KINDS[name][0], change.id)
    for change in changes:
        if not isinstance(change, Delete):
            continue
        name = change.kind.ENTITY
        if name in ENTITY_KINDS and graph.has_entity(ENTITY_KINDS[name][0], change.id):
            graph.remove_entity(ENTITY_KINDS[name][0], change.id)


def touches_graph(changes: Sequence[Change]) -> bool:
    """Whether :func:`apply_changes` changes anything of the graph for this batch: an entity or
    a policy of a kind the graph holds is put or deleted."""
    for change in changes:
        name = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        if name in ENTITY_KINDS or name in POLICY_KINDS:
            return True
    return False


class GraphObserver(Protocol):
    """Sees each committed batch with the graph's state before and after it is applied."""

    def before(self, graph: PolicyGraph, changes: Sequence[Change]) -> Any: ...

    def after(self, graph: PolicyGraph, changes: Sequence[Change], before: Any) -> None: ...


@dataclass(frozen=True)
class Grant:
    """What an identity holds on one service: its permissions (``Bind``/``Dial``, sorted) and, per
    service policy granting them, the policy's type and posture check ids (§6)."""

    permissions: tuple[str, ...]
    posture: dict[str, tuple[str, tuple[str, ...]]]


NO_GRANT = Grant((), {})
#: How many (identity, service) grants :meth:`AccessManager.grants` keeps (then it starts afresh).
GRANTS_KEPT = 65536


@dataclass(frozen=True)
class AdviceResult:
    """Policy advice materialised while the graph was locked (plain values, safe to keep)."""

    is_dial_allowed: bool
    is_bind_allowed: bool
    identity_router_count: int
    service_router_count: int
    common_router_ids: tuple[str, ...]


class PolicyMembers(Collection[str]):
    """The entity ids one side of one policy selects, read from the live graph on each use:
    ``in`` is one bit test, ``len`` a bit count, and iterating lists the ids, sorted. A policy
    or entity the graph does not know (one deleted meanwhile) selects nothing."""

    __slots__ = ("_access", "_entity_kind", "_policy_id", "_policy_kind")

    def __init__(
        self, access: AccessManager, policy_kind: PolicyKind, policy_id: str, entity_kind: EntityKind
    ) -> None:
        self._access = access
        self._policy_kind = policy_kind
        self._policy_id = policy_id
        self._entity_kind = entity_kind

    def __contains__(self, entity_id: object) -> bool:
        if not isinstance(entity_id, str):
            return False
        with self._access._lock:
            graph = self._access._graph
            return graph.policy_selects(self._policy_kind, self._policy_id, self._entity_kind, entity_id)

    def __len__(self) -> int:
        with self._access._lock:
            return self._access._graph.policy_member_count(
                self._policy_kind, self._policy_id, self._entity_kind
            )

    def __iter__(self) -> Iterator[str]:
        with self._access._lock:
            graph = self._access._graph
            if not graph.has_policy(self._policy_kind, self._policy_id):
                return iter(())
            return iter(graph.policy_members(self._policy_kind, self._policy_id, self._entity_kind))


class AccessManager:
    """Reachability, provenance and advice over the live graph, answered with entities.

    The graph is not thread-safe (its caches fill on read), and gunicorn's gthread worker runs
    requests concurrently: every use of the graph holds ``self._lock``. Graph operations take
    microseconds to a few milliseconds, so one lock costs little next to a request.
    """

    def __init__(self, store: Store, graph: PolicyGraph | None = None) -> None:
        self.store = store
        self._lock = threading.RLock()
        self._graph = graph if graph is not None else build_graph(store)
        #: The store's revision the graph is at (the last batch it took).
        self._revision = store.last_seq
        #: :meth:`grants`' answers by (identity id, service id) for the graph as it is: emptied
        #: (under the lock) whenever the graph changes or is replaced.
        self._grants: dict[tuple[str, str], Grant] = {}
        self._observers: list[GraphObserver] = []

    def observe(self, observer: GraphObserver) -> None:
        """Show ``observer`` the graph before and after every committed batch (under the lock)."""
        self._observers.append(observer)

    def on_commit(self, changes: list[Change]) -> None:
        """Apply a committed batch; should that ever fail, rebuild from storage (the truth)."""
        with self._lock:
            seen: list[tuple[GraphObserver, Any]] = []
            for observer in self._observers:
                try:
                    seen.append((observer, observer.before(self._graph, changes)))
                except Exception:
                    log.exception("graph observer failed before a batch")
            try:
                apply_changes(self._graph, changes)
            except Exception:
                log.exception("policy graph update failed; rebuilding it from storage")
                self._graph = build_graph(self.store)
                self._grants = {}
            self._revision = self.store.last_seq
            if touches_graph(changes):  # (a batch of sessions, say, leaves every grant as it was)
                self._grants = {}
            for observer, state in seen:
                try:
                    observer.after(self._graph, changes, state)
                except Exception:
                    log.exception("graph observer failed after a batch")

    @contextmanager
    def _query(self) -> Iterator[None]:
        """Hold the graph lock; an entity removed since the store read is simply not found."""
        with self._lock:
            try:
                yield
            except (UnknownEntityError, UnknownPolicyError):
                raise NotFoundError() from None

    @contextmanager
    def reading(self) -> Iterator[tuple[PolicyGraph, int]]:
        """The live graph and the store revision it is at, held still for the duration (its lock
        is held: no batch is applied meanwhile). Only read it, and keep nothing of it past the
        block; take other managers' locks (posture, ...) before, never inside."""
        with self._lock:
            yield self._graph, self._revision

    def snapshot(self) -> PolicyGraph:
        """An independent copy of the graph, for analysis or what-if evaluation."""
        with self._lock:
            return self._graph.copy()

    def rebuild(self) -> None:
        """Replace the graph by one resolved afresh from the store (a data integrity fix).

        Call it under the store's write lock, so that no batch lands between the read and the swap.
        """
        graph = build_graph(self.store)
        with self._lock:
            self._graph = graph
            self._revision = self.store.last_seq
            self._grants = {}

    # -- helpers -------------------------------------------------------------------------------
    def _load(self, kind: type[E], ids: Sequence[str]) -> list[E]:
        get = self.store.get
        return [e for i in ids if (e := get(kind, i)) is not None]

    def load(self, kind: type[E], ids: Sequence[str]) -> list[E]:
        """The entities of ``kind`` and ``ids`` that exist, in that order."""
        return self._load(kind, ids)

    def _require(self, kind: type[E], id: str) -> E:
        entity = self.store.get(kind, id)
        if entity is None:
            raise NotFoundError()
        return entity

    # -- identity ------------------------------------------------------------------------------
    def services_of_identity(self, identity_id: str, policy_type: str | None = None) -> list[Service]:
        return self._load(Service, self.service_ids_of_identity(identity_id, policy_type))

    def service_ids_of_identity(self, identity_id: str, policy_type: str | None = None) -> list[str]:
        """The ids of :meth:`services_of_identity`, sorted, nothing loaded (a list pages them)."""
        self._require(Identity, identity_id)
        with self._query():
            return self._graph.services_for_identity(identity_id, policy_type)

    def services(self, ids: Sequence[str]) -> list[Service]:
        """The services of ``ids`` that exist, in that order."""
        return self._load(Service, ids)

    def edge_routers_of_identity(self, identity_id: str) -> list[EdgeRouter]:
        self._require(Identity, identity_id)
        with self._query():
            ids = self._graph.edge_routers_for_identity(identity_id)
        return self._load(EdgeRouter, ids)

    # -- service -------------------------------------------------------------------------------
    def identities_of_service(self, service_id: str, policy_type: str | None = None) -> list[Identity]:
        self._require(Service, service_id)
        with self._query():
            ids = self._graph.identities_for_service(service_id, policy_type)
        return self._load(Identity, ids)

    def edge_routers_of_service(self, service_id: str) -> list[EdgeRouter]:
        self._require(Service, service_id)
        with self._query():
            ids = self._graph.edge_routers_for_service(service_id)
        return self._load(EdgeRouter, ids)

    # -- edge router ---------------------------------------------------------------------------
    def identities_of_edge_router(self, router_id: str) -> list[Identity]:
        self._require(EdgeRouter, router_id)
        with self._query():
            ids = self._graph.identities_for_edge_router(router_id)
        return self._load(Identity, ids)

    def services_of_edge_router(self, router_id: str) -> list[Service]:
        self._require(EdgeRouter, router_id)
        with self._query():
            ids = self._graph.services_for_edge_router(router_id)
        return self._load(Service, ids)

    # -- policies ------------------------------------------------------------------------------
    def policies_of(self, entity_kind: type[Entity], entity_id: str, policy_kind: type[E]) -> list[E]:
        """The policies of ``policy_kind`` whose roles select the entity."""
        self._require(entity_kind, entity_id)
        kind = ENTITY_KINDS[entity_kind.ENTITY][0]
        with self._query():
            ids = self._graph.policies_for_entity(kind, entity_id, POLICY_KINDS[policy_kind.ENTITY][0])
        return self._load(policy_kind, ids)

    def members_of(self, policy_kind: type[Entity], policy_id: str, member_kind: type[E]) -> list[E]:
        """The entities of ``member_kind`` a policy's roles select."""
        self._require(policy_kind, policy_id)
        with self._query():
            ids = self._graph.policy_members(
                POLICY_KINDS[policy_kind.ENTITY][0], policy_id, ENTITY_KINDS[member_kind.ENTITY][0]
            )
        return self._load(member_kind, ids)

    def member_ids(
        self, policy_kind: type[Entity], policy_id: str, member_kind: type[Entity]
    ) -> PolicyMembers:
        """The ids of the entities of ``member_kind`` a policy's roles select, asked of the graph
        only when used (a filter's ``anyOf(identities) = "x"`` over every policy tests one bit
        per policy instead of listing each one's members)."""
        return PolicyMembers(
            self, POLICY_KINDS[policy_kind.ENTITY][0], policy_id, ENTITY_KINDS[member_kind.ENTITY][0]
        )

    # -- lists ---------------------------------------------------------------------------------
    def role_filter(self, kind: type[Entity], roles: Sequence[str], semantic: str) -> set[str]:
        """Ids of the entities a list's ``roleFilter`` selects (docs/policy.md §1.5)."""
        with self._lock:
            return set(self._graph.role_filter(ENTITY_KINDS[kind.ENTITY][0], roles, semantic))

    def attribute_names(self, kind: type[Entity]) -> list[str]:
        """The distinct role attributes carried by entities of ``kind``, sorted."""
        with self._lock:
            return self._graph.attribute_names(ENTITY_KINDS[kind.ENTITY][0])

    # -- answers -------------------------------------------------------------------------------
    def permissions(self, identity_id: str, service_id: str) -> list[str]:
        """``Bind``/``Dial`` the identity holds on the service (sorted, as OpenZiti lists them).

        Nothing when either is unknown to the graph: a list read the service (or identity) just
        before another request deleted it, and renders it as it was.
        """
        with self._lock:
            if not self._graph.has_entity(IDENTITY, identity_id) or not self._graph.has_entity(
                SERVICE, service_id
            ):
                return []
            return sorted(self._graph.permissions(identity_id, service_id))

    def service_for_identity(self, identity_id: str, service_id: str | None) -> tuple[Service, list[str]]:
        """The service and the identity's permissions on it, as OpenZiti's ``ReadForIdentity``:
        ``NOT_FOUND`` when the service is missing or the identity may neither Dial nor Bind it
        (docs/policy.md §5.1; the client API, sessions and terminators share this rule)."""
        service = self.store.get(Service, service_id) if service_id else None
        permissions = self.permissions(identity_id, service.id) if service is not None else []
        if service is None or not permissions:
            raise NotFoundError()
        return service, permissions

    def usable_edge_routers(self, identity: Identity) -> list[EdgeRouter]:
        """``/current-identity/edge-routers`` (§5.3): verified routers an edge router policy gives
        the identity; every verified router for an admin."""
        if identity.is_admin:
            routers = self.store.all(EdgeRouter)
        else:
            with self._query():
                ids = self._graph.edge_routers_for_identity(identity.id)
            routers = self._load(EdgeRouter, ids)
        return sorted((r for r in routers if r.is_verified), key=lambda r: r.id)

    def common_edge_routers(self, identity_id: str, service_id: str) -> list[EdgeRouter]:
        """Edge routers an edge router policy gives the identity and a service edge router policy
        gives the service (sessions' routers, §5.2), sorted by id; none when either is unknown."""
        with self._lock:
            if not (
                self._graph.has_entity(IDENTITY, identity_id) and self._graph.has_entity(SERVICE, service_id)
            ):
                return []
            ids = self._graph.common_edge_routers(identity_id, service_id)
        return self._load(EdgeRouter, ids)

    def posture_checks_for(
        self, identity_id: str, service_id: str, policy_type: str
    ) -> dict[str, tuple[str, ...]]:
        """Per service policy of ``policy_type`` linking the pair, its posture check ids (§6)."""
        with self._lock:
            if not (
                self._graph.has_entity(IDENTITY, identity_id) and self._graph.has_entity(SERVICE, service_id)
            ):
                return {}
            return self._graph.posture_checks_for(identity_id, service_id, policy_type)

    def grants(self, identity_id: str, service_ids: Iterable[str]) -> dict[str, Grant]:
        """:meth:`permissions` and :meth:`posture_policies` of many services under one hold of the
        lock (a list's page: per-service calls from many request threads queue on the lock)."""
        out: dict[str, Grant] = {}
        with self._lock:
            kept = self._grants
            graph = self._graph
            known: bool | None = None
            for service_id in service_ids:
                key = (identity_id, service_id)
                grant = kept.get(key)
                if grant is None:
                    if known is None:
                        known = graph.has_entity(IDENTITY, identity_id)
                    if known and graph.has_entity(SERVICE, service_id):
                        grant = Grant(*graph.grant(identity_id, service_id))
                    else:
                        grant = NO_GRANT
                    if len(kept) >= GRANTS_KEPT:
                        kept.clear()
                    kept[key] = grant
                out[service_id] = grant
        return out

    def posture_gated_services(self) -> list[str]:
        """The services whose sessions posture can end (:meth:`PolicyGraph.posture_gated_services`)."""
        with self._lock:
            return self._graph.posture_gated_services()

    def has_posture_checks(self) -> bool:
        """Whether any posture check exists (none: posture is not evaluated at all, §6)."""
        with self._lock:
            return self._graph.size(POSTURE_CHECK) > 0

    def advice(self, identity_id: str, service_id: str) -> tuple[Identity, Service, AdviceResult]:
        identity = self._require(Identity, identity_id)
        service = self._require(Service, service_id)
        with self._query():
            advice = self._graph.advice(identity_id, service_id)
            result = AdviceResult(
                is_dial_allowed=advice.is_dial_allowed,
                is_bind_allowed=advice.is_bind_allowed,
                identity_router_count=advice.identity_router_count,
                service_router_count=advice.service_router_count,
                common_router_ids=advice.common_router_ids,
            )
        return identity, service, result
