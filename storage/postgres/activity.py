"""API sessions' last use, shared by the processes serving one PostgreSQL database.

Each process keeps the activity of the API sessions it serves in memory and writes it to the
session itself only now and then (through the write path, which on a shared database needs the
cluster's write token). Without more, a session used only on one worker looks idle to the others,
and the worker that runs the purge would end it as expired while it is in use.
:class:`PostgresActivity` shares the activity outside the change log instead: what a process
notes is upserted (the later time wins) into the ``UNLOGGED`` table ``api_session_activity`` by a
background thread every :data:`SHARE_SECONDS`, one statement for all the sessions noted since, and
a process about to end a session as expired asks the table first (``latest``).

The table holds no secret (session ids and times) and nothing that must survive a crash of the
server: at worst a session's activity of the last minutes is forgotten with it, as one process
forgets it when it restarts. Rows of ended sessions are dropped (``forget``, and every
:data:`SWEEP_SECONDS` those not used for ``retain``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import psycopg

from storage.postgres.connections import KeptConnection

log = logging.getLogger(__name__)

ACTIVITY_TABLE = "api_session_activity"
#: How often what a process noted is shared: a session used in the last seconds before it is
#: judged expired elsewhere (after a whole timeout of rest, 30 minutes by default) may be missed.
SHARE_SECONDS = 5.0
#: How often rows not used for ``retain`` are dropped.
SWEEP_SECONDS = 3600.0

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresActivity:
    """The :class:`~engine.ports.ActivityBoard` of a PostgreSQL database (thread-safe)."""

    def __init__(self, connect: Callable[[], Connection], *, retain: timedelta) -> None:
        self.retain = retain
        self._db = KeptConnection(connect, "API-session activity")
        self._noted: dict[str, datetime] = {}
        self._noted_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._swept_at = time.monotonic()

    # -- the port ------------------------------------------------------------------------------
    def note(self, session_id: str, when: datetime) -> None:
        with self._noted_lock:
            held = self._noted.get(session_id)
            if held is None or held < when:
                self._noted[session_id] = when
            if self._thread is None and not self._stopping.is_set():
                self._thread = threading.Thread(target=self._share_loop, name="trellis-activity", daemon=True)
                self._thread.start()

    def latest(self, session_ids: Sequence[str]) -> dict[str, datetime]:
        rows = self._run(
            f"SELECT id, at FROM {ACTIVITY_TABLE} WHERE id = ANY(%s)", [list(session_ids)], fetch=True
        )
        return {str(row[0]): row[1] for row in rows or () if isinstance(row[1], datetime)}

    def forget(self, session_ids: Sequence[str]) -> None:
        if session_ids:
            self._run(f"DELETE FROM {ACTIVITY_TABLE} WHERE id = ANY(%s)", [list(session_ids)])

    # -- sharing -------------------------------------------------------------------------------
    def share(self) -> None:
        """Upsert what was noted since the last time (the later time of each session wins)."""
        with self._noted_lock:
            noted, self._noted = self._noted, {}
        if not noted:
            return
        ids, times = list(noted), list(noted.values())
        done = self._run(
            f"INSERT INTO {ACTIVITY_TABLE} (id, at) SELECT * FROM unnest(%s::text[], %s::timestamptz[]) "
            f"ON CONFLICT (id) DO UPDATE SET at = GREATEST({ACTIVITY_TABLE}.at, EXCLUDED.at)",
            [ids, times],
        )
        if done is None:  # the database did not answer: kept for the next time
            with self._noted_lock:
                for session_id, when in noted.items():
                    held = self._noted.get(session_id)
                    if held is None or held < when:
                        self._noted[session_id] = when

    def _share_loop(self) -> None:
        while not self._stopping.wait(SHARE_SECONDS):
            self.share()
            self._sweep()

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept_at < SWEEP_SECONDS:
            return
        self._swept_at = now
        self._run(f"DELETE FROM {ACTIVITY_TABLE} WHERE at < %s", [datetime.now(UTC) - self.retain])

    def _run(self, sql: str, params: list[object], *, fetch: bool = False) -> list[tuple[object, ...]] | None:
        """One statement; None when the database did not answer (the board is advice: it costs
        at most a session ended early or late)."""
        return self._db.run(sql, params, fetch=fetch)

    def close(self) -> None:
        """Share what is noted, stop the thread, close the connection."""
        self._stopping.set()
        thread = self._thread
        if thread is not None:
            thread.join(SHARE_SECONDS * 2)
        self.share()
        self._db.close()
