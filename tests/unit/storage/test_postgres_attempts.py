"""The guesses ledger in PostgreSQL (storage/postgres/attempts.py): the rules of
engine/attempts.py's memory ledger, shared by every process of a database (here: two ledgers on
one database, as two processes hold them)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest

from engine.attempts import MemoryAttempts
from engine.errors import CommitFailedError
from engine.ports import Attempts, Backoff, Lockout
from storage.postgres import PostgresStore
from storage.postgres.attempts import PENDING_SECONDS, PostgresAttempts

LOCKOUT = Lockout(max_attempts=3)
BACKOFF = Backoff(free=2, base=1.0, cap=8.0)


@pytest.fixture
def ledgers(postgres_url: str) -> Iterator[tuple[PostgresAttempts, PostgresAttempts]]:
    store = PostgresStore(postgres_url)  # makes the tables
    store.close()

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(postgres_url, autocommit=True)

    first, second = PostgresAttempts(connect), PostgresAttempts(connect)
    yield first, second
    first.close()
    second.close()


def test_a_lockout_counts_the_guesses_of_every_process(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    first, second = ledgers
    one = first.begin("updb:a", 100.0, LOCKOUT)
    two = second.begin("updb:a", 100.0, LOCKOUT)
    three = first.begin("updb:a", 100.0, LOCKOUT)
    fourth = second.begin("updb:a", 100.0, LOCKOUT)  # three pending: refused unchecked

    assert (one.granted, two.granted, three.granted, fourth.granted) == (True, True, True, False)
    assert first.fail(one, 101.0, LOCKOUT) == 1
    assert second.fail(two, 101.0, LOCKOUT) == 2
    first.abandon(three)  # the check could not run: its place is given back, nothing counted
    assert second.failures("updb:a") == 2
    assert first.begin("updb:b", 101.0, LOCKOUT).granted  # another key: its own count
    again = second.begin("updb:a", 102.0, LOCKOUT)
    assert again.granted
    assert first.fail(again, 102.0, LOCKOUT) == 3
    assert not first.begin("updb:a", 103.0, LOCKOUT).granted
    second.forget("updb:a")  # the caller locked the identity out
    assert first.failures("updb:a") == 0
    assert first.begin("updb:a", 104.0, LOCKOUT).granted


def test_a_success_clears_the_key(ledgers: tuple[PostgresAttempts, PostgresAttempts]) -> None:
    first, second = ledgers
    failed = first.begin("k", 1.0, LOCKOUT)
    first.fail(failed, 1.0, LOCKOUT)
    right = second.begin("k", 2.0, LOCKOUT)
    second.succeed(right)

    assert first.failures("k") == 0


def test_a_backoff_takes_one_guess_at_a_time_and_doubles_its_wait(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    first, second = ledgers
    for at in (0.0, 0.0):  # the free failures
        attempt = first.begin("mfa:x", at, BACKOFF)
        assert attempt.granted
        second.fail(attempt, at, BACKOFF)
    blocked = second.begin("mfa:x", 0.5, BACKOFF)
    assert not blocked.granted
    assert blocked.retry_after == pytest.approx(0.5)  # base 1 s after the second failure
    taken = first.begin("mfa:x", 1.0, BACKOFF)
    assert taken.granted
    queued = second.begin("mfa:x", 1.0, BACKOFF)  # past the free ones, one is being checked
    assert (queued.granted, queued.retry_after) == (False, BACKOFF.base)
    first.fail(taken, 1.0, BACKOFF)
    assert second.begin("mfa:x", 2.9, BACKOFF).retry_after == pytest.approx(0.1)  # 2 s now


def test_a_claim_is_refused_unless_above_every_earlier_one(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    first, second = ledgers
    assert first.claim("totp-step:x", 10, 1.0)
    assert not second.claim("totp-step:x", 10, 1.0)  # the same code on the other process
    assert not second.claim("totp-step:x", 9, 1.0)
    assert second.claim("totp-step:x", 11, 2.0)


def test_a_place_left_by_a_process_that_died_stops_counting(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    first, second = ledgers
    for _ in range(3):
        assert first.begin("updb:gone", 10.0, LOCKOUT).granted  # never settled: the process died
    assert not second.begin("updb:gone", 10.0 + PENDING_SECONDS, LOCKOUT).granted
    assert second.begin("updb:gone", 11.0 + PENDING_SECONDS, LOCKOUT).granted


def test_concurrent_guesses_on_two_ledgers_get_no_more_places_than_the_lockout(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    granted: list[bool] = []
    barrier = threading.Barrier(16)

    def guess(ledger: Attempts) -> None:
        barrier.wait()
        granted.append(ledger.begin("updb:raced", 5.0, LOCKOUT).granted)

    threads = [threading.Thread(target=guess, args=(ledgers[n % 2],)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(granted) == [False] * 13 + [True] * 3


def test_the_memory_ledger_and_this_one_answer_alike(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    """The same sequence of operations on both ledgers: the same answers."""
    memory, shared = MemoryAttempts(), ledgers[0]
    answers: list[list[object]] = [[], []]
    for n, ledger in enumerate((memory, shared)):
        out = answers[n]
        rule: Lockout | Backoff
        for rule in (LOCKOUT, BACKOFF):
            key = f"seq-{type(rule).__name__}"
            for at in (0.0, 0.0, 0.5, 1.0, 1.0, 4.0, 20.0):
                attempt = ledger.begin(key, at, rule)
                out.append((attempt.granted, attempt.retry_after))
                if attempt.granted:
                    out.append(ledger.fail(attempt, at, rule))
            out.append(ledger.failures(key))
    assert answers[0] == answers[1]


def test_a_database_that_is_gone_refuses_the_guess(postgres_url: str) -> None:
    def unreachable() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect("host=/nonexistent-trellis-socket-dir dbname=x connect_timeout=2")

    ledger = PostgresAttempts(unreachable)
    with pytest.raises(CommitFailedError):
        ledger.begin("updb:a", 1.0, LOCKOUT)


def test_guesses_that_settle_while_others_begin_never_find_their_row_gone(
    ledgers: tuple[PostgresAttempts, PostgresAttempts],
) -> None:
    """A success drops the key's row; a guess beginning on another process at that moment still
    gets its place (the row made again), never an error."""
    errors: list[BaseException] = []
    rule = Lockout(max_attempts=0)  # no limit: every guess gets a place

    def logins(ledger: PostgresAttempts) -> None:
        try:
            for n in range(60):
                attempt = ledger.begin("updb:busy", float(n), rule)
                assert attempt.granted
                ledger.succeed(attempt)
        except BaseException as ex:  # collected for the assertion below
            errors.append(ex)

    first, second = ledgers
    others = [PostgresAttempts(first._connect) for _ in range(4)]
    try:
        threads = [threading.Thread(target=logins, args=(ledger,)) for ledger in (first, second, *others)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        for ledger in others:
            ledger.close()

    assert errors == []
    assert first.failures("updb:busy") == 0
