"""The in-memory store: the group commit (:mod:`storage.group_commit`) with nothing underneath.
It keeps nothing across restarts; the API tests and the unit tests run on it, and so does any
controller built without a database file.
"""

from __future__ import annotations

from datetime import datetime

from engine.ports import LogProblem, SnapshotUnsupportedError
from storage.access_changes import MemoryAccessChangeLog
from storage.group_commit import GroupCommitStore


class MemoryStore(GroupCommitStore):
    """A complete ``Store`` that keeps nothing across restarts: each batch is published as soon
    as it is staged, on the writer's thread."""

    def snapshot(self, at: datetime) -> str:
        """Memory has no database file to copy: a durable subclass (``DuckDBStore``) does it."""
        raise SnapshotUnsupportedError("the in-memory store keeps no database file to snapshot")

    def change_log_problems(self) -> list[LogProblem]:
        """Memory keeps no change log."""
        return []

    def access_change_log(self) -> MemoryAccessChangeLog:
        """The access changes of this store's batches, in memory (one log per store)."""
        found: MemoryAccessChangeLog | None = getattr(self, "_access_changes", None)
        if found is None:
            found = self._access_changes = MemoryAccessChangeLog()
        return found
