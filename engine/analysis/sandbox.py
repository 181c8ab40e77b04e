"""Proposed writes run by the real managers against an overlay of the store, writing nowhere.

A what-if must produce exactly the changes the management API would: the same validation (role
syntax, ``@id`` references, unique names, system policies), the same follow-ups (a deleted
entity's ``@id`` stripped from every policy, a tunneler-enabled router's identity and system
policy, an identity's authenticators and enrollments). So the managers themselves run, each a
copy bound to an :class:`~engine.managers._base.Env` whose store is an :class:`Overlay`: reads see
the base state through the batch's earlier changes; ``commit`` records the changes instead of
writing them. What the overlay gathered is then either applied to a fork of the policy graph (a
what-if) or committed to the real store as one batch (apply).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, TypeVar

from engine.entities import Entity
from engine.managers._base import Env
from engine.ports import Change, Delete, Put, StoreView
from engine.query import ListIndex
from engine.query.plan import ScanIndex

__all__ = ["Overlay", "sandboxed"]

E = TypeVar("E", bound=Entity)

_UNHASHABLE = object()


class Overlay:
    """A store for managers over a base :class:`~engine.ports.StoreView`: writes are gathered in
    :attr:`changes` (in order) and seen by later reads, nothing is written.

    Lookups by a unique or indexed field are indexed over the overlay's own puts, so a batch of
    thousands of creates costs linear time, not quadratic.
    """

    def __init__(self, base: StoreView, revision: int = 0) -> None:
        self._base = base
        self._revision = revision
        #: kind name -> id -> the entity, or None once deleted.
        self._rows: dict[str, dict[str, Entity | None]] = {}
        #: (kind name, field) -> value -> ids of the overlay's puts with it.
        self._indexes: dict[tuple[str, str], dict[Any, set[str]]] = {}
        self.changes: list[Change] = []

    # -- the overlay's own rows ---------------------------------------------------------------
    def _index(self, name: str, field: str) -> dict[Any, set[str]]:
        key = (name, field)
        index = self._indexes.get(key)
        if index is None:
            index = self._indexes[key] = {}
            for entity_id, entity in self._rows.get(name, {}).items():
                if entity is not None:
                    index.setdefault(_hashable(getattr(entity, field, None)), set()).add(entity_id)
        return index

    def _record(self, name: str, entity_id: str, entity: Entity | None) -> None:
        rows = self._rows.setdefault(name, {})
        old = rows.get(entity_id)
        for (kind, field), index in self._indexes.items():
            if kind != name:
                continue
            if old is not None:
                index.get(_hashable(getattr(old, field, None)), set()).discard(entity_id)
            if entity is not None:
                index.setdefault(_hashable(getattr(entity, field, None)), set()).add(entity_id)
        rows[entity_id] = entity

    def _mine(self, kind: type[E], field: str, value: object) -> list[E]:
        rows = self._rows.get(kind.ENTITY)
        if not rows:
            return []
        key = _hashable(value)
        if key is _UNHASHABLE:
            found = [e for e in rows.values() if e is not None and getattr(e, field, None) == value]
        else:
            ids = self._index(kind.ENTITY, field).get(key, set())
            found = [e for e in (rows[i] for i in sorted(ids)) if e is not None]
            found = [e for e in found if getattr(e, field, None) == value]
        return [e for e in found if isinstance(e, kind)]

    # -- StoreView ------------------------------------------------------------------------------
    def get(self, kind: type[E], id: str) -> E | None:
        rows = self._rows.get(kind.ENTITY)
        if rows is not None and id in rows:
            entity = rows[id]
            return entity if isinstance(entity, kind) else None
        return self._base.get(kind, id)

    def all(self, kind: type[E]) -> list[E]:
        rows = self._rows.get(kind.ENTITY)
        base = self._base.all(kind)
        if not rows:
            return base
        out: list[E] = []
        for entity in base:
            if entity.id in rows:
                current = rows[entity.id]
                if isinstance(current, kind):
                    out.append(current)
            else:
                out.append(entity)
        seen = {e.id for e in base}
        out.extend(e for i, e in rows.items() if i not in seen and isinstance(e, kind))
        return out

    def count(self, kind: type[Entity]) -> int:
        rows = self._rows.get(kind.ENTITY)
        total = self._base.count(kind)
        for entity_id, entity in (rows or {}).items():
            total += (entity is not None) - (self._base.get(kind, entity_id) is not None)
        return total

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        mine = self._mine(kind, field, value)
        if mine:
            return mine[0]
        found = self._base.find_unique(kind, field, value)
        if found is None or found.id in self._rows.get(kind.ENTITY, {}):
            return None  # changed or deleted in the overlay: a match would have been found above
        return found

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        rows = self._rows.get(kind.ENTITY, {})
        out = [e for e in self._base.find_by(kind, field, value) if e.id not in rows]
        out.extend(self._mine(kind, field, value))
        return out

    def list_index(self, kind: type[E]) -> ListIndex[E]:
        return ScanIndex(self.all(kind))

    def view(self) -> Overlay:
        return self

    # -- what managers call of a Store ----------------------------------------------------------
    def commit(self, changes: Sequence[Change], *, wait: bool = True) -> None:
        for change in changes:
            if isinstance(change, Put):
                self._record(change.entity.ENTITY, change.entity.id, change.entity)
            else:
                assert isinstance(change, Delete)
                self._record(change.kind.ENTITY, change.id, None)
            self.changes.append(change)

    def write_lock(self) -> AbstractContextManager[object]:
        return nullcontext()

    def pinned(self) -> AbstractContextManager[object]:
        return nullcontext()

    def subscribe(self, listener: Callable[[list[Change]], None]) -> None:
        """Nothing is published from an overlay."""

    def catch_up(self) -> bool:
        return False

    @property
    def last_seq(self) -> int:
        return self._revision

    @property
    def replaying(self) -> bool:
        return False

    def final(self) -> list[Change]:
        """The gathered changes, one per entity (the last), puts before deletes: the batch to
        commit or to apply to a graph."""
        puts: list[Change] = []
        deletes: list[Change] = []
        latest: dict[tuple[str, str], Change] = {}
        for change in self.changes:
            key = (
                (change.entity.ENTITY, change.entity.id)
                if isinstance(change, Put)
                else (
                    change.kind.ENTITY,
                    change.id,
                )
            )
            latest.pop(key, None)
            latest[key] = change
        for change in latest.values():
            (puts if isinstance(change, Put) else deletes).append(change)
        return puts + deletes


def _hashable(value: object) -> object:
    try:
        hash(value)
    except TypeError:
        return _UNHASHABLE
    return value


@contextmanager
def sandboxed(env: Env, overlay: Overlay) -> Iterator[Callable[[Any], Any]]:
    """A function binding a manager to an env whose store is ``overlay`` (a shallow copy of the
    manager: the original keeps its env)."""
    # dataclasses.replace runs Env.__post_init__, which subscribes to the overlay (a no-op)
    # the guardrails see the whole batch once, not each write of it (AnalysisManager)
    sandbox_env = dataclasses.replace(env, store=overlay, listeners=[], checks=[])  # type: ignore[arg-type]

    def bind(manager: Any) -> Any:
        clone = copy.copy(manager)
        clone.env = sandbox_env
        return clone

    yield bind
