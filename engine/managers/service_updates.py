"""When each identity's service list last changed: ``GET /current-api-session/service-updates``.

SDKs poll ``lastChangeAt`` and list their services again when it moves, so it must move exactly
when what the identity would list changes (OpenZiti's ``IdentityRefreshMap``, fed by its service
events, docs/policy.md §3.3):

- a service appears in or leaves the identity's list, or its ``permissions`` change (Dial or Bind
  gained or lost: a pair's last linking policy of a type goes, or its first comes);
- a service in the list is created, updated or deleted, or a config it uses is updated or
  deleted, or a posture check its policies use changes, or a policy's posture checks change;
- the identity's own service-config overrides change.

Edge router policies and service edge router policies change no service list (OpenZiti emits no
service event for them), nor do other identities' changes.

The tracker observes every committed batch on the policy graph (:meth:`AccessManager.observe`):
``before`` notes what the batch may change while the graph still holds the old state, ``after``
compares. A service policy change is checked per service it selected before or after: an
identity whose pair with the service entered or left the policy's product changed iff no other
policy of that type links the pair (pair by pair for a few candidates, by one set difference
against the other policies' members for many). A change whose candidates exceed
:data:`PAIR_BUDGET` pairs over more than :data:`SERVICE_BUDGET` services (an ``#all`` policy
swapping many services) marks every candidate instead: a few spare refreshes, never a missed one.

Times live in memory, as OpenZiti's do: after a restart every session falls back to the
controller's start time, so clients refresh once.

**Several processes on one database** (the store's :class:`~engine.ports.CommitTimes` shared):
a client polling may reach any of them, so every process must answer the same time for the same
history, and never less than another answered. A mark is then the batch's number (the same
everywhere), dated by the batch's commit time as the change log holds it; a posture change is
dated by the posture data's own times (shared with the data); and the least answer is the
store's epoch, when the latest process started (what a process knows of changes before its
start is lost, so each raises the epoch to its start and all answer no less: as after one
controller's restart, clients refresh once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.entities.identities import ApiSession, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.services import Config, Service
from engine.policy import IDENTITY, POSTURE_CHECK, SERVICE, SERVICE_POLICY, PolicyGraph
from engine.ports import Change, Clock, CommitTimes, Delete, LocalCommitTimes, Put, Store

#: A service policy change touching more candidate pairs than this, over more services than
#: :data:`SERVICE_BUDGET`, marks every candidate identity instead of checking each.
PAIR_BUDGET = 50_000
SERVICE_BUDGET = 200
#: Up to this many candidates of one service are checked pair by pair; more, by set difference.
PAIR_CHECKS = 64
TYPES = ("Dial", "Bind")


@dataclass
class _PolicyState:
    type: str
    identities: frozenset[str]
    services: frozenset[str]
    posture_checks: frozenset[str] = frozenset()


@dataclass
class _Before:
    policies: dict[str, _PolicyState | None] = field(default_factory=dict)
    identity_services: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    service_identities: dict[str, frozenset[str]] = field(default_factory=dict)
    posture_identities: set[str] = field(default_factory=set)


def _override_signature(identity: Identity) -> Any:
    """A comparable form of the identity's service-config overrides (None when it has none)."""
    if not identity.service_configs:
        return None
    return tuple(
        sorted(
            (service, tuple(sorted(by_type.items()))) for service, by_type in identity.service_configs.items()
        )
    )


class ServiceUpdates:
    """The per-identity ``lastChangeAt`` marks, kept by observing the policy graph's batches."""

    def __init__(self, store: Store, clock: Clock, times: CommitTimes | None = None) -> None:
        self.store = store
        self.clock = clock
        self.started_at = clock.now()
        self.times: CommitTimes = times if times is not None else LocalCommitTimes()
        self._changed: dict[str, datetime] = {}
        #: Shared times: each identity's last batch mark (its ``seq``, and this process's time
        #: of it should the batch's time not be told) and its last posture change's time.
        self._batches: dict[str, tuple[int, datetime]] = {}
        self._posture: dict[str, datetime] = {}
        #: Shared times: the least this process answers, its start (the store's clock).
        self._floor: datetime | None = None
        if self.times.shared:
            started = self.times.started()
            self._floor = started if started is not None else self.started_at
        self._lock = threading.Lock()
        self._overrides: dict[str, Any] = {}
        for identity in store.all(Identity):
            signature = _override_signature(identity)
            if signature is not None:
                self._overrides[identity.id] = signature

    # -- queries -----------------------------------------------------------------------------------
    def last_change_at(self, session: ApiSession) -> datetime:
        """The identity's last mark; else when the session began, but never before our start.

        Shared times: the latest of the batch mark's commit time, the posture change's time,
        the session's start and the epoch (:class:`~engine.ports.CommitTimes`)."""
        identity_id = session.identity_id
        if not self.times.shared:
            with self._lock:
                marked = self._changed.get(identity_id)
            if marked is not None:
                return marked
            return max(session.created_at, self.started_at)
        with self._lock:
            batch = self._batches.get(identity_id)
            posture = self._posture.get(identity_id)
        candidates = [session.created_at, self._floor, self.times.epoch(), posture]
        if batch is not None:
            committed = self.times.at(batch[0])
            candidates.append(committed if committed is not None else batch[1])
        return max(at for at in candidates if at is not None)

    def mark(self, identity_ids: Iterable[str]) -> None:
        """The identities' lists changed with the batch just published (shared times: dated by
        it), else now."""
        now = self.clock.now()
        if self.times.shared:
            seq = self.store.last_seq
            with self._lock:
                for identity_id in identity_ids:
                    self._batches[identity_id] = (seq, now)
            return
        with self._lock:
            for identity_id in identity_ids:
                self._changed[identity_id] = now

    def posture_changed(self, identity_id: str, at: datetime | None) -> None:
        """The identity's posture data changed, last at ``at`` as the data says (shared times:
        every process holds the same data); now if it says nothing, or the times are local."""
        if not self.times.shared:
            self.mark([identity_id])
        else:
            self._mark_posture(identity_id, at if at is not None else self.clock.now())

    def _mark_posture(self, identity_id: str, at: datetime) -> None:
        with self._lock:
            held = self._posture.get(identity_id)
            if held is None or at > held:
                self._posture[identity_id] = at

    # -- graph observer ----------------------------------------------------------------------------
    def before(self, graph: PolicyGraph, changes: Sequence[Change]) -> _Before:
        state = _Before()
        for change in changes:
            entity_kind = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
            entity_id = change.entity.id if isinstance(change, Put) else change.id
            if entity_kind == ServicePolicy.ENTITY:
                state.policies[entity_id] = _policy_state(graph, entity_id)
            elif entity_kind == Identity.ENTITY and isinstance(change, Put):
                if graph.has_entity(IDENTITY, entity_id):
                    state.identity_services[entity_id] = {
                        t: frozenset(graph.services_for_identity(entity_id, t)) for t in TYPES
                    }
            elif entity_kind == Service.ENTITY:
                if graph.has_entity(SERVICE, entity_id):
                    state.service_identities[entity_id] = frozenset(graph.identities_for_service(entity_id))
            elif entity_kind == PostureCheck.ENTITY:
                state.posture_identities |= _posture_identities(graph, entity_id)
        return state

    def after(self, graph: PolicyGraph, changes: Sequence[Change], before: _Before) -> None:
        marked: set[str] = set(before.posture_identities)
        for change in changes:
            if isinstance(change, Put):
                self._after_put(graph, change.entity, before, marked)
            else:
                self._after_delete(graph, change, before, marked)
        for policy_id, old in before.policies.items():
            marked |= _policy_marks(graph, policy_id, old, _policy_state(graph, policy_id))
        if marked:
            self.mark(marked)

    def _after_put(self, graph: PolicyGraph, entity: Any, before: _Before, marked: set[str]) -> None:
        kind = entity.ENTITY
        if kind == Identity.ENTITY:
            old = before.identity_services.get(entity.id)
            if graph.has_entity(IDENTITY, entity.id):
                new = {t: frozenset(graph.services_for_identity(entity.id, t)) for t in TYPES}
                if new != (old or {t: frozenset() for t in TYPES}):
                    marked.add(entity.id)
            signature = _override_signature(entity)
            if signature != self._overrides.get(entity.id):
                marked.add(entity.id)
                if signature is None:
                    self._overrides.pop(entity.id, None)
                else:
                    self._overrides[entity.id] = signature
        elif kind == Service.ENTITY:
            marked |= before.service_identities.get(entity.id, frozenset())
            if graph.has_entity(SERVICE, entity.id):
                marked.update(graph.identities_for_service(entity.id))
        elif kind == Config.ENTITY:
            marked |= self._config_identities(graph, entity.id)
        elif kind == PostureCheck.ENTITY:
            marked |= _posture_identities(graph, entity.id)

    def _after_delete(self, graph: PolicyGraph, change: Delete, before: _Before, marked: set[str]) -> None:
        kind = change.kind.ENTITY
        if kind == Service.ENTITY:
            marked |= before.service_identities.get(change.id, frozenset())
        elif kind == Config.ENTITY:
            marked |= self._config_identities(graph, change.id)
        elif kind == Identity.ENTITY:
            self._overrides.pop(change.id, None)
            with self._lock:
                self._changed.pop(change.id, None)
                self._batches.pop(change.id, None)
                self._posture.pop(change.id, None)

    def _config_identities(self, graph: PolicyGraph, config_id: str) -> set[str]:
        """Identities that see a service using the config, or override a service's config with it."""
        out: set[str] = set()
        for service in self.store.all(Service):
            if config_id in service.configs and graph.has_entity(SERVICE, service.id):
                out.update(graph.identities_for_service(service.id))
        for identity_id in self._overrides:
            identity = self.store.get(Identity, identity_id)
            if identity is not None and any(
                config_id in by_type.values() for by_type in identity.service_configs.values()
            ):
                out.add(identity_id)
        return out


def _policy_state(graph: PolicyGraph, policy_id: str) -> _PolicyState | None:
    if not graph.has_policy(SERVICE_POLICY, policy_id):
        return None
    record = graph.policy(SERVICE_POLICY, policy_id)
    return _PolicyState(
        type=str(record.type or "Dial"),
        identities=frozenset(graph.policy_members(SERVICE_POLICY, policy_id, IDENTITY)),
        services=frozenset(graph.policy_members(SERVICE_POLICY, policy_id, SERVICE)),
        posture_checks=frozenset(graph.policy_members(SERVICE_POLICY, policy_id, POSTURE_CHECK)),
    )


def _policy_marks(
    graph: PolicyGraph, policy_id: str, old: _PolicyState | None, new: _PolicyState | None
) -> set[str]:
    """Identities whose access changed because one service policy went from ``old`` to ``new``.

    Per type and per service ``s`` the policy selected before or after, the identities whose pair
    with ``s`` is in exactly one of the old and new products are candidates; a candidate changed
    unless another policy of that type links it to ``s``. Few candidates are checked pair by pair;
    many against the union of the other policies' members (one set difference per service).
    A change of the policy's posture checks changes the posture queries of every service it
    links: all its identities, before and after, are marked.
    """
    marked: set[str] = set()
    if old is not None and new is not None and old.posture_checks != new.posture_checks:
        if new.services:
            marked |= new.identities
        if old.services:
            marked |= old.identities
    for policy_type in TYPES:
        old_i, old_s = _product(old, policy_type)
        new_i, new_s = _product(new, policy_type)
        if not (old_i or new_i):
            continue
        flipped = old_i ^ new_i
        services = [
            (
                service_id,
                flipped
                if service_id in old_s and service_id in new_s
                else old_i
                if service_id in old_s
                else new_i,
            )
            for service_id in old_s | new_s
        ]
        services = [(service_id, group) for service_id, group in services if group]
        if sum(len(group) for _, group in services) > PAIR_BUDGET and len(services) > SERVICE_BUDGET:
            for _, group in services:
                marked |= group
            continue
        for service_id, group in services:
            if not graph.has_entity(SERVICE, service_id):
                continue
            candidates = group - marked
            if len(candidates) <= PAIR_CHECKS:
                for identity_id in candidates:
                    if graph.has_entity(IDENTITY, identity_id) and not any(
                        p != policy_id for p in graph.link_policies(identity_id, service_id, policy_type)
                    ):
                        marked.add(identity_id)
            else:
                marked |= candidates - _other_members(graph, policy_id, service_id, policy_type)
    return marked


def _other_members(graph: PolicyGraph, policy_id: str, service_id: str, policy_type: str) -> set[str]:
    """Identities linked to the service with ``policy_type`` by policies other than ``policy_id``."""
    out: set[str] = set()
    for other in graph.policies_for_entity(SERVICE, service_id, SERVICE_POLICY):
        if other != policy_id and graph.policy(SERVICE_POLICY, other).type == policy_type:
            out.update(graph.policy_members(SERVICE_POLICY, other, IDENTITY))
    return out


def _product(state: _PolicyState | None, policy_type: str) -> tuple[frozenset[str], frozenset[str]]:
    if state is None or state.type != policy_type:
        return frozenset(), frozenset()
    return state.identities, state.services


def _posture_identities(graph: PolicyGraph, check_id: str) -> set[str]:
    """Identities of the service policies whose posture side selects the check."""
    if not graph.has_entity(POSTURE_CHECK, check_id):
        return set()
    out: set[str] = set()
    for policy_id in graph.policies_for_entity(POSTURE_CHECK, check_id, SERVICE_POLICY):
        if graph.policy_members(SERVICE_POLICY, policy_id, SERVICE):
            out.update(graph.policy_members(SERVICE_POLICY, policy_id, IDENTITY))
    return out
