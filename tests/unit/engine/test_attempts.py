"""The guess ledger (``engine.attempts``): places taken before a check, lockouts, backoffs, claims."""

from __future__ import annotations

import threading

from engine.attempts import MemoryAttempts
from engine.ports import Backoff, Lockout

LOCKOUT = Lockout(max_attempts=3)
BACKOFF = Backoff(free=2, base=30.0, cap=120.0)


def test_pending_guesses_count_so_no_more_than_max_attempts_are_ever_checked() -> None:
    ledger = MemoryAttempts()

    attempts = [ledger.begin("k", 0.0, LOCKOUT) for _ in range(32)]

    assert sum(a.granted for a in attempts) == 3


def test_guesses_from_many_threads_at_once_get_max_attempts_places() -> None:
    ledger = MemoryAttempts()
    start = threading.Barrier(32)
    granted: list[bool] = []
    lock = threading.Lock()

    def guess() -> None:
        start.wait()
        attempt = ledger.begin("k", 0.0, LOCKOUT)
        with lock:
            granted.append(attempt.granted)

    threads = [threading.Thread(target=guess) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert granted.count(True) == 3


def test_failures_add_up_to_the_lockout_and_refuse_the_next_guess() -> None:
    ledger = MemoryAttempts()
    counts = []
    for _ in range(3):
        attempt = ledger.begin("k", 0.0, LOCKOUT)
        counts.append(ledger.fail(attempt, 0.0, LOCKOUT))

    assert counts == [1, 2, 3]
    assert ledger.begin("k", 0.0, LOCKOUT).granted is False
    ledger.forget("k")
    assert ledger.begin("k", 0.0, LOCKOUT).granted is True


def test_a_success_clears_the_failures_and_an_abandoned_guess_counts_nothing() -> None:
    ledger = MemoryAttempts()
    ledger.fail(ledger.begin("k", 0.0, LOCKOUT), 0.0, LOCKOUT)
    ledger.abandon(ledger.begin("k", 0.0, LOCKOUT))
    assert ledger.failures("k") == 1

    ledger.succeed(ledger.begin("k", 0.0, LOCKOUT))

    assert ledger.failures("k") == 0
    assert len(ledger) == 0  # an idle key is not kept


def test_no_limit_counts_but_never_refuses() -> None:
    ledger = MemoryAttempts()
    unlimited = Lockout(max_attempts=0)
    for _ in range(50):
        attempt = ledger.begin("k", 0.0, unlimited)
        assert attempt.granted
        ledger.fail(attempt, 0.0, unlimited)


def test_a_backoff_gives_free_failures_then_a_doubling_wait_up_to_its_cap() -> None:
    ledger = MemoryAttempts()
    at = 0.0
    for _ in range(2):
        ledger.fail(ledger.begin("k", at, BACKOFF), at, BACKOFF)

    refused = ledger.begin("k", at + 29.0, BACKOFF)
    assert (refused.granted, refused.retry_after) == (False, 1.0)
    waits = []
    for _ in range(4):
        attempt = ledger.begin("k", at + 1000.0, BACKOFF)
        assert attempt.granted
        at += 1000.0
        ledger.fail(attempt, at, BACKOFF)
        blocked = ledger.begin("k", at, BACKOFF)
        waits.append(blocked.retry_after)

    assert waits == [60.0, 120.0, 120.0, 120.0]


def test_past_the_free_failures_guesses_are_taken_one_at_a_time() -> None:
    ledger = MemoryAttempts()
    for _ in range(2):
        ledger.fail(ledger.begin("k", 0.0, BACKOFF), 0.0, BACKOFF)
    first = ledger.begin("k", 100.0, BACKOFF)

    second = ledger.begin("k", 100.0, BACKOFF)

    assert first.granted
    assert not second.granted


def test_a_right_guess_ends_the_wait() -> None:
    ledger = MemoryAttempts()
    for _ in range(3):
        attempt = ledger.begin("k", 1000.0, BACKOFF)
        ledger.fail(attempt, 1000.0, BACKOFF)
    ledger.succeed(ledger.begin("k", 5000.0, BACKOFF))

    assert ledger.begin("k", 5000.0, BACKOFF).granted


def test_a_claim_is_taken_once_and_never_below_a_later_one() -> None:
    ledger = MemoryAttempts()

    assert ledger.claim("step", 10, 0.0) is True
    assert ledger.claim("step", 10, 1.0) is False
    assert ledger.claim("step", 9, 1.0) is False
    assert ledger.claim("step", 12, 1.0) is True
    assert ledger.claim("other", 10, 1.0) is True


def test_old_claims_are_pruned_so_memory_stays_bounded() -> None:
    ledger = MemoryAttempts(claim_ttl=60.0)
    for i in range(5000):
        ledger.claim(f"identity-{i}", 1, 0.0)

    ledger.claim("late", 1, 1000.0)

    assert len(ledger) < 5000
