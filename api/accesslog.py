"""The access log line, written without gunicorn's per-request cost when nothing custom is set.

gunicorn's ``Logger.access`` builds a dict of every atom its format language knows (each request
header, response header and environ entry as ``{name}i``/``{name}o``/``{name}e``), copies it into a
``SafeAtoms`` escaping every string, formats a time stamp with ``strftime`` and goes through the
``logging`` machinery (a record, the handler's lock, a formatter): about a fifth of a small
request's CPU in this process (profiled with ``python -m bench http --profile``).

:class:`AccessLog` writes the same line for the common case, gunicorn's default
``access_log_format`` (``%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"``) on its own
``Logger`` class with plain stream handlers (``--access-logfile -`` or a file) formatted as
``%(message)s``: only the atoms of that format, the same escaping (``"`` as ``\\"``), the time stamp
made once a second, and the line written to each handler's stream under its lock, flushed as
``StreamHandler.emit`` does. Anything else (a custom format, logger class, handler, syslog or
``logconfig``) goes through gunicorn's own ``Logger.access`` unchanged.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from gunicorn import glogging
from gunicorn.config import AccessLogFormat

__all__ = ["AccessLog"]

DEFAULT_FORMAT: str = AccessLogFormat.default


def _safe(value: str) -> str:
    return value.replace('"', '\\"') if '"' in value else value


class _Clock:
    """Apache's ``[%d/%b/%Y:%H:%M:%S %z]`` in local time, made once per second."""

    __slots__ = ("second", "text")

    def __init__(self) -> None:
        self.second = -1
        self.text = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self.second:
            self.text = time.strftime("[%d/%b/%Y:%H:%M:%S %z]", time.localtime(second))
            self.second = second
        return self.text


def _user(environ: Mapping[str, Any]) -> str:
    """The user name of a ``Basic`` Authorization header, as gunicorn reads it; else ``-``."""
    auth = environ.get("HTTP_AUTHORIZATION")
    if not auth or not auth.lower().startswith("basic"):
        return "-"
    parts = auth.split(" ", 1)
    if len(parts) != 2:
        return "-"
    try:
        return base64.b64decode(parts[1].strip().encode("utf-8")).split(b":", 1)[0].decode("utf-8") or "-"
    except (TypeError, binascii.Error, UnicodeDecodeError):
        return "-"


class AccessLog:
    """Write one request's access log line through ``log`` (a gunicorn logger)."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.clock = _Clock()
        #: What :meth:`_plain_streams` was last asked about, and its answer (a configuration
        #: reload re-runs gunicorn's ``Logger.setup``, which replaces the handlers).
        self._seen: tuple[str, tuple[logging.Handler, ...]] | None = None
        self._streams: list[logging.StreamHandler[Any]] | None = None

    def streams(self, access_log_format: str) -> list[logging.StreamHandler[Any]] | None:
        logger = getattr(self.log, "access_log", None)
        seen = (access_log_format, tuple(logger.handlers) if isinstance(logger, logging.Logger) else ())
        if seen != self._seen:
            self._streams = self._plain_streams(self.log, access_log_format)
            self._seen = seen
        return self._streams

    @staticmethod
    def _plain_streams(log: Any, access_log_format: str) -> list[logging.StreamHandler[Any]] | None:
        """The handlers to write to directly, or None when gunicorn must format the line."""
        if type(log) is not glogging.Logger or access_log_format != DEFAULT_FORMAT:
            return None
        logger = getattr(log, "access_log", None)
        if not isinstance(logger, logging.Logger) or logger.propagate or logger.filters:
            return None
        handlers: list[logging.StreamHandler[Any]] = []
        for handler in logger.handlers:
            formatter = handler.formatter
            if (
                not isinstance(handler, logging.StreamHandler)
                or handler.filters
                or handler.level > logging.INFO
                or formatter is None
                or type(formatter) is not logging.Formatter
                or formatter._fmt != "%(message)s"
            ):
                return None
            handlers.append(handler)
        return handlers

    def write(
        self,
        access_log_format: str,
        logged: Any,
        req: Any,
        environ: Mapping[str, Any],
        request_time: timedelta,
    ) -> None:
        """Log one request (``logged``: status, headers and ``sent`` as gunicorn's response)."""
        if not getattr(self.log, "access_log_enabled", True):
            return
        streams = self.streams(access_log_format)
        if streams is None or not self.log.access_log.isEnabledFor(logging.INFO):
            self.log.access(logged, req, environ, request_time)
            return
        status = logged.status
        code = status.split(None, 1)[0] if isinstance(status, str) else str(status)
        sent = logged.sent
        line = (
            f"{_safe(environ.get('REMOTE_ADDR', '-'))} - {_safe(_user(environ))} {self.clock.now()} "
            f'"{_safe(environ["REQUEST_METHOD"])} {_safe(environ["RAW_URI"])} {_safe(environ["SERVER_PROTOCOL"])}" '
            f"{code} {str(sent) if sent is not None else '-'} "
            f'"{_safe(environ.get("HTTP_REFERER", "-"))}" "{_safe(environ.get("HTTP_USER_AGENT", "-"))}"'
        )
        for handler in streams:
            handler.acquire()
            try:
                handler.stream.write(line + handler.terminator)
                handler.flush()
            except Exception:
                handler.handleError(logging.makeLogRecord({"msg": line}))
            finally:
                handler.release()
