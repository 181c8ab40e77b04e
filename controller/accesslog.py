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
``logconfig``) goes through gunicorn's own ``Logger.access``.

Either way secrets never reach the log (:func:`redact_uri`, :func:`redact_environ`): the values of
secret query parameters (``token=`` of ``/enroll*``, and any ``*token``, ``*secret``,
``*password``, ``*jwt`` or ``code`` parameter) and of filters that name such a field become
``REDACTED``, in the request line, the query and the referer; for gunicorn's own formatting the
credential headers (``Authorization``, ``zt-session``, cookies) too, in every atom that shows
them. A one-time token left in a log would be usable by whoever reads the log.

Under ``trellis serve`` gunicorn's logger is ``controller.logs.GunicornLogger`` (``structured``): the line
is then a structured record (:func:`access_fields`: the request id the app gave the request, the
client, method, redacted target, status, size, duration, agent and redacted referer) written by
the one log formatter with every other line, instead of Apache's combined format.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
import re
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import unquote_plus

from gunicorn import glogging
from gunicorn.config import AccessLogFormat

from api import REQUEST_ID_KEY

__all__ = [
    "REDACTED",
    "AccessLog",
    "access_fields",
    "redact_environ",
    "redact_query",
    "redact_uri",
]

DEFAULT_FORMAT: str = AccessLogFormat.default

#: What a secret is logged as.
REDACTED = "REDACTED"
#: Query parameters that carry secrets, by their name lower-cased without ``-`` and ``_``: the
#: enrollment token (``/enroll*?token=``), and what OAuth/OIDC-style or careless clients put in a
#: URL (``access_token``, ``code``, ``password``, a ``zt-session`` token, ...).
SECRET_PARAMS = frozenset(
    {
        "token",
        "code",
        "otp",
        "totp",
        "password",
        "passwd",
        "secret",
        "jwt",
        "key",
        "apikey",
        "ztsession",
        "session",
        "sessiontoken",
        "authorization",
        "assertion",
        "signature",
        "sig",
    }
)
#: ... and any parameter whose name ends so (``enrollmentToken``, ``client_secret``, ``id_token``).
SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "jwt", "apikey")
#: A filter naming one of these fields (``token = "..."`` on ``/sessions`` or ``/enrollments``,
#: ``enrollmentJwt``) has its whole value redacted.
_SECRET_FILTER = re.compile(r"token|jwt|secret|passw", re.IGNORECASE)
#: Request headers that carry credentials (gunicorn's ``{name}i`` atoms, ``HTTP_*`` environ keys).
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "zt-session", "cookie", "x-api-key"})
#: Response headers that do (``{name}o``): the session token of a login.
SECRET_RESPONSE_HEADERS = frozenset({"zt-session", "set-cookie"})
_SECRET_ENVIRON = frozenset("HTTP_" + name.upper().replace("-", "_") for name in SECRET_HEADERS)


def _secret_param(name: str) -> bool:
    key = unquote_plus(name).lower().replace("-", "").replace("_", "").strip()
    return key in SECRET_PARAMS or key.endswith(SECRET_SUFFIXES)


_PLAIN, _SECRET, _FILTER = 0, 1, 2


@functools.lru_cache(maxsize=1024)
def _kept_param_kind(name: str) -> int:
    if _secret_param(name):
        return _SECRET
    return _FILTER if unquote_plus(name).strip().lower() == "filter" else _PLAIN


def _param_kind(name: str) -> int:
    """A query parameter's name as :func:`redact_query` reads it: a secret's, ``filter`` or
    another; a pure function of the name, kept for short names (every request's ``limit`` and
    ``offset`` ask again)."""
    return _kept_param_kind(name) if len(name) <= 64 else _kept_param_kind.__wrapped__(name)


def redact_query(query: str) -> str:
    """``query`` (a raw query string) with the values of secret parameters :data:`REDACTED`;
    everything else as it came, byte for byte."""
    if not query:
        return query
    parts = query.split("&")
    changed = False
    for i, part in enumerate(parts):
        name, eq, value = part.partition("=")
        if not eq or not value:
            continue
        kind = _param_kind(name)
        secret = kind == _SECRET or (kind == _FILTER and _SECRET_FILTER.search(unquote_plus(value)))
        if secret:
            parts[i] = f"{name}={REDACTED}"
            changed = True
    return "&".join(parts) if changed else query


def redact_uri(uri: str) -> str:
    """A request target (or a referer URL) with :func:`redact_query` applied to its query."""
    path, sep, query = uri.partition("?")
    if not sep:
        return uri
    return f"{path}?{redact_query(query)}"


def _redact_credentials(value: str) -> str:
    """An ``Authorization`` value with its credentials :data:`REDACTED`; a ``Basic`` one keeps its
    user name (gunicorn's ``%(u)s`` shows it)."""
    scheme, _, credentials = value.strip().partition(" ")
    if not credentials:
        return REDACTED
    if scheme.lower() == "basic":
        try:
            user = base64.b64decode(credentials.strip().encode("utf-8")).split(b":", 1)[0]
            return "Basic " + base64.b64encode(user + b":" + REDACTED.encode()).decode("ascii")
        except (TypeError, binascii.Error, ValueError):
            pass
    return f"{scheme} {REDACTED}"


def redact_environ(environ: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``environ`` fit for a log line: secret query values and credential headers
    :data:`REDACTED` (``RAW_URI``, ``QUERY_STRING``, ``REQUEST_URI``, the referer, ``HTTP_*``)."""
    out = dict(environ)
    for key in ("RAW_URI", "REQUEST_URI", "HTTP_REFERER"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = redact_uri(value)
    query = out.get("QUERY_STRING")
    if isinstance(query, str):
        out["QUERY_STRING"] = redact_query(query)
    for key in _SECRET_ENVIRON:
        value = out.get(key)
        if isinstance(value, str):
            out[key] = _redact_credentials(value) if key.endswith("AUTHORIZATION") else REDACTED
    return out


def _redact_headers(headers: Any, secret: frozenset[str]) -> list[tuple[str, str]]:
    """A header list (or mapping) with the values of ``secret`` headers :data:`REDACTED`."""
    items: Iterable[tuple[str, str]] = headers.items() if hasattr(headers, "items") else headers
    out: list[tuple[str, str]] = []
    for name, value in items:
        lower = name.lower()
        if lower in secret:
            value = _redact_credentials(value) if lower.endswith("authorization") else REDACTED
        out.append((name, value))
    return out


class _Redacted:
    """A request or response for gunicorn's atoms: ``headers`` redacted, the rest its original's."""

    def __init__(self, original: Any, headers: list[tuple[str, str]]) -> None:
        self._original = original
        self.headers = headers

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


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


def access_fields(logged: Any, environ: Mapping[str, Any], request_time: timedelta) -> dict[str, Any]:
    """A structured access line's fields (None ones are left out of the line): the secrets of
    the target and the referer redacted as in the combined line; no credential header at all."""
    status = logged.status
    code = status.split(None, 1)[0] if isinstance(status, str) else status
    referer = environ.get("HTTP_REFERER")
    return {
        "request_id": environ.get(REQUEST_ID_KEY),
        "remote": environ.get("REMOTE_ADDR"),
        "method": environ.get("REQUEST_METHOD"),
        "path": redact_uri(str(environ.get("RAW_URI") or environ.get("PATH_INFO") or "")),
        "protocol": environ.get("SERVER_PROTOCOL"),
        "status": int(code) if str(code).isdigit() else code,
        "bytes": getattr(logged, "sent", None),
        "duration_ms": round(request_time.total_seconds() * 1000, 3),
        "user_agent": environ.get("HTTP_USER_AGENT"),
        "referer": redact_uri(referer) if isinstance(referer, str) else None,
    }


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
        if getattr(self.log, "structured", False):  # controller.logs.GunicornLogger: one record, no atoms
            self.log.access(logged, req, environ, request_time)
            return
        streams = self.streams(access_log_format)
        if streams is None or not self.log.access_log.isEnabledFor(logging.INFO):
            self.log.access(
                _Redacted(logged, _redact_headers(getattr(logged, "headers", ()), SECRET_RESPONSE_HEADERS)),
                _Redacted(req, _redact_headers(getattr(req, "headers", ()), SECRET_HEADERS)),
                redact_environ(environ),
                request_time,
            )
            return
        status = logged.status
        code = status.split(None, 1)[0] if isinstance(status, str) else str(status)
        sent = logged.sent
        line = (
            f"{_safe(environ.get('REMOTE_ADDR', '-'))} - {_safe(_user(environ))} {self.clock.now()} "
            f'"{_safe(environ["REQUEST_METHOD"])} {_safe(redact_uri(environ["RAW_URI"]))} '
            f'{_safe(environ["SERVER_PROTOCOL"])}" '
            f"{code} {str(sent) if sent is not None else '-'} "
            f'"{_safe(redact_uri(environ.get("HTTP_REFERER", "-")))}" "{_safe(environ.get("HTTP_USER_AGENT", "-"))}"'
        )
        for handler in streams:
            write_line(handler, line)


def write_line(handler: logging.StreamHandler[Any], line: str) -> None:
    """Write a formatted ``line`` straight to ``handler``'s stream, as ``Handler.emit`` would
    (under its lock, flushed; a failure goes to ``handleError``), without making a record."""
    handler.acquire()
    try:
        handler.stream.write(line + handler.terminator)
        handler.flush()
    except Exception:
        handler.handleError(logging.makeLogRecord({"msg": line}))
    finally:
        handler.release()
