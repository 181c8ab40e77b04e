"""The routers connected to each process of a PostgreSQL database, shared.

A router keeps its control connection to the one process of a controller that leads (and, with
several controllers, to one of each): the others learn of it here. :class:`PostgresFleetBoard`
is the :class:`~engine.ports.FleetBoard` of a PostgreSQL store: a background thread upserts this
process's fleet (``export``) into the ``UNLOGGED`` table ``fleet_state`` (one row per process,
``owner``) when it changed and every :data:`RENEW_SECONDS`, with an expiry of
:data:`EXPIRE_SECONDS`; and every :data:`PULL_SECONDS` it reads the other live rows, handing them
to ``absorb`` when they differ from the last it read.

So a router connected to one process is online in every other within about
:data:`PULL_SECONDS`; a process that ends cleanly withdraws its row at once, and one that is
killed is forgotten when its row expires (its routers have lost their connection with it and
connect again to whichever process leads next). The table holds no secret and nothing that must
survive a crash of the database server: the live processes write it again within seconds.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable

import psycopg
from psycopg.types.json import Jsonb

from engine.ports import FleetState
from storage.postgres.connections import alive

log = logging.getLogger(__name__)

FLEET_TABLE = "fleet_state"
#: How often the other processes' fleets are read.
PULL_SECONDS = 0.5
#: How often a process renews its row, changed or not, and how long a row lives unrenewed.
RENEW_SECONDS = 3.0
EXPIRE_SECONDS = 15.0

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresFleetBoard:
    """The :class:`~engine.ports.FleetBoard` of a PostgreSQL database (thread-safe)."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        *,
        pull_seconds: float = PULL_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
        expire_seconds: float = EXPIRE_SECONDS,
    ) -> None:
        self._connect = connect
        self.pull_seconds = pull_seconds
        self.renew_seconds = renew_seconds
        self.expire_seconds = expire_seconds
        #: This process's row: host, pid and a random part (a pid may be used again).
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._conn: Connection | None = None
        self._export: Callable[[], FleetState] | None = None
        self._absorb: Callable[[list[FleetState]], None] | None = None
        self._wake = threading.Event()
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._last_read: list[FleetState] | None = None
        self._published = False
        self._renewed_at = 0.0

    # -- the port ------------------------------------------------------------------------------
    def attach(self, export: Callable[[], FleetState], absorb: Callable[[list[FleetState]], None]) -> None:
        with self._lock:
            self._export, self._absorb = export, absorb
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._loop, name="trellis-fleet", daemon=True)
                self._thread.start()

    def changed(self) -> None:
        self._dirty.set()
        self._wake.set()

    # -- the thread ----------------------------------------------------------------------------
    def sync(self) -> None:
        """One round: share this process's fleet if it changed or is due, read the others'."""
        export, absorb = self._export, self._absorb
        if export is None or absorb is None:
            return
        try:
            conn = self._connection()
            if self._dirty.is_set() or self._due():
                self._dirty.clear()
                self._publish(conn, export())
            rows = conn.execute(
                f"SELECT state FROM {FLEET_TABLE} WHERE owner <> %s AND expires_at > now() ORDER BY owner",
                [self.owner],
            ).fetchall()
        except psycopg.Error as ex:
            self._dirty.set()  # shared again at the next round
            self._drop_connection()
            log.warning("fleet: the database did not answer: %s", " ".join(str(ex).split()))
            return
        states = [row[0] for row in rows if isinstance(row[0], dict)]
        if states != self._last_read:
            self._last_read = states
            try:
                absorb(states)
            except Exception:  # the board must outlive a bug of its reader
                log.exception("fleet: the other processes' routers could not be taken in")

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.sync()
            self._wake.wait(self.pull_seconds)
            self._wake.clear()

    def _due(self) -> bool:
        return time.monotonic() - self._renewed_at >= self.renew_seconds if self._published else True

    def _publish(self, conn: Connection, state: FleetState) -> None:
        conn.execute(
            f"INSERT INTO {FLEET_TABLE} (owner, state, expires_at) "
            f"VALUES (%s, %s, now() + make_interval(secs => %s)) ON CONFLICT (owner) "
            "DO UPDATE SET state = EXCLUDED.state, expires_at = EXCLUDED.expires_at",
            [self.owner, Jsonb(state), self.expire_seconds],
        )
        self._published, self._renewed_at = True, time.monotonic()
        # rows of processes gone without a word (kill -9) are dropped by whoever renews
        conn.execute(f"DELETE FROM {FLEET_TABLE} WHERE expires_at < now() - interval '1 minute'")

    def _connection(self) -> Connection:
        conn = self._conn
        if not alive(conn):
            self._drop_connection()
            conn = self._conn = self._connect()
            # a crash of the server empties UNLOGGED tables: this process's row is shared again
            self._dirty.set()
        assert conn is not None
        return conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Stop the thread and withdraw this process's row (its routers are no longer here)."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(max(self.pull_seconds, 1.0) * 4)
        try:
            if self._published:
                self._connection().execute(f"DELETE FROM {FLEET_TABLE} WHERE owner = %s", [self.owner])
        except psycopg.Error as ex:
            log.info("fleet: the row of this process could not be withdrawn: %s", " ".join(str(ex).split()))
        self._drop_connection()
