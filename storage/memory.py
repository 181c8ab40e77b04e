"""The in-memory store: the read side of every store, and on its own a twin for unit tests.

Entities are held per kind in dicts, with a hash index per unique field. Entities are
treated as immutable values: managers put new objects, never mutate stored ones, so a
reader holding a reference never sees a half-updated entity.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TypeVar

from engine.entities import Entity
from engine.ports import Change, Delete, Put, SnapshotUnsupportedError

E = TypeVar("E", bound=Entity)


class MemoryStore:
    """A complete ``Store`` that keeps nothing across restarts."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rows: dict[str, dict[str, Entity]] = {}
        self._unique: dict[tuple[str, str], dict[object, str]] = {}
        self._indexed: dict[tuple[str, str], dict[object, set[str]]] = {}
        self._settings: dict[str, str] = {}

    # -- reads -------------------------------------------------------------------------------
    def get(self, kind: type[E], id: str) -> E | None:
        entity = self._rows.get(kind.ENTITY, {}).get(id)
        if entity is None:
            return None
        assert isinstance(entity, kind)
        return entity

    def all(self, kind: type[E]) -> list[E]:
        rows = self._rows.get(kind.ENTITY)
        if not rows:
            return []
        return list(rows.values())  # type: ignore[arg-type]

    def count(self, kind: type[Entity]) -> int:
        return len(self._rows.get(kind.ENTITY, {}))

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        entity_id = self._unique.get((kind.ENTITY, field), {}).get(value)
        return None if entity_id is None else self.get(kind, entity_id)

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        # tuple() copies the set in one step under the GIL: a commit changing the bucket meanwhile
        # cannot make this iteration fail ("Set changed size during iteration")
        ids = tuple(self._indexed.get((kind.ENTITY, field), {}).get(value, ()))
        return [e for e in (self.get(kind, i) for i in ids) if e is not None]

    def get_setting(self, key: str) -> str | None:
        return self._settings.get(key)

    # -- writes ------------------------------------------------------------------------------
    def write_lock(self) -> AbstractContextManager[object]:
        return self._lock

    def put_setting(self, key: str, value: str) -> None:
        with self._lock:
            self._persist_setting(key, value)
            self._settings[key] = value

    def commit(self, changes: Sequence[Change]) -> None:
        with self._lock:
            self._persist(changes)
            for change in changes:
                self._apply(change)

    def load(self, entities: Sequence[Entity]) -> None:
        """Fill memory from durable storage at start-up (no write-through)."""
        for entity in entities:
            self._apply(Put(entity))

    def snapshot(self, at: datetime) -> str:
        """Memory has no database file to copy: a durable subclass (``DuckDBStore``) does it."""
        raise SnapshotUnsupportedError("the in-memory store keeps no database file to snapshot")

    def close(self) -> None:
        """Nothing to release in memory."""

    # -- hooks for durable subclasses --------------------------------------------------------
    def _persist(self, changes: Sequence[Change]) -> None:
        """Make ``changes`` durable, atomically; raise to refuse the whole batch."""

    def _persist_setting(self, key: str, value: str) -> None:
        """Make a setting durable."""

    # -- internals ---------------------------------------------------------------------------
    def _apply(self, change: Change) -> None:
        if isinstance(change, Put):
            entity = change.entity
            rows = self._rows.setdefault(entity.ENTITY, {})
            old = rows.get(entity.id)
            if old is not None:
                self._unindex(old)
            rows[entity.id] = entity
            self._index(entity)
        elif isinstance(change, Delete):
            old = self._rows.get(change.kind.ENTITY, {}).pop(change.id, None)
            if old is not None:
                self._unindex(old)

    def _index(self, entity: Entity) -> None:
        for field in entity.UNIQUE:
            value = getattr(entity, field)
            if value is not None:
                self._unique.setdefault((entity.ENTITY, field), {})[value] = entity.id
        for field in entity.INDEXED:
            value = getattr(entity, field)
            self._indexed.setdefault((entity.ENTITY, field), {}).setdefault(value, set()).add(entity.id)

    def _unindex(self, entity: Entity) -> None:
        for field in entity.UNIQUE:
            value = getattr(entity, field)
            index = self._unique.get((entity.ENTITY, field))
            if value is not None and index is not None and index.get(value) == entity.id:
                del index[value]
        for field in entity.INDEXED:
            bucket = self._indexed.get((entity.ENTITY, field), {}).get(getattr(entity, field))
            if bucket is not None:
                bucket.discard(entity.id)
