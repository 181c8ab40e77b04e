"""The access-relevant batches this controller applied to its policy graph, by revision.

A *revision* is the store's ``last_seq`` (the sequence number of the last change published; the
same batch has the same number in every process sharing a store). :class:`AccessHistory` watches
the graph (a :class:`~engine.managers.access.GraphObserver`: it sees every committed batch under
the graph's lock, before and after it is applied) and keeps, for each batch that touched an
identity, service, edge router, posture check or policy, its revision and what undoes it on the
graph (each touched entity's attributes and each touched policy's definition as they were).

So it can answer, for a revision ``R`` a what-if was computed at:

- whether anything access-relevant changed since (:meth:`changed_since`);
- the graph as it was at ``R`` (:meth:`rewind`: a fork of the current graph with the later
  batches undone, newest first), hence the access diff since ``R``.

It knows nothing before the controller started, and keeps the last :data:`MAX_ENTRIES` batches
(at most :data:`MAX_CHANGES` changes together): a revision older than that is
:class:`RevisionTooOldError`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.managers.access import ENTITY_KINDS as ENTITY_NAMES
from engine.managers.access import POLICY_KINDS as POLICY_NAMES
from engine.policy import (
    EDGE_ROUTER,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    EntityKind,
    PolicyGraph,
    PolicyKind,
    PolicyRecord,
)
from engine.ports import Change, Delete, Put

__all__ = ["MAX_CHANGES", "MAX_ENTRIES", "AccessHistory", "RevisionTooOldError"]

#: How many access-relevant batches are kept at most.
MAX_ENTRIES = 4096
#: How many changes those batches may hold together at most.
MAX_CHANGES = 200_000


class RevisionTooOldError(Exception):
    """The revision is before what this controller's history holds."""

    def __init__(self, revision: int, floor: int) -> None:
        super().__init__(f"revision {revision} is older than this controller's history (from {floor})")
        self.revision = revision
        self.floor = floor


@dataclass(frozen=True)
class _Undo:
    """One batch: its revision, and per touched entity / policy its state before (None: absent)."""

    revision: int
    entities: tuple[tuple[EntityKind, str, frozenset[str] | None], ...]
    policies: tuple[tuple[PolicyKind, str, PolicyRecord | None], ...]

    @property
    def size(self) -> int:
        return len(self.entities) + len(self.policies)


def _touched(changes: Sequence[Change]) -> tuple[list[tuple[EntityKind, str]], list[tuple[PolicyKind, str]]]:
    entities: list[tuple[EntityKind, str]] = []
    policies: list[tuple[PolicyKind, str]] = []
    for change in changes:
        name = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        entity_id = change.entity.id if isinstance(change, Put) else change.id
        assert isinstance(change, Put | Delete)
        if name in ENTITY_NAMES:
            entities.append((ENTITY_NAMES[name][0], entity_id))
        elif name in POLICY_NAMES:
            policies.append((POLICY_NAMES[name][0], entity_id))
    return entities, policies


def is_access_relevant(changes: Sequence[Change]) -> bool:
    """Whether a batch touches an entity or policy kind the policy graph holds."""
    entities, policies = _touched(changes)
    return bool(entities or policies)


class AccessHistory:
    """See the module docstring; attach it with ``AccessManager.observe``."""

    def __init__(self, revision: Callable[[], int]) -> None:
        self._revision = revision
        self._lock = threading.Lock()
        self._entries: deque[_Undo] = deque()
        self._changes = 0
        #: Every access-relevant batch after this revision is in ``_entries``.
        self._floor = revision()

    # -- GraphObserver ------------------------------------------------------------------------
    def before(self, graph: PolicyGraph, changes: Sequence[Change]) -> Any:
        entities, policies = _touched(changes)
        if not entities and not policies:
            return None
        return _Undo(
            0,
            tuple(
                (kind, i, graph.entity_attributes(kind, i) if graph.has_entity(kind, i) else None)
                for kind, i in entities
            ),
            tuple(
                (kind, i, graph.policy(kind, i) if graph.has_policy(kind, i) else None)
                for kind, i in policies
            ),
        )

    def after(self, graph: PolicyGraph, changes: Sequence[Change], before: Any) -> None:
        if before is None:
            return
        assert isinstance(before, _Undo)
        entry = _Undo(self._revision(), before.entities, before.policies)
        with self._lock:
            self._entries.append(entry)
            self._changes += entry.size
            while self._entries and (len(self._entries) > MAX_ENTRIES or self._changes > MAX_CHANGES):
                dropped = self._entries.popleft()
                self._changes -= dropped.size
                self._floor = max(self._floor, dropped.revision)

    # -- questions ----------------------------------------------------------------------------
    @property
    def floor(self) -> int:
        """The oldest revision whose later access-relevant batches are all known."""
        with self._lock:
            return self._floor

    def since(self, revision: int) -> list[_Undo]:
        """The access-relevant batches after ``revision``, oldest first (RevisionTooOldError when
        some may be unknown)."""
        with self._lock:
            if revision < self._floor:
                raise RevisionTooOldError(revision, self._floor)
            return [e for e in self._entries if e.revision > revision]

    def changed_since(self, revision: int) -> bool:
        """Whether an access-relevant batch was applied after ``revision``."""
        return bool(self.since(revision))

    def rewind(self, graph: PolicyGraph, revision: int) -> PolicyGraph:
        """``graph`` (the current one: call under the store's write lock, so that no batch lands
        meanwhile) forked and taken back to ``revision``."""
        entries = self.since(revision)
        past = graph.copy()
        for entry in reversed(entries):
            _undo(past, entry)
        return past

    def touched_since(self, revision: int) -> dict[str, set[str]]:
        """The engine kinds and ids the batches after ``revision`` touched."""
        out: dict[str, set[str]] = {}
        for entry in self.since(revision):
            for kind, i, _ in entry.entities:
                out.setdefault(kind, set()).add(i)
            for pkind, i, _ in entry.policies:
                out.setdefault(pkind, set()).add(i)
        return out


def _undo(graph: PolicyGraph, entry: _Undo) -> None:
    """Reverse ``apply_changes`` (which puts entities, puts policies, deletes policies, deletes
    entities): restore entities that went, then policies, then entities that changed or came."""
    for kind, entity_id, attributes in entry.entities:
        if attributes is not None and not graph.has_entity(kind, entity_id):
            graph.upsert_entity(kind, entity_id, attributes)
    for pkind, policy_id, record in entry.policies:
        if record is None:
            if graph.has_policy(pkind, policy_id):
                graph.remove_policy(pkind, policy_id)
            continue
        roles = record.roles
        graph.upsert_policy(
            pkind,
            policy_id,
            semantic=record.semantic,
            type=record.type,
            identity_roles=roles.get(IDENTITY, ()),
            service_roles=roles.get(SERVICE, ()),
            edge_router_roles=roles.get(EDGE_ROUTER, ()),
            posture_check_roles=roles.get(POSTURE_CHECK, ()),
        )
    for kind, entity_id, attributes in entry.entities:
        if attributes is None:
            if graph.has_entity(kind, entity_id):
                graph.remove_entity(kind, entity_id)
        else:
            graph.upsert_entity(kind, entity_id, attributes)
