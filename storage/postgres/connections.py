"""Telling whether an idle PostgreSQL connection still works, without a round trip.

psycopg marks a connection ``broken`` only once an operation on it has failed: after the server
restarted, or a backend was ended (``pg_terminate_backend``), every connection kept idle still
looks usable, and the next statement on it fails. For the write path that would be one refused
write after every restart, for the guesses ledger a refused login, and for the write token or
the lead lock (session-level advisory locks, gone with their connection) a lock this process
believes it holds while nobody does.

An idle connection is sent nothing by the server (Trellis's connections other than the
follower's do not ``LISTEN``): when its socket has something to read, the server has closed it
or is closing it (a ``FATAL`` "terminating connection" first, then the end of the stream).
:func:`alive` looks, without reading: one ``poll`` with no wait.
"""

from __future__ import annotations

import logging
import select
import threading
from collections.abc import Callable
from typing import Any

import psycopg

log = logging.getLogger(__name__)


def alive(conn: psycopg.Connection[Any] | None) -> bool:
    """Whether ``conn`` (idle: no statement running on it) can still be used: open, not broken,
    and nothing waiting on its socket. A false alarm (a message nobody asked for) costs one new
    connection."""
    if conn is None or conn.closed or conn.broken:
        return False
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return not poller.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False


class KeptConnection:
    """One connection for a board's statements (thread-safe), opened with ``connect`` when first
    needed and again when it has gone (:func:`alive`). The boards' writes are advice, not the
    data: a statement the database does not answer is logged (naming ``what``; once, until it
    answers again, since a board tries every fraction of a second) and answered None, for the
    caller to keep what it meant to write for the next time."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], what: str) -> None:
        self._connect = connect
        self.what = what
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._failing = False

    def run(self, sql: str, params: list[object], *, fetch: bool = False) -> list[tuple[Any, ...]] | None:
        """One statement; its rows (``fetch``) or ``[]``; None when the database did not answer."""
        with self._lock:
            try:
                conn = self._conn
                if conn is None or not alive(conn):
                    if conn is not None:
                        conn.close()
                    self._conn = None
                    conn = self._conn = self._connect()
                cur = conn.execute(sql, params)
                rows = cur.fetchall() if fetch else []
            except psycopg.Error as ex:
                said, self._failing = self._failing, True
                log.log(
                    logging.DEBUG if said else logging.WARNING,
                    "%s: the database did not answer: %s",
                    self.what,
                    " ".join(str(ex).split()),
                )
                return None
            if self._failing:
                self._failing = False
                log.info("%s: the database answers again", self.what)
            return rows

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
