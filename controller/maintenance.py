"""The serving process's maintenance ticker: every ``settings.purge_interval`` seconds it deletes
expired API sessions (with their Dial/Bind sessions and ephemeral certificates) and forgets idle
clients' request budgets; every ``settings.posture_interval`` seconds it ends the Dial/Bind
sessions that no longer pass posture (OpenZiti's 5-second posture sweep: an MFA check's timeout
lapses with time alone).

``create_app`` builds it stopped: ``trellis serve`` starts it in the worker and stops it before the
database is closed; a test app has none running unless the test starts it.
"""

from __future__ import annotations

import logging
import threading
import time

from api.limits import RequestLimits
from engine.errors import CommitFailedError
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.sessions import SessionManager
from engine.ports import Clock

log = logging.getLogger("trellis.maintenance")


class Maintenance:
    def __init__(
        self,
        api_sessions: ApiSessionManager,
        clock: Clock,
        limits: RequestLimits,
        interval: float,
        *,
        dial_bind: SessionManager | None = None,
        posture_interval: float = 5.0,
    ) -> None:
        self.api_sessions = api_sessions
        self.clock = clock
        self.limits = limits
        self.interval = interval
        self.dial_bind = dial_bind
        self.posture_interval = posture_interval
        #: Completed runs (successful or not), for whoever waits on :attr:`ticked`.
        self.runs = 0
        self.ticked = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run_once(self) -> int:
        """One round of maintenance; returns how many expired API sessions were deleted."""
        purged = self.api_sessions.purge_expired(self.clock.now())
        if purged:
            log.info("deleted %d expired API sessions", purged)
        self.limits.prune()
        self.sweep_posture()
        return purged

    def sweep_posture(self) -> int:
        """End the Dial/Bind sessions that no longer pass posture; how many ended."""
        if self.dial_bind is None:
            return 0
        ended = self.dial_bind.enforce_posture_all()
        if ended:
            log.info("ended %d sessions that no longer pass posture", ended)
        return ended

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="trellis-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the ticker and wait for a round in progress to finish."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def wait_for_runs(self, count: int, timeout: float) -> bool:
        """Wait until at least ``count`` rounds have completed (False if ``timeout`` passes first)."""
        with self.ticked:
            return self.ticked.wait_for(lambda: self.runs >= count, timeout)

    def _loop(self) -> None:
        tick = min(self.interval, self.posture_interval) if self.dial_bind is not None else self.interval
        next_round = time.monotonic() + self.interval
        while not self._stop.wait(tick):
            try:
                if time.monotonic() >= next_round:
                    next_round = time.monotonic() + self.interval
                    self.run_once()
                else:
                    self.sweep_posture()
                    continue
            except CommitFailedError as ex:  # expected while the store refuses writes: it reports that
                log.debug("maintenance round refused: %s", ex.message)
            except Exception:  # a failed round must not end the ticker
                log.exception("maintenance round failed")
            with self.ticked:
                self.runs += 1
                self.ticked.notify_all()
