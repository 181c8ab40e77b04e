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

import select
from typing import Any

import psycopg


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
