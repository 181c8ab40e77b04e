"""The group commit: the read side and the write path every store shares (:class:`GroupCommitStore`).

Three layers, each with one owner:

* **Published state** (:class:`State`): every entity per kind, with a lookup per unique field,
  per indexed field and per value of each multi-valued field (``MULTI_INDEXED``: what lists'
  ``anyOf(roleAttributes)`` filters use, through ``list_index``), as of the last published
  batch. It is never changed in place: a batch makes a new state that shares what it did not
  touch (the touched kinds' maps and index buckets are new versions of
  :class:`~storage.layered.Layered` maps, sharing all but the changes) and is swapped in with
  one assignment, so a reader sees whole batches only. A request may pin one state for its whole
  duration (:meth:`GroupCommitStore.pinned`).
* **Staged changes**: what writers staged and the committer has not yet published, per kind and
  id with the change's sequence number. Writers (the thread holding the write lock) read the
  published state through them (:class:`StagedView`), so each check sees every earlier write.
* **The queue** of tickets (one per ``commit``), taken by the committer in order. A batch is every
  waiting ticket (bounded): it is persisted (``_persist``: the durable subclass appends it to its
  journal, or writes it and its change-log entries in one transaction), then published under
  the write lock (new state, staged entries trimmed, listeners called with the batch's
  changes). What listeners commit in turn (the sessions a policy change ends) is the next batch,
  run at once; only then are the writers answered, so a writer reads its write's consequences
  too (a writer ``deferring`` is not waited for: its ticket, a :class:`~engine.ports.Durable`,
  goes to its caller). If persisting fails,
  that batch and everything staged after it fail with :class:`~engine.errors.CommitFailedError`
  and nothing of them is applied.

A store that several processes share (:mod:`storage.postgres`) hooks in around the write lock
(``_before_write``: the cluster's write token and a catch-up, ``_after_write``, ``_after_batch``,
``_may_submit``) and publishes the other processes' batches with ``_publish_foreign`` (listeners
see :attr:`GroupCommitStore.replaying`); for the others these hooks do nothing.

The in-memory store (:mod:`storage.memory`) runs a batch as soon as it is staged, on the writer's
thread (it has nothing to wait for); the durable store (:mod:`storage.duckdb`) runs a committer
thread (``background=True``). Entities are
immutable values: managers put new objects, never mutate stored ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, cast

from engine.attempts import MemoryAttempts
from engine.entities import Entity
from engine.errors import CommitFailedError
from engine.logs import Outage
from engine.ports import (
    ActivityBoard,
    Attempts,
    Change,
    CommitListener,
    CommitTimes,
    Durable,
    FleetBoard,
    LocalCommitTimes,
    NoActivityBoard,
    NoFleetBoard,
    NoPostureBoard,
    NoRateBoard,
    PostureBoard,
    Put,
    RateBoard,
    StoreView,
)
from engine.query import ListIndex, ScanIndex
from storage.state import State, change_key, coalesce

E = TypeVar("E", bound=Entity)

log = logging.getLogger(__name__)

#: A batch takes at most this many tickets (requests' commits); the rest wait for the next one.
MAX_BATCH_TICKETS = 512
#: How long a writer waits for its batch before it is answered 503 (a stuck disk, not a hang).
COMMIT_WAIT_SECONDS = 60.0
#: Gathering (as PostgreSQL's ``commit_delay``): once publishing a batch (the policy engine's
#: update and the other listeners) takes longer than this, the committer waits before it takes
#: the next batch, for half that time and at most :data:`GATHER_MAX_SECONDS`. Meanwhile the
#: request threads stage more writes, and writes to the same keys then cost one publish: a burst
#: of changes to one policy at 1M identities took ~9 ms of engine work per batch, and batches
#: made durable by a 0.2-2 ms journal append were too small to share it. Cheap publishes (a
#: session, an identity) never wait.
GATHER_AFTER_SECONDS = 0.002
GATHER_MAX_SECONDS = 0.005


#: Staged changes: kind name -> id -> (sequence number, the entity, or None once deleted).
Staged = dict[str, dict[str, tuple[int, Entity | None]]]


class StagedView:
    """The published state seen through the staged changes: what writers read under the lock."""

    def __init__(self, store: GroupCommitStore) -> None:
        self._store = store

    def _layers(self, kind: type[Entity]) -> tuple[State, dict[str, tuple[int, Entity | None]]]:
        return self._store._state, self._store._staged.get(kind.ENTITY, {})

    def get(self, kind: type[E], id: str) -> E | None:
        state, staged = self._layers(kind)
        if id in staged:
            entity = staged[id][1]
            assert entity is None or isinstance(entity, kind)
            return entity
        return state.get(kind, id)

    def all(self, kind: type[E]) -> list[E]:
        state, staged = self._layers(kind)
        if not staged:
            return state.all(kind)
        out: list[E] = []
        for entity in state.all(kind):
            if entity.id in staged:
                current = staged[entity.id][1]
                if current is not None:
                    out.append(current)  # type: ignore[arg-type]
            else:
                out.append(entity)
        out.extend(e for i, (_, e) in staged.items() if e is not None and state.get(kind, i) is None)  # type: ignore[misc]
        return out

    def count(self, kind: type[Entity]) -> int:
        state, staged = self._layers(kind)
        total = state.count(kind)
        for entity_id, (_, entity) in staged.items():
            present = state.get(kind, entity_id) is not None
            total += (entity is not None) - present
        return total

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        state, staged = self._layers(kind)
        for _, entity in staged.values():
            if entity is not None and getattr(entity, field) == value:
                return entity  # type: ignore[return-value]
        found = state.find_unique(kind, field, value)
        if found is None or found.id not in staged:
            return found
        return None  # changed or deleted since: a staged match was returned above

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        state, staged = self._layers(kind)
        found = state.find_by(kind, field, value)
        if not staged:
            return found
        out = [e for e in found if e.id not in staged]
        out.extend(e for _, e in staged.values() if e is not None and getattr(e, field) == value)  # type: ignore[misc]
        return out

    def list_index(self, kind: type[E]) -> ListIndex[E]:
        """Writers seldom list: the staged collection, looked up by scanning."""
        state, staged = self._layers(kind)
        if not staged:
            return state.list_index(kind)
        return cast("ListIndex[E]", ScanIndex(self.all(kind)))


#: Guards every ticket's callbacks against being added while it is being finished.
_CALLBACKS = threading.Lock()


@dataclass(eq=False)
class Ticket:
    """One ``commit``'s changes with their sequence numbers; done once published or failed (a
    :class:`~engine.ports.Durable`)."""

    entries: list[tuple[int, Change]]
    error: BaseException | None = None
    finished: bool = False
    _callbacks: list[Callable[[], object]] = field(default_factory=list)

    def when_done(self, callback: Callable[[], object]) -> None:
        with _CALLBACKS:
            if not self.finished:
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float) -> bool:
        """Block until done (True) or ``timeout`` seconds have passed (False). The event is made
        only here: a write answered from the event loop (``when_done``) never needs one."""
        with _CALLBACKS:
            if self.finished:
                return True
            event = threading.Event()
            self._callbacks.append(event.set)
        return event.wait(timeout)

    def finish(self, error: BaseException | None = None) -> None:
        """Done (published, or refused with ``error``): wake the waiters, call the callbacks."""
        self.error = error
        with _CALLBACKS:
            self.finished = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a commit callback failed")

    @property
    def last_seq(self) -> int:
        return self.entries[-1][0]


class _WriteLock:
    """The store's write lock; leaving the outermost hold waits for what the thread staged."""

    def __init__(self, store: GroupCommitStore) -> None:
        self._store = store

    def __enter__(self) -> object:
        self._store._enter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._store._exit()


class GroupCommitStore:
    """A ``Store``'s reads and its group-commit write path; a subclass says where batches go
    (``_persist``) and how to snapshot."""

    def __init__(self, *, background: bool = False) -> None:
        self._lock = threading.RLock()
        self._write = _WriteLock(self)
        self._local = threading.local()
        self._state = State({}, 0)
        self._staged: Staged = {}
        self._staged_view = StagedView(self)
        self._seq = 0
        self._settings: dict[str, str] = {}
        self._listeners: list[CommitListener] = []
        self._background = background
        self._queue: list[Ticket] = []
        self._followups: list[Ticket] = []
        self._queued = threading.Condition(threading.Lock())
        self._committer: threading.Thread | None = None
        self._closing = False
        #: How long publishing the last batch took (seconds): what the next one waits for.
        self._publish_seconds = 0.0
        #: Refused writes, reported as an outage: once as it starts, a count, once as it ends.
        self._outage = Outage(log, "commit")

    # -- reads -------------------------------------------------------------------------------
    def _reader(self) -> State | StagedView:
        local = self._local
        if getattr(local, "depth", 0) and not getattr(local, "committer", False):
            return self._staged_view
        pinned: State | None = getattr(local, "pinned", None)
        return pinned if pinned is not None else self._state

    def get(self, kind: type[E], id: str) -> E | None:
        return self._reader().get(kind, id)

    def all(self, kind: type[E]) -> list[E]:
        return self._reader().all(kind)

    def count(self, kind: type[Entity]) -> int:
        return self._reader().count(kind)

    def find_unique(self, kind: type[E], field: str, value: object) -> E | None:
        return self._reader().find_unique(kind, field, value)

    def find_by(self, kind: type[E], field: str, value: object) -> list[E]:
        return self._reader().find_by(kind, field, value)

    def list_index(self, kind: type[E]) -> ListIndex[E]:
        return self._reader().list_index(kind)

    def view(self) -> State:
        return self._state

    @contextmanager
    def _thread_setting(self, name: str, value: object) -> Iterator[None]:
        """This thread's ``name`` (``pinned``, ``deferred``) is ``value`` for the duration."""
        local = self._local
        previous = getattr(local, name, None)
        setattr(local, name, value)
        try:
            yield
        finally:
            setattr(local, name, previous)

    def pinned(self) -> AbstractContextManager[object]:
        return self._thread_setting("pinned", self._state)

    def deferring(self, into: list[Durable]) -> AbstractContextManager[object]:
        return self._thread_setting("deferred", into)

    def get_setting(self, key: str) -> str | None:
        return self._settings.get(key)

    def setdefault_setting(self, key: str, value: str) -> str:
        """``key``'s setting, set to ``value`` first if it has none."""
        with self._lock:
            current = self._settings.get(key)
            if current is not None:
                return current
            self._persist_setting(key, value)
            self._settings[key] = value
            return value

    @property
    def replaying(self) -> bool:
        """Whether this thread is publishing a batch another process committed (a shared store's
        follower): listeners must not commit follow-ups for it (its origin does)."""
        return bool(getattr(self._local, "replaying", False))

    def catch_up(self) -> bool:
        """Apply what other processes committed up to now; whether anything was. Nothing shares
        a memory or DuckDB store: False at once."""
        return False

    def lead(self) -> bool:
        """Whether this process runs the duties one process runs (the control listener, the
        maintenance ticker): always, for a store only this process opens."""
        return True

    def when_leading(self, start: Callable[[], None], stop: Callable[[], None]) -> None:
        """This process leads for as long as it runs: ``start`` at once."""
        start()

    def attempts_ledger(self) -> Attempts:
        """This process's own ledger: nothing else counts guesses at this store's secrets."""
        return MemoryAttempts()

    def activity_board(self, retain: timedelta) -> ActivityBoard:
        """Nothing to share: only this process serves the store."""
        return NoActivityBoard()

    def fleet_board(self) -> FleetBoard:
        """Nothing to share: every router connected to this store connects to this process."""
        return NoFleetBoard()

    def posture_board(self) -> PostureBoard:
        """Nothing to share: every posture response to this store reaches this process."""
        return NoPostureBoard()

    def rate_board(self) -> RateBoard:
        """Nothing to share: every request to this store's clients reaches this process."""
        return NoRateBoard()

    def commit_times(self) -> CommitTimes:
        """Nothing to share: this process's clock dates its batches."""
        return LocalCommitTimes()

    def health(self) -> list[dict[str, Any]]:
        """Whether this process can write, as checks in OpenZiti's health-check form (``id``,
        ``healthy``, ``lastCheckTime``, ``details`` when failing): here, whether the last batch
        was made durable (a full disk refuses writes until one is). A shared store says more."""
        check: dict[str, Any] = {
            "id": "store.commit",
            "healthy": not self._outage.failing,
            "lastCheckTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self._outage.failing:
            check["details"] = "the last batch could not be made durable: writes are refused"
        return [check]

    @property
    def last_seq(self) -> int:
        """The sequence number of the last published change."""
        return self._state.seq

    # -- writes ------------------------------------------------------------------------------
    def write_lock(self) -> AbstractContextManager[object]:
        return self._write

    def subscribe(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def put_setting(self, key: str, value: str) -> None:
        with self._lock:
            self._persist_setting(key, value)
            self._settings[key] = value

    def commit(self, changes: Sequence[Change], *, wait: bool = True) -> None:
        if not changes:
            return
        with self._write:
            ticket = self._stage(changes)
            if wait and not getattr(self._local, "committer", False):
                self._local.ticket = ticket

    def try_submit(self, build: Callable[[StoreView], Sequence[Change]]) -> bool:
        if not self._lock.acquire(blocking=False):
            return False
        if not self._may_submit():
            self._lock.release()
            return False
        local = self._local
        local.depth = getattr(local, "depth", 0) + 1
        try:
            changes = build(self._staged_view)
            if changes:
                self._stage(changes)
        finally:
            local.depth -= 1
            self._lock.release()
        return True

    def load(self, entities: Sequence[Entity]) -> None:
        """Fill memory from durable storage at start-up (no write-through): a kind memory does
        not hold yet is built in one pass, any other takes the entities as puts."""
        fresh: dict[str, dict[str, Entity]] = {}
        held: list[Change] = []
        state = self._state
        for entity in entities:
            if state.count(type(entity)):
                held.append(Put(entity))
            else:
                fresh.setdefault(entity.ENTITY, {})[entity.id] = entity
        self._state = state.with_kinds(fresh, held, self._seq)

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called (threads of others that write here stop then)."""
        return self._closing

    def close(self) -> None:
        """Commit what is queued and stop the committer."""
        thread = self._committer
        if thread is None:
            self._closing = True
            return
        with self._queued:
            self._closing = True
            self._queued.notify_all()
        thread.join(COMMIT_WAIT_SECONDS)

    # -- hooks for durable subclasses --------------------------------------------------------
    def _persist(self, entries: Sequence[tuple[int, Change]]) -> None:
        """Make a batch durable, atomically: ``entries`` every change in order with its sequence
        number. Raise to refuse the whole batch."""

    def _persist_setting(self, key: str, value: str) -> None:
        """Make a setting durable."""

    def _prepare(self, changes: Sequence[Change]) -> None:
        """Raise (refusing the commit, nothing staged) if ``changes`` cannot be persisted; called
        on the writer's thread, so a bad value fails its own request, never a batch."""

    def _before_write(self) -> None:
        """Called as a thread enters the outermost write lock, before it takes the lock: a shared
        store takes the cluster's write token here and catches up (nothing to do alone)."""

    def _after_write(self) -> None:
        """Called as a thread has left the outermost write lock (after :meth:`_before_write`)."""

    def _after_batch(self) -> None:
        """Called on the committer after each batch (published or refused)."""

    def _may_submit(self) -> bool:
        """Whether ``try_submit`` may stage now (under the lock): a shared store only while it
        holds the write token."""
        return True

    def _expected_failure(self, error: BaseException) -> bool:
        """Whether ``_persist`` failing with ``error`` is a failure of the storage underneath (a
        full disk, a database that has gone: logged without a traceback) rather than a bug."""
        return isinstance(error, OSError)

    # -- the write lock and waiting ----------------------------------------------------------
    def _enter(self) -> None:
        local = self._local
        depth = getattr(local, "depth", 0)
        if getattr(local, "replaying", False):
            raise RuntimeError("a listener wrote while another process's batch was published")
        outermost = depth == 0 and not getattr(local, "committer", False)
        if outermost:
            self._before_write()
        try:
            self._lock.acquire()
        except BaseException:
            if outermost:
                self._after_write()
            raise
        local.depth = depth + 1
        local.outermost = outermost if depth == 0 else getattr(local, "outermost", False)

    def _exit(self) -> None:
        local = self._local
        local.depth -= 1
        ticket: Ticket | None = getattr(local, "ticket", None) if local.depth == 0 else None
        if ticket is not None:
            local.ticket = None
        self._lock.release()
        if local.depth == 0 and local.outermost:
            local.outermost = False
            self._after_write()
        if ticket is not None:
            deferred: list[Durable] | None = getattr(local, "deferred", None)
            if deferred is not None:
                deferred.append(ticket)
            else:
                self._await(ticket)

    def _await(self, ticket: Ticket) -> None:
        if not ticket.wait(COMMIT_WAIT_SECONDS):
            self._outage.failed(f"a write was not committed within {COMMIT_WAIT_SECONDS:.0f} s")
            raise CommitFailedError("the write was not committed in time; it may yet be")
        if ticket.error is not None:  # the database's own words go to the log, not to the client
            raise CommitFailedError() from ticket.error
        if getattr(self._local, "pinned", None) is not None:
            self._local.pinned = self._state  # the request reads on, including its own write

    # -- staging, batches and publishing -----------------------------------------------------
    def _stage(self, changes: Sequence[Change]) -> Ticket:
        """Number ``changes``, show them to later writers and queue them (under the write lock)."""
        self._prepare(changes)
        entries: list[tuple[int, Change]] = []
        for change in changes:
            self._seq += 1
            entries.append((self._seq, change))
            name, entity_id = change_key(change)
            entity = change.entity if isinstance(change, Put) else None
            self._staged.setdefault(name, {})[entity_id] = (self._seq, entity)
        ticket = Ticket(entries)
        if not self._background:
            self._run_batch([ticket])
            if ticket.error is not None:
                raise CommitFailedError() from ticket.error
            return ticket
        if getattr(self._local, "committer", False):
            # a listener's follow-up (sessions ended by a policy change): committed right after
            # the batch that caused it, before that batch's writers are answered
            self._followups.append(ticket)
            return ticket
        self._start_committer()
        with self._queued:
            self._queue.append(ticket)
            self._queued.notify()
        return ticket

    def _start_committer(self) -> None:
        if self._committer is None:
            self._committer = threading.Thread(
                target=self._commit_loop, name="trellis-committer", daemon=True
            )
            self._committer.start()

    def _commit_loop(self) -> None:
        self._local.committer = True
        while True:
            with self._queued:
                while not self._queue and not self._closing:
                    self._queued.wait()
                if not self._queue:
                    return
                gather = self._gather_seconds()
            if gather > 0.0:
                time.sleep(gather)  # without the lock: writers go on queueing
            with self._queued:
                tickets = self._queue[:MAX_BATCH_TICKETS]
                del self._queue[:MAX_BATCH_TICKETS]
            self._run_batch(tickets)
            self._after_batch()

    def _gather_seconds(self) -> float:
        """How long to wait for more writes before the next batch (see :data:`GATHER_AFTER_SECONDS`;
        not when closing, nor once a batch is full)."""
        cost = self._publish_seconds
        if cost <= GATHER_AFTER_SECONDS or self._closing or len(self._queue) >= MAX_BATCH_TICKETS:
            return 0.0
        return min(cost / 2, GATHER_MAX_SECONDS)

    def _run_batch(self, tickets: list[Ticket]) -> None:
        """Persist, publish and answer one batch; on failure fail it and all staged after it."""
        entries = [entry for ticket in tickets for entry in ticket.entries]
        try:
            self._persist(entries)
        except BaseException as ex:
            # Not a traceback per refused batch (a full disk refuses every write for as long as
            # it lasts): one line as the outage starts, a count while it lasts, one as it ends.
            refused = self._fail(tickets, ex)
            self._outage.failed(ex, count=refused, expected=self._expected_failure(ex))
            return
        self._outage.succeeded()
        final = coalesce(entries)
        with self._lock:
            began = time.perf_counter()
            self._publish(entries, final)
            self._publish_seconds = time.perf_counter() - began
            followups, self._followups = self._followups, []
        if followups:
            self._run_batch(followups)
        for ticket in tickets:
            ticket.finish()

    def _publish_foreign(self, entries: list[tuple[int, Change]]) -> None:
        """Publish a batch another process committed (under the lock, nothing of this process's
        staged): as a local batch is, with :attr:`replaying` set for its listeners."""
        local = self._local
        local.replaying = True
        try:
            self._publish(entries, coalesce(entries))
        finally:
            local.replaying = False
        self._seq = max(self._seq, entries[-1][0])

    def _idle(self) -> bool:
        """Nothing staged, queued or being committed (under the lock)."""
        with self._queued:
            queued = bool(self._queue)
        return not queued and not self._followups and not any(self._staged.values())

    def _publish(self, entries: list[tuple[int, Change]], final: list[Change]) -> None:
        last = entries[-1][0]
        self._state = self._state.apply(final, last)
        for seq, change in entries:
            name, entity_id = change_key(change)
            staged = self._staged.get(name)
            if staged is not None and entity_id in staged and staged[entity_id][0] <= seq:
                del staged[entity_id]
        for listener in list(self._listeners):
            try:
                listener(list(final))
            except Exception:
                log.exception("a commit listener failed on batch %d", last)

    def _fail(self, tickets: list[Ticket], error: BaseException) -> int:
        """Refuse ``tickets`` and every one queued or staged after them; how many were refused."""
        with self._lock:
            with self._queued:
                later, self._queue = self._queue, []
            later.extend(self._followups)
            self._followups = []
            self._staged.clear()
            self._seq = self._state.seq  # nothing staged is left: numbering goes on without a gap
            refused = [*tickets, *later]
            for ticket in refused:
                ticket.finish(error)
        return len(refused)
