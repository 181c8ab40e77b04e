"""What the checks share: a finding (:class:`Problem`), a frozen copy of the store, repairs."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from engine.entities import ALL_KINDS, Entity
from engine.entities import all as _all_kinds  # noqa: F401  (every kind registered: ALL_KINDS is complete)
from engine.managers.api_sessions import delete_session
from engine.ports import Change, SnapshotUnsupportedError, UnitOfWork
from engine.ports import StoreView as PortsView

E = TypeVar("E", bound=Entity)

#: Ids listed in one finding's description before "and N more".
_LISTED = 10

#: A fix: it changes a unit of work, stamping ``updated_at`` of what it changes with the time given.
Repair = Callable[[UnitOfWork, datetime], None]


@dataclass(frozen=True)
class Problem:
    """One finding: what is wrong and, when it can be fixed, how."""

    description: str
    #: Applies the fix to a unit of work (re-reading the entities it changes), or None.
    repair: Repair | None = None
    #: Fixed by rebuilding the policy engine from the database.
    rebuild: bool = False
    #: Identities whose service links the rebuild changes (they get a service-update mark).
    identities: tuple[str, ...] = ()

    @property
    def fixable(self) -> bool:
        return self.repair is not None or self.rebuild


class StoreView:
    """The store's entities as they were when captured: a read-only :class:`~engine.ports.Store`."""

    def __init__(self, store: PortsView) -> None:
        self._rows: dict[str, dict[str, Entity]] = {
            kind.ENTITY: {entity.id: entity for entity in store.all(kind)} for kind in ALL_KINDS
        }

    def ids(self, kind: type[Entity]) -> set[str]:
        return set(self._rows.get(kind.ENTITY, {}))

    def get(self, kind: type[E], id: str) -> E | None:
        entity = self._rows.get(kind.ENTITY, {}).get(id)
        return entity if isinstance(entity, kind) else None

    def all(self, kind: type[E]) -> list[E]:
        return [e for e in self._rows.get(kind.ENTITY, {}).values() if isinstance(e, kind)]

    def count(self, kind: type[Entity]) -> int:
        return len(self._rows.get(kind.ENTITY, {}))

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        return next((e for e in self.all(kind) if getattr(e, field) == value), None)

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        return [e for e in self.all(kind) if getattr(e, field) == value]

    def commit(self, changes: Sequence[Change]) -> None:
        raise RuntimeError("a captured store view is read-only")

    def write_lock(self) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def get_setting(self, key: str) -> str | None:
        return None

    def put_setting(self, key: str, value: str) -> None:
        raise RuntimeError("a captured store view is read-only")

    def snapshot(self, at: datetime) -> str:
        raise SnapshotUnsupportedError("a captured store view has no database file")

    def close(self) -> None:
        """Nothing to release."""


def listed(ids: Iterable[str]) -> str:
    values = sorted(ids)
    shown = ", ".join(values[:_LISTED])
    return shown + (f" and {len(values) - _LISTED} more" if len(values) > _LISTED else "")


def exist(count: int) -> str:
    return "does not exist" if count == 1 else "do not exist"


def its(parts: Sequence[str]) -> str:
    """``its service x and router y do not exist``."""
    return f"its {' and '.join(parts)} {exist(len(parts))}"


def named(entity: Entity) -> str:
    name = getattr(entity, "name", None)
    return f"{entity.id} ({name})" if name else entity.id


def singular(kind: type[Entity]) -> str:
    return kind.ENTITY.removesuffix("s").replace("-", " ").replace("identitie", "identity")


def updater(kind: type[E], id: str, change: Callable[[UnitOfWork, E], dict[str, Any]]) -> Repair:
    """A repair putting the current ``kind`` ``id`` with the fields ``change`` computes from it."""

    def repair(uow: UnitOfWork, now: datetime) -> None:
        current = uow.get(kind, id)
        if current is not None:
            uow.put(dataclasses.replace(current, updated_at=now, **change(uow, current)))

    return repair


def deleter(kind: type[Entity], id: str) -> Repair:
    def repair(uow: UnitOfWork, now: datetime) -> None:
        uow.delete(kind, id)

    return repair


def session_deleter(id: str) -> Repair:
    """An API session goes with its certificates and Dial/Bind sessions, as everywhere else."""

    def repair(uow: UnitOfWork, now: datetime) -> None:
        delete_session(uow, id)

    return repair
