"""Ports: the interfaces the engine needs from the outside world.

``storage`` implements :class:`Store`, ``pki`` implements :class:`PasswordHasher`, and the
composition root (``api/app.py``) supplies a :class:`Clock` and an :class:`IdGenerator`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from engine.entities import Entity

E = TypeVar("E", bound=Entity)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware UTC, millisecond precision."""
        ...


class IdGenerator(Protocol):
    def new_id(self) -> str:
        """A short opaque entity id (OpenZiti shortid style)."""
        ...

    def new_token(self) -> str:
        """A random UUIDv4 string (API session tokens, enrollment tokens)."""
        ...


class PasswordHasher(Protocol):
    def hash(self, password: str) -> str: ...

    def verify(self, password: str, encoded: str) -> bool: ...


@dataclass(frozen=True)
class SchemaViolation:
    """The first way a document fails a JSON schema, in the terms of the schema keyword."""

    path: tuple[str | int, ...]
    keyword: str
    instance: Any
    expected: Any
    schema: Any
    message: str


class SchemaChecker(Protocol):
    """JSON Schema validation (config types' schemas and configs' data)."""

    def schema_error(self, schema: dict[str, Any]) -> str | None:
        """Why ``schema`` is not a valid JSON schema, or None when it is."""
        ...

    def first_violation(self, schema: dict[str, Any], data: Any) -> SchemaViolation | None:
        """The most relevant way ``data`` fails ``schema``, or None when it conforms."""
        ...


@dataclass(frozen=True)
class Put:
    entity: Entity


@dataclass(frozen=True)
class Delete:
    kind: type[Entity]
    id: str


Change = Put | Delete


class Store(Protocol):
    """Entities by kind, served from memory and written through to durable storage.

    ``commit`` makes a batch of changes durable atomically and only then visible; if it raises,
    nothing of the batch is applied. Readers never see a half-applied batch.
    """

    def get(self, kind: type[E], id: str) -> E | None: ...

    def all(self, kind: type[E]) -> list[E]: ...

    def count(self, kind: type[Entity]) -> int: ...

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        """The entity whose unique ``field`` (one of ``kind.UNIQUE``) equals ``value``."""
        ...

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        """Entities whose indexed ``field`` (one of ``kind.INDEXED``) equals ``value``."""
        ...

    def commit(self, changes: Sequence[Change]) -> None: ...

    def write_lock(self) -> AbstractContextManager[object]:
        """Serialises writers: read-check-write sequences run under it."""
        ...

    def get_setting(self, key: str) -> str | None: ...

    def put_setting(self, key: str, value: str) -> None: ...

    def close(self) -> None: ...


class UnitOfWork:
    """Changes gathered by a manager and committed together; reads see the pending changes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._puts: dict[tuple[str, str], Entity] = {}
        self._deletes: dict[tuple[str, str], type[Entity]] = {}

    def get(self, kind: type[E], id: str) -> E | None:
        key = (kind.ENTITY, id)
        if key in self._deletes:
            return None
        pending = self._puts.get(key)
        if pending is not None:
            assert isinstance(pending, kind)
            return pending
        return self.store.get(kind, id)

    def all(self, kind: type[E]) -> list[E]:
        out: list[E] = []
        seen: set[str] = set()
        for entity in self.store.all(kind):
            key = (kind.ENTITY, entity.id)
            seen.add(entity.id)
            if key in self._deletes:
                continue
            pending = self._puts.get(key, entity)
            assert isinstance(pending, kind)
            out.append(pending)
        for (entity_kind, entity_id), extra in self._puts.items():
            if entity_kind == kind.ENTITY and entity_id not in seen:
                assert isinstance(extra, kind)
                out.append(extra)
        return out

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        """``Store.find_by`` seen through the pending changes."""
        out = [e for e in (self.get(kind, c.id) for c in self.store.find_by(kind, field, value)) if e]
        out = [e for e in out if getattr(e, field) == value]
        seen = {e.id for e in out}
        for (entity_kind, _), entity in self._puts.items():
            if entity_kind == kind.ENTITY and entity.id not in seen and getattr(entity, field) == value:
                assert isinstance(entity, kind)
                out.append(entity)
        return out

    def put(self, entity: Entity) -> None:
        key = (entity.ENTITY, entity.id)
        self._deletes.pop(key, None)
        self._puts[key] = entity

    def delete(self, kind: type[Entity], id: str) -> None:
        key = (kind.ENTITY, id)
        self._puts.pop(key, None)
        self._deletes[key] = kind

    def changes(self) -> list[Change]:
        out: list[Change] = [Put(e) for e in self._puts.values()]
        out.extend(Delete(kind, key[1]) for key, kind in self._deletes.items())
        return out

    def commit(self) -> None:
        changes = self.changes()
        if changes:
            self.store.commit(changes)
        self._puts.clear()
        self._deletes.clear()


def iter_changes(changes: Sequence[Change]) -> Iterator[tuple[str, Change]]:
    """Each change with the entity kind name it touches."""
    for change in changes:
        kind = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        yield kind, change
