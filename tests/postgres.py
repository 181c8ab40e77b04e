"""A throwaway PostgreSQL server for the tests: ``initdb`` and ``postgres`` in a temporary directory.

:func:`find_bindir` finds the server's programs (``pg_config --bindir``, then Debian's
``/usr/lib/postgresql/<version>/bin``, then ``PATH``); the tests that need a server skip when
there is none. :class:`PostgresServer` makes a cluster and runs it:

* ``initdb`` refuses to run as root, and the tests run as root in CI: as root, the cluster's
  directory is given to uid/gid 65534 (``nobody``) and both programs run as that user;
* it listens on a unix socket in its own directory only (``listen_addresses=''``), so any number
  of them (one per test process under pytest-xdist) run side by side;
* it is made for speed, not for surviving a crash of the machine (``fsync``,
  ``synchronous_commit`` and ``full_page_writes`` off);
* :meth:`PostgresServer.stop` ends it (SIGQUIT: an immediate shutdown) and waits for it;
  :meth:`PostgresServer.destroy` also removes its directory. Nothing is left running.

The superuser is ``postgres`` (``initdb -U postgres``), trusted on the socket; each test gets a
database of its own (:meth:`PostgresServer.new_database`).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import psycopg

#: Who runs the server when the tests run as root (``nobody``).
UNPRIVILEGED = 65534
#: How long the server may take to accept connections, and to stop.
START_SECONDS = 30.0
STOP_SECONDS = 10.0


def find_bindir() -> Path | None:
    """The directory of ``initdb`` and ``postgres``, or None when PostgreSQL is not installed."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            answer = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(answer.stdout.strip()))
        except (OSError, subprocess.SubprocessError):
            pass
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
    )
    candidates += [Path(p) for p in reversed(versions)]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    return None


class PostgresServer:
    """A PostgreSQL cluster in a temporary directory, served on a unix socket there."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.as_root = os.geteuid() == 0
        # In /tmp where there is one, whatever TMPDIR says: the socket's path must stay short (a
        # unix socket's is limited to about 100 bytes) and uid 65534 must be able to reach it.
        base = "/tmp" if os.path.isdir("/tmp") else None
        self.directory = Path(tempfile.mkdtemp(prefix="trellis-pg-", dir=base))
        self.data = self.directory / "data"
        self.logfile = self.directory / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._databases = 0
        try:
            if self.as_root:
                os.chown(self.directory, UNPRIVILEGED, UNPRIVILEGED)
            self._init()
        except BaseException:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise

    def _init(self) -> None:
        bindir = self.bindir
        self._run_as(
            [
                str(bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            what="initdb",
        )

    def _popen_user(self) -> dict[str, object]:
        if not self.as_root:
            return {}
        return {"user": UNPRIVILEGED, "group": UNPRIVILEGED, "extra_groups": []}

    def _run_as(self, command: list[str], *, what: str) -> None:
        done = subprocess.run(
            command,
            cwd=self.directory,
            capture_output=True,
            timeout=120,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
            **self._popen_user(),  # type: ignore[arg-type]
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace").strip()
            raise RuntimeError(f"{what} failed (exit {done.returncode}): {output}")

    @property
    def host(self) -> str:
        """Where the socket is: libpq's ``host`` for a unix socket is its directory."""
        return str(self.directory)

    def start(self) -> None:
        """Start the server and wait (bounded) until it accepts connections."""
        assert self.process is None, "already running"
        log = open(self.logfile, "ab")  # noqa: SIM115 (the server writes to it for its life)
        try:
            self.process = subprocess.Popen(
                [
                    str(self.bindir / "postgres"),
                    "-D",
                    str(self.data),
                    "-k",
                    str(self.directory),
                    "-c",
                    "listen_addresses=",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "shared_buffers=16MB",
                    "-c",
                    "max_connections=60",
                ],
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, "LC_ALL": "C"},
                start_new_session=True,  # a Ctrl-C to the tests does not reach it; stop() does
                **self._popen_user(),  # type: ignore[arg-type]
            )
        finally:
            log.close()
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.process = None
                raise RuntimeError(f"postgres exited with {code} while starting: {self._log_tail()}")
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as ex:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"postgres did not accept connections within {START_SECONDS:g} s ({ex}): "
                        f"{self._log_tail()}"
                    ) from None
            time.sleep(0.05)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.logfile.read_text(errors="replace").strip().splitlines()[-5:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the server now (SIGQUIT: an immediate shutdown) and wait for it to be gone."""
        process, self.process = self.process, None
        if process is None:
            return
        for sig in (signal.SIGQUIT, signal.SIGKILL):
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                process.wait(STOP_SECONDS)
                break
            except subprocess.TimeoutExpired:
                continue
        # An immediate shutdown leaves the postmaster's pid file: the next start removes it.

    def destroy(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def url(self, database: str) -> str:
        """A ``postgresql://`` URL of ``database`` as the superuser, over the socket."""
        host = urllib.parse.quote(self.host, safe="")
        return f"postgresql://postgres@/{database}?host={host}"

    def new_database(self) -> str:
        """A new, empty database (UTF-8); its URL."""
        self._databases += 1
        name = f"trellis_test_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE \"{name}\" TEMPLATE template0 ENCODING 'UTF8'")
        return self.url(name)

    def execute(self, url: str, sql: str, params: list[object] | None = None) -> list[tuple[object, ...]]:
        """Run ``sql`` on the database of ``url`` in a transaction of its own; its rows."""
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            cur.execute(sql, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description is not None else []
