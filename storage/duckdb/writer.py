"""Where the DuckDB statements of a running store execute: in this process, or in a writer process.

A store's committer thread writes each batch as one transaction (``BEGIN``, one statement per
table, the change log, ``COMMIT``). In a process that also serves requests on many threads, each
of those DuckDB calls gives up the GIL and must win it back from the request threads before the
next statement can start: measured at tier L, a batch of a few rows took ~20 ms that way, and
durable writes stopped at ~800/s whatever the batch size. :class:`ProcessDatabase` runs the
statements in a child process instead (:func:`main` in a fresh interpreter, DuckDB's only
connection to the file while the store is open): the committer hands it a whole transaction in
one message and waits once for the answer, and the child runs it on its own GIL.

Both kinds have one method, :meth:`Database.run`: a list of ``(sql, params)`` executed in order on
one connection, answering each statement's rows (``[]`` for a statement without a result). When
one fails, the ``on_error`` statements run (a ``ROLLBACK``, a ``DETACH``; their own failures are
ignored) and the failure is raised as a :class:`duckdb.Error`. A child that has gone (killed, out
of memory) fails the call with :class:`WriterGone` (a ``duckdb.Error``: the batch is refused with
``COMMIT_FAILED``) and is started again, on the same file, at the next call.

The child reads framed requests on its standard input and answers on its standard output
(a 4-byte length, then a pickle: both ends are this module). It ignores SIGINT (Ctrl-C in a
terminal reaches the whole process group; the store closes the child itself, after the last
batch) and ends when its input closes, so a parent that dies takes it along once the current
transaction is done. DuckDB's file lock is the child's from its ``open`` on: a new server waits
for it (see :func:`connect`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import duckdb

__all__ = ["Database", "LocalDatabase", "ProcessDatabase", "Statement", "WriterGone", "connect", "execute"]

log = logging.getLogger(__name__)

Statement = tuple[str, Sequence[Any] | None]
Config = dict[str, str | bool | int | float | list[str]]
_HEADER = struct.Struct("!I")
#: How long :func:`connect` waits for another process to let go of the database's lock.
LOCK_WAIT_SECONDS = 15.0


class WriterGone(duckdb.Error):
    """The writer process is not there to answer (it is started again at the next call)."""


class Database(Protocol):
    """The statements of a running store (see the module docstring)."""

    #: Held while statements run (re-entrant): whoever holds it keeps the database busy.
    lock: threading.RLock

    def run(self, statements: Sequence[Statement], on_error: Sequence[Statement] = ()) -> list[list[Any]]:
        """Execute ``statements`` in order; every statement's rows."""
        ...

    def close(self) -> None:
        """Close the connection (and end the writer process, if any)."""
        ...


def connect(path: Path, config: Config) -> duckdb.DuckDBPyConnection:
    """Open ``path``, waiting up to :data:`LOCK_WAIT_SECONDS` while another process holds its
    lock (the writer of a server that has just stopped, finishing its last transaction)."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            return duckdb.connect(str(path), config=config)
        except duckdb.IOException as ex:
            if "lock" not in str(ex).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def execute(
    con: duckdb.DuckDBPyConnection, statements: Sequence[Statement], on_error: Sequence[Statement]
) -> list[list[Any]]:
    """:meth:`Database.run` on a connection."""
    results: list[list[Any]] = []
    try:
        for sql, params in statements:
            con.execute(sql, params)
            results.append(con.fetchall() if con.description is not None else [])
    except BaseException:
        for sql, params in on_error:
            try:
                con.execute(sql, params)
            except duckdb.Error as ex:
                log.debug("ignored while recovering: %s", ex)
        raise
    return results


class LocalDatabase:
    """The statements run on a connection of this process (one call at a time)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.lock = threading.RLock()

    def run(self, statements: Sequence[Statement], on_error: Sequence[Statement] = ()) -> list[list[Any]]:
        with self.lock:
            return execute(self.con, statements, on_error)

    def close(self) -> None:
        with self.lock:
            self.con.close()


def _send(stream: IO[bytes], message: object) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack(header)
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)  # the other end is this module, in our own child


class ProcessDatabase:
    """The statements run in a writer process on ``path`` (started here; see the module)."""

    def __init__(self, path: Path, config: Config) -> None:
        self.path = path
        self.config = dict(config)
        self.lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._opened = False
        self._closed = False
        self.start()

    def start(self) -> None:
        """Start the child (it imports DuckDB meanwhile); :meth:`open` gives it the file."""
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from storage.duckdb.writer import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self._opened = False

    def open(self) -> None:
        """Have the child open the database (this process must have closed its connection)."""
        with self.lock:
            self._call(("open", str(self.path), self.config))
            self._opened = True

    def run(self, statements: Sequence[Statement], on_error: Sequence[Statement] = ()) -> list[list[Any]]:
        with self.lock:
            if self._closed:
                raise WriterGone("the database is closed")
            proc = self._proc
            if proc is None or proc.poll() is not None:
                log.warning("the database writer process has gone; starting it again")
                self._stop()
                self.start()
            if not self._opened:
                self._call(("open", str(self.path), self.config))
                self._opened = True
            result: list[list[Any]] = self._call(("run", list(statements), list(on_error)))
            return result

    def _call(self, request: tuple[Any, ...]) -> Any:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise WriterGone("no database writer process")
        try:
            _send(proc.stdin, request)
            reply = _receive(proc.stdout)
        except (BrokenPipeError, OSError) as ex:
            self._opened = False
            raise WriterGone(f"the database writer process has gone: {ex}") from ex
        if reply is None:
            self._opened = False
            raise WriterGone("the database writer process has gone")
        status, value = reply
        if status == "ok":
            return value
        kind, message = value
        error = getattr(duckdb, kind, None)
        if isinstance(error, type) and issubclass(error, duckdb.Error):
            raise error(message)
        raise duckdb.Error(f"{kind}: {message}")

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        self._opened = False
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def close(self) -> None:
        """Close the database in the child (a checkpoint), then end it."""
        with self.lock:
            if self._closed:
                return
            self._closed = True
            proc = self._proc
            if proc is not None and proc.poll() is None:
                try:
                    self._call(("close",))
                except duckdb.Error as ex:
                    log.warning("closing the database writer: %s", ex)
            self._stop()

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid


def main() -> None:
    """The writer process: answer requests on stdin/stdout until stdin closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers goes to the parent's pipe
    con: duckdb.DuckDBPyConnection | None = None
    try:
        while True:
            request = _receive(requests)
            if request is None:
                break
            try:
                if request[0] == "open":
                    if con is not None:
                        con.close()
                    con = connect(Path(request[1]), request[2])
                    _send(answers, ("ok", None))
                elif request[0] == "run":
                    if con is None:
                        raise duckdb.ConnectionException("the database is not open")
                    _send(answers, ("ok", execute(con, request[1], request[2])))
                elif request[0] == "close":
                    if con is not None:
                        con.close()
                        con = None
                    _send(answers, ("ok", None))
                    break
                else:
                    raise ValueError(f"unknown request {request[0]!r}")
            except Exception as ex:
                _send(answers, ("error", (type(ex).__name__, str(ex))))
    finally:
        if con is not None:
            con.close()


if __name__ == "__main__":
    main()
