"""What clients spend of their request budgets on each process of a PostgreSQL database, shared.

The request budgets (``TRELLIS_RATE_*``, ``api.limits``) are token buckets in each process's
memory, checked with no round trip. :class:`PostgresRateBoard` is the
:class:`~engine.ports.RateBoard` of a PostgreSQL store: every :data:`ROUND_SECONDS` its thread
inserts what this process admitted since the last round (one row per client key and kind, and a
row saying the process is there) into the ``UNLOGGED`` table ``rate_spent``, reads the rows the
others inserted since its last read, and hands the process what they spent and how many
processes share the budgets (those heard within :data:`PEER_SECONDS`, this one included).

Rows are read by their insertion time with a margin (:data:`MARGIN_SECONDS`) and told apart by
their id, so a row whose insert committed late is still counted, once. Rows older than
:data:`KEEP_SECONDS` are deleted by whoever inserts. The table holds client addresses and API
session ids (no secret) and nothing that must survive a crash of the server: a process that
starts, or a server that restarted, counts spending from then on.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg

from engine.ports import RateSpending
from storage.postgres.connections import KeptConnection

log = logging.getLogger(__name__)

RATE_TABLE = "rate_spent"
#: How often a process shares what it admitted and reads what the others did.
ROUND_SECONDS = 0.25
#: A row inserted this long before the last read's time is looked for again (a late commit).
MARGIN_SECONDS = 2.0
#: A process not heard from for this long no longer shares the budgets.
PEER_SECONDS = 2.0
#: Rows older than this are deleted (every :data:`CLEAN_SECONDS`, by the process inserting).
KEEP_SECONDS = 30.0
CLEAN_SECONDS = 5.0

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresRateBoard:
    """The :class:`~engine.ports.RateBoard` of a PostgreSQL database (thread-safe)."""

    def __init__(self, connect: Callable[[], Connection], *, round_seconds: float = ROUND_SECONDS) -> None:
        self._db = KeptConnection(connect, "rate budgets")
        self.round_seconds = round_seconds
        #: This process's rows: host, pid and a random part (a pid may be used again).
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._export: Callable[[], RateSpending] | None = None
        self._absorb: Callable[[RateSpending, int], None] | None = None
        self._unsent: RateSpending = {}
        self._read_at: datetime | None = None  # the database's time at the last read
        self._counted: dict[int, datetime] = {}  # rows counted, by id, with their time
        self._peers: dict[str, datetime] = {}  # other processes, by the time of their last row
        self._cleaned = 0.0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the port ------------------------------------------------------------------------------
    def attach(self, export: Callable[[], RateSpending], absorb: Callable[[RateSpending, int], None]) -> None:
        with self._lock:
            self._export, self._absorb = export, absorb
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._loop, name="trellis-rates", daemon=True)
                self._thread.start()

    # -- the thread ----------------------------------------------------------------------------
    def sync(self) -> None:
        """One round: share what this process admitted, take in what the others did."""
        export, absorb = self._export, self._absorb
        if export is None or absorb is None:
            return
        with self._lock:
            self.publish(export())
            spent, processes = self.read()
        try:
            absorb(spent, processes)
        except Exception:  # the board must outlive a bug of its reader
            log.exception("rate budgets: what other processes admitted could not be taken in")

    def publish(self, spent: RateSpending) -> None:
        """Insert ``spent`` (with what a failed round kept) and this process's presence row."""
        for key, n in spent.items():
            self._unsent[key] = self._unsent.get(key, 0) + n
        keys = [("", ""), *self._unsent]
        done = self._db.run(
            f"INSERT INTO {RATE_TABLE} (owner, kind, key, spent) "
            "SELECT %s, k, c, n FROM unnest(%s::text[], %s::text[], %s::int[]) AS u(k, c, n)",
            [
                self.owner,
                [kind for kind, _ in keys],
                [client for _, client in keys],
                [self._unsent.get(key, 0) for key in keys],
            ],
        )
        if done is None:
            return  # kept for the next round
        self._unsent = {}
        now = time.monotonic()
        if now - self._cleaned >= CLEAN_SECONDS:
            self._cleaned = now
            self._db.run(
                f"DELETE FROM {RATE_TABLE} WHERE at < now() - make_interval(secs => %s)", [KEEP_SECONDS]
            )

    def read(self) -> tuple[RateSpending, int]:
        """What the others admitted since the last read (each row once), and how many processes
        share the budgets now (1 while the database does not answer and no other was heard)."""
        spent: RateSpending = {}
        after = self._read_at - timedelta(seconds=MARGIN_SECONDS) if self._read_at is not None else None
        rows = self._db.run(
            "SELECT 0::bigint, '', '', '', 0, now(), now() "
            f"UNION ALL SELECT id, owner, kind, key, spent, at, now() FROM {RATE_TABLE} "
            "WHERE owner <> %s AND at > coalesce(%s, now() - make_interval(secs => %s))",
            [self.owner, after, PEER_SECONDS],
            fetch=True,
        )
        if rows:
            now = rows[0][6]
            assert isinstance(now, datetime)
            first = self._read_at is None
            self._read_at = now
            for row_id, owner, kind, key, n, at, _ in rows[1:]:
                assert isinstance(at, datetime)
                owner = str(owner)
                if at > self._peers.get(owner, at - timedelta(1)):
                    self._peers[owner] = at
                if first or int(row_id) in self._counted or not n:
                    continue
                self._counted[int(row_id)] = at
                key_of = (str(kind), str(key))
                spent[key_of] = spent.get(key_of, 0) + int(n)
            horizon = now - timedelta(seconds=MARGIN_SECONDS + 1)
            self._counted = {i: at for i, at in self._counted.items() if at > horizon}
            peers = now - timedelta(seconds=PEER_SECONDS)
            self._peers = {owner: at for owner, at in self._peers.items() if at > peers}
        elif rows is None:
            self._peers.clear()  # unheard: each process keeps its own budgets meanwhile
        return spent, 1 + len(self._peers)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            began = time.monotonic()
            self.sync()
            self._stopping.wait(max(0.0, self.round_seconds - (time.monotonic() - began)))

    def close(self) -> None:
        """Stop the thread (sharing what is left) and close the connection."""
        self._stopping.set()
        thread = self._thread
        if thread is not None:
            thread.join(max(self.round_seconds, 1.0) * 4)
        export = self._export
        if export is not None:
            with self._lock:
                self.publish(export())
        self._db.close()
