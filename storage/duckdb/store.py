"""The DuckDB store: every entity in memory for reads, every write made durable first.

One process may open the file read-write (docs/architecture.md §5), so the server runs one worker and
opens the store after the fork. With a journal (``journal=True``, what ``trellis serve`` uses) a
write batch is durable once appended to it (:mod:`storage.duckdb.journal`); a flusher thread
then writes the journaled batches into the tables and the change log, many to one DuckDB
transaction, and every open first puts into the database what a run journaled and did not
flush. Without one, a batch is one DuckDB transaction of its own. Either way, only then are the
changes applied in memory and the request acknowledged.

The database holds secrets (password hashes, enrollment tokens, API-session token hashes), so
its directory is private (0700) and the database and its WAL are 0600 from the moment they
exist: opening a store tightens the process umask (:func:`restrict_umask`) and the modes of an
existing directory, database and WAL.

Snapshots (``POST /database/snapshot``, and before a data integrity fix) are DuckDB's own copy of
the database into a fresh file next to it, taken under the write lock while reads go on from
memory; :func:`restore_snapshot` puts one back in place while the server is stopped
(``trellis restore``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from engine.entities import ALL_KINDS, Entity
from engine.logs import Outage
from engine.ports import Change, LogProblem, Put
from storage.changelog import key_problems
from storage.codec import decode, encode
from storage.duckdb.access_changes import DuckDBAccessChangeLog
from storage.duckdb.journal import Entry, Journal, Record, discard, read_records, set_aside
from storage.duckdb.migrations import (
    CHANGE_LOG_TABLE,
    COMPACT_TASK,
    MAINTENANCE_TABLE,
    MIGRATIONS,
    migrate,
    pending_tasks,
    table_name,
)
from storage.duckdb.writer import Database, LocalDatabase, ProcessDatabase, Statement, connect, execute
from storage.files import restrict_umask, tighten
from storage.group_commit import GroupCommitStore

_CONFIG = {
    "autoinstall_known_extensions": "false",
    "autoload_known_extensions": "false",
    "threads": "2",
    "memory_limit": "1GB",
}


_CHUNK_ROWS = 500

_COMPACT_ALIAS = "trellis_compact"
_SNAPSHOT_ALIAS = "trellis_snapshot"

log = logging.getLogger(__name__)


def _chunks(values: list[object], size: int) -> list[list[object]]:
    return [values[i : i + size] for i in range(0, len(values), size)]


def wal_path(path: Path) -> Path:
    """DuckDB's write-ahead log of the database at ``path``."""
    return path.with_name(path.name + ".wal")


def _fsync(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d-%H%M%S")


def snapshot_path(path: Path, at: datetime) -> Path:
    """Where a snapshot of the database at ``path`` taken at ``at`` goes: next to it, named as
    OpenZiti names its snapshots (``<db file>-YYYYMMDD-HHMMSS``; here in UTC)."""
    return path.with_name(f"{path.name}-{_stamp(at)}")


CURRENT_DATABASE = "SELECT current_database()"


def _quoted(rows: Sequence[tuple[object, ...]] | None) -> str:
    """The database name :data:`CURRENT_DATABASE` answered, quoted for SQL (``COPY FROM DATABASE``)."""
    name = str(rows[0][0]) if rows else ""
    return '"' + name.replace('"', '""') + '"'


def _database_name(con: duckdb.DuckDBPyConnection) -> str:
    """The connection's own database, quoted for SQL."""
    return _quoted(con.execute(CURRENT_DATABASE).fetchall())


def _remove(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


#: Change-log entries kept by default (a replica further behind resyncs from a snapshot).
CHANGE_LOG_RETAIN = 100_000
#: With a journal: a flush takes at most this many changes into one transaction.
FLUSH_ENTRIES = 20_000
#: With a journal: the flusher lets batches gather this long (unless :data:`FLUSH_ENTRIES` are
#: waiting) before it puts them into DuckDB. A DuckDB transaction has a fixed cost whatever its
#: size (its WAL's fsync among it): one per batch kept the database writer process at a third to
#: a half of a core and its fsyncs queued beside the journal's on the disk; the batches are
#: durable in the journal meanwhile.
FLUSH_DELAY_SECONDS = 0.1
#: With a journal: batches wait (the committer is held) while this many changes are not yet in
#: the database, so that memory and the time a restart replays stay bounded.
MAX_UNFLUSHED = 200_000
ROLLBACK: list[Statement] = [("ROLLBACK", None)]


def transaction(records: Sequence[Record]) -> list[Statement]:
    """The one DuckDB transaction that writes ``records`` (batches, in order): each table takes
    each key's last change, the change log every change.

    A key's first entry says whether it was in its table before these records: a new key is a
    plain INSERT, only a changed one needs INSERT OR REPLACE (twice the cost), and a key created
    and deleted within them was never in its table. Whole columns are bound as lists: one
    statement per table whatever the size (a row of ``?`` per value costs more to bind than the
    write itself).
    """
    existed: dict[tuple[str, str], bool] = {}
    final: dict[tuple[str, str], str | None] = {}
    log: tuple[list[int], list[int], list[str], list[str], list[str], list[str | None]] = (
        [], [], [], [], [], []
    )  # fmt: skip
    for batch, entries in records:
        for seq, table, entity_id, doc, held in entries:
            key = (table, entity_id)
            existed.setdefault(key, held)
            final[key] = doc
            log[0].append(seq)
            log[1].append(batch)
            log[2].append(table)
            log[3].append(entity_id)
            log[4].append("delete" if doc is None else "put")
            log[5].append(doc)
    inserts: dict[str, tuple[list[str], list[str]]] = {}
    replaces: dict[str, tuple[list[str], list[str]]] = {}
    deletes: dict[str, list[str]] = {}
    for (table, entity_id), doc in final.items():
        if doc is not None:
            ids, docs = (replaces if existed[table, entity_id] else inserts).setdefault(table, ([], []))
            ids.append(entity_id)
            docs.append(doc)
        elif existed[table, entity_id]:
            deletes.setdefault(table, []).append(entity_id)
    statements: list[Statement] = [("BEGIN TRANSACTION", None)]
    for table, ids in deletes.items():
        statements.append((f"DELETE FROM {table} WHERE id IN (SELECT unnest($1::VARCHAR[]))", [ids]))
    for verb, puts in (("INSERT", inserts), ("INSERT OR REPLACE", replaces)):
        for table, (ids, docs) in puts.items():
            statements.append(
                (
                    f"{verb} INTO {table} (id, doc) SELECT unnest($1::VARCHAR[]), unnest($2::VARCHAR[])",
                    [ids, docs],
                )
            )
    statements.append(
        (
            f"INSERT INTO {CHANGE_LOG_TABLE} (seq, batch, kind, id, op, doc) SELECT unnest($1::BIGINT[]), "
            "unnest($2::BIGINT[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[]), unnest($5::VARCHAR[]), "
            "unnest($6::VARCHAR[])",
            list(log),
        )
    )
    statements.append(("COMMIT", None))
    return statements


def replay_journal(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Put what a run journaled and did not flush into the database at ``path`` (open on
    ``con``): the records past the change log's last ``seq``; then checkpoint and delete the
    journal. Every open does this, and a restore before it moves the database aside.

    Replay goes on only while the journal continues the database, change by change
    (:func:`continuing`). A journal that resumes past a gap is not this database's next
    history: a snapshot copied over the file by hand, or a record lost in the middle of the
    journal. Applying it would leave the tables in a state no run ever had. So replay stops at
    the gap, as PostgreSQL stops at the first bad WAL record: the batches after it are not
    applied and their segments are kept beside the database, renamed ``*.orphaned``, for an
    operator to inspect."""
    records = list(read_records(path))
    if records:
        row = con.execute(f"SELECT coalesce(max(seq), 0) FROM {CHANGE_LOG_TABLE}").fetchone()
        done = int(row[0]) if row else 0
        missing, gap = continuing(records, done)
        if missing:
            execute(con, transaction(missing), ROLLBACK)
            log.warning(
                "replayed %d journaled batches (%d changes) into %s",
                len(missing),
                sum(len(entries) for _, entries in missing),
                path,
            )
        con.execute("CHECKPOINT")
        if gap is not None:
            kept = set_aside(path)
            log.error(
                "the journal of %s does not continue it: the database ends at change %d, the journal "
                "resumes at change %d; the batches from there on were not applied; its segments are "
                "kept as %s",
                path,
                gap[0],
                gap[1],
                ", ".join(p.name for p in kept),
            )
            return
    discard(path)


def continuing(records: Sequence[Record], done: int) -> tuple[list[Record], tuple[int, int] | None]:
    """The batches of ``records`` past change ``done`` that follow on from it without a gap, each
    with only its changes past ``done``, and where a gap stopped them: (the last change applied,
    the change the journal resumed at), or None. A batch is taken whole or not at all."""
    out: list[Record] = []
    last = done
    for batch, entries in records:
        ahead = [entry for entry in entries if entry[0] > done]
        if not ahead:
            continue
        if [entry[0] for entry in ahead] != list(range(last + 1, last + 1 + len(ahead))):
            return out, (last, ahead[0][0])
        out.append((batch, ahead))
        last = ahead[-1][0]
    return out, None


class DuckDBStore(GroupCommitStore):
    """A group-commit ``Store`` on a DuckDB file (see :mod:`storage.group_commit` for the write path).

    A batch is one DuckDB transaction: the entity tables take each key's last change and the
    ``change_log`` table every change, numbered. The log is kept to the newest
    ``change_log_retain`` entries: when it has grown by half that again, the committer checkpoints
    the database (the WAL folded into the file) and then deletes what is older.
    """

    def __init__(
        self,
        path: Path,
        *,
        memory_limit: str = "1GB",
        change_log_retain: int = CHANGE_LOG_RETAIN,
        writer: str = "thread",
        journal: bool = False,
    ) -> None:
        """``writer``: where the statements run once the store is loaded: ``"thread"`` (the
        committer thread, on this process's connection) or ``"process"`` (a writer process, see
        :mod:`storage.duckdb.writer`: what ``trellis serve`` uses). ``journal``: a batch is durable
        once in the journal (:mod:`storage.duckdb.journal`) and put into the database by a flusher
        thread, many batches to a transaction; without it, once its own transaction commits.
        Whatever a journal left behind is put into the database at open either way."""
        if writer not in ("thread", "process"):
            raise ValueError(f"writer must be 'thread' or 'process', not {writer!r}")
        super().__init__(background=True)
        self.change_log_retain = max(1, change_log_retain)
        #: Documents encoded at staging, by entity object, until their batch is written.
        self._encoded: dict[int, tuple[Entity, str]] = {}
        self._journal: Journal | None = None
        #: Journaled batches not yet in the database, oldest first, and their count of changes.
        self._pending: list[Record] = []
        self._pending_entries = 0
        self._unflushed = threading.Condition(threading.Lock())
        #: Held by a flush (one transaction of pending batches at a time, in order).
        self._flush_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._stopping = False
        #: The flusher's refused attempts, reported as an outage (once, a count, once).
        self._flush_outage = Outage(log, "flush", unit="attempts")
        restrict_umask()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # The database's directory is its own (TRELLIS_HOME); ".tmp" is DuckDB's spill directory.
        for existing in (path.parent, path, wal_path(path), path.with_name(path.name + ".tmp")):
            tighten(existing)
        self._config: dict[str, str | bool | int | float | list[str]] = {
            **_CONFIG,
            "memory_limit": memory_limit,
        }
        self.path = path
        # The writer process starts now and imports DuckDB while this one loads the data.
        child = ProcessDatabase(path, self._config) if writer == "process" else None
        try:
            self._con = connect(path, self._config)
            replay_journal(self._con, path)
            self.schema_version = migrate(self._con)
            if COMPACT_TASK in pending_tasks(self._con):
                self._compact(path)
            self._load_all()
            row = self._con.execute(
                f"SELECT coalesce(max(seq), 0), count(*) FROM {CHANGE_LOG_TABLE}"
            ).fetchone()
            self._seq = int(row[0]) if row else 0
            self._logged = int(row[1]) if row else 0
            self.load([])  # the published state carries the last sequence number
            if child is not None:
                self._con.close()  # the file's lock goes to the writer process
                child.open()
        except BaseException:
            if child is not None:
                child.close()
            raise
        self._db: Database = child if child is not None else LocalDatabase(self._con)
        if journal:
            self._journal = Journal(path)
            self._flusher = threading.Thread(target=self._flush_loop, name="trellis-flusher", daemon=True)
            self._flusher.start()

    def _compact(self, path: Path) -> None:
        """Rewrite the database into a fresh file, so that no overwritten value (e.g. a plain
        API-session token before migration 2) survives in the old file's freed blocks.

        The copy is made without the ``compact`` task and replaces the file atomically, so a crash
        at any point leaves either the old file (task pending: compacted at the next open) or the
        new one. On failure the old file is kept and served; the next open retries.
        """
        fresh = path.with_name(path.name + ".compact")
        for leftover in (fresh, wal_path(fresh)):
            leftover.unlink(missing_ok=True)
        con = self._con
        try:
            quoted = _database_name(con)
            con.execute("CHECKPOINT")
            con.execute(f"ATTACH ? AS {_COMPACT_ALIAS}", [str(fresh)])
            try:
                con.execute(f"COPY FROM DATABASE {quoted} TO {_COMPACT_ALIAS}")
                con.execute(
                    f"DELETE FROM {_COMPACT_ALIAS}.{MAINTENANCE_TABLE} WHERE task = ?", [COMPACT_TASK]
                )
            finally:
                con.execute(f"DETACH {_COMPACT_ALIAS}")
            con.close()
            if wal_path(path).exists() or wal_path(fresh).exists():
                raise RuntimeError("a database was not fully checkpointed")
            _fsync(fresh)
            os.replace(fresh, path)
            _fsync(path.parent, directory=True)
        except (duckdb.Error, OSError, RuntimeError) as ex:
            log.warning("could not compact %s (retried at the next open): %s", path, ex)
            for leftover in (fresh, wal_path(fresh)):
                leftover.unlink(missing_ok=True)
        finally:
            con.close()
            self._con = connect(path, self._config)

    def _load_all(self) -> None:
        for kind in ALL_KINDS:
            rows = self._con.execute(f"SELECT id, doc FROM {table_name(kind.ENTITY)}").fetchall()
            self.load([decode(kind, row[0], row[1]) for row in rows])
        settings = self._con.execute("SELECT key, value FROM settings").fetchall()
        self._settings.update({str(k): str(v) for k, v in settings})

    def _prepare(self, changes: Sequence[Change]) -> None:
        """Encode each put's document now, on the writer's thread: a value that cannot be stored
        (``UnstorableValueError``, a 400) refuses its own request, never its batch."""
        encoded = [(change.entity, encode(change.entity)) for change in changes if isinstance(change, Put)]
        for entity, doc in encoded:
            self._encoded[id(entity)] = (entity, doc)

    def _expected_failure(self, error: BaseException) -> bool:
        """A failing disk or database (``duckdb.Error``, ``WriterGone`` among them) is expected."""
        return isinstance(error, (OSError, duckdb.Error))

    def _doc(self, entity: Entity) -> str:
        cached = self._encoded.get(id(entity))
        return cached[1] if cached is not None and cached[0] is entity else encode(entity)

    def _persist(self, entries: Sequence[tuple[int, Change]]) -> None:
        try:
            self._write_batch(entries)
        finally:
            for _, change in entries:
                if isinstance(change, Put):
                    self._encoded.pop(id(change.entity), None)

    def _record(self, entries: Sequence[tuple[int, Change]]) -> Record:
        """A batch as the journal and :func:`transaction` take it."""
        # The published state holds exactly what the batches before this one left in the tables.
        published = self._state
        out: list[Entry] = []
        for seq, change in entries:
            if isinstance(change, Put):
                entity = change.entity
                table = table_name(entity.ENTITY)
                out.append(
                    (seq, table, entity.id, self._doc(entity), published.holds(entity.ENTITY, entity.id))
                )
            else:
                table = table_name(change.kind.ENTITY)
                out.append((seq, table, change.id, None, published.holds(change.kind.ENTITY, change.id)))
        return entries[-1][0], out

    def _write_batch(self, entries: Sequence[tuple[int, Change]]) -> None:
        record = self._record(entries)
        journal = self._journal
        if journal is None:
            # One call: in the writer process, one message and one answer (storage.duckdb.writer).
            self._db.run(transaction([record]), on_error=ROLLBACK)
            self._written(len(entries), record[0])
            return
        journal.append(*record)  # durable from here: the tables follow (the flusher)
        with self._unflushed:
            self._pending.append(record)
            self._pending_entries += len(entries)
            self._unflushed.notify_all()
            while self._pending_entries > MAX_UNFLUSHED and self._flusher is not None:
                self._unflushed.wait(1.0)

    def _written(self, entries: int, last: int) -> None:
        """``entries`` more changes are in the change log, the last of batch ``last``."""
        self._logged += entries
        if self._logged >= self.change_log_retain + max(1, self.change_log_retain // 2):
            self._trim_change_log(last)

    # -- the journal's flusher -------------------------------------------------------------------
    def flush(self) -> None:
        """Put every journaled batch into the database now (a no-op without a journal); raise
        what the database answered if it refuses them (they stay journaled and pending)."""
        while self._flush_some():
            pass

    def _flush_some(self) -> bool:
        """One transaction of pending batches; False when none was pending."""
        journal = self._journal
        if journal is None:
            return False
        with self._flush_lock:
            with self._unflushed:
                taken = 0
                count = 0
                for _, entries in self._pending:
                    if count and taken + len(entries) > FLUSH_ENTRIES:
                        break
                    taken += len(entries)
                    count += 1
                records = self._pending[:count]
            if not records:
                return False
            self._db.run(transaction(records), on_error=ROLLBACK)
            with self._unflushed:
                del self._pending[:count]
                self._pending_entries -= taken
                self._unflushed.notify_all()
            last = records[-1][0]
            self._written(taken, last)
            journal.release(last)
            return True

    def _flush_loop(self) -> None:
        delay = 0.0
        while True:
            with self._unflushed:
                while not self._pending and not self._stopping:
                    self._unflushed.wait()
                if self._stopping:
                    return
                if delay:
                    self._unflushed.wait(delay)  # after a refusal; close() flushes what is left
                else:
                    self._unflushed.wait_for(
                        lambda: self._stopping or self._pending_entries >= FLUSH_ENTRIES, FLUSH_DELAY_SECONDS
                    )
                if self._stopping:
                    return
            try:
                self._flush_some()
                delay = 0.0
                self._flush_outage.succeeded()
            except Exception as ex:
                # retried with a growing delay; the batches stay journaled (durable) meanwhile
                delay = min(5.0, max(0.1, delay * 2))
                self._flush_outage.failed(ex, expected=self._expected_failure(ex))

    def _trim_change_log(self, last: int) -> None:
        """Checkpoint, then keep the newest ``change_log_retain`` entries (by the committer, after
        a commit). A failure here loses nothing: the log is trimmed next time."""
        try:
            results = self._db.run(
                [
                    ("CHECKPOINT", None),
                    (f"DELETE FROM {CHANGE_LOG_TABLE} WHERE seq <= ?", [last - self.change_log_retain]),
                    (f"SELECT count(*) FROM {CHANGE_LOG_TABLE}", None),
                ]
            )
            rows = results[-1]
            self._logged = int(rows[0][0]) if rows else 0
        except duckdb.Error as ex:
            log.warning("could not trim the change log (retried later): %s", ex)

    def change_log(
        self, after: int = 0, limit: int = 1000
    ) -> list[tuple[int, int, str, str, str, str | None]]:
        """Change-log entries with ``seq`` above ``after``, oldest first: (seq, batch, kind, id,
        op, doc). What a replica follows."""
        self.flush()
        (rows,) = self._db.run(
            [
                (
                    f"SELECT seq, batch, kind, id, op, doc FROM {CHANGE_LOG_TABLE} WHERE seq > ? ORDER BY seq LIMIT ?",
                    [after, limit],
                )
            ]
        )
        return [
            (int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), None if r[5] is None else str(r[5]))
            for r in rows
        ]

    def change_log_problems(self) -> list[LogProblem]:
        """Where the change log disagrees with the tables: gaps in its numbering, or a key whose
        newest logged change is not what its table holds (a put of another document, a delete of
        a row that is there). Entries trimmed away are not compared."""
        self.flush()
        problems: list[LogProblem] = []
        counted, kinds = self._db.run(
            [
                (f"SELECT count(*), min(seq), max(seq) FROM {CHANGE_LOG_TABLE}", None),
                (f"SELECT DISTINCT kind FROM {CHANGE_LOG_TABLE}", None),
            ]
        )
        row = counted[0] if counted else None
        if row and row[0]:
            count, low, high = int(row[0]), int(row[1]), int(row[2])
            if high - low + 1 != count:
                problems.append(
                    LogProblem(
                        f"change log: {high - low + 1 - count} sequence numbers missing between {low} and {high}"
                    )
                )
        known = {table_name(kind.ENTITY): kind.ENTITY for kind in ALL_KINDS}
        tables = sorted(str(r[0]) for r in kinds)
        for table in tables:
            if table not in known:
                problems.append(LogProblem(f"change log: entries of an unknown kind {table!r}"))
        compared = [table for table in tables if table in known]
        answers = self._db.run(
            [
                (
                    f"WITH last AS (SELECT id, arg_max(op, seq) AS op, arg_max(doc::VARCHAR, seq) AS doc "
                    f"FROM {CHANGE_LOG_TABLE} WHERE kind = ? GROUP BY id) "
                    f"SELECT last.id, last.op, t.id IS NOT NULL FROM last LEFT JOIN {table} t ON t.id = last.id "
                    "WHERE (last.op = 'delete' AND t.id IS NOT NULL) "
                    "OR (last.op = 'put' AND (t.id IS NULL OR t.doc::VARCHAR <> last.doc)) ORDER BY last.id",
                    [table],
                )
                for table in compared
            ]
        )
        for table, rows in zip(compared, answers, strict=True):
            problems.extend(key_problems(table, known[table], rows))
        return problems

    def access_change_log(self) -> DuckDBAccessChangeLog:
        """The access changes of this database's batches (``access_changes``, migration 9)."""
        return DuckDBAccessChangeLog(lambda statements: self._db.run(statements))

    def _persist_setting(self, key: str, value: str) -> None:
        self._db.run([("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", [key, value])])

    def snapshot(self, at: datetime) -> str:
        """Copy the database into ``<db>-YYYYMMDD-HHMMSS`` next to it; return that path.

        DuckDB copies it (``ATTACH`` a fresh file, ``COPY FROM DATABASE``, ``DETACH``) under the
        write lock (re-entrant: a writer holding it may snapshot), so no batch is half in the
        copy; reads are served from memory meanwhile and only writers wait. The copy holds the
        committed rows and nothing of the old file's freed blocks. It is written as
        ``<name>.partial``, fsynced, then renamed into place, so a snapshot file is always
        complete. An existing snapshot of the same name is kept.
        """
        target = snapshot_path(self.path, at)
        partial = target.with_name(target.name + ".partial")
        with self._lock:
            if target.exists():
                log.info("database snapshot already made: %s", target)
                return str(target)
            _remove(partial, wal_path(partial))
            try:
                self.flush()
                self._db.run(
                    [
                        (f"ATTACH ? AS {_SNAPSHOT_ALIAS}", [str(partial)]),
                        (f"COPY FROM DATABASE {self._database_name()} TO {_SNAPSHOT_ALIAS}", None),
                        (f"DETACH {_SNAPSHOT_ALIAS}", None),
                    ],
                    on_error=[(f"DETACH {_SNAPSHOT_ALIAS}", None)],
                )
                if wal_path(partial).exists():
                    raise RuntimeError(f"the snapshot {partial} was not fully checkpointed")
                _fsync(partial)
                os.replace(partial, target)
                _fsync(target.parent, directory=True)
            except BaseException:
                _remove(partial, wal_path(partial))
                raise
        tighten(target)
        log.info("created database snapshot %s", target)
        return str(target)

    def _database_name(self) -> str:
        """The open database's name, quoted for SQL."""
        (rows,) = self._db.run([(CURRENT_DATABASE, None)])
        return _quoted(rows)

    def close(self) -> None:
        """Commit what is queued, stop the committer and the flusher, put what is journaled into
        the database (else it stays journaled for the next open), then close the database."""
        super().close()
        flusher = self._flusher
        if flusher is not None:
            with self._unflushed:
                self._stopping = True
                self._unflushed.notify_all()
            flusher.join()
            self._flusher = None
        journal = self._journal
        if journal is not None:
            try:
                self.flush()
            except Exception as ex:
                log.error("journaled batches stay in the journal until the next open: %s", ex)
                journal.close()
            else:
                journal.clear()
        self._db.close()


class RestoreError(Exception):
    """Why a snapshot cannot be restored, in words for the operator."""


def restore_snapshot(path: Path, snapshot: Path, at: datetime) -> Path | None:
    """Replace the database at ``path`` with a copy of ``snapshot`` (the server must be stopped).

    The running server holds DuckDB's lock on the database: then nothing is touched and a
    :class:`RestoreError` says so. The snapshot is copied beside the database, checked to be a
    Trellis database no newer than this code's schema, and made self-contained (a WAL beside the
    snapshot is replayed into the copy); only then is the current database moved aside to
    ``<db>.pre-restore-YYYYMMDD-HHMMSS`` and the copy renamed into its place. Returns where the
    previous database was kept (None when there was none). The snapshot file itself is unchanged.
    """
    restrict_umask()
    if not snapshot.is_file():
        raise RestoreError(f"{snapshot}: no such snapshot file")
    if path.exists() and snapshot.resolve() == path.resolve():
        raise RestoreError(f"{snapshot} is the database itself, not a snapshot of it")
    aside = path.with_name(f"{path.name}.pre-restore-{_stamp(at)}")
    if aside.exists():
        raise RestoreError(f"{aside} already exists: try again in a second")
    if path.exists():
        _checkpoint_unlocked(path)
    staged = path.with_name(path.name + ".restore")
    _remove(staged, wal_path(staged))
    try:
        shutil.copyfile(snapshot, staged)
        if wal_path(snapshot).exists():
            shutil.copyfile(wal_path(snapshot), wal_path(staged))
        _check_snapshot(staged, snapshot)
        _fsync(staged)
        if path.exists():
            os.replace(path, aside)
        os.replace(staged, path)
        _fsync(path.parent, directory=True)
    except BaseException:
        _remove(staged, wal_path(staged))
        raise
    return aside if aside.exists() else None


def _checkpoint_unlocked(path: Path) -> None:
    """Fold the database's journal and WAL into it, refusing while another process (the server)
    holds it."""
    try:
        con = duckdb.connect(str(path), config=dict(_CONFIG))
    except duckdb.IOException as ex:
        if "lock" in str(ex).lower():
            raise RestoreError(f"{path} is in use by a running server: stop it first ({ex})") from None
        raise RestoreError(f"cannot open {path}: {ex}") from None
    try:
        replay_journal(con, path)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    if wal_path(path).exists():
        raise RestoreError(f"{path} could not be checkpointed; nothing was changed")


def _check_snapshot(staged: Path, snapshot: Path) -> None:
    """``staged`` is a Trellis database this code can open (its WAL, if any, folded in)."""
    latest = max(version for version, _ in MIGRATIONS)
    try:
        con = duckdb.connect(str(staged), config=dict(_CONFIG))
    except duckdb.Error as ex:
        raise RestoreError(f"{snapshot} is not a DuckDB database: {ex}") from None
    try:
        row = con.execute("SELECT max(version) FROM schema_migrations").fetchone()
        con.execute("SELECT count(*) FROM identities").fetchone()
        con.execute("CHECKPOINT")
    except duckdb.Error as ex:
        raise RestoreError(f"{snapshot} is not a Trellis database: {ex}") from None
    finally:
        con.close()
    version = int(row[0]) if row and row[0] is not None else 0
    if version > latest:
        raise RestoreError(f"{snapshot} has schema version {version}; this Trellis knows up to {latest}")
    if wal_path(staged).exists():
        raise RestoreError(f"{snapshot} could not be made self-contained")
