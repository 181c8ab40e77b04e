"""The one logging set-up of Trellis: structured lines on standard error, key=value or JSON.

Standard library ``logging`` (not structlog): gunicorn, the engine and the storage layer already
log through it, so a handler and a formatter on the root logger put every line (ours, gunicorn's
error and access logs, any library's) into one shape, with no second logging system to bridge.
The engine logs with ``logging.getLogger(__name__)`` and ``extra`` fields (``engine.logs.event``);
this module decides how they look.

One line per record, these keys first, then the record's own fields in the order given::

    ts=2025-06-01T12:00:00.123Z level=info logger=gunicorn.access msg=request request_id=Qm3a9ZkP0 ...
    ts=2025-06-01T12:00:01.456Z level=warning logger=engine.managers.authentication event=login.failed ...

``ts`` (UTC, milliseconds), ``level``, ``logger``, then ``event`` (a named event: security and
outage events) or ``msg`` (free text), ``request_id`` (of the request being served, from
:func:`bind_request_id`, the same id as the error envelope's ``requestId`` and the access log
line's), the fields, and last ``exc`` (a traceback) and ``stack``. In the key=value format a value
is written bare when it is printable and holds no blank, ``=``, ``"`` or ``\\``; otherwise it is
quoted, with ``"`` and ``\\`` escaped and line breaks, tabs and every other unprintable character
(C0/C1 controls, Unicode line separators, bidirectional overrides) written as escapes, so that
no value (a username an attacker typed, a traceback) can start a new line or forge a field. A
value past :data:`MAX_VALUE` characters is cut. A field whose value is None is left out. The JSON
format has the same keys in the same order, one object a line.

Under ``trellis serve`` everything goes to standard error: gunicorn's error log, the access log
(one INFO line per request: :class:`GunicornLogger`) and every ``logging`` record of the app.

The settings (read here until they join ``controller.settings``):

- ``TRELLIS_LOG_LEVEL``: ``debug``, ``info`` (default), ``warning``, ``error`` or ``critical``;
- ``TRELLIS_LOG_FORMAT``: ``text`` (key=value, default) or ``json`` (one JSON object a line).

A bad value stops the command before anything starts (``controller.settings.SettingError``: the
``trellis`` command prints ``trellis: <reason>``, one line on standard error, and exits 2).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import IO, Any

import orjson
from gunicorn import glogging

from controller.accesslog import access_fields, write_line
from controller.settings import BY_ENV
from engine.logs import RESERVED, bind_request_id, current_request_id, unbind_request_id

__all__ = [
    "FORMAT_VAR",
    "LEVEL_VAR",
    "GunicornLogger",
    "LogSettings",
    "RequestIdFilter",
    "StructuredFormatter",
    "bind_request_id",
    "configure",
    "configure_from_env",
    "current_request_id",
    "gunicorn_options",
    "parse_logfmt",
    "unbind_request_id",
]

LEVEL_VAR = "TRELLIS_LOG_LEVEL"
FORMAT_VAR = "TRELLIS_LOG_FORMAT"
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
FORMATS = ("text", "json")
#: The longest value written (a traceback's ``exc`` excepted); longer ones are cut.
MAX_VALUE = 4096

# -- settings -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogSettings:
    level: int = logging.INFO
    format: str = "text"

    @property
    def level_name(self) -> str:
        return logging.getLevelName(self.level).lower()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LogSettings:
        """The settings from ``TRELLIS_LOG_LEVEL`` and ``TRELLIS_LOG_FORMAT`` (unset or empty:
        the default), checked as every setting is (``controller.settings``): a bad value ends the
        process (exit status 2) with its reason."""
        env = os.environ if environ is None else environ
        level = BY_ENV[LEVEL_VAR].parse(env.get(LEVEL_VAR))
        return cls(level=LEVELS[level], format=BY_ENV[FORMAT_VAR].parse(env.get(FORMAT_VAR)))


# -- the request being served -------------------------------------------------------------------


class RequestIdFilter(logging.Filter):
    """Puts the request id of the request being served on each record that has none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "request_id" not in record.__dict__:
            record.request_id = current_request_id()
        return True


# -- the formatter ------------------------------------------------------------------------------

#: Record attributes that are not fields (``request_id`` and ``event`` have their own places).
_NOT_FIELDS = RESERVED | {"request_id", "event"}
#: Keys of the line's head: a field so named is written with a trailing ``_``.
_HEAD = frozenset({"ts", "level", "logger", "event", "msg", "request_id", "exc", "stack"})
_BAD_KEY = re.compile(r"[^A-Za-z0-9_.\-]")
_NEEDS_QUOTES = re.compile(r'[ ="\\]')
#: What is written bare for sure: printable ASCII but blank, ``"``, ``=`` and ``\``.
_BARE = re.compile(r"[!#-<>-\[\]-~]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: Characters JSON leaves as they are that some readers take for line ends.
_JSON_LINE_ENDS = {b"\xc2\x85": b"\\u0085", b"\xe2\x80\xa8": b"\\u2028", b"\xe2\x80\xa9": b"\\u2029"}


#: Field names as written, by attribute name (a name is checked once).
_KEYS: dict[str, str] = {}


class _Clock:
    """``2025-06-01T12:00:00.123Z`` for a record's ``created``, the seconds made once a second."""

    def __init__(self) -> None:
        self.second = -1
        self.text = ""

    def stamp(self, created: float) -> str:
        second = int(created)
        if second != self.second:
            self.text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self.second = second
        return f"{self.text}.{int((created - second) * 1000):03d}Z"


def _cut(text: str, limit: int = MAX_VALUE) -> str:
    return text if len(text) <= limit else text[:limit] + "...(cut)"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return str(value.total_seconds())
    return str(value)


def _escape_char(char: str) -> str:
    escaped = _ESCAPES.get(char)
    if escaped is not None:
        return escaped
    if char == " " or char.isprintable():
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def logfmt_value(value: Any, limit: int = MAX_VALUE) -> str:
    """``value`` as a key=value line writes it: bare, or quoted with escapes (see the module
    docstring)."""
    if type(value) is int:  # the common cases first: a count, a status
        return str(value)
    text = value if type(value) is str else _text(value)
    if len(text) <= limit and _BARE.fullmatch(text):
        return text
    text = _cut(text, limit)
    if text and text.isprintable() and not _NEEDS_QUOTES.search(text):
        return text
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return '"' + "".join(_escape_char(c) for c in text) + '"'


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return _cut(_text(value))


class StructuredFormatter(logging.Formatter):
    """One line per record: key=value (``json=False``) or a JSON object (see the module docstring)."""

    def __init__(self, *, json: bool = False) -> None:
        super().__init__()
        self.json = json
        self._clock = _Clock()

    def fields(self, record: logging.LogRecord) -> list[tuple[str, Any]]:
        attrs = record.__dict__
        out: list[tuple[str, Any]] = [
            ("ts", self._clock.stamp(record.created)),
            ("level", record.levelname.lower()),
            ("logger", record.name),
        ]
        event = attrs.get("event")
        message = record.getMessage()
        if event:
            out.append(("event", event))
        if not event or message != event:
            out.append(("msg", message))
        request_id = attrs.get("request_id")
        if request_id:
            out.append(("request_id", request_id))
        keys = _KEYS
        for key, value in attrs.items():
            if key in _NOT_FIELDS or value is None:
                continue
            written = keys.get(key)
            if written is None:
                written = _BAD_KEY.sub("_", key) or "_"
                written = f"{written}_" if written in _HEAD else written
                if len(keys) < 10_000:
                    keys[key] = written
            out.append((written, value))
        if record.exc_info and record.exc_info[0] is not None:
            out.append(("exc", self.formatException(record.exc_info)))
        elif record.exc_text:
            out.append(("exc", record.exc_text))
        if record.stack_info:
            out.append(("stack", self.formatStack(record.stack_info)))
        return out

    def format(self, record: logging.LogRecord) -> str:
        return self.render(self.fields(record))

    def render(self, fields: Iterable[tuple[str, Any]]) -> str:
        return json_line(fields) if self.json else logfmt_line(fields)

    def format_values(
        self, created: float, level: str, logger: str, message: str, values: Mapping[str, Any]
    ) -> str:
        """The line of a record that was never made: what :meth:`format` writes for a record of
        ``level`` (lower case) from ``logger`` with ``message`` and ``values`` as its fields
        (plain names, none of the line's head but ``request_id``)."""
        out: list[tuple[str, Any]] = [
            ("ts", self._clock.stamp(created)),
            ("level", level),
            ("logger", logger),
            ("msg", message),
        ]
        request_id = values.get("request_id")
        if request_id:
            out.append(("request_id", request_id))
        out.extend((k, v) for k, v in values.items() if v is not None and k != "request_id")
        return self.render(out)


def logfmt_line(fields: Iterable[tuple[str, Any]]) -> str:
    parts = []
    bare = _BARE.fullmatch
    for key, value in fields:
        kind = type(value)
        # most values; a float's text (``str``, as logfmt_value writes it) is always bare
        if (kind is str and len(value) <= MAX_VALUE and bare(value)) or kind is int or kind is float:
            parts.append(f"{key}={value}")
        else:
            parts.append(
                f"{key}={logfmt_value(value, sys.maxsize if key in ('exc', 'stack') else MAX_VALUE)}"
            )
    return " ".join(parts)


def json_line(fields: Iterable[tuple[str, Any]]) -> str:
    document: dict[str, Any] = {}
    for key, value in fields:
        document[key] = value if key in ("exc", "stack") else _json_value(value)
    data = orjson.dumps(document, default=str)
    for raw, escaped in _JSON_LINE_ENDS.items():
        if raw in data:
            data = data.replace(raw, escaped)
    return data.decode("utf-8")


_PAIR = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)')
_UNESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def _unquote(value: str) -> str:
    if not value.startswith('"'):
        return value
    body = value[1:-1]

    def one(match: re.Match[str]) -> str:
        text = match.group(1)
        if text[0] in _UNESCAPES:
            return _UNESCAPES[text[0]]
        return chr(int(text[1:], 16))

    return re.sub(r"\\(u[0-9a-f]{4}|U[0-9a-f]{8}|.)", one, body)


def parse_logfmt(line: str) -> dict[str, str]:
    """The fields of a key=value line (values as text, escapes undone): for tests and tools."""
    return {key: _unquote(value) for key, value in _PAIR.findall(line)}


# -- set-up -------------------------------------------------------------------------------------


def configure(settings: LogSettings, stream: IO[str] | None = None) -> logging.Handler:
    """Send every record at ``settings.level`` and above to ``stream`` (standard error) in
    ``settings.format``. Idempotent: a handler an earlier call installed is replaced."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_trellis", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler._trellis = True  # type: ignore[attr-defined]
    handler.setFormatter(StructuredFormatter(json=settings.format == "json"))
    handler.addFilter(RequestIdFilter())
    root.addHandler(handler)
    root.setLevel(settings.level)
    logging.captureWarnings(True)
    return handler


def configure_from_env(environ: Mapping[str, str] | None = None) -> LogSettings:
    """:func:`configure` from ``TRELLIS_LOG_LEVEL`` and ``TRELLIS_LOG_FORMAT`` (for a command)."""
    settings = LogSettings.from_env(environ)
    configure(settings)
    return settings


class GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger class for ``trellis serve``: its error and access loggers hand their
    records to the root logger's handler (:func:`configure`, run here from the environment in
    the master and so inherited by the worker), and an access line is a structured record
    (``controller.accesslog.access_fields``) rather than Apache's combined format. The access log is
    on when gunicorn's ``accesslog`` is set (``-``): its lines go to standard error with the rest."""

    #: ``controller.accesslog.AccessLog`` hands the access line to :meth:`access` as it is.
    structured = True

    def __init__(self, cfg: Any) -> None:
        #: The root handlers last looked at, and whether :meth:`access` may write to them itself.
        self._seen: tuple[logging.Handler, ...] | None = None
        self._direct: list[logging.StreamHandler[Any]] | None = None
        super().__init__(cfg)

    def setup(self, cfg: Any) -> None:
        self.cfg = cfg
        settings = LogSettings.from_env()
        configure(settings)
        self._access_log_enabled = bool(cfg.accesslog)
        self.loglevel = settings.level
        for log in (self.error_log, self.access_log):
            for handler in list(log.handlers):
                if getattr(handler, "_gunicorn", False):
                    log.removeHandler(handler)
            log.propagate = True
            log.setLevel(logging.NOTSET)

    def access(self, resp: Any, req: Any, environ: Mapping[str, Any], request_time: timedelta) -> None:
        """One request's access line (INFO): the fields of ``controller.accesslog.access_fields``.

        A record costs more than the line (making it, finding its caller: a third of a small
        request's logging): when the line would go only to :func:`configure`'s handlers, it is
        formatted and written to them here, as their ``emit`` would; otherwise it is a record
        like any other (another handler, a filter: a test's capture)."""
        logger = self.access_log
        if not self.access_log_enabled or not logger.isEnabledFor(logging.INFO):
            return
        fields = access_fields(resp, environ, request_time)
        handlers = self._direct_handlers()
        if handlers is None:
            logger.info("request", extra=fields)
            return
        created = time.time()
        for handler in handlers:
            formatter = handler.formatter
            assert isinstance(formatter, StructuredFormatter)
            write_line(handler, formatter.format_values(created, "info", logger.name, "request", fields))

    def _direct_handlers(self) -> list[logging.StreamHandler[Any]] | None:
        root = logging.getLogger()
        seen = tuple(root.handlers)
        if seen != self._seen:
            self._direct = self._only_ours(self.access_log, root)
            self._seen = seen
        return self._direct

    @staticmethod
    def _only_ours(logger: logging.Logger, root: logging.Logger) -> list[logging.StreamHandler[Any]] | None:
        if logger.filters or not root.handlers:
            return None
        between: logging.Logger | None = logger
        while between is not None and between is not root:  # a record reaches root's handlers only
            if between.handlers or not between.propagate:
                return None
            between = between.parent
        handlers: list[logging.StreamHandler[Any]] = []
        for handler in root.handlers:
            if (
                not getattr(handler, "_trellis", False)
                or type(handler) is not logging.StreamHandler
                or handler.level > logging.INFO
                or not isinstance(handler.formatter, StructuredFormatter)
                or any(not isinstance(f, RequestIdFilter) for f in handler.filters)
            ):
                return None
            handlers.append(handler)
        return handlers


def gunicorn_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """gunicorn settings that route its logs through :class:`GunicornLogger`; the logging
    variables are checked here, before gunicorn starts (exit status 2 on a bad one)."""
    settings = LogSettings.from_env(environ)
    return {"logger_class": GunicornLogger, "loglevel": settings.level_name}
