"""The PostgreSQL store: every entity in memory for reads, every write made durable first, on a
PostgreSQL server (``TRELLIS_DATABASE_URL``).

The write path is the group commit's (:mod:`storage.group_commit`): a committer thread takes the
staged batches in order and makes each durable in one PostgreSQL transaction: the entity tables
take each key's last change, ``change_log`` every change, numbered, and ``log_head`` moves from
the number before the batch's first change to its last with a compare-and-set. Only once that
transaction has committed are the changes published in memory and the writers answered.

Several processes (``TRELLIS_WORKERS``, or controllers on several hosts) may serve one database:

* **One write order: the write token.** Before a thread of this process reads, checks and stages
  under the outermost write lock (or ``try_submit`` stages), the process holds the cluster's
  write token, a session-level ``pg_advisory_lock`` on a connection of its own, and has applied
  every batch committed before it took it, so its checks (unique names, references, policies)
  see every committed write, and its numbering goes on from the head. It keeps the token while
  it keeps writing; it lets it go once idle (nothing staged, queued or being committed, no writer
  in) when another process asked for it (a ``NOTIFY`` on ``trellis_token`` heard by its follower,
  or a waiter seen in ``pg_locks``: asked in the round trip of every batch, so a busy holder hands
  over at the end of the batch in flight) or after :data:`TOKEN_LINGER` unused; with a process
  waiting it admits new writers for :data:`TOKEN_QUANTUM` only, so two busy processes take turns,
  and its writers that waited for that hold to end join its next hold together. A batch's
  transaction is one round trip (a pipeline), and taking the token with its catch-up one (two
  when another process holds it): in a busy process every round trip is also a wait for the GIL.
* **The fence stays.** ``log_head`` moves by compare-and-set in every batch's transaction: a
  process whose token went with a cut connection, while another took it and wrote, has its batch
  refused whole (:class:`LogHeadMovedError`, ``COMMIT_FAILED``) and takes the token again, caught
  up, for its next write.
* **Following.** A follower thread with its own connection ``LISTEN``s on ``trellis_log`` (every
  batch's transaction ``NOTIFY``s it with its last ``seq``: a hint only) and wakes on it or every
  :data:`FOLLOW_SECONDS`; while this process does not hold the token it reads ``change_log`` past
  its state, in order, and publishes each whole batch as a local one is published (a new state,
  the listeners called) under the store's lock, with ``replaying`` set: readers see whole batches
  only, and a listener does not commit follow-ups for another process's batch.
  :meth:`PostgresStore.catch_up` does one such round at once (an unknown token or id is looked
  for again after it).

A database that fails (the server gone, the connection cut) refuses the batch in hand and all
staged after it, as a full disk does to the DuckDB store; the next batch opens a new connection.
An idle connection the server closed meanwhile (a restart, ``pg_terminate_backend``) is noticed
before it is used (:func:`~storage.postgres.connections.alive`), so the first write after the
server is back is not refused; the write token and the lead lock, gone with their connections,
are taken again (the token caught up, before the next write; the lead by the follower). While no
connection can be made a write is refused before anything is staged, and :meth:`PostgresStore.health`
says so (``/trellis/health-checks``).
Each connection attempt is bounded (``connect_timeout``), and so is each statement
(``statement_timeout``, below the writers' own wait), so a writer is answered, never left hanging.
A connection lost while the server was committing leaves the outcome unknown: the store then
looks for the batch in ``change_log`` (by its ``origin``) on a new connection, and answers from
what it finds; if the server cannot be reached to tell, the batch is refused, and should it have
landed after all, the fence refuses the next batch, and the one after takes the token again and
applies it from the log as another process's.

The connection string may carry a password: it is never logged nor put in an error; what names
the database in the log is :func:`describe`'s form of it, without the password.

There is no file to copy: :meth:`PostgresStore.snapshot` refuses, and backups are PostgreSQL's
own (``pg_dump`` and ``pg_restore``, or the server's base backups and WAL archiving).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from engine.entities import ALL_KINDS, Entity
from engine.errors import CommitFailedError
from engine.ports import Change, Delete, LogProblem, Put, SnapshotUnsupportedError
from storage.changelog import key_problems
from storage.codec import UnstorableValueError, decode, encode
from storage.group_commit import COMMIT_WAIT_SECONDS, GroupCommitStore
from storage.postgres.access_changes import PostgresAccessChangeLog
from storage.postgres.activity import PostgresActivity
from storage.postgres.attempts import PostgresAttempts
from storage.postgres.commit_times import PostgresCommitTimes
from storage.postgres.connections import alive
from storage.postgres.fleet import PostgresFleetBoard
from storage.postgres.migrations import (
    CHANGE_LOG_TABLE,
    LATEST,
    LEAD_LOCK,
    LOG_CHANNEL,
    LOG_HEAD_TABLE,
    MIGRATIONS_TABLE,
    SETTINGS_TABLE,
    TOKEN_CHANNEL,
    WRITE_TOKEN_LOCK,
    SchemaTooNewError,
    migrate,
    table_name,
)
from storage.postgres.posture import PostgresPostureBoard
from storage.postgres.rates import PostgresRateBoard

log = logging.getLogger(__name__)

Connection = psycopg.Connection[TupleRow]

#: Change-log entries kept by default (as the DuckDB store's ``CHANGE_LOG_RETAIN``).
CHANGE_LOG_RETAIN = 100_000
#: How long a statement may run on the server before it is cancelled, in milliseconds: below the
#: time a writer waits for its batch (``COMMIT_WAIT_SECONDS``), so a stuck server refuses the
#: batch before its writers give up on it. The load at open and the integrity check have none.
STATEMENT_TIMEOUT_MS = 30_000
assert STATEMENT_TIMEOUT_MS < COMMIT_WAIT_SECONDS * 1000
#: Connection parameters Trellis sets unless the connection string does: a bounded connection
#: attempt, TCP keep-alives and a bound on unacknowledged data, so that a server that vanished
#: from the network is noticed within seconds instead of the system's minutes.
CONNECT_DEFAULTS = {
    "connect_timeout": "5",
    "application_name": "trellis",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "3",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
#: After a connection attempt failed slowly (it took :data:`SLOW_CONNECT_SECONDS` or more: a
#: server unreachable on the network, not one that refuses at once), writes are refused at once
#: (503 with ``Retry-After``) for this long (seconds) instead of each waiting for a connection
#: attempt of its own in turn; the follower tries again meanwhile. A connection refused at once
#: costs nothing to try again: the first write after the server is back is not refused.
RECONNECT_SECONDS = 1.0
SLOW_CONNECT_SECONDS = 0.5
#: The health check calls the database unreachable when the follower has not completed a round
#: for this long (seconds): it completes one at least every :data:`FOLLOW_SECONDS`.
HEALTH_STALE_SECONDS = 5.0
#: Set whatever the connection string says: documents are UTF-8 text.
CONNECT_FIXED = {"client_encoding": "UTF8"}

_Rows = tuple[list[int], list[str], list[str], list[str], list[str | None]]

#: The follower wakes at least this often (seconds), notification or not: NOTIFY is a hint.
FOLLOW_SECONDS = 1.0
#: How often a process that does not lead tries to (the one that led has stopped when it can).
LEAD_RETRY_SECONDS = 5.0
#: A catch-up reads about this many change-log rows per round trip (whole batches).
FOLLOW_ROWS = 5000
#: With another process waiting for the write token, this process keeps admitting new writers
#: for this long (seconds) after it took the token, then lets it go once its writes are done.
TOKEN_QUANTUM = 0.005
#: An idle process lets the token go after this long (seconds) without a write, even when no
#: request for it was heard (a notification can be missed).
TOKEN_LINGER = 0.5
#: Catch-up rounds asked for (an unknown token or id) are budgeted: this many a second, with
#: bursts of :data:`CATCH_UP_BURST`, so that requests naming nothing (bogus tokens) cannot turn
#: into database load; beyond it a miss is answered from what the follower has applied.
CATCH_UP_RATE = 100.0
CATCH_UP_BURST = 20.0


def _read_tables(
    cur: psycopg.Cursor[tuple[Any, ...]], where: str, missing: Callable[[str], Exception]
) -> tuple[int, dict[type[Entity], dict[str, Entity]]]:
    """``log_head`` and every entity, by kind and id, in ``cur``'s transaction (a repeatable-read
    one, so as of one moment); ``missing(where + reason)`` is raised without a ``log_head`` row."""
    cur.execute("SET LOCAL statement_timeout = 0")
    cur.execute(f"SELECT seq FROM {LOG_HEAD_TABLE} WHERE id = 1")
    row = cur.fetchone()
    if row is None:
        raise missing(f"{where}the {LOG_HEAD_TABLE} row is missing")
    loaded: dict[type[Entity], dict[str, Entity]] = {}
    for kind in ALL_KINDS:
        cur.execute(f"SELECT id, doc::text FROM {table_name(kind.ENTITY)}")
        loaded[kind] = {str(i): decode(kind, str(i), str(doc)) for i, doc in cur.fetchall()}
    return int(row[0]), loaded


_KINDS_BY_TABLE: dict[str, type[Entity]] = {}


def _kind_of_table(table: str) -> type[Entity] | None:
    """The entity kind stored in ``table``. Kinds register as their modules are imported, so the
    table is made again whenever the registry has grown (not once at this module's import)."""
    if len(_KINDS_BY_TABLE) != len(ALL_KINDS):
        _KINDS_BY_TABLE.clear()
        _KINDS_BY_TABLE.update((table_name(kind.ENTITY), kind) for kind in ALL_KINDS)
    return _KINDS_BY_TABLE.get(table)


class DatabaseUrlError(ValueError):
    """The connection string cannot be parsed (the message never repeats it: it may hold a
    password)."""


class StoreOpenError(RuntimeError):
    """The database cannot be opened (unreachable, refused, not UTF-8, too new a schema); the
    message names it without its password."""


class LogHeadMovedError(RuntimeError):
    """The batch was refused: the database's ``log_head`` is not where this process left it."""


class LogGapError(RuntimeError):
    """The change log cannot be applied by this process (a change of a kind it does not know)."""


def parse_url(url: str) -> dict[str, str]:
    """The parameters of ``url`` (a ``postgresql://`` URL or ``key=value`` pairs), as libpq reads
    them; :class:`DatabaseUrlError` when it cannot."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # libpq's message may quote a piece of the string, which may be the password.
        raise DatabaseUrlError(
            "libpq cannot parse it: give a postgresql:// URL or key=value pairs "
            "(check the quoting and the percent-encoding)"
        ) from None
    return {str(key): str(value) for key, value in params.items() if value is not None}


def describe(url: str) -> str:
    """``url`` as the log and the errors show it: its parameters, the password masked."""
    try:
        params = parse_url(url)
    except DatabaseUrlError:
        return "(an unparsable connection string)"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params) or "(libpq's defaults)"


def probe(url: str) -> str:
    """Check, without loading anything, that the database of ``url`` can be opened: reachable,
    UTF-8, not of a schema newer than this code's (what ``trellis serve`` asks before it starts
    its worker). Its description (:func:`describe`); :class:`DatabaseUrlError` or
    :class:`StoreOpenError` when it cannot be used."""
    params = parse_url(url)
    described = describe(url)
    params.setdefault("connect_timeout", CONNECT_DEFAULTS["connect_timeout"])
    try:
        with psycopg.connect(make_conninfo("", **params), autocommit=True) as conn:
            PostgresStore._check_encoding(conn)
            row = conn.execute(f"SELECT to_regclass('{MIGRATIONS_TABLE}') IS NOT NULL").fetchone()
            if row is not None and row[0]:
                counted = conn.execute(f"SELECT coalesce(max(version), 0) FROM {MIGRATIONS_TABLE}").fetchone()
                version = int(counted[0]) if counted else 0
                if version > LATEST:
                    raise SchemaTooNewError(
                        f"the database has schema version {version}; this Trellis knows up to {LATEST}"
                    )
    except (psycopg.Error, SchemaTooNewError) as ex:
        raise StoreOpenError(f"cannot open the PostgreSQL database {described}: {ex}") from ex
    return described


#: How soon the follower looks again at a token another process waits for and that it could
#: not let go at its last look.
TOKEN_RETRY_SECONDS = 0.005

#: The change log past a ``seq`` (twice: the parameters), whole batches of about
#: :data:`FOLLOW_ROWS` entries at most, in order.
LOG_READ_SQL = (
    f"SELECT seq, batch, kind, id, op, doc::text FROM {CHANGE_LOG_TABLE} WHERE seq > %s "
    f"AND seq <= (SELECT max(batch) FROM (SELECT batch FROM {CHANGE_LOG_TABLE} "
    "WHERE seq > %s ORDER BY seq LIMIT %s) AS next) ORDER BY seq"
)
#: Try the write token; when another process holds it, ask for it in the same statement.
TRY_TOKEN_SQL = (
    "SELECT CASE WHEN pg_try_advisory_lock(%s) THEN true ELSE (SELECT false FROM pg_notify(%s, %s)) END"
)
#: Whether a process waits for the write token (a lock not yet granted).
TOKEN_WAITER_SQL = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
    "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1)"
)
TOKEN_WAITER_PARAMS = [WRITE_TOKEN_LOCK >> 32, WRITE_TOKEN_LOCK & 0xFFFFFFFF]


class PostgresStore(GroupCommitStore):
    """A group-commit ``Store`` on a PostgreSQL database (see the module docstring).

    ``url``: a libpq connection string (``postgresql://user@host/db`` or ``host=... dbname=...``;
    libpq's ``PG*`` variables and password file fill in what it leaves out). Opening runs the
    migrations, then loads every entity in one ``REPEATABLE READ READ ONLY`` transaction, and
    numbering goes on from ``log_head``.
    """

    def __init__(
        self, url: str, *, change_log_retain: int = CHANGE_LOG_RETAIN, token_linger: float = TOKEN_LINGER
    ) -> None:
        super().__init__(background=True)
        #: How long an idle process keeps the write token nobody asked for (see TOKEN_LINGER).
        self.token_linger = token_linger
        params = parse_url(url)
        self.description = describe(url)
        for key, value in CONNECT_DEFAULTS.items():
            params.setdefault(key, value)
        params.update(CONNECT_FIXED)
        self._conninfo = make_conninfo("", **params)
        self.change_log_retain = max(1, change_log_retain)
        #: Names this process's batches in ``change_log`` (a lost commit answer is looked up by it).
        self.origin = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        #: Documents encoded at staging, by entity object, until their batch is written.
        self._encoded: dict[int, tuple[Entity, str]] = {}
        #: The committer's connection (and the settings'); the reads' one (change log, checks).
        self._write_conn: Connection | None = None
        self._writer_lock = threading.Lock()
        self._read_conn: Connection | None = None
        self._reader_lock = threading.Lock()
        self._logged = 0
        self._said_synchronous = False
        # -- the cluster's write token (see _before_write) --
        #: Guards the token's state and its connection; waited on while it is being let go.
        self._token = threading.Condition(threading.Lock())
        self._token_conn: Connection | None = None
        self._token_held = False
        #: Set when the fence refused a batch: the token may have been lost with its connection.
        self._token_suspect = False
        #: Another process asked for the token (a notification on ``TOKEN_CHANNEL``).
        self._token_wanted = False
        self._token_since = 0.0
        #: How many times this process has taken the token: a writer waiting for this process's
        #: hold to end stops waiting once a new hold began (it joins that one).
        self._token_holds = 0
        #: Threads between taking the token and leaving the outermost write lock.
        self._writers = 0
        self._last_write = 0.0
        #: When the follower last looked for a process waiting for the token (``pg_locks``).
        self._waiters_checked = 0.0
        # -- following --
        self._follower: threading.Thread | None = None
        self._stopping = threading.Event()
        self._gap: LogGapError | None = None
        self._catch_up = threading.Condition()
        self._rounds_started = 0
        self._rounds_done = 0
        self._round_running = False
        self._round_budget = CATCH_UP_BURST
        self._round_at = time.monotonic()
        self._lead_conn: Connection | None = None
        self._leads: bool | None = None
        self._lead_guard = threading.Lock()
        #: What runs while this process leads (:meth:`when_leading`), and the last try to.
        self._lead_hooks: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self._lead_tried_at = 0.0
        # -- reachability (the health check, and refusing writes at once while it is away) --
        #: When the last connection attempt failed (monotonic), None once one succeeded; when
        #: one last failed slowly; the error it failed with.
        self._connect_failed_at: float | None = None
        self._connect_failed_slowly_at: float | None = None
        self._connect_error: BaseException | None = None
        #: Since when (wall clock) connection attempts fail, and the last one's error.
        self._unreachable_since: datetime | None = None
        self._unreachable_error = ""
        #: When the follower last completed a round (monotonic), and its last error since.
        self._followed_at = time.monotonic()
        self._follow_error = ""
        #: The guesses ledgers handed out (:meth:`attempts_ledger`), closed with the store.
        self._ledgers: list[PostgresAttempts] = []
        self._boards: list[
            PostgresActivity
            | PostgresFleetBoard
            | PostgresPostureBoard
            | PostgresRateBoard
            | PostgresCommitTimes
            | PostgresAccessChangeLog
        ] = []
        try:
            with self._writer_lock:
                conn = self._connection_for_writes()
                self._check_encoding(conn)
                self.schema_version = migrate(conn)
                self._load_all(conn)
        except (psycopg.Error, SchemaTooNewError) as ex:
            self._close_connections()
            raise StoreOpenError(f"cannot open the PostgreSQL database {self.description}: {ex}") from ex
        except BaseException:
            self._close_connections()
            raise
        log.info(
            "opened the PostgreSQL database %s (schema version %d, change %d)",
            self.description,
            self.schema_version,
            self._seq,
        )
        self._follower = threading.Thread(target=self._follow, name="trellis-follower", daemon=True)
        self._follower.start()

    # -- connections -------------------------------------------------------------------------
    def _connect(self) -> Connection:
        """A new connection in autocommit mode (transactions are explicit), its statements bounded
        and its commits durable: a server whose ``synchronous_commit`` is ``off`` answers a
        commit before it is on disk, so a crash of the server could lose an acknowledged write;
        Trellis's connections then set it ``on`` (any stronger setting, for a synchronous
        replica, is kept)."""
        began = time.monotonic()
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.Error as ex:
            if self._connect_failed_at is None:
                self._unreachable_since = datetime.now(UTC)
            self._unreachable_error = " ".join(str(ex).split())
            self._connect_error = ex
            now = self._connect_failed_at = time.monotonic()
            if now - began >= SLOW_CONNECT_SECONDS:
                self._connect_failed_slowly_at = now
            raise
        self._connect_failed_at = self._connect_failed_slowly_at = None
        self._unreachable_since = None
        try:
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            row = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
            if row is not None and str(row[0]) == "off":
                conn.execute("SET synchronous_commit = on")
                if not self._said_synchronous:
                    self._said_synchronous = True
                    log.warning(
                        "the database's synchronous_commit is off: Trellis sets it on for its own "
                        "connections, so that no acknowledged write can be lost"
                    )
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _usable(conn: Connection | None) -> bool:
        return conn is not None and not conn.closed and not conn.broken

    def _connection_for_writes(self) -> Connection:
        """The writer connection (under ``_writer_lock``), a new one if the last has failed."""
        conn = self._write_conn
        if conn is None or not alive(conn):
            if conn is not None:
                conn.close()
            self._write_conn = None
            conn = self._write_conn = self._connect()
        return conn

    def _connection_for_reads(self) -> Connection:
        """The reader connection (under ``_reader_lock``), a new one if the last has failed."""
        conn = self._read_conn
        if conn is None or not alive(conn):
            if conn is not None:
                conn.close()
            self._read_conn = None
            conn = self._read_conn = self._connect()
        return conn

    def _close_connections(self) -> None:
        for lock, name in ((self._writer_lock, "_write_conn"), (self._reader_lock, "_read_conn")):
            with lock:
                conn: Connection | None = getattr(self, name)
                setattr(self, name, None)
                if conn is not None:
                    conn.close()

    @staticmethod
    def _check_encoding(conn: Connection) -> None:
        row = conn.execute("SHOW server_encoding").fetchone()
        encoding = str(row[0]) if row else ""
        if encoding.upper() != "UTF8":
            raise StoreOpenError(
                f"the database's encoding is {encoding}, not UTF8: create it with ENCODING 'UTF8'"
            )

    # -- open --------------------------------------------------------------------------------
    def _load_all(self, conn: Connection) -> None:
        """Every entity and setting, and ``log_head``, as of one moment."""
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        try:
            with conn.transaction(), conn.cursor() as cur:
                head, loaded = _read_tables(cur, f"{self.description}: ", StoreOpenError)
                for entities in loaded.values():
                    self.load(list(entities.values()))
                cur.execute(f"SELECT key, value FROM {SETTINGS_TABLE}")
                self._settings.update({str(k): str(v) for k, v in cur.fetchall()})
                cur.execute(f"SELECT count(*) FROM {CHANGE_LOG_TABLE}")
                counted = cur.fetchone()
                self._logged = int(counted[0]) if counted else 0
        finally:
            conn.isolation_level = None
            conn.read_only = None
        self._seq = head
        self.load([])  # the published state carries the last sequence number

    # -- staging -----------------------------------------------------------------------------
    def _prepare(self, changes: Sequence[Change]) -> None:
        """Encode each put's document now, on the writer's thread, and check each id: a value
        that cannot be stored (``UnstorableValueError``, a 400) refuses its own request, never
        its batch. PostgreSQL's text holds no NUL character, and a key is text."""
        for change in changes:
            entity_id = change.entity.id if isinstance(change, Put) else change.id
            if "\x00" in entity_id:
                raise UnstorableValueError("id", "text must not contain NUL characters")
            try:
                entity_id.encode("utf-8")
            except UnicodeEncodeError:
                raise UnstorableValueError("id", "text is not valid UTF-8") from None
        encoded = [(change.entity, encode(change.entity)) for change in changes if isinstance(change, Put)]
        for entity, doc in encoded:
            self._encoded[id(entity)] = (entity, doc)

    def _doc(self, entity: Entity) -> str:
        cached = self._encoded.get(id(entity))
        return cached[1] if cached is not None and cached[0] is entity else encode(entity)

    def _expected_failure(self, error: BaseException) -> bool:
        """The database failing or refusing (``psycopg.Error``, the fence) is expected."""
        return isinstance(error, (OSError, psycopg.Error, LogHeadMovedError))

    # -- the batch's transaction -------------------------------------------------------------
    def _persist(self, entries: Sequence[tuple[int, Change]]) -> None:
        try:
            self._write_batch(entries)
        except BaseException:
            # The token's connection may have gone with the batch's: let it go and take it anew.
            self._token_suspect = True
            # The batch and everything staged after it are refused: none of their documents
            # will be written (and a write staged meanwhile encodes its own again if need be).
            self._encoded.clear()
            raise
        finally:
            for _, change in entries:
                if isinstance(change, Put):
                    self._encoded.pop(id(change.entity), None)

    def _rows(
        self, entries: Sequence[tuple[int, Change]]
    ) -> tuple[dict[str, list[str]], dict[str, tuple[list[str], list[str]]], _Rows]:
        """The batch as statements take it: the ids each table deletes, the ids and documents
        each upserts (each key's last change), and the change log's columns (every change)."""
        final: dict[tuple[str, str], str | None] = {}
        log_rows: _Rows = ([], [], [], [], [])
        for seq, change in entries:
            if isinstance(change, Put):
                table, entity_id, doc = (
                    table_name(change.entity.ENTITY),
                    change.entity.id,
                    self._doc(change.entity),
                )
            else:
                table, entity_id, doc = table_name(change.kind.ENTITY), change.id, None
            final[table, entity_id] = doc
            log_rows[0].append(seq)
            log_rows[1].append(table)
            log_rows[2].append(entity_id)
            log_rows[3].append("delete" if doc is None else "put")
            log_rows[4].append(doc)
        deletes: dict[str, list[str]] = {}
        upserts: dict[str, tuple[list[str], list[str]]] = {}
        for (table, entity_id), doc in final.items():
            if doc is None:
                deletes.setdefault(table, []).append(entity_id)
            else:
                ids, docs = upserts.setdefault(table, ([], []))
                ids.append(entity_id)
                docs.append(doc)
        return deletes, upserts, log_rows

    def _write_batch(self, entries: Sequence[tuple[int, Change]]) -> None:
        """The batch's transaction, sent as one pipeline: one round trip to the server, not one per
        statement (a thread waking from each round trip waits for the GIL again, up to the switch
        interval when other threads are busy: five round trips cost a busy process 5-25 ms)."""
        first, last = entries[0][0], entries[-1][0]
        deletes, upserts, log_rows = self._rows(entries)
        with self._writer_lock:
            conn = self._connection_for_writes()
            try:
                with conn.pipeline(), conn.cursor() as cur:
                    cur.execute("BEGIN")
                    # First: it takes the head row's lock, so a second writer waits here for the
                    # first's commit and then finds the head moved: the division by zero (no row
                    # moved) fails the transaction, and nothing after it runs. Its NOTIFY is
                    # delivered at commit, to every process following: a hint to read the log now.
                    cur.execute(
                        f"WITH moved AS (UPDATE {LOG_HEAD_TABLE} SET seq = %s WHERE id = 1 AND seq = %s "
                        "RETURNING pg_notify(%s, %s::text)) SELECT 1 / (SELECT count(*)::int FROM moved)",
                        [last, first - 1, LOG_CHANNEL, str(last)],
                    )
                    for table, ids in deletes.items():
                        cur.execute(f"DELETE FROM {table} WHERE id = ANY(%s::text[])", [ids])
                    for table, (ids, docs) in upserts.items():
                        cur.execute(
                            f"INSERT INTO {table} (id, doc) SELECT i, d::json "
                            "FROM unnest(%s::text[], %s::text[]) AS u(i, d) "
                            "ON CONFLICT (id) DO UPDATE SET doc = EXCLUDED.doc",
                            [ids, docs],
                        )
                    cur.execute(
                        f"INSERT INTO {CHANGE_LOG_TABLE} (seq, batch, kind, id, op, doc, origin) "
                        "SELECT s, %s, k, i, o, d::json, %s "
                        "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[], %s::text[]) "
                        "AS u(s, k, i, o, d)",
                        [last, self.origin, *log_rows],
                    )
                    cur.execute("COMMIT")
                    # In the same round trip: does another process wait for the token? Then this
                    # one hands it over at the end of this batch, if nothing else is in flight
                    # (_after_batch), rather than when its follower hears the notification.
                    cur.execute(TOKEN_WAITER_SQL, TOKEN_WAITER_PARAMS)
                    waiting = cur.fetchone()
                if waiting and waiting[0]:
                    self._token_wanted = True
            except psycopg.errors.DivisionByZero:
                self._rollback(conn)
                row = conn.execute(f"SELECT seq FROM {LOG_HEAD_TABLE} WHERE id = 1").fetchone()
                raise LogHeadMovedError(
                    f"the database's change log is at {row[0] if row else 'no head'}, this "
                    f"process's at {first - 1}: another process has written to it (or a commit "
                    "whose answer was lost did land); batch refused: restart to reload the database"
                ) from None
            except psycopg.Error as ex:
                if not (conn.closed or conn.broken):
                    self._rollback(conn)  # the server refused a statement: nothing was committed
                    raise
                # The connection went with the pipeline in flight: the COMMIT may have landed.
                if not self._landed(last, len(entries)):
                    raise
                log.warning("the commit of changes %d to %d lost its answer (%s) but landed", first, last, ex)
            except BaseException:
                self._rollback(conn)
                raise
            self._written(len(entries), last)

    @staticmethod
    def _rollback(conn: Connection) -> None:
        if conn.closed or conn.broken:
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error as ex:
            log.debug("ignored while rolling back: %s", ex)

    def _landed(self, last: int, count: int) -> bool:
        """Whether this process's batch ending at ``last`` is in the database (after its commit
        lost its answer): asked on a new connection; False when that cannot be told."""
        try:
            conn = self._connection_for_writes()
            row = conn.execute(
                f"SELECT count(*) FROM {CHANGE_LOG_TABLE} WHERE batch = %s AND origin = %s",
                [last, self.origin],
            ).fetchone()
        except psycopg.Error as ex:
            log.error("a commit's outcome is unknown (the database cannot be asked: %s)", ex)
            return False
        return row is not None and int(row[0]) == count

    def _written(self, entries: int, last: int) -> None:
        """``entries`` more changes are in the change log (under ``_writer_lock``)."""
        self._logged += entries
        if self._logged >= self.change_log_retain + max(1, self.change_log_retain // 2):
            self._trim_change_log(last)

    def _trim_change_log(self, last: int) -> None:
        """Keep the newest ``change_log_retain`` entries. A failure loses nothing: it is tried
        again after the next batch."""
        conn = self._write_conn
        if conn is None:
            return
        try:
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(
                    f"DELETE FROM {CHANGE_LOG_TABLE} WHERE seq <= %s", [last - self.change_log_retain]
                )
                cur.execute(f"SELECT count(*) FROM {CHANGE_LOG_TABLE}")
                row = cur.fetchone()
            self._logged = int(row[0]) if row else 0
        except psycopg.Error as ex:
            log.warning("could not trim the change log (retried later): %s", ex)

    # -- the cluster's write token -----------------------------------------------------------
    def _before_write(self) -> None:
        """Hold the cluster's write token before this thread writes: take it (a session-level
        advisory lock on the token connection) unless this process holds it, and catch up to
        the log's head under it, so every check reads every committed write and numbering goes
        on from the head. With another process waiting and the token held longer than
        :data:`TOKEN_QUANTUM`, new writers wait for this process's writes to finish, let it go,
        and queue for it again behind the other."""
        if self._gap is not None:
            raise CommitFailedError(
                "this process has fallen behind the change log: restart it"
            ) from self._gap
        self._refuse_if_unreachable()
        with self._token:
            self._refuse_if_unreachable()  # another writer's attempt, waited for, just failed
            if self._token_held and not alive(self._token_conn):
                # the token's connection is gone (the server restarted, the backend was ended),
                # and the advisory lock with it: let it go and take it again, caught up
                self._token_suspect = True
            if (
                self._token_held
                and self._token_wanted
                and time.monotonic() - self._token_since > TOKEN_QUANTUM
            ):
                hold = self._token_holds
                deadline = time.monotonic() + COMMIT_WAIT_SECONDS
                while self._token_held and self._token_holds == hold and time.monotonic() < deadline:
                    self._release_if_idle(force=True)
                    if self._token_held and self._token_holds == hold:
                        self._token.wait(0.05)
            if self._token_held and self._token_suspect and not self._writers:
                self._release_if_idle(force=True)
            if not self._token_held:
                self._take_token()
            self._writers += 1

    def _refuse_if_unreachable(self) -> None:
        """Refuse the write at once (nothing staged) when a connection attempt failed slowly a
        moment ago (:data:`RECONNECT_SECONDS`): writers do not queue for connection attempts
        that each take ``connect_timeout`` while the server is unreachable."""
        failed_at = self._connect_failed_slowly_at
        if failed_at is not None and time.monotonic() - failed_at < RECONNECT_SECONDS:
            self._outage.failed(self._unreachable_error or "the database cannot be reached", expected=True)
            raise CommitFailedError("the database cannot be reached") from self._connect_error

    def _after_write(self) -> None:
        with self._token:
            self._writers -= 1
            self._last_write = time.monotonic()
            if not self._writers and (self._token_wanted or self._token_suspect):
                self._release_if_idle(force=False)

    def _after_batch(self) -> None:
        with self._token:
            self._last_write = time.monotonic()
            if self._token_wanted or self._token_suspect:
                self._release_if_idle(force=False)

    def _may_submit(self) -> bool:
        return self._token_held and not self._token_suspect

    def _take_token(self) -> None:
        """Take the token and catch up (under ``_token``); :class:`CommitFailedError` when the
        database cannot be reached or the token is not had within the statement timeout."""
        try:
            conn = self._token_conn
            if conn is None or not alive(conn):
                if conn is not None:
                    conn.close()
                self._token_conn = None
                conn = self._token_conn = self._connect()
            self._token_wanted = False  # asked before this: by whoever held the token then
            # One round trip when the token is free: the try, and the log past this process's
            # state read under it. When it is not, the try asks the holder for it (NOTIFY) in the
            # same statement, and a second round trip waits for the lock and reads the log.
            after = self._state.seq
            with conn.pipeline():
                tried = conn.execute(TRY_TOKEN_SQL, [WRITE_TOKEN_LOCK, TOKEN_CHANNEL, self.origin])
                read = conn.execute(LOG_READ_SQL, [after, after, FOLLOW_ROWS])
                row = tried.fetchone()
                rows = read.fetchall()
            if not (row and row[0]):
                after = self._state.seq
                with conn.pipeline():
                    conn.execute("SELECT pg_advisory_lock(%s)", [WRITE_TOKEN_LOCK])
                    rows = conn.execute(LOG_READ_SQL, [after, after, FOLLOW_ROWS]).fetchall()
            with self._lock:
                try:
                    self._apply_log(conn, rows)
                except BaseException:
                    conn.execute("SELECT pg_advisory_unlock(%s)", [WRITE_TOKEN_LOCK])
                    raise
                self._seq = self._state.seq
                self._token_held = True
        except psycopg.Error as ex:
            self._outage.failed(ex, count=1, expected=True)
            raise CommitFailedError("the cluster's write token could not be had") from ex
        except LogGapError as ex:
            raise CommitFailedError("this process has fallen behind the change log: restart it") from ex
        self._token_suspect = False
        self._token_since = time.monotonic()
        self._token_holds += 1
        self._token.notify_all()

    def _release_if_idle(self, *, force: bool) -> None:
        """Let the token go (under ``_token``) when no writer is in and nothing is staged, queued
        or being committed; ``force`` even when nobody asked for it."""
        if not self._token_held or self._writers:
            return
        if not (force or self._token_wanted or self._token_suspect):
            return
        with self._lock:
            if not self._idle():
                return
            self._token_held = False
            self._token_wanted = False
            conn = self._token_conn
            try:
                if conn is not None and alive(conn):
                    conn.execute("SELECT pg_advisory_unlock(%s)", [WRITE_TOKEN_LOCK])
            except psycopg.Error as ex:
                log.warning("could not let the write token go (closing its connection): %s", ex)
                conn.close()  # type: ignore[union-attr]
                self._token_conn = None
            if self._token_suspect and self._token_conn is not None:
                self._token_conn.close()
                self._token_conn = None
        self._token.notify_all()

    @property
    def holds_write_token(self) -> bool:
        """Whether this process holds the cluster's write token now."""
        return self._token_held

    # -- following other processes' batches --------------------------------------------------
    def _apply_log(self, conn: Connection, rows: list[TupleRow] | None = None) -> int:
        """Publish every whole batch in the change log past this process's state, in order, as
        foreign (under ``_lock``, the token not held by this process, nothing staged); how many
        batches. ``rows``: the first read (:data:`LOG_READ_SQL`), made already; what the follower
        applied since is skipped. Entries it needs trimmed away, it reads the database again
        (:meth:`_reload`); :class:`LogGapError` for a change of a kind it does not know."""
        applied = 0
        while True:
            after = self._state.seq
            if rows is None:
                rows = conn.execute(LOG_READ_SQL, [after, after, FOLLOW_ROWS]).fetchall()
            read = len(rows)
            rows = [r for r in rows if int(r[0]) > after]  # whole batches: the state has whole ones
            if not rows:
                if read < FOLLOW_ROWS:
                    return applied
                rows = None
                continue
            if int(rows[0][0]) != after + 1:  # trimmed past this process's state
                self._reload(conn, int(rows[0][0]))
                applied += 1
                rows = None
                continue
            batch: list[tuple[int, Change]] = []
            for seq, last, table, entity_id, op, doc in rows:
                kind = _kind_of_table(str(table))
                if kind is None:
                    self._gap = LogGapError(
                        f"change {seq} is of an unknown kind {table!r}: restart on a newer Trellis"
                    )
                    raise self._gap
                change: Change = (
                    Delete(kind, str(entity_id))
                    if op == "delete"
                    else Put(decode(kind, str(entity_id), str(doc)))
                )
                batch.append((int(seq), change))
                if int(seq) == int(last):
                    self._publish_foreign(batch)
                    applied += 1
                    batch = []
            if read < FOLLOW_ROWS:
                return applied  # the read had every entry there was: no second, empty one
            rows = None

    def _reload(self, conn: Connection, first: int) -> None:
        """The change log starts at ``first``, past what this process applied (trimmed:
        ``TRELLIS_CHANGE_LOG_RETAIN``): read every table and ``log_head`` as of one moment, as
        opening does, and publish how they differ from this process's state as one batch of
        another process's, numbered with the head (under ``_lock``, nothing staged)."""
        behind = self._state.seq
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        try:
            with conn.transaction(), conn.cursor() as cur:
                head, loaded = _read_tables(cur, "", LogGapError)
        finally:
            conn.isolation_level = None
            conn.read_only = None
        state = self._state
        changes: list[Change] = []
        for kind, entities in loaded.items():
            changes += [Delete(kind, e.id) for e in state.all(kind) if e.id not in entities]
            changes += [Put(e) for i, e in entities.items() if state.get(kind, i) != e]
        log.warning(
            "this process had applied the change log up to %d, and the log now starts at %d (it "
            "keeps TRELLIS_CHANGE_LOG_RETAIN changes): the database was read again at %d (%d changes)",
            behind,
            first,
            head,
            len(changes),
        )
        if changes:
            self._publish_foreign([(head, change) for change in changes])
        else:
            self._state = state.apply([], head)
            self._seq = max(self._seq, head)

    def _follow(self) -> None:
        """The follower thread: wakes on a notification (a batch committed, the token wanted)
        or every :data:`FOLLOW_SECONDS`, applies what others committed and lets an idle token go."""
        conn: Connection | None = None
        said = False
        worked = False  # the connection lost had served: connect again at once, not in a second
        while not self._stopping.is_set():
            try:
                if conn is None or not self._usable(conn):
                    if conn is not None:
                        conn.close()
                    conn = self._connect()
                    conn.execute(f"LISTEN {LOG_CHANNEL}")
                    conn.execute(f"LISTEN {TOKEN_CHANNEL}")
                    if said:
                        log.info("following the change log again")
                        said = False
                    self._follow_round(conn)  # what was missed while away, before any wait
                    self._keep_lead()
                # Someone waits for the token this process holds and could not be given it at the
                # last look (a writer was inside): look again soon, not at the next notification.
                pending = self._token_wanted and self._token_held
                # Every notification waiting is taken now, not one per round: a busy process
                # hears its own batches' notifications too, and a request for the token queued
                # behind hundreds of them was heard hundreds of rounds late.
                timeout = TOKEN_RETRY_SECONDS if pending else FOLLOW_SECONDS
                while True:
                    notes = list(conn.notifies(timeout=timeout, stop_after=1))
                    if any(n.channel == TOKEN_CHANNEL and n.payload != self.origin for n in notes):
                        self._token_wanted = True
                    if not notes or self._stopping.is_set():
                        break
                    timeout = 0.0
                if self._stopping.is_set():
                    break
                self._follow_round(conn)
                self._tick_token(conn)
                self._keep_lead()
                self._take_lead()
                self._followed_at = time.monotonic()
                self._follow_error = ""
                worked = True
            except psycopg.Error as ex:
                self._follow_error = " ".join(str(ex).split())
                if not said:
                    log.warning("cannot follow the change log (retrying every %g s): %s", FOLLOW_SECONDS, ex)
                    said = True
                if conn is not None:
                    conn.close()
                conn = None
                if not worked:
                    self._stopping.wait(FOLLOW_SECONDS)
                worked = False
            except LogGapError as ex:
                log.error("%s", ex)
                break
            except Exception:
                log.exception("the change-log follower failed; retrying")
                self._stopping.wait(FOLLOW_SECONDS)
        if conn is not None:
            conn.close()

    def _follow_round(self, conn: Connection) -> int:
        """Apply what others committed, unless this process holds the token (then nothing is
        new but its own batches, which its committer publishes)."""
        if self._token_held:  # no lock needed to tell: the notification was this process's own
            return 0
        with self._lock:
            if self._token_held or self._gap is not None:
                return 0
            return self._apply_log(conn)

    def _tick_token(self, conn: Connection) -> None:
        """Let an idle token go when someone asked for it or it has not been used for
        :data:`TOKEN_LINGER` (never blocks on a writer taking it). A request for it whose
        notification was missed is seen in ``pg_locks`` (someone waiting for the lock)."""
        if not self._token_held:
            return
        now = time.monotonic()
        if not self._token_wanted and now - self._waiters_checked >= FOLLOW_SECONDS:
            self._waiters_checked = now
            row = conn.execute(TOKEN_WAITER_SQL, TOKEN_WAITER_PARAMS).fetchone()
            if row and row[0]:
                self._token_wanted = True
        if not self._token.acquire(blocking=False):
            return
        try:
            if self._token_held and not alive(self._token_conn):
                self._token_suspect = True  # its lock went with its connection
            lingered = time.monotonic() - self._last_write >= self.token_linger
            if self._token_held and (self._token_wanted or lingered or self._token_suspect):
                self._release_if_idle(force=lingered)
        finally:
            self._token.release()

    def catch_up(self) -> bool:
        """Apply everything other processes had committed when this was called, in one round trip
        (one round in flight at once: a caller arriving during a round waits for it and then for
        the next; rounds are budgeted, :data:`CATCH_UP_RATE`); whether this thread reads anything
        newer now (a request pinned to a state reads the latest after it). No round trip while
        this process holds the write token (nobody else can have written)."""
        local = self._local
        if getattr(local, "replaying", False) or getattr(local, "committer", False):
            return False  # a listener, amid publishing a batch: never another batch inside it
        if self._token_held or self._gap is not None:
            return self._refresh_pin()
        with self._catch_up:
            wanted = self._rounds_started + 1
            while True:
                if self._rounds_done >= wanted:
                    applied = self._last_round_applied
                    break
                if not self._round_running:
                    now = time.monotonic()
                    self._round_budget = min(
                        CATCH_UP_BURST, self._round_budget + (now - self._round_at) * CATCH_UP_RATE
                    )
                    self._round_at = now
                    if self._round_budget < 1.0:  # over budget: what the follower has applied
                        return self._refresh_pin()
                    self._round_budget -= 1.0
                    self._round_running = True
                    self._rounds_started += 1
                    mine = self._rounds_started
                    applied = -1
                    break
                self._catch_up.wait()
        if applied < 0:
            try:
                applied = self._catch_up_round()
            finally:
                with self._catch_up:
                    self._round_running = False
                    self._rounds_done = mine
                    self._last_round_applied = max(applied, 0)
                    self._catch_up.notify_all()
        return self._refresh_pin() or applied > 0

    def _refresh_pin(self) -> bool:
        """Move this thread's pinned state (a request's) to the latest; whether it was older (the
        follower may have applied what a catch-up was asked for)."""
        pinned: Any = getattr(self._local, "pinned", None)
        if pinned is None or pinned.seq >= self._state.seq:
            return False
        self._local.pinned = self._state
        return True

    _last_round_applied = 0

    def _catch_up_round(self) -> int:
        try:
            with self._reader_lock:
                return self._follow_round(self._connection_for_reads())
        except psycopg.Error as ex:
            log.warning("could not catch up with the change log: %s", ex)
            return 0
        except LogGapError as ex:
            log.error("%s", ex)
            return 0

    # -- one process of the cluster ----------------------------------------------------------
    def activity_board(self, retain: timedelta) -> PostgresActivity:
        """The API-session activity every process of this database shares (its own connection
        and thread); rows not used for ``retain`` are dropped."""
        board = PostgresActivity(self._connect, retain=retain)
        self._boards.append(board)
        return board

    def posture_board(self) -> PostgresPostureBoard:
        """Identities' posture data every process of this database shares (its own connection
        and thread, started when first used)."""
        board = PostgresPostureBoard(self._connect)
        self._boards.append(board)
        return board

    def fleet_board(self) -> PostgresFleetBoard:
        """The routers connected to each process of this database, shared (its own connection
        and thread, started when the fleet attaches)."""
        board = PostgresFleetBoard(self._connect)
        self._boards.append(board)
        return board

    def rate_board(self) -> PostgresRateBoard:
        """What clients spend of their request budgets on each process of this database, shared
        (its own connection and thread, started when the budgets attach)."""
        board = PostgresRateBoard(self._connect)
        self._boards.append(board)
        return board

    def commit_times(self) -> PostgresCommitTimes:
        """The change log's commit times, the same for every process (its own connection)."""
        times = PostgresCommitTimes(self._connect)
        self._boards.append(times)
        return times

    def access_change_log(self) -> PostgresAccessChangeLog:
        """The access changes of this database's batches (``access_changes``, migration 10; one
        connection of its own, made once)."""
        found: PostgresAccessChangeLog | None = getattr(self, "_access_changes", None)
        if found is None:
            found = self._access_changes = PostgresAccessChangeLog(self._connect)
            self._boards.append(found)
        return found

    def attempts_ledger(self) -> PostgresAttempts:
        """The guesses ledger every process of this database shares (its own connection)."""
        ledger = PostgresAttempts(self._connect)
        self._ledgers.append(ledger)
        return ledger

    def lead(self) -> bool:
        """Whether this process is the one of those serving the database that runs the control
        listener and the maintenance ticker: the first to ask, holding a session-level advisory
        lock on a connection of its own for as long as it runs (a process that stops frees it for
        the next to start). Asked once; False when the database cannot be asked."""
        with self._lead_guard:
            return self._lead()

    def _lead(self) -> bool:
        if self._leads is None:
            try:
                conn = self._connect()
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", [LEAD_LOCK]).fetchone()
            except psycopg.Error as ex:
                log.warning("cannot tell whether this process leads (it does not): %s", ex)
                self._leads = False
                return False
            self._leads = bool(row and row[0])
            if self._leads:
                self._lead_conn = conn
            else:
                conn.close()
        return self._leads

    def when_leading(self, start: Callable[[], None], stop: Callable[[], None]) -> None:
        with self._lead_guard:
            self._lead_hooks.append((start, stop))
            leads = self._lead()
        if leads:
            start()

    def _take_lead(self) -> None:
        """On the follower, every :data:`LEAD_RETRY_SECONDS`, for a process that does not lead
        and waits to (:meth:`when_leading`): the process that led has stopped (its lock went
        with its connection) when the lock can be taken; then this one leads."""
        with self._lead_guard:
            if self._leads is not False or not self._lead_hooks:
                return
            if time.monotonic() - self._lead_tried_at < LEAD_RETRY_SECONDS:
                return
            self._lead_tried_at = time.monotonic()
            conn = self._try_lead_lock()
            if conn is None:
                return
            self._leads, self._lead_conn = True, conn
            hooks = list(self._lead_hooks)
        log.warning("the process that led has stopped: this one leads now (maintenance)")
        for start, _ in hooks:
            try:
                start()
            except Exception:
                log.exception("starting what the leading process runs failed")

    def _try_lead_lock(self) -> Connection | None:
        """A new connection holding the lead lock, or None (closed) when another process holds it."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", [LEAD_LOCK]).fetchone()
        except BaseException:
            conn.close()
            raise
        if row and row[0]:
            return conn
        conn.close()
        return None

    def _keep_lead(self) -> None:
        """On the follower, connected: when this process leads and the connection holding the
        lead lock is gone (the server restarted, the backend was ended), the lock went with it:
        take it again on a new connection. Should another process have taken it meanwhile (one
        started while the lock was free), this one no longer leads (:meth:`lead` answers False
        from then on, and an ERROR says so): one process leads, never two."""
        with self._lead_guard:
            if not self._leads or alive(self._lead_conn):
                return
            lost, self._lead_conn = self._lead_conn, None
            if lost is not None:
                lost.close()
            conn = self._try_lead_lock()
            if conn is not None:
                self._lead_conn = conn
                log.warning("the connection holding the lead was lost: the lead is taken again")
                return
            self._leads = False
            hooks = list(self._lead_hooks)
        log.error(
            "the connection holding the lead was lost and another process took the lead "
            "meanwhile: this process no longer leads (its maintenance stops)"
        )
        for _, stop in hooks:
            try:
                stop()
            except Exception:
                log.exception("stopping what the leading process runs failed")

    def health(self) -> list[dict[str, Any]]:
        """Whether this process can write (OpenZiti's health-check form: ``id``, ``healthy``,
        ``lastCheckTime``, and ``details``, ``failingSince`` when failing): the database can be
        reached (the last connection attempt succeeded, and the follower completed a round within
        :data:`HEALTH_STALE_SECONDS`), and this process has not fallen behind the change log."""
        now = datetime.now(UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        stale = time.monotonic() - self._followed_at
        reachable: dict[str, Any] = {"id": "postgres.reachable", "healthy": True, "lastCheckTime": stamp}
        if self._connect_failed_at is not None:
            since = self._unreachable_since or now
            reachable.update(
                healthy=False,
                details=f"cannot connect: {self._unreachable_error}",
                failingSince=since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        elif stale > HEALTH_STALE_SECONDS:
            since = now - timedelta(seconds=stale)
            reachable.update(
                healthy=False,
                details=f"no answer for {stale:.0f} s"
                + (f": {self._follow_error}" if self._follow_error else ""),
                failingSince=since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            )
        log_check: dict[str, Any] = {
            "id": "postgres.change-log",
            "healthy": self._gap is None,
            "lastCheckTime": stamp,
        }
        if self._gap is not None:
            log_check["details"] = str(self._gap)
        return [reachable, log_check]

    def setdefault_setting(self, key: str, value: str) -> str:
        """``key``'s setting, set to ``value`` first if the database has none: the first of
        several processes starting at once sets it, the others read it back."""
        with self._lock, self._writer_lock:
            conn = self._connection_for_writes()
            conn.execute(
                f"INSERT INTO {SETTINGS_TABLE} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                [key, value],
            )
            row = conn.execute(f"SELECT value FROM {SETTINGS_TABLE} WHERE key = %s", [key]).fetchone()
            current = str(row[0]) if row else value
            self._settings[key] = current
            return current

    def _persist_setting(self, key: str, value: str) -> None:
        with self._writer_lock:
            conn = self._connection_for_writes()
            conn.execute(
                f"INSERT INTO {SETTINGS_TABLE} (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                [key, value],
            )

    # -- reads of the database ---------------------------------------------------------------
    def change_log(
        self, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, int, str, str, str, str | None]]:
        """Change-log entries with ``seq`` above ``after``, oldest first: (seq, batch, kind, id,
        op, doc). What a replica follows."""
        with self._reader_lock:
            rows = (
                self._connection_for_reads()
                .execute(
                    f"SELECT seq, batch, kind, id, op, doc::text FROM {CHANGE_LOG_TABLE} "
                    "WHERE seq > %s ORDER BY seq LIMIT %s",
                    [after, limit],
                )
                .fetchall()
            )
        return [
            (int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), None if r[5] is None else str(r[5]))
            for r in rows
        ]

    def change_log_problems(self) -> list[LogProblem]:
        """Where the change log disagrees with the tables: gaps in its numbering, a ``log_head``
        that is not its last entry, or a key whose newest logged change is not what its table
        holds (a put of another document, a delete of a row that is there). Entries trimmed
        away are not compared. Read in one snapshot of the database."""
        known = {table_name(kind.ENTITY): kind.ENTITY for kind in ALL_KINDS}
        problems: list[LogProblem] = []
        with self._reader_lock:
            conn = self._connection_for_reads()
            conn.isolation_level = IsolationLevel.REPEATABLE_READ
            conn.read_only = True
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute("SET LOCAL statement_timeout = 0")
                    cur.execute(f"SELECT count(*), min(seq), max(seq) FROM {CHANGE_LOG_TABLE}")
                    counted = cur.fetchone()
                    cur.execute(f"SELECT seq FROM {LOG_HEAD_TABLE} WHERE id = 1")
                    head_row = cur.fetchone()
                    cur.execute(f"SELECT DISTINCT kind FROM {CHANGE_LOG_TABLE} ORDER BY kind")
                    tables = [str(r[0]) for r in cur.fetchall()]
                    found: list[tuple[str, list[tuple[Any, ...]]]] = []
                    for table in tables:
                        if table not in known:
                            continue
                        cur.execute(
                            "WITH last AS (SELECT DISTINCT ON (id) id, op, doc::text AS doc "
                            f"FROM {CHANGE_LOG_TABLE} WHERE kind = %s ORDER BY id, seq DESC) "
                            f"SELECT last.id, last.op, t.id IS NOT NULL FROM last LEFT JOIN {table} t "
                            "ON t.id = last.id WHERE (last.op = 'delete' AND t.id IS NOT NULL) "
                            "OR (last.op = 'put' AND (t.id IS NULL OR t.doc::text <> last.doc)) "
                            "ORDER BY last.id",
                            [table],
                        )
                        found.append((table, cur.fetchall()))
            finally:
                conn.isolation_level = None
                conn.read_only = None
        if counted and counted[0]:
            count, low, high = int(counted[0]), int(counted[1]), int(counted[2])
            if high - low + 1 != count:
                problems.append(
                    LogProblem(
                        f"change log: {high - low + 1 - count} sequence numbers missing between {low} and {high}"
                    )
                )
        else:
            high = 0
        head = int(head_row[0]) if head_row else None
        if head is None:
            problems.append(LogProblem(f"change log: the {LOG_HEAD_TABLE} row is missing"))
        elif head != high and (high or head):
            ends = f"ends at {high}" if high else "is empty"
            problems.append(LogProblem(f"change log: {LOG_HEAD_TABLE} is at {head} but the log {ends}"))
        for table in tables:
            if table not in known:
                problems.append(LogProblem(f"change log: entries of an unknown kind {table!r}"))
        for table, rows in found:
            problems.extend(key_problems(table, known[table], rows))
        return problems

    def snapshot(self, at: datetime) -> str:
        """PostgreSQL keeps no file of Trellis's to copy: refused, naming PostgreSQL's own tools."""
        raise SnapshotUnsupportedError(
            "the PostgreSQL store has no database file to snapshot: back the database up with "
            "pg_dump (and restore it with pg_restore), or with the server's base backups"
        )

    def close(self) -> None:
        """Commit what is queued, stop the committer and the follower, let the write token go,
        close the connections."""
        super().close()
        self._stopping.set()
        follower = self._follower
        if follower is not None and follower.is_alive():
            try:  # wake it now rather than at its next tick (every follower wakes: a hint)
                with self._writer_lock:
                    self._connection_for_writes().execute("SELECT pg_notify(%s, '')", [LOG_CHANNEL])
            except psycopg.Error:
                pass
            follower.join(FOLLOW_SECONDS * 3)
        with self._token:
            self._token_held = False
            for name in ("_token_conn", "_lead_conn"):
                conn: Connection | None = getattr(self, name)
                setattr(self, name, None)
                if conn is not None:
                    conn.close()
        for ledger in self._ledgers:
            ledger.close()
        for board in self._boards:
            board.close()
        self._close_connections()
