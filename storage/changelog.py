"""What the durable stores' change-log checks report, in the same words for each store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.ports import LogProblem


def key_problems(table: str, kind: str, rows: Iterable[Sequence[object]]) -> list[LogProblem]:
    """A :class:`LogProblem` per key of ``table`` (entity kind ``kind``) whose newest change-log
    entry its table does not hold: ``rows`` are ``(id, op, present)``, the newest entry's
    operation and whether the table has a row for the id, as each store's comparison answers."""
    problems: list[LogProblem] = []
    for entity_id, op, present in rows:
        if op == "delete":
            state = "is deleted in the change log but present in its table"
        elif present:
            state = "differs from its newest change-log entry"
        else:
            state = "is in the change log but missing from its table"
        problems.append(LogProblem(f"change log: {table} {entity_id} {state}", kind, str(entity_id)))
    return problems
