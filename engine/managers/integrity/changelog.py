"""The change log against the tables: the store compares them; a wrong key is logged again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from engine.entities import ALL_KINDS, Entity
from engine.managers.integrity._core import Problem, Repair
from engine.ports import Store, UnitOfWork


def change_log_problems(store: Store) -> Iterator[Problem]:
    """Each disagreement the store finds between its change log and its tables. One key's is
    fixed by logging the entity again as it is now (or its deletion), so that the newest entry
    a replica would follow is what the table holds; gaps in the numbering are reported only."""
    kinds: dict[str, type[Entity]] = {kind.ENTITY: kind for kind in ALL_KINDS}
    for found in store.change_log_problems():
        kind = kinds.get(found.kind) if found.kind is not None else None
        if kind is None or found.id is None:
            yield Problem(found.description)
        else:
            yield Problem(found.description, repair=_log_again(kind, found.id))


def _log_again(kind: type[Entity], id: str) -> Repair:
    def repair(uow: UnitOfWork, now: datetime) -> None:
        current = uow.get(kind, id)
        if current is None:
            uow.delete(kind, id)
        else:
            uow.put(current)

    return repair
