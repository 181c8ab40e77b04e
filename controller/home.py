"""``TRELLIS_HOME`` on disk, checked before a command uses it.

A Trellis home holds ``trellis.duckdb`` and ``pki/`` (``trellis init`` makes both). The CLI looks
before it touches anything: ``serve`` wants a complete home, ``init`` a new, empty or Trellis
one (never a directory of other files: it would tighten it to 0700 and write into it),
``restore`` an existing one. Each refusal is a :class:`~controller.settings.SettingError` naming
``TRELLIS_HOME``.

One server per home: ``serve`` holds an exclusive ``flock`` on ``<home>/serve.lock`` (its pid
inside) for as long as it runs; its gunicorn worker inherits it. A second ``serve`` (or a
``restore``, or an ``init``) finds it taken and stops at once, before gunicorn starts, instead of
failing on DuckDB's lock in the worker. DuckDB's own lock on the database (held by whatever has
it open: the writer process of a server that is just stopping, a ``duckdb`` shell) is then
waited for a while, as the worker would wait for it, and named if it stays.

Only the standard library: the serving process must not load DuckDB before it forks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
import sys
import time
from pathlib import Path

from controller.settings import SettingError

DB_FILE = "trellis.duckdb"
PKI_DIR = "pki"
LOCK_FILE = "serve.lock"
#: What ``trellis init`` writes into ``pki/``.
PKI_FILES = (
    "root-ca.pem",
    "root-ca.key",
    "intermediate-ca.pem",
    "intermediate-ca.key",
    "server.pem",
    "server.key",
    "ca-bundle.pem",
)
#: How long ``serve`` waits for another process to let go of the database (as the store's
#: ``storage.duckdb.writer.LOCK_WAIT_SECONDS``, which the worker would wait).
DATABASE_WAIT_SECONDS = 15.0
#: How long ``serve`` waits for the lock of a server whose main process has gone (its worker
#: notices within a second or two and stops).
ORPHAN_WAIT_SECONDS = 10.0

MISSING = "missing"
NOT_A_DIRECTORY = "not a directory"
EMPTY = "empty"
PARTIAL = "partial"
TRELLIS = "trellis"
FOREIGN = "foreign"


def shown(home: Path) -> str:
    """``home`` as given, and where that is when it is relative."""
    return str(home) if home.is_absolute() else f"{home} ({Path.cwd() / home})"


def examine(home: Path) -> tuple[str, list[str]]:
    """What ``home`` is (one of the constants above) and, for an incomplete home, what it lacks."""
    try:
        if not home.exists():
            return MISSING, []
        if not home.is_dir():
            return NOT_A_DIRECTORY, []
        entries = {p.name for p in home.iterdir()}
        pki = home / PKI_DIR
        pki_files = {p.name for p in pki.iterdir()} if pki.is_dir() else set()
    except PermissionError as ex:
        raise SettingError(f"TRELLIS_HOME {shown(home)} cannot be read: {ex.strerror}") from None
    if not entries:
        return EMPTY, [DB_FILE, f"{PKI_DIR}/"]
    if DB_FILE not in entries and PKI_DIR not in entries:
        return FOREIGN, []
    lacking = [] if DB_FILE in entries else [DB_FILE]
    if PKI_DIR not in entries:
        lacking.append(f"{PKI_DIR}/")
    else:
        lacking += [f"{PKI_DIR}/{name}" for name in PKI_FILES if name not in pki_files]
    return (PARTIAL, lacking) if lacking else (TRELLIS, [])


def _foreign(home: Path) -> SettingError:
    return SettingError(
        f"TRELLIS_HOME {shown(home)} is not a Trellis home: it holds other files and no "
        f"{DB_FILE} or {PKI_DIR}/; point TRELLIS_HOME at a Trellis home, or at a new or empty directory"
    )


def check(home: Path, command: str) -> None:
    """Refuse a home ``command`` cannot use (see the module)."""
    state, lacking = examine(home)
    if state == NOT_A_DIRECTORY:
        raise SettingError(f"TRELLIS_HOME {shown(home)} is not a directory")
    if state == FOREIGN:
        raise _foreign(home)
    if command == "serve":
        if state == MISSING:
            raise SettingError(
                f"TRELLIS_HOME {shown(home)} does not exist: run `trellis init` first (or `make run`, "
                "which does both)"
            )
        if state in (EMPTY, PARTIAL):
            raise SettingError(
                f"TRELLIS_HOME {shown(home)} is not initialised (no {', '.join(lacking)}): "
                "run `trellis init` first (or `make run`)"
            )
    if command == "restore" and state == MISSING:
        raise SettingError(
            f"TRELLIS_HOME {shown(home)} does not exist: restore replaces the database of an existing "
            "home (is TRELLIS_HOME right?)"
        )


# -- one server per home -------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _in_use(home: Path, pid: int | None) -> SettingError:
    who = f"pid {pid}" if pid else "its pid unknown"
    return SettingError(f"TRELLIS_HOME {shown(home)} is in use by a running server: stop it first ({who})")


def hold(home: Path) -> int:
    """Take ``home``'s server lock for this process (and the worker it forks) until it exits;
    the open descriptor is returned (keep it). Refused while another server holds it; a server
    whose main process has gone (only its worker left, stopping) is waited for a little."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as ex:
        raise SettingError(f"TRELLIS_HOME {shown(home)}: cannot write {LOCK_FILE}: {ex.strerror}") from None
    deadline = time.monotonic() + ORPHAN_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            pid = _read_pid(fd)
            if (pid is not None and _alive(pid)) or time.monotonic() > deadline:
                os.close(fd)
                raise _in_use(home, pid) from None
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def server_pid(home: Path) -> int | None:
    """The pid of the server holding ``home`` (0 if unknown), None when none does."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(fd) or 0
    finally:
        os.close(fd)  # also lets go of the shared lock, if taken
    return None


def refuse_while_served(home: Path) -> None:
    """:class:`SettingError` when a server holds ``home``."""
    pid = server_pid(home)
    if pid is not None:
        raise _in_use(home, pid)


# -- DuckDB's lock ---------------------------------------------------------------------------------


def database_holder(path: Path) -> int | None:
    """The pid of another process holding DuckDB's lock on ``path`` (0 if it cannot be told),
    None when none does (or there is no such file). DuckDB locks the whole file with
    ``fcntl(F_SETLK)``; this asks with ``F_GETLK``, which takes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        if sys.platform == "linux" and struct.calcsize("P") == 8:
            # struct flock: short l_type, l_whence; off_t l_start, l_len; pid_t l_pid (32 bytes)
            query = struct.pack("@hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(32, b"\0")
            answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
            kind, _, _, _, pid = struct.unpack_from("@hhqqi", answer)
            return None if kind == fcntl.F_UNLCK else pid
        try:  # elsewhere: try taking it (this process holds nothing else on the file)
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as ex:
            if ex.errno in (errno.EACCES, errno.EAGAIN):
                return 0
            raise
        return None
    finally:
        os.close(fd)


def _command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return text if len(text) <= 120 else text[:117] + "..."


def wait_for_database(path: Path, timeout: float = DATABASE_WAIT_SECONDS) -> None:
    """Wait up to ``timeout`` s while another process holds DuckDB's lock on ``path``; then
    :class:`SettingError` naming it."""
    start = time.monotonic()
    said = False
    while (pid := database_holder(path)) is not None:
        waited = time.monotonic() - start
        if waited > timeout:
            what = _command_line(pid) if pid else ""
            who = (f"pid {pid}" + (f": {what}" if what else "")) if pid else "another process"
            raise SettingError(
                f"TRELLIS_HOME's database {path} is held by another process ({who}): stop it first"
            )
        if waited > 1.0 and not said:
            holder = f"pid {pid}" if pid else "another process"
            print(f"trellis: waiting up to {timeout:g} s for {holder} to let go of {path}", file=sys.stderr)
            said = True
        time.sleep(0.2)
