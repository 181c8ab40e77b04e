"""Data integrity runs: one at a time in a background thread, their findings kept until the next."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engine.errors import RateLimitedError
from engine.managers._base import Env
from engine.managers.access import AccessManager, build_graph
from engine.managers.database import DatabaseManager
from engine.managers.integrity._core import Problem, StoreView
from engine.managers.integrity.changelog import change_log_problems
from engine.managers.integrity.links import engine_links
from engine.managers.integrity.references import DATABASE_CHECKS
from engine.managers.service_updates import ServiceUpdates
from engine.policy import PolicyGraph
from engine.ports import SnapshotUnsupportedError, UnitOfWork

log = logging.getLogger("trellis.integrity")

#: OpenZiti keeps the first 1,000 findings and then only sets ``tooManyErrors``.
MAX_RESULTS = 1000


@dataclass(frozen=True)
class Finding:
    description: str
    fixed: bool


@dataclass(frozen=True)
class IntegrityReport:
    """The state of the last (or the running) data integrity run."""

    in_progress: bool
    fixing_errors: bool
    start_time: datetime | None
    end_time: datetime | None
    error: str | None
    results: tuple[Finding, ...]
    too_many_errors: bool


def find_problems(view: StoreView, live: PolicyGraph) -> Iterator[Problem]:
    """Every finding about ``view`` (the database) and ``live`` (the engine's graph of it)."""
    for check in DATABASE_CHECKS:
        yield from check(view)
    yield from engine_links(live, build_graph(view))


# -- the runs --------------------------------------------------------------------------------


@dataclass
class _Run:
    fixing: bool = False
    start_time: datetime | None = None
    end_time: datetime | None = None
    error: str | None = None
    results: list[Finding] = field(default_factory=list)
    too_many: bool = False


class IntegrityManager:
    """Starts data integrity runs in a background thread (one at a time) and keeps their results."""

    def __init__(
        self,
        env: Env,
        access: AccessManager,
        database: DatabaseManager,
        service_updates: ServiceUpdates | None = None,
    ) -> None:
        self.env = env
        self.access = access
        self.database = database
        self.service_updates = service_updates
        self._lock = threading.Lock()
        self._running = False
        self._current = _Run()
        self._thread: threading.Thread | None = None

    # -- the API -------------------------------------------------------------------------------
    def start(self, *, fix: bool) -> None:
        """Start a check (or a fix) in the background; ``RateLimitedError`` while one runs."""
        with self._lock:
            if self._running:
                raise RateLimitedError()
            self._running = True
            self._current = _Run(fixing=fix, start_time=self.env.clock.now())
            thread = threading.Thread(
                target=self._background, args=(fix,), name="trellis-integrity", daemon=True
            )
            self._thread = thread
        thread.start()

    def results(self) -> IntegrityReport:
        with self._lock:
            run = self._current
            return IntegrityReport(
                in_progress=self._running,
                fixing_errors=run.fixing,
                start_time=run.start_time,
                end_time=run.end_time,
                error=run.error,
                results=tuple(run.results),
                too_many_errors=run.too_many,
            )

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the run in progress (if any); True once none is running."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            return not self._running

    def run(self, *, fix: bool) -> IntegrityReport:
        """A check or fix run in the calling thread (for tools and tests that want it synchronous)."""
        self.start(fix=fix)
        self.join()
        return self.results()

    # -- the work ------------------------------------------------------------------------------
    def _background(self, fix: bool) -> None:
        try:
            self.scan(fix=fix, sink=self._record)
        except Exception as ex:  # reported in the results' ``error``, as OpenZiti does
            log.exception("data integrity %s failed", "fix" if fix else "check")
            with self._lock:
                self._current.error = str(ex) or type(ex).__name__
        finally:
            with self._lock:
                self._current.end_time = self.env.clock.now()
                self._running = False

    def _record(self, description: str, fixed: bool) -> None:
        log.warning("data integrity error reported (fixed: %s): %s", fixed, description)
        with self._lock:
            if len(self._current.results) < MAX_RESULTS:
                self._current.results.append(Finding(description, fixed))
            else:
                self._current.too_many = True

    def scan(self, *, fix: bool, sink: Callable[[str, bool], None]) -> None:
        """Find every problem and report each to ``sink(description, fixed)``.

        With ``fix``, everything runs under the write lock: when anything can be fixed, a database
        snapshot is taken first (as OpenZiti's ``CheckIntegrityInTx``), then every fixable problem
        is repaired in one batch, whatever ``sink`` keeps. A check only copies under the lock.
        """
        store = self.env.store
        if not fix:
            with store.write_lock():
                view, live = StoreView(store.view()), self.access.snapshot()
            for problem in find_problems(view, live):
                sink(problem.description, False)
            for problem in change_log_problems(store):
                sink(problem.description, False)
            return
        with store.write_lock():
            problems = list(find_problems(StoreView(store.view()), self.access.snapshot()))
            problems.extend(change_log_problems(store))
            repaired = False
            try:
                if any(problem.fixable for problem in problems):
                    self._snapshot_before_fix()
                    self._repair(problems)
                repaired = True
            finally:
                for problem in problems:
                    sink(problem.description, repaired and problem.fixable)

    def _snapshot_before_fix(self) -> None:
        try:
            path = self.database.snapshot_unthrottled()
        except SnapshotUnsupportedError:
            log.info("no database snapshot before the data integrity fix: the store has no file")
        else:
            log.info("database snapshot before the data integrity fix: %s", path)

    def _repair(self, problems: Sequence[Problem]) -> None:
        now = self.env.clock.now()
        uow = UnitOfWork(self.env.store)
        for problem in problems:
            if problem.repair is not None:
                problem.repair(uow, now)
        if uow.changes():
            self.env.commit(uow)
        if any(problem.rebuild for problem in problems):
            self.access.rebuild()
            marked = {i for problem in problems for i in problem.identities}
            if marked and self.service_updates is not None:
                self.service_updates.mark(marked)
