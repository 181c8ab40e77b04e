"""The access-change stream (docs/analysis.md §15): for every access-relevant batch, the
(identity, service, Dial|Bind) and (identity, edge router) pairs it added and removed, the writes
that made it (the kinds and ids they changed) and who made them, kept durable and read in
revision order from any revision still held.

**Computed off the commit path.** :class:`AccessChangeStream` observes the policy graph (a
:class:`~engine.managers.access.GraphObserver`): for each batch it only queues the batch's changes
(under the graph's lock, microseconds). A worker thread keeps two private graphs, *before* and
*after*, forked from the live graph when the stream started (forks share the live graph's
bitsets: a few MB at tier L). For each queued batch it applies the changes to *after*, compares
the two with :func:`~engine.analysis.diff.access_diff` (only where the batch touched), records the
answer, then applies the changes to *before*: no fork per batch (78 ms at tier L) and no lock
held while comparing, however many pairs a batch changes. A queue that grows past
:data:`QUEUE_CHANGES` changes is dropped, the private graphs are forked again from the live one,
and a *gap* record says that the changes in between are unknown: commits are never held up.

**Kept durable, shared.** Each batch that changed a pair is a row of the store's
:class:`~engine.ports.AccessChangeLog` (a table in DuckDB and PostgreSQL): its revision, the
revision of the row before it (``prev``: a reader resuming at ``R`` knows it misses nothing when
the oldest row kept has ``prev <= R``), the commit time and the record as compressed JSON (ids
written once, pairs as indexes). Rows older than the retention (``TRELLIS_ACCESS_CHANGES_RETAIN_DAYS``)
are dropped, the newest always kept. The process that committed a batch writes its row, since
only it knows who made the writes; the other processes of a shared database compute the same
rows and write theirs (without the actor) only if that row has not appeared after
:data:`FOLLOWER_GRACE_SECONDS`, should the committing process have stopped first.

**The actor.** A write's caller is known only where the write is made: the API sets
:data:`current_actor` for each request (the admin identity and its API session), and the stream's
check on every ``Env.commit`` (``Env.checks``) notes it for the changes the write stages; the
batch's record names, per actor, the access-relevant changes it made. Writes no caller made
(routers connecting, follow-ups, maintenance) have none.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from engine.analysis.diff import AccessDiff, access_diff, touched_by
from engine.managers.access import ENTITY_KINDS as ENTITY_NAMES
from engine.managers.access import POLICY_KINDS as POLICY_NAMES
from engine.managers.access import AccessManager, apply_changes
from engine.policy import PolicyGraph
from engine.ports import AccessChangeLog, AccessChangeRow, Change, Clock, Put, Store

__all__ = [
    "FOLLOWER_GRACE_SECONDS",
    "QUEUE_CHANGES",
    "AccessChangeStream",
    "Actor",
    "ChangeRecord",
    "Cursor",
    "RevisionExpiredError",
    "current_actor",
    "decode_record",
    "encode_record",
]

log = logging.getLogger(__name__)

#: How many changes may wait for the worker before the queue is dropped for a gap record.
QUEUE_CHANGES = 2_000_000
#: How long a process that did not commit a batch waits for its row before writing its own.
FOLLOWER_GRACE_SECONDS = 2.0
#: How often old rows are dropped.
TRIM_EVERY_SECONDS = 60.0
#: A worker with nothing to do for this long ends (seconds); the next batch starts one again. A
#: controller without writes holds no thread, and one whose store closed none at all.
IDLE_EXIT_SECONDS = 10.0
#: How many access-relevant changes a record lists per batch (all are counted).
MAX_LISTED_CHANGES = 1000
#: How many notes of who staged what are kept waiting for their batch at most.
MAX_ACTOR_NOTES = 20_000
#: Access-relevant kinds, by store name.
_ACCESS_KINDS = frozenset({*ENTITY_NAMES, *POLICY_NAMES})


@dataclass(frozen=True)
class Actor:
    """Who made a write: the caller's identity and API session (as the management API knew it)."""

    identity_id: str
    identity_name: str = ""
    api_session_id: str = ""
    #: ``METHOD path`` of the request that made it.
    request: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "identityId": self.identity_id,
            "identityName": self.identity_name,
            "apiSessionId": self.api_session_id,
            "request": self.request,
        }


#: The caller of the request being served on this thread (set by the API, read by writes).
current_actor: ContextVar[Actor | None] = ContextVar("trellis_actor", default=None)


class RevisionExpiredError(Exception):
    """The stream no longer holds every change after the revision (410)."""

    def __init__(self, revision: int, floor: int) -> None:
        super().__init__(
            f"revision {revision} is older than the access changes kept (from revision {floor} on)"
        )
        self.revision = revision
        self.floor = floor


@dataclass(frozen=True)
class Cursor:
    """A place in the stream: every change up to ``revision`` read (``offset`` None), or the first
    ``offset`` pairs of ``revision``'s record. Written ``REV`` or ``REV.OFFSET``."""

    revision: int
    offset: int | None = None

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """``REV`` or ``REV.OFFSET`` (ValueError otherwise)."""
        head, dot, tail = text.strip().partition(".")
        if not head.isdigit() or (dot and not tail.isdigit()) or len(head) > 19 or len(tail) > 19:
            raise ValueError(f"not a revision: {text!r}")
        revision = int(head)
        offset = int(tail) if dot else None
        return cls(revision, offset or None)

    def __str__(self) -> str:
        return str(self.revision) if self.offset is None else f"{self.revision}.{self.offset}"


@dataclass
class ChangeRecord:
    """One row's record: a batch's access changes (``kind`` ``changes``), or a ``gap`` (the
    changes after ``prev`` up to ``revision`` are unknown), or the ``start`` of the stream."""

    revision: int
    prev: int
    committed_at: datetime
    kind: str = "changes"
    #: Per actor (None: no caller) the access-relevant changes it made: ``{"actor", "changes"}``.
    writes: list[dict[str, Any]] = field(default_factory=list)
    #: How many access-relevant changes the batch made (``writes`` lists at most 1,000).
    change_count: int = 0
    services_added: list[tuple[str, str, str]] = field(default_factory=list)
    services_removed: list[tuple[str, str, str]] = field(default_factory=list)
    routers_added: list[tuple[str, str]] = field(default_factory=list)
    routers_removed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total(self) -> int:
        return (
            len(self.services_added)
            + len(self.services_removed)
            + len(self.routers_added)
            + len(self.routers_removed)
        )

    def part(self, offset: int, limit: int) -> dict[str, Any]:
        """Pairs ``offset`` to ``offset + limit`` (in the order services added, services removed,
        routers added, routers removed) as the API renders them."""
        end = min(self.total, offset + max(1, limit))
        lists: list[tuple[str, str, list[Any]]] = [
            ("services", "added", self.services_added),
            ("services", "removed", self.services_removed),
            ("routers", "added", self.routers_added),
            ("routers", "removed", self.routers_removed),
        ]
        out: dict[str, Any] = {
            "revision": self.revision,
            "kind": self.kind,
            "committedAt": self.committed_at.isoformat().replace("+00:00", "Z"),
            "writes": self.writes,
            "changeCount": self.change_count,
            "offset": offset,
            "total": self.total,
            "complete": end >= self.total,
            "services": {"added": [], "removed": []},
            "routers": {"added": [], "removed": []},
        }
        if self.kind == "gap":
            out["gap"] = {"after": self.prev}
        start = 0
        for group, op, pairs in lists:
            lo, hi = max(offset, start), min(end, start + len(pairs))
            for pair in pairs[lo - start : hi - start] if lo < hi else ():
                if group == "services":
                    out[group][op].append({"identityId": pair[0], "serviceId": pair[1], "type": pair[2]})
                else:
                    out[group][op].append({"identityId": pair[0], "edgeRouterId": pair[1]})
            start += len(pairs)
        return out


def encode_record(record: ChangeRecord) -> bytes:
    """The record as the row keeps it: JSON (each id once, pairs as indexes) compressed."""
    ids: dict[str, int] = {}

    def at(value: str) -> int:
        found = ids.get(value)
        if found is None:
            found = ids[value] = len(ids)
        return found

    def services(pairs: list[tuple[str, str, str]]) -> list[int]:
        flat: list[int] = []
        for i, s, t in pairs:
            flat += (at(i), at(s), 0 if t == "Dial" else 1)
        return flat

    def routers(pairs: list[tuple[str, str]]) -> list[int]:
        flat: list[int] = []
        for i, r in pairs:
            flat += (at(i), at(r))
        return flat

    doc = {
        "v": 1,
        "kind": record.kind,
        "writes": record.writes,
        "changeCount": record.change_count,
        "sa": services(record.services_added),
        "sr": services(record.services_removed),
        "ra": routers(record.routers_added),
        "rr": routers(record.routers_removed),
    }
    doc["ids"] = list(ids)
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)


def decode_record(row: AccessChangeRow) -> ChangeRecord:
    doc = json.loads(zlib.decompress(row.doc))
    ids: list[str] = doc["ids"]

    def services(flat: list[int]) -> list[tuple[str, str, str]]:
        return [
            (ids[flat[k]], ids[flat[k + 1]], "Dial" if flat[k + 2] == 0 else "Bind")
            for k in range(0, len(flat), 3)
        ]

    def routers(flat: list[int]) -> list[tuple[str, str]]:
        return [(ids[flat[k]], ids[flat[k + 1]]) for k in range(0, len(flat), 2)]

    return ChangeRecord(
        row.revision,
        row.prev,
        row.committed_at,
        doc["kind"],
        doc["writes"],
        doc["changeCount"],
        services(doc["sa"]),
        services(doc["sr"]),
        routers(doc["ra"]),
        routers(doc["rr"]),
    )


@dataclass
class _Pending:
    """A batch waiting for the worker."""

    revision: int
    changes: list[Change]
    at: datetime
    writes: list[dict[str, Any]]
    change_count: int
    #: Another process committed it (its row is theirs to write).
    followed: bool


def _key(change: Change) -> tuple[str, str]:
    if isinstance(change, Put):
        return change.entity.ENTITY, change.entity.id
    return change.kind.ENTITY, change.id


class AccessChangeStream:
    """See the module docstring. Attach one per controller (:meth:`attach`); ``close`` stops it."""

    def __init__(
        self,
        store: Store,
        access: AccessManager,
        clock: Clock,
        *,
        retain: timedelta,
        queue_changes: int = QUEUE_CHANGES,
    ) -> None:
        self.store = store
        self.access = access
        self.clock = clock
        self.retain = retain
        self.queue_changes = queue_changes
        self.log: AccessChangeLog = store.access_change_log()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[_Pending] = deque()
        self._queued = 0
        #: The queue was dropped: the worker forks the graphs again and records a gap.
        self._overflow = False
        self._stopping = False
        self._actors: OrderedDict[tuple[str, str], tuple[object, Actor]] = OrderedDict()
        self._actors_lock = threading.Lock()
        #: Rows other processes should write, kept until the grace is over.
        self._held: deque[tuple[float, AccessChangeRow]] = deque()
        self._decoded: OrderedDict[int, ChangeRecord] = OrderedDict()
        self._decoded_lock = threading.Lock()
        self._trimmed_at = 0.0
        self._before: PolicyGraph
        self._after: PolicyGraph
        #: The last access-relevant revision this process applied (rows up to it are due).
        self.applied = 0
        #: The newest row this process wrote or saw written.
        self.recorded = 0
        #: The last batch the worker finished with (recorded, or found to change no pair).
        self.processed = 0
        self._prev = 0
        self._start = 0
        self._thread: threading.Thread | None = None

    # -- setting up ---------------------------------------------------------------------------
    def attach(self, checks: list[Callable[[list[Change]], list[Change]]]) -> None:
        """Fork the live graph, observe every batch from there on, note the actor of every write
        (``checks``: ``Env.checks``), and start the worker."""
        with self.access.reading() as (graph, revision):
            self._before = graph.copy()
            self._start = revision
            self.access.observe(self)
        self._after = self._before.copy()
        self.applied = self.processed = revision
        _, high = self.log.bounds()
        if high is None:
            # An empty stream starts here: a record saying so keeps this revision resumable.
            start = ChangeRecord(revision, revision, self.clock.now(), "start")
            self.log.append(AccessChangeRow(revision, revision, start.committed_at, 0, encode_record(start)))
            self._prev = self.recorded = revision
        else:
            self._prev = self.recorded = high.revision
        checks.append(self._note_actor)
        self._thread = threading.Thread(target=self._run, name="trellis-access-changes", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        """Record what is queued (for up to ``timeout``), then stop the worker."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queue and time.monotonic() < deadline:
                self._cond.wait(0.05)
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()) + 0.5)

    # -- who made a write ---------------------------------------------------------------------
    def _note_actor(self, changes: list[Change]) -> list[Change]:
        """``Env.checks`` entry: note the request's caller for the access-relevant changes."""
        actor = current_actor.get()
        if actor is None:
            return []
        with self._actors_lock:
            for change in changes:
                key = _key(change)
                if key[0] in _ACCESS_KINDS:
                    self._actors.pop(key, None)
                    self._actors[key] = (change.entity if isinstance(change, Put) else None, actor)
            while len(self._actors) > MAX_ACTOR_NOTES:
                self._actors.popitem(last=False)  # a write refused after the note
        return []

    def _writes(self, changes: Sequence[Change], own: bool) -> tuple[list[dict[str, Any]], int]:
        by_actor: dict[Actor | None, list[dict[str, str]]] = {}
        count = 0
        with self._actors_lock:
            for change in changes:
                key = _key(change)
                if key[0] not in _ACCESS_KINDS:
                    continue
                count += 1
                actor = None
                noted = self._actors.pop(key, None) if own else None
                if noted is not None and (noted[0] is None or noted[0] is getattr(change, "entity", None)):
                    actor = noted[1]
                listed = by_actor.setdefault(actor, [])
                if count <= MAX_LISTED_CHANGES:
                    listed.append(
                        {"kind": key[0], "id": key[1], "op": "put" if isinstance(change, Put) else "delete"}
                    )
        writes = [
            {"actor": None if a is None else a.as_dict(), "changes": listed} for a, listed in by_actor.items()
        ]
        return writes, count

    # -- GraphObserver --------------------------------------------------------------------------
    def before(self, graph: PolicyGraph, changes: Sequence[Change]) -> Any:
        return None

    def after(self, graph: PolicyGraph, changes: Sequence[Change], before: Any) -> None:
        if not touched_by(changes):
            return
        revision = self.store.last_seq
        followed = self.store.replaying
        writes, count = self._writes(changes, not followed)
        with self._cond:
            self.applied = revision
            if self._overflow:
                self._cond.notify_all()
                return
            if self._queue and self._queued + len(changes) > self.queue_changes:
                log.warning(
                    "access changes: %d changes wait to be compared; dropped for a gap record", self._queued
                )
                self._queue.clear()
                self._queued = 0
                self._overflow = True
                self._ensure_worker()
                self._cond.notify_all()
                return
            self._queue.append(_Pending(revision, list(changes), self.clock.now(), writes, count, followed))
            self._queued += len(changes)
            self._ensure_worker()
            self._cond.notify_all()

    # -- the worker ------------------------------------------------------------------------------
    def _store_closing(self) -> bool:
        return bool(getattr(self.store, "closing", False))

    def _ensure_worker(self) -> None:
        """(Under ``_cond``) a worker running, started again if it ended idle."""
        if self._stopping or (self._thread is not None and self._thread.is_alive()):
            return
        self._thread = threading.Thread(target=self._run, name="trellis-access-changes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                idle_since = time.monotonic()
                while not self._queue and not self._overflow and not self._stopping:
                    self._cond.wait(min(self._idle_wait(), IDLE_EXIT_SECONDS))
                    if self._maintenance_due():
                        break
                    if (
                        not self._queue
                        and not self._overflow
                        and not self._held
                        and (time.monotonic() - idle_since >= IDLE_EXIT_SECONDS or self._store_closing())
                    ):
                        # nothing to do for a while (or the store is closing): the next batch
                        # starts a worker again (_ensure_worker), and with it the maintenance
                        self._thread = None
                        return
                if self._stopping and not self._queue:
                    return
                item = self._queue[0] if self._queue else None
                overflow = self._overflow and item is None
            try:
                if item is not None:
                    self._record(item)
                elif overflow:
                    self._resync()
                self._maintain()
            except Exception:  # the stream must outlive a bug: it records a gap and goes on
                if self._store_closing():  # the controller stops: nothing more can be recorded
                    with self._cond:
                        self._thread = None
                    return
                log.exception("access changes: a batch could not be recorded")
                with self._cond:
                    self._queue.clear()
                    self._queued = 0
                    self._overflow = True
            if item is not None:
                with self._cond:
                    self.processed = max(self.processed, item.revision)
                    if self._queue and self._queue[0] is item:
                        self._queue.popleft()
                        self._queued -= len(item.changes)
                    self._cond.notify_all()

    def _idle_wait(self) -> float:
        return 0.25 if self._held else TRIM_EVERY_SECONDS

    def _maintenance_due(self) -> bool:
        return bool(self._held) and self._held[0][0] <= time.monotonic()

    def _record(self, item: _Pending) -> None:
        apply_changes(self._after, item.changes)
        diff = access_diff(self._before, self._after, touched_by(item.changes))
        if not diff.empty:
            self._store_row(self._row(item, diff), item.followed)
        apply_changes(self._before, item.changes)

    def _row(self, item: _Pending, diff: AccessDiff) -> AccessChangeRow:
        record = ChangeRecord(
            item.revision,
            self._prev,
            item.at,
            "changes",
            item.writes,
            item.change_count,
            diff.services_added,
            diff.services_removed,
            diff.routers_added,
            diff.routers_removed,
        )
        self._prev = item.revision
        return AccessChangeRow(item.revision, record.prev, item.at, record.total, encode_record(record))

    def _store_row(self, row: AccessChangeRow, followed: bool) -> None:
        if followed:
            self._held.append((time.monotonic() + FOLLOWER_GRACE_SECONDS, row))
            return
        for attempt in range(5):
            if self.log.append(row) or self._held_by_log(row.revision):
                break
            time.sleep(0.05 * (attempt + 1))
        else:
            log.error("access changes: the record of revision %d could not be kept", row.revision)
        with self._cond:
            self.recorded = max(self.recorded, row.revision)
            self._cond.notify_all()

    def _held_by_log(self, revision: int) -> bool:
        return any(r.revision == revision for r in self.log.read(revision - 1, 1))

    def _resync(self) -> None:
        """The queue was dropped: fork the live graph again and record the gap."""
        with self._cond:
            self._overflow = False
        with self.access.reading() as (graph, revision):
            self._before = graph.copy()
            with self._cond:
                self._queue.clear()
                self._queued = 0
        self._after = self._before.copy()
        gap = ChangeRecord(revision, self._prev, self.clock.now(), "gap")
        self._prev = revision
        self._store_row(AccessChangeRow(revision, gap.prev, gap.committed_at, 0, encode_record(gap)), False)

    def _maintain(self) -> None:
        now = time.monotonic()
        while self._held and self._held[0][0] <= now:
            _, row = self._held.popleft()
            self.log.append(row)  # the committing process's row wins: it was there first
            with self._cond:
                self.recorded = max(self.recorded, row.revision)
                self._cond.notify_all()
        if now - self._trimmed_at >= TRIM_EVERY_SECONDS:
            self._trimmed_at = now
            try:
                self.log.trim(self.clock.now() - self.retain)
            except Exception:
                log.exception("access changes: old records could not be dropped")

    # -- reading --------------------------------------------------------------------------------
    @property
    def revision(self) -> int:
        return self.store.last_seq

    def floor(self) -> int:
        """The oldest revision the stream can be resumed from."""
        low, _ = self.log.bounds()
        return low.prev if low is not None else self._start

    def _decode(self, row: AccessChangeRow) -> ChangeRecord:
        with self._decoded_lock:
            found = self._decoded.get(row.revision)
            if found is not None:
                self._decoded.move_to_end(row.revision)
                return found
        record = decode_record(row)
        with self._decoded_lock:
            self._decoded[row.revision] = record
            while len(self._decoded) > 16:
                self._decoded.popitem(last=False)
        return record

    def check(self, cursor: Cursor) -> None:
        """RevisionExpiredError when changes after ``cursor`` may no longer be held; ValueError
        when it is ahead of the controller."""
        if cursor.revision > self.revision:
            raise ValueError(f"revision {cursor.revision} is ahead of the controller ({self.revision})")
        floor = self.floor()
        if cursor.revision < floor:
            raise RevisionExpiredError(cursor.revision, floor)

    def read(self, cursor: Cursor, limit: int, max_rows: int = 1000) -> tuple[list[dict[str, Any]], Cursor]:
        """The parts after ``cursor`` (at most ``limit`` pairs together, at least one part when any
        is there) and the cursor after them. ``start`` records are passed over."""
        after = cursor.revision - 1 if cursor.offset is not None else cursor.revision
        rows = self.log.read(after, max_rows)
        parts: list[dict[str, Any]] = []
        budget = max(1, limit)
        position = cursor
        for row in rows:
            record = self._decode(row)
            if record.kind == "start":
                position = Cursor(row.revision)
                continue
            offset = (cursor.offset or 0) if row.revision == cursor.revision else 0
            if parts and budget <= 0:
                break
            if offset >= record.total and record.kind == "changes":
                position = Cursor(row.revision)
                continue
            take = min(budget, record.total - offset) if record.total else 0
            part = record.part(offset, max(take, 1))
            parts.append(part)
            budget -= max(take, 1)
            end = offset + take
            position = Cursor(row.revision) if end >= record.total else Cursor(row.revision, end)
            part["cursor"] = str(position)
            if position.offset is not None:
                break
        return parts, position

    def wait(self, cursor: Cursor, timeout: float) -> None:
        """Return when a record after ``cursor`` may have been kept since (the worker kept one, or
        a batch was queued), after at most ``timeout``; every 25 ms while a row this process
        holds back for another (the one that committed the batch) is awaited in the log."""
        with self._cond:
            if self._stopping or self.recorded > cursor.revision:
                return
            if any(row.revision > cursor.revision for _, row in list(self._held)):
                timeout = min(timeout, 0.025)
            self._cond.wait(max(0.0, timeout))
