"""Several processes on one PostgreSQL database, as two :class:`PostgresStore`\\ s in one test
process (each has its own connections, write token state, follower and committer, as two
processes have): what one commits the other follows, on its own or at ``catch_up()``; the write
token gives both one order, so a check under the write lock sees the other's committed writes;
a batch of the other's reaches the listeners marked as foreign, and they do not write for it.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.ports import Change, Delete, Put
from storage.postgres import PostgresStore
from storage.postgres import store as store_module

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
#: A generous bound for what should take milliseconds (a busy 2-core machine).
DEADLINE_SECONDS = 30.0


def _identity(key: str, name: str | None = None) -> Identity:
    return Identity(id=f"id-{key}", created_at=NOW, updated_at=NOW, name=name or f"name-{key}")  # type: ignore[call-arg]


def eventually(check: Callable[[], bool]) -> None:
    """Poll ``check`` until it holds, failing after :data:`DEADLINE_SECONDS`."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        time.sleep(0.01)


@pytest.fixture
def pair(postgres_url: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    yield first, second
    first.close()
    second.close()


def test_a_write_on_one_is_seen_by_the_other_at_catch_up(pair: tuple[PostgresStore, PostgresStore]) -> None:
    first, second = pair
    first.commit([Put(_identity("1"))])
    second.commit([Put(_identity("2"))])  # the token passes to second, and back
    first.commit([Put(_identity("3"))])
    second.catch_up()
    assert {i.id for i in second.all(Identity)} == {"id-1", "id-2", "id-3"}
    assert second.last_seq == first.last_seq == 3
    assert second.catch_up() is False  # nothing new: cheap, and says so


def test_a_write_on_one_is_seen_by_the_other_without_asking(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = pair
    for i in range(5):
        first.commit([Put(_identity(str(i)))])
    first.commit([Delete(Identity, "id-0")])
    eventually(lambda: second.last_seq == 6)
    assert sorted(i.id for i in second.all(Identity)) == ["id-1", "id-2", "id-3", "id-4"]


def test_a_reader_pinned_on_the_other_sees_whole_batches_only(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = pair
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            with second.pinned():
                seen.append(second.count(Identity))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for batch in range(20):
            first.commit([Put(_identity(f"{batch}-{n}")) for n in range(10)])
        eventually(lambda: second.count(Identity) == 200)
    finally:
        stop.set()
        reader.join(DEADLINE_SECONDS)
    assert {count % 10 for count in seen} == {0}


def test_the_first_create_of_a_unique_name_wins_on_either_store_every_round(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """200 rounds: a thread on each store checks the name is free under the write lock and
    creates it; exactly one creates it each round, and nothing committed is lost."""
    stores = pair
    rounds = 200
    created: list[list[int]] = [[], []]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def create(n: int) -> None:
        store = stores[n]
        for r in range(rounds):
            barrier.wait()
            try:
                with store.write_lock():
                    if store.find_unique(Identity, "name", f"round-{r}") is None:
                        store.commit([Put(_identity(f"{r}-{n}", f"round-{r}"))])
                        created[n].append(r)
            except BaseException as ex:
                errors.append(ex)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    assert sorted(created[0] + created[1]) == list(range(rounds))  # one per round, none twice
    for store in stores:
        store.catch_up()
        assert store.count(Identity) == rounds
    assert stores[0].change_log_problems() == []


def test_a_foreign_batch_reaches_the_listeners_marked_and_they_cannot_write_for_it(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = pair
    heard: list[tuple[bool, list[str]]] = []
    refused: list[BaseException] = []

    def listener(changes: list[Change]) -> None:
        heard.append((second.replaying, [c.entity.id for c in changes if isinstance(c, Put)]))
        if second.replaying:
            try:
                second.commit([Put(_identity("follow-up"))])
            except RuntimeError as ex:
                refused.append(ex)

    second.subscribe(listener)
    first.commit([Put(_identity("1")), Put(_identity("2"))])
    eventually(lambda: bool(heard))
    second.commit([Put(_identity("3"))])  # its own: not replaying
    assert heard == [(True, ["id-1", "id-2"]), (False, ["id-3"])]
    assert len(refused) == 1
    assert "another process's batch" in str(refused[0])
    assert second.get(Identity, "id-follow-up") is None
    first.catch_up()
    assert first.get(Identity, "id-follow-up") is None


def test_the_token_goes_to_a_waiting_store_while_the_holder_keeps_writing(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """A store writing flat out does not starve the other: the other's write lands while the
    first is still writing."""
    first, second = pair
    stop = threading.Event()
    written = [0]

    def busy() -> None:
        while not stop.is_set():
            first.commit([Put(_identity(f"busy-{written[0]}"))])
            written[0] += 1

    writer = threading.Thread(target=busy)
    writer.start()
    try:
        eventually(lambda: written[0] > 5)
        second.commit([Put(_identity("other"))])
        during = written[0]
        eventually(lambda: written[0] > during + 5)  # and the first one goes on afterwards
    finally:
        stop.set()
        writer.join(DEADLINE_SECONDS)
    second.catch_up()
    first.catch_up()
    assert first.get(Identity, "id-other") is not None
    assert second.count(Identity) == first.count(Identity) == written[0] + 1


def test_a_setting_set_at_once_by_two_stores_is_the_first_ones(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = pair
    assert first.setdefault_setting("instance_id", "a") == "a"
    assert second.setdefault_setting("instance_id", "b") == "a"


def test_one_store_of_those_on_a_database_leads(postgres_url: str) -> None:
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    assert (first.lead(), second.lead()) == (True, False)
    first.close()  # it stops: the next to start leads
    second.close()
    third = PostgresStore(postgres_url)
    assert third.lead()
    third.close()


def test_when_the_leading_store_stops_a_running_one_takes_over(postgres_url: str) -> None:
    """What one process runs (maintenance) does not stop with the process that ran it: a store
    that waits to lead takes the lead once the one that led has stopped."""
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    events: list[str] = []
    try:
        first.when_leading(lambda: events.append("first starts"), lambda: events.append("first stops"))
        second.when_leading(lambda: events.append("second starts"), lambda: events.append("second stops"))
        assert events == ["first starts"]
        assert (first.lead(), second.lead()) == (True, False)

        first.close()  # killed or stopped: its lock goes with its connection

        deadline = time.monotonic() + 60
        while "second starts" not in events:
            assert time.monotonic() < deadline, events
            time.sleep(0.05)
        assert events == ["first starts", "second starts"]
        assert second.lead()
    finally:
        second.close()


def test_writers_of_both_stores_keep_writing_while_the_token_goes_back_and_forth(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    """Four threads on each store write flat out for two seconds: every thread writes in each
    second, none waits for the token through the whole run (a thread waiting for its store's
    hold to end joins the next hold its store takes, not only the first to see it end)."""
    stores = pair
    seconds = 2.0
    began = time.monotonic()
    stamps: dict[tuple[int, int], list[float]] = {(s, t): [] for s in range(2) for t in range(4)}
    errors: list[BaseException] = []

    def write(s: int, t: int) -> None:
        n = 0
        while time.monotonic() - began < seconds:
            try:
                stores[s].commit([Put(_identity(f"{s}-{t}-{n}"))])
            except BaseException as ex:
                errors.append(ex)
                return
            stamps[s, t].append(time.monotonic() - began)
            n += 1

    threads = [threading.Thread(target=write, args=key) for key in stamps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_SECONDS)
    assert errors == []
    for key, times in stamps.items():
        assert any(at < seconds / 2 for at in times), (key, times[:5])
        assert any(at >= seconds / 2 for at in times), (key, times[-5:])
    total = sum(len(times) for times in stamps.values())
    for store in stores:
        store.catch_up()
        assert store.count(Identity) == total
    assert stores[0].change_log_problems() == []


def test_the_holder_hands_the_token_over_at_its_next_batch_without_hearing_the_request(
    pair: tuple[PostgresStore, PostgresStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request for the token (a NOTIFY) goes unheard and the holder's follower never looks
    in pg_locks: the holder, writing flat out, still sees the waiter in the round trip of its
    next batch and lets the token go, and the other store's write lands while it writes on."""
    first, second = pair
    monkeypatch.setattr(store_module, "TOKEN_CHANNEL", "trellis_nobody_listens")
    first._waiters_checked = float("inf")  # the follower's look in pg_locks: never
    stop = threading.Event()
    written = [0]

    def busy() -> None:
        while not stop.is_set():
            first.commit([Put(_identity(f"busy-{written[0]}"))])
            written[0] += 1

    writer = threading.Thread(target=busy)
    writer.start()
    try:
        eventually(lambda: written[0] > 5)
        second.commit([Put(_identity("other"))])
        during = written[0]
        eventually(lambda: written[0] > during + 5)
    finally:
        stop.set()
        writer.join(DEADLINE_SECONDS)
    first.catch_up()
    assert first.get(Identity, "id-other") is not None


def _race(url: str, index: int, rounds: int, barrier: Any, results: Any) -> None:
    """(A spawned process) create ``round-<r>`` if it is free, for each round, in step with the
    other process; report the rounds this one created."""

    store = PostgresStore(url)
    won: list[int] = []
    try:
        for r in range(rounds):
            barrier.wait(DEADLINE_SECONDS)
            with store.write_lock():
                if store.find_unique(Identity, "name", f"round-{r}") is None:
                    store.commit([Put(_identity(f"{r}-{index}", f"round-{r}"))])
                    won.append(r)
    finally:
        results.put((index, won))
        store.close()


@pytest.mark.timeout(300)
def test_two_processes_creating_the_same_names_at_once_create_each_once(postgres_url: str) -> None:
    """Two processes (not two stores of one: two interpreters, as two workers) create the same
    name at the same moment, 50 times: exactly one of them creates it each time, and the
    database holds each name once with a change log that agrees with it."""
    rounds = 50
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    children = [
        context.Process(target=_race, args=(postgres_url, i, rounds, barrier, results)) for i in range(2)
    ]
    for child in children:
        child.start()
    try:
        won = dict(results.get(timeout=240) for _ in children)
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
    assert sorted(won[0] + won[1]) == list(range(rounds))  # one per round, none twice
    store = PostgresStore(postgres_url)
    try:
        assert store.count(Identity) == rounds
        assert store.change_log_problems() == []
    finally:
        store.close()
