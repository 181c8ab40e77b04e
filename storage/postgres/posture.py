"""Identities' posture data, shared by the processes of a PostgreSQL database.

Posture data lives in memory (``engine.managers.posture``), as in OpenZiti; an SDK's posture
responses reach one process and its session requests may reach any. :class:`PostgresPostureBoard`
is the :class:`~engine.ports.PostureBoard` of a PostgreSQL store: what a process publishes is
upserted into the ``UNLOGGED`` table ``posture_data`` (the latest state of each identity, numbered
from the sequence ``posture_changes``) before the posture response is answered (by a background
thread later if the database did not answer); every :data:`PULL_SECONDS` the thread reads what
the others published since the last number it saw and hands it to the process. A process about to refuse a
session for posture reads the identity's row first (:meth:`PostgresPostureBoard.latest`), so a
response sent to another process a moment before counts.

The table holds what clients report of their devices (OS, domain, MAC addresses, processes), no
secret, and nothing that must survive a crash of the server: as after a restart of a process,
SDKs send their posture again when asked (their posture queries' timeouts).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable

import psycopg
from psycopg.types.json import Jsonb

from engine.ports import PostureState
from storage.postgres.connections import KeptConnection

log = logging.getLogger(__name__)

POSTURE_TABLE = "posture_data"
POSTURE_SEQUENCE = "posture_changes"
#: How often the other processes' publications are read, and the least time between two writes.
PULL_SECONDS = 0.25
MIN_GAP_SECONDS = 0.02

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresPostureBoard:
    """The :class:`~engine.ports.PostureBoard` of a PostgreSQL database (thread-safe)."""

    shares = True

    def __init__(self, connect: Callable[[], Connection], *, pull_seconds: float = PULL_SECONDS) -> None:
        self._db = KeptConnection(connect, "posture")
        self.pull_seconds = pull_seconds
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._queued: dict[str, PostureState] = {}
        self._forgotten: set[str] = set()
        self._queue_lock = threading.Lock()
        # One flush at a time: a publish that finds its state already taken by the thread's flush
        # returns only once that flush's statement is done, so "written before this returns" holds.
        self._flush_lock = threading.Lock()
        self._absorb: Callable[[dict[str, PostureState]], None] | None = None
        self._seen = -1  # the last number read (-1: none yet, start from the current one)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the port ------------------------------------------------------------------------------
    def attach(self, absorb: Callable[[dict[str, PostureState]], None]) -> None:
        self._absorb = absorb
        self._start()

    def publish(self, identity_id: str, state: PostureState) -> None:
        """Written before this returns (one statement), so that a session request to another
        process right after the posture response finds it; kept for the thread if the database
        does not answer."""
        with self._queue_lock:
            self._queued[identity_id] = state
        self._start()
        self.flush()

    def latest(self, identity_id: str) -> PostureState | None:
        self.flush()  # what this process published first: the row is then the latest of all
        rows = self._run(f"SELECT state FROM {POSTURE_TABLE} WHERE identity_id = %s", [identity_id])
        if not rows or not isinstance(rows[0][0], dict):
            return None
        return rows[0][0]

    def forget(self, identity_id: str) -> None:
        with self._queue_lock:  # dropped by the thread: this may be called on a commit's thread
            self._queued.pop(identity_id, None)
            self._forgotten.add(identity_id)
        self._start()
        self._wake.set()

    # -- the thread ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write what was published and not written yet (kept for the next time on a failure)."""
        with self._flush_lock:
            self._flush()

    def _flush(self) -> None:
        with self._queue_lock:
            queued, self._queued = self._queued, {}
            forgotten, self._forgotten = self._forgotten, set()
        if (
            forgotten
            and self._run(
                f"DELETE FROM {POSTURE_TABLE} WHERE identity_id = ANY(%s)", [list(forgotten)], fetch=False
            )
            is None
        ):
            with self._queue_lock:
                self._forgotten |= forgotten
        if not queued:
            return
        ids = list(queued)
        done = self._run(
            f"INSERT INTO {POSTURE_TABLE} (identity_id, owner, state, changed) "
            f"SELECT i, %s, s, nextval('{POSTURE_SEQUENCE}') FROM unnest(%s::text[], %s::jsonb[]) AS u(i, s) "
            "ON CONFLICT (identity_id) DO UPDATE SET owner = EXCLUDED.owner, state = EXCLUDED.state, "
            "changed = EXCLUDED.changed",
            [self.owner, ids, [Jsonb(queued[i]) for i in ids]],
            fetch=False,
        )
        if done is None:
            with self._queue_lock:
                for identity_id, state in queued.items():
                    self._queued.setdefault(identity_id, state)

    def pull(self) -> None:
        """Hand the process what the others published since the last time."""
        absorb = self._absorb
        if absorb is None:
            return
        if self._seen < 0:
            rows = self._run(f"SELECT coalesce(max(changed), 0) FROM {POSTURE_TABLE}", [])
            if not rows:
                return
            start = int(rows[0][0])  # type: ignore[call-overload]
            # everything published before this process started listening, once
            rows = self._run(
                f"SELECT identity_id, state, changed FROM {POSTURE_TABLE} WHERE owner <> %s", [self.owner]
            )
            if rows is None:
                return
            self._seen = start
        else:
            rows = self._run(
                f"SELECT identity_id, state, changed FROM {POSTURE_TABLE} "
                "WHERE changed > %s AND owner <> %s ORDER BY changed",
                [self._seen, self.owner],
            )
            if rows is None:
                return
        changed = {str(r[0]): r[1] for r in rows if isinstance(r[1], dict)}
        for row in rows:
            self._seen = max(self._seen, int(row[2]))  # type: ignore[call-overload]
        if changed:
            try:
                absorb(changed)
            except Exception:  # the board must outlive a bug of its reader
                log.exception("posture: what other processes published could not be taken in")

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self.flush()
            self.pull()
            self._stopping.wait(MIN_GAP_SECONDS)
            self._wake.wait(self.pull_seconds)
            self._wake.clear()

    def _start(self) -> None:
        if self._thread is None and not self._stopping.is_set():
            with self._queue_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._loop, name="trellis-posture", daemon=True)
                    self._thread.start()

    def _run(self, sql: str, params: list[object], *, fetch: bool = True) -> list[tuple[object, ...]] | None:
        """One statement; None when the database did not answer (the board is advice: a failure
        costs at most a response counted late)."""
        return self._db.run(sql, params, fetch=fetch)

    def close(self) -> None:
        """Write what is queued, stop the thread, close the connection."""
        self._stopping.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(max(self.pull_seconds, 1.0) * 4)
        self.flush()
        self._db.close()
