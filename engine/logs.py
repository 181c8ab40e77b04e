"""Structured log events and the reporting of an expected, lasting failure.

The engine only logs through the standard library: ``logging.getLogger(__name__)``, with the
record's fields as ``extra`` attributes. What the lines look like (key=value or JSON, the level,
the request id of the request being served) is the composition root's business (``controller.logs``);
the engine imports nothing of it.

:func:`event` logs a named event (``login.failed``, ``identity.locked_out``, ...) with its
fields; a field that is None is left out. Never pass a secret (a password, a token, an MFA
code, a JWT): the identity's id and name, the method, the reason, what an operator needs.

:class:`Outage` reports a failure that is expected to last a while (a full disk, a database
that has gone) without flooding the log: one line when it starts (with the reason, and a
traceback only when the failure is not of a kind we expect), a count while it lasts, one line
when it ends. Tracebacks are for the unexpected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

__all__ = [
    "RESERVED",
    "Outage",
    "bind_request_id",
    "current_request_id",
    "event",
    "unbind_request_id",
]

#: Attributes a ``LogRecord`` has of its own (an ``extra`` key among them is refused by
#: ``logging``); :func:`event` renames a field so named with a trailing ``_``.
RESERVED = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}

# -- the request being served: its id is put on each line logged while it is (by the
# composition root's log filter, controller.logs) ----------------------------------------------

_request_id: ContextVar[str | None] = ContextVar("trellis_request_id", default=None)


def bind_request_id(request_id: str) -> Token[str | None]:
    """Lines logged from here on (in this thread or task) carry ``request_id``; hand the token
    to :func:`unbind_request_id` when the request is done."""
    return _request_id.set(request_id)


def unbind_request_id(token: Token[str | None] | None) -> None:
    if token is None:
        return
    try:
        _request_id.reset(token)
    except ValueError:  # made in another context: the best we can do is to forget the id
        _request_id.set(None)


def current_request_id() -> str | None:
    return _request_id.get()


#: The longest text of a failure's reason that is logged.
MAX_REASON = 300


def event(logger: logging.Logger, level: int, name: str, /, **fields: Any) -> None:
    """Log event ``name`` at ``level`` with ``fields`` (None values left out)."""
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {"event": name}
    for key, value in fields.items():
        if value is None:
            continue
        extra[f"{key}_" if key in RESERVED or key == "event" else key] = value
    logger.log(level, name, extra=extra, stacklevel=2)


def reason_of(error: BaseException | str) -> str:
    """A failure's reason for the log: its type and message, one line, bounded."""
    if isinstance(error, str):
        text = error
    else:
        message = str(error).strip()
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


class Outage:
    """One kind of expected failure (``what``: ``commit``, ``flush``), reported as it starts, lasts
    and ends:

    - the first :meth:`failed` logs ``<what>.failing`` (ERROR) with the reason; with the traceback
      only when the caller says the failure was ``expected=False``;
    - while it lasts, ``<what>.still_failing`` (WARNING) with the count of refusals so far, when
      the count reaches a power of two from :attr:`first_count` on (8, 16, 32, ...) and at least
      every :attr:`heartbeat` seconds while refusals go on;
    - the first :meth:`succeeded` after that logs ``<what>.recovered`` (WARNING, so that it shows
      wherever the start did) with the count and how long it lasted.

    Safe to call from any thread; :meth:`succeeded` costs one attribute read when all is well.
    """

    first_count = 8
    heartbeat = 60.0

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        unit: str = "refused",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.what = what
        #: The name of the count field (``refused``: writes refused; ``attempts``: retries).
        self.unit = unit
        self._clock = clock
        self._lock = threading.Lock()
        self.failing = False
        self.count = 0
        self._started = 0.0
        self._reported = 0.0
        self._next_count = self.first_count

    def failed(self, error: BaseException | str, *, count: int = 1, expected: bool = True) -> None:
        """``count`` more refusals because of ``error``."""
        with self._lock:
            now = self._clock()
            if not self.failing:
                self.failing = True
                self.count = count
                self._started = self._reported = now
                self._next_count = self.first_count
                starting = True
            else:
                self.count += count
                starting = False
                due = self.count >= self._next_count or now - self._reported >= self.heartbeat
                if not due:
                    return
                while self._next_count <= self.count:
                    self._next_count *= 2
                self._reported = now
            total, seconds = self.count, now - self._started
        if starting:
            self.logger.log(
                logging.ERROR,
                f"{self.what}.failing",
                extra={"event": f"{self.what}.failing", "reason": reason_of(error), self.unit: total},
                exc_info=None if expected or isinstance(error, str) else error,
            )
            return
        self.logger.log(
            logging.WARNING,
            f"{self.what}.still_failing",
            extra={
                "event": f"{self.what}.still_failing",
                self.unit: total,
                "seconds": round(seconds, 1),
                "reason": reason_of(error),
            },
        )

    def succeeded(self) -> None:
        """The thing works again: ends the outage, if there was one."""
        if not self.failing:
            return
        with self._lock:
            if not self.failing:
                return
            self.failing = False
            total, seconds = self.count, self._clock() - self._started
            self.count = 0
        self.logger.log(
            logging.WARNING,
            f"{self.what}.recovered",
            extra={"event": f"{self.what}.recovered", self.unit: total, "seconds": round(seconds, 1)},
        )
