"""Request budgets shared by the processes of a PostgreSQL database (storage/postgres/rates.py):
what one process admits is taken off the other's buckets within rounds, each knows how many
share the budgets, and a client alternating between them gets one budget, not one each."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from api.limits import RateLimiter
from engine.ports import RateSpending
from storage.postgres import PostgresStore
from storage.postgres.rates import RATE_TABLE, PostgresRateBoard

#: Generous: the boards run a round every 0.05 s here; a loaded machine may take seconds.
DEADLINE = 30.0
ROUND = 0.05

Connect = Callable[[], psycopg.Connection[tuple[object, ...]]]


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE:.0f} s"
        time.sleep(0.01)


@pytest.fixture
def connect(postgres_url: str) -> Connect:
    PostgresStore(postgres_url).close()  # makes the table

    def connect() -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(postgres_url, autocommit=True)

    return connect


class Shared:
    """One process's budget of one kind, shared through its own board."""

    def __init__(self, connect: Connect, per_minute: int, burst: int) -> None:
        self.limiter = RateLimiter(per_minute, burst, time.monotonic)
        self.limiter.share()
        self.board = PostgresRateBoard(connect, round_seconds=ROUND)
        self.rounds = 0
        self.board.attach(self.export, self.absorb)

    def export(self) -> RateSpending:
        return {("write", key): n for key, n in self.limiter.spent().items()}

    def absorb(self, spent: RateSpending, processes: int) -> None:
        self.limiter.absorb({key: n for (_, key), n in spent.items()}, processes)
        self.rounds += 1

    def after_rounds(self, n: int) -> None:
        target = self.rounds + n
        until(lambda: self.rounds >= target, f"{n} rounds")


@pytest.fixture
def pair(connect: Connect) -> Iterator[tuple[Shared, Shared]]:
    one, two = Shared(connect, 1, 20), Shared(connect, 1, 20)
    yield one, two
    for shared in (one, two):
        shared.board.close()


def test_each_process_learns_how_many_share_the_budgets(pair: tuple[Shared, Shared]) -> None:
    one, two = pair
    until(lambda: one.limiter.processes == two.limiter.processes == 2, "two processes")

    two.board.close()

    until(lambda: one.limiter.processes == 1, "the one left alone")


def test_what_one_admits_is_taken_off_the_others_bucket(pair: tuple[Shared, Shared]) -> None:
    one, two = pair
    until(lambda: one.limiter.processes == two.limiter.processes == 2, "two processes")
    admitted = 0
    while (wait := one.limiter.take("client")) is None or wait == 1:  # its shares, round by round
        if wait is None:
            admitted += 1
        else:
            one.after_rounds(1)

    two.after_rounds(3)

    assert 20 <= admitted <= 21
    assert two.limiter.take("client") is not None  # the budget went on the other process


def test_a_client_alternating_between_two_processes_gets_one_budget(pair: tuple[Shared, Shared]) -> None:
    one, two = pair
    until(lambda: one.limiter.processes == two.limiter.processes == 2, "two processes")
    admitted = 0
    for i in range(200):  # as fast as it can, then slower: the rounds in between
        if (one if i % 2 else two).limiter.take("client") is None:
            admitted += 1
        if i >= 40:
            time.sleep(ROUND / 4)
    one.after_rounds(3)
    two.after_rounds(3)

    # the budget and what one round's shares admit before the other process hears of them (two
    # to five requests here), never twice the budget
    assert 20 <= admitted < 30
    assert one.limiter.take("client") is not None
    assert two.limiter.take("client") is not None


def test_old_rows_are_deleted(connect: Connect, postgres_url: str) -> None:
    board = PostgresRateBoard(connect, round_seconds=3600)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {RATE_TABLE} (owner, kind, key, spent, at) "
            "VALUES ('gone', 'write', 'c', 1, now() - interval '1 hour')"
        )
        board.publish({("write", "c"): 2})
        rows = conn.execute(f"SELECT owner, kind, key, spent FROM {RATE_TABLE} ORDER BY id").fetchall()
    board.close()

    assert rows == [(board.owner, "", "", 0), (board.owner, "write", "c", 2)]


def test_a_board_the_database_does_not_answer_stands_alone_and_keeps_what_it_admitted(
    connect: Connect, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    away = [False]

    def flaky() -> psycopg.Connection[tuple[object, ...]]:
        if away[0]:
            raise psycopg.OperationalError("the server is away")
        return connect()

    board, other = (
        PostgresRateBoard(flaky, round_seconds=3600),
        PostgresRateBoard(connect, round_seconds=3600),
    )
    try:
        other.publish({})
        assert board.read() == ({}, 2)
        away[0] = True
        board._db.close()  # the next statement connects again, and fails

        board.publish({("write", "c"): 3})
        board.publish({("write", "c"): 1})
        alone = board.read()
        away[0] = False
        board.publish({})
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            rows = conn.execute(
                f"SELECT spent FROM {RATE_TABLE} WHERE owner = %s AND kind = 'write'", [board.owner]
            ).fetchall()
    finally:
        board.close()
        other.close()

    assert alone == ({}, 1)  # unheard: its own budgets, whole, meanwhile
    assert rows == [(4,)]  # shared once it answers again, nothing lost
    said = [r for r in caplog.records if "did not answer" in r.getMessage() and r.levelname == "WARNING"]
    assert len(said) == 1  # once, not every round
