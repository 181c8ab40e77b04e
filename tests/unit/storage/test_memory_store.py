"""The in-memory read side under concurrent commits: lookups never fail half-way."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from engine.entities.identities import Authenticator
from engine.ports import Delete, Put
from storage.memory import MemoryStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _authenticator(n: int) -> Authenticator:
    return Authenticator(id=f"a{n}", created_at=NOW, updated_at=NOW, identity_id="shared", method="updb")


def test_find_by_while_the_bucket_changes_never_raises() -> None:
    """The soak's 500 "Set changed size during iteration": a reader iterated an index bucket
    that a commit was changing. Readers now copy the bucket first."""
    store = MemoryStore()
    store.commit([Put(_authenticator(n)) for n in range(200)])
    failures: list[BaseException] = []
    done = threading.Event()

    def writer() -> None:
        n = 200
        while not done.is_set():
            store.commit([Put(_authenticator(n)), Delete(Authenticator, f"a{n - 200}")])
            n += 1

    def reader() -> None:
        try:
            for _ in range(3_000):
                store.find_by(Authenticator, "identity_id", "shared")
        except BaseException as exc:  # the assertion below reports it
            failures.append(exc)

    thread = threading.Thread(target=writer)
    readers = [threading.Thread(target=reader) for _ in range(2)]
    thread.start()
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    done.set()
    thread.join()

    assert failures == []
    assert len(store.find_by(Authenticator, "identity_id", "shared")) == 200
