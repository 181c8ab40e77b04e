"""The API's gunicorn worker: an asyncio event loop does the network, a thread pool runs the app.

Why (issue "stalled clients stop the server"): gunicorn's ``gthread`` worker gives each connection
a pool thread for its TLS handshake and its request head, with no time limit, so eight clients that
connect and stall stop the server answering anyone. Here a connection holds no thread until its
request is complete:

- the event loop accepts on gunicorn's listening sockets and does the TLS handshake
  (``ssl_handshake_timeout``), with an ``SSLContext`` chosen per connection: the app's
  ``tls_context()`` if it has one (so CA trust can change at run time), else one built once from
  gunicorn's configuration;
- it reads the request head (time and size limits: 414, 431), then the body (``Content-Length`` or
  ``Transfer-Encoding: chunked``, a time limit and a cap: 413), answering ``Expect: 100-continue``;
- only then is the WSGI app called, with the body already read (``wsgi.input`` is a ``BytesIO``),
  the response serialised and the access log line written: on a pool thread (``threads`` of
  them), or, when the app's ``runs_on_loop(method, path, query)`` says the request never
  blocks, right here on the loop (no thread hand-off: on one core, waking a pool thread and
  winning the GIL back cost more than a small request itself; see ``api.http.LOOP_READS``). A
  request run on the loop does not wait for its writes: the app puts them, pending, in
  ``environ["trellis.deferred"]`` (``engine.ports.Durable``) and the loop answers once they are
  durable, 503 ``COMMIT_FAILED`` if one is refused, serving other connections meanwhile;
- the loop writes the response (a time limit too) and keeps the connection alive (idle time
  limit) or closes it.

Errors found before the app runs are answered in OpenZiti's JSON error envelope and the connection
is closed; a timeout just closes it. The environ carries no ``gunicorn.socket``; the client's
certificate chain is ``environ["trellis.peer_cert_chain"]`` (DER, leaf first, as the client sent
it: unverified). The worker honours gunicorn's ``max_requests``, ``graceful_timeout``,
``worker_connections``, the heartbeat, the ``pre_request``/``post_request`` hooks, SIGTERM
(graceful), SIGINT/SIGQUIT (quick) and the access log.

A response whose body is a list (Falcon's ``text``, ``data`` and ``media``: the API's small JSON
documents) is sent whole, with its ``Content-Length``. One whose body is any other iterable
(Falcon's ``resp.stream``: Server-Sent Events, a Parquet export) is streamed to an HTTP/1.1
client: the head at once, then each piece as the app gives it, ``Transfer-Encoding: chunked``
unless the app gave a ``Content-Length``. The pool thread is held only while the app makes the
next piece; the loop writes it (the write time limit for each). A client that goes away, or a
piece that does not come, ends the body and the app's iterable is closed; a stream still open
when the worker stops is ended cleanly (``environ["trellis.stopping"]``, a ``threading.Event``,
tells the app to finish). An HTTP/1.0 client, and a request run on the loop, get the body whole.

The app may serve more on the same loop: its ``serve_alongside(loop, pool)``, if it has one, is
awaited once accepting starts (the control listener edge routers connect to, ``controller.control``), and
the stop it answers is awaited first thing at shutdown.

Measurements and the options compared: ``bench/serving.py`` (``python -m bench serving``).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto as asyncio_sslproto
import concurrent.futures
import ctypes
import errno
import io
import os
import re
import resource
import secrets
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import formatdate
from functools import partial
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from gunicorn.workers.base import Worker

from api.errors import envelope
from api.http import DEFERRED_KEY
from controller.accesslog import AccessLog, redact_uri
from engine import errors as e
from engine.ports import Durable
from pki.tls import peer_cert_chain

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_BAD_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,18}")
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection"})
#: Pause reading a connection with this much unread input (a pipelining or over-eager client).
_READ_HIGH_WATER = 256 * 1024
#: asyncio's TLS protocol allocates a read buffer of ``SSLProtocol.max_size`` (256 KiB) for every
#: connection, from its first byte: 300 KiB of memory per stalled TLS connection. Two TLS records.
_TLS_READ_BUFFER = 32 * 1024
_CHUNK_LINE_BYTES = 4096
#: How long a request run on the event loop waits for its deferred writes (then 503).
DURABLE_WAIT = 60.0


@dataclass(frozen=True)
class Limits:
    """Time (seconds) and size (bytes) limits on one connection."""

    handshake_timeout: float = 10.0
    #: From the first byte of a request (or the end of the handshake) to the end of its head.
    header_timeout: float = 10.0
    #: To read a whole body, from the end of its head.
    body_timeout: float = 30.0
    #: For a response to be taken by the client (its socket buffer drained).
    write_timeout: float = 30.0
    #: How long a kept-alive connection may wait for its next request; 0 closes after each one.
    keepalive_timeout: float = 5.0
    #: For the client's close_notify when we close a TLS connection.
    tls_shutdown_timeout: float = 5.0
    max_request_line: int = 16 * 1024
    max_head_bytes: int = 64 * 1024
    max_header_fields: int = 100
    max_field_bytes: int = 16 * 1024
    max_body_bytes: int = 1024 * 1024

    @classmethod
    def from_cfg(cls, cfg: Any) -> Limits:
        """Defaults, with gunicorn's keep-alive and header limits where it has them (0 = default)."""
        base = cls()
        return cls(
            keepalive_timeout=float(cfg.keepalive),
            max_request_line=int(cfg.limit_request_line) or base.max_request_line,
            max_header_fields=int(cfg.limit_request_fields) or base.max_header_fields,
            max_field_bytes=int(cfg.limit_request_field_size) or base.max_field_bytes,
        )


# -- errors answered before the app runs ---------------------------------------------------------


class HttpError(Exception):
    """A request refused before the app sees it: status, OpenZiti code and message, reason."""

    def __init__(self, status: int, phrase: str, error: type[e.ControllerError], reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.phrase = phrase
        self.code = error.code
        self.message = error.default_message
        self.reason = reason


def bad_request(reason: str) -> HttpError:
    return HttpError(400, "Bad Request", e.CouldNotParseBodyError, reason)


def too_large(reason: str) -> HttpError:
    return HttpError(413, "Request Entity Too Large", e.RequestEntityTooLargeError, reason)


def uri_too_long(limit: int) -> HttpError:
    return HttpError(414, "URI Too Long", e.FieldError, f"the request line is longer than {limit} bytes")


def head_too_large(reason: str) -> HttpError:
    return HttpError(431, "Request Header Fields Too Large", e.FieldError, reason)


def error_document(status: int, phrase: str, code: str, message: str, reason: str | None) -> bytes:
    """A complete ``Connection: close`` response carrying OpenZiti's error envelope."""
    cause = {"reason": reason} if reason else None
    body = orjson.dumps(envelope(code, message, secrets.token_hex(5), cause))
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: application/json\r\n"
        "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\nPragma: no-cache\r\n"
        f"Content-Length: {len(body)}\r\nDate: {http_date()}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _error_response(err: HttpError) -> bytes:
    return error_document(err.status, err.phrase, err.code, err.message, err.reason)


_date_cache: tuple[int, str] = (0, "")


def http_date() -> str:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True))
    return _date_cache[1]


# -- the request head ----------------------------------------------------------------------------


@dataclass(slots=True)
class Request:
    """A parsed request head (names and values as latin-1 ``str``, as WSGI wants them)."""

    method: str
    uri: str
    path: str
    query: str
    version: tuple[int, int]
    headers: list[tuple[str, str]]
    content_length: int = 0
    chunked: bool = False
    keep_alive: bool = True
    expect_continue: bool = False

    @property
    def protocol(self) -> str:
        return f"HTTP/{self.version[0]}.{self.version[1]}"


def parse_head(head: bytes, limits: Limits) -> Request:
    """Parse a request head ending in CRLF CRLF; :class:`HttpError` if it is refused."""
    lines = head[:-4].split(b"\r\n")
    request_line = lines[0]
    if len(request_line) > limits.max_request_line:
        raise uri_too_long(limits.max_request_line)
    parts = request_line.split(b" ")
    if len(parts) != 3:
        raise bad_request("malformed request line")
    method, target, proto = parts
    if not _TOKEN.fullmatch(method):
        raise bad_request("invalid method")
    if proto == b"HTTP/1.1":
        version = (1, 1)
    elif proto == b"HTTP/1.0":
        version = (1, 0)
    else:
        raise bad_request("unsupported HTTP version (HTTP/1.0 and HTTP/1.1 are served)")
    if not target or _BAD_TARGET.search(target):
        raise bad_request("invalid request target")
    if len(lines) - 1 > limits.max_header_fields:
        raise head_too_large(f"more than {limits.max_header_fields} header fields")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if len(line) > limits.max_field_bytes:
            raise head_too_large(f"a header field is longer than {limits.max_field_bytes} bytes")
        if line[:1] in (b" ", b"\t"):
            raise bad_request("obsolete line folding in the header")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise bad_request("malformed header field")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise bad_request("invalid character in a header value")
        headers.append((name.decode("latin-1"), value.decode("latin-1")))
    uri = target.decode("latin-1")
    path, _, query = uri.partition("?")
    query = query.partition("#")[0]
    if not path.startswith("/"):
        if uri == "*" and method == b"OPTIONS":
            path = "*"
        elif "://" in path:  # absolute-form: http://host/path
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        else:
            raise bad_request("invalid request target")
    req = Request(method.decode("latin-1"), uri, path.partition("#")[0], query, version, headers)
    _framing(req)
    return req


def _framing(req: Request) -> None:
    """Body length, keep-alive and Expect from the headers (RFC 9112 sections 6 and 9)."""
    lengths: set[str] = set()
    codings: list[str] = []
    connection: list[str] = []
    hosts = 0
    for name, value in req.headers:
        key = name.lower()
        if key == "content-length":
            lengths.update(v.strip() for v in value.split(","))
        elif key == "transfer-encoding":
            codings.extend(c.strip().lower() for c in value.split(",") if c.strip())
        elif key == "connection":
            connection.extend(c.strip().lower() for c in value.split(","))
        elif key == "host":
            hosts += 1
        elif key == "expect":
            if value.lower() != "100-continue":
                raise HttpError(417, "Expectation Failed", e.FieldError, f"unsupported expectation {value!r}")
            req.expect_continue = req.version >= (1, 1)
    if req.version >= (1, 1) and hosts != 1:
        raise bad_request("an HTTP/1.1 request needs exactly one Host header")
    if codings:
        if req.version < (1, 1) or codings != ["chunked"]:
            raise bad_request("unsupported Transfer-Encoding (only chunked is accepted)")
        if lengths:
            raise bad_request("both Transfer-Encoding and Content-Length")
        req.chunked = True
    elif lengths:
        if len(lengths) != 1:
            raise bad_request("conflicting Content-Length values")
        length = lengths.pop()
        if not _DIGITS.fullmatch(length):
            raise bad_request("invalid Content-Length")
        req.content_length = int(length)
    if req.version >= (1, 1):
        req.keep_alive = "close" not in connection
    else:
        req.keep_alive = "keep-alive" in connection


# -- one connection ------------------------------------------------------------------------------


class Timeout(Exception):
    """A time limit ran out: the connection is closed without an answer."""


class Disconnected(Exception):
    """The client closed the connection in the middle of a request."""


class Connection(asyncio.Protocol):
    """Buffers what a client sends; coroutines wait on it with deadlines."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tls: bool) -> None:
        self.loop = loop
        self.tls = tls
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.eof = False
        self.lost = False
        self.discard = False
        self.busy = False
        self._read_paused = False
        self._write_paused = False
        self._reader: asyncio.Future[bool] | None = None
        self._writer: asyncio.Future[bool] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.discard:
            self.buf += data
            # Input nobody waits for (the client sends ahead while the app runs): stop reading.
            if len(self.buf) > _READ_HIGH_WATER and self._reader is None and not self._read_paused:
                self._pause_reading(True)
        _wake(self._reader, True)

    def eof_received(self) -> bool:
        self.eof = True
        _wake(self._reader, True)
        return not self.tls  # plain TCP: a half-closed client still gets its answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = self.lost = True
        _wake(self._reader, True)
        _wake(self._writer, True)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        _wake(self._writer, True)

    # used by the worker
    def take(self, n: int) -> bytes:
        data = bytes(self.buf[:n])
        del self.buf[:n]
        if self._read_paused and len(self.buf) < _READ_HIGH_WATER // 4:
            self._pause_reading(False)
        return data

    def _pause_reading(self, pause: bool) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._read_paused = pause
            if pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    async def readable(self, deadline: float) -> bool:
        """Wait for more input (or the end of it); False if ``deadline`` (loop time) passes first."""
        if self.eof:
            return True
        if self._read_paused:  # someone needs more than is buffered (a large body)
            self._pause_reading(False)
        waiter: asyncio.Future[bool] = self.loop.create_future()
        self._reader = waiter
        timer = self.loop.call_at(deadline, _wake, waiter, False)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._reader = None

    async def need(self, n: int, deadline: float) -> None:
        """Wait until ``n`` bytes are buffered."""
        while len(self.buf) < n:
            if self.eof:
                raise Disconnected()
            if not await self.readable(deadline):
                raise Timeout()

    async def line(self, deadline: float, limit: int, too_long: HttpError) -> bytes:
        """The next CRLF-terminated line, without the CRLF."""
        start = 0
        while True:
            end = self.buf.find(b"\r\n", start)
            if end >= 0:
                return self.take(end + 2)[:-2]
            if len(self.buf) > limit:
                raise too_long
            start = max(0, len(self.buf) - 1)
            if self.eof:
                raise Disconnected()
            if not await self.readable(deadline):
                raise Timeout()

    async def write(self, data: bytes, deadline: float) -> bool:
        """Write ``data``; False if the client is gone or did not take it by ``deadline``."""
        if self.lost or self.transport is None or self.transport.is_closing():
            return False
        self.transport.write(data)
        while self._write_paused and not self.lost:
            waiter: asyncio.Future[bool] = self.loop.create_future()
            self._writer = waiter
            timer = self.loop.call_at(deadline, _wake, waiter, False)
            try:
                if not await waiter:
                    return False
            finally:
                timer.cancel()
                self._writer = None
        return not self.lost

    async def linger(self, seconds: float) -> None:
        """Read and drop input for a while, so closing does not reset an answer still in flight."""
        self.discard = True
        self.buf.clear()
        deadline = self.loop.time() + seconds
        while not self.eof and self.loop.time() < deadline:
            await self.readable(deadline)

    def close(self, abort: bool = False) -> None:
        if self.transport is not None and not self.transport.is_closing():
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class _Settler:
    """Futures of the loop set done from other threads, one wake-up of the loop for all those
    settled meanwhile (the committer finishes a whole batch of tickets at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._ready: list[asyncio.Future[None]] = []

    def settle(self, done: asyncio.Future[None]) -> None:
        """Any thread: set ``done`` on the loop."""
        with self._lock:
            self._ready.append(done)
            if len(self._ready) > 1:  # a wake-up is already on its way
                return
        self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        for done in ready:
            if not done.done():
                done.set_result(None)

    async def durable(self, pending: list[Durable]) -> str | None:
        """Wait for each deferred write; None once all are durable, else why the request failed."""
        loop = self._loop
        deadline = loop.time() + DURABLE_WAIT
        for write in pending:
            done: asyncio.Future[None] = loop.create_future()
            write.when_done(partial(self.settle, done))
            try:
                async with asyncio.timeout_at(deadline):
                    await done
            except TimeoutError:
                return "the write was not committed in time; it may yet be"
            if write.error is not None:
                return e.CommitFailedError.default_message
        return None


def _error_result(status: int, phrase: str, error: type[e.ControllerError], message: str) -> _AppResult:
    """An answer in OpenZiti's error envelope, closing the connection, in place of the app's."""
    data = error_document(status, phrase, error.code, message, None)
    body_length = len(data) - data.index(b"\r\n\r\n") - 4
    return _AppResult(data, False, f"{status} {phrase}", [("Content-Type", "application/json")], body_length)


def _end_to_end(headers: list[tuple[str, str]]) -> tuple[list[tuple[str, str, str]], bool]:
    """The app's headers less the hop-by-hop ones, as (name, value, lower-case name), and
    whether one of those asked to close the connection; ValueError for a header that could
    split the response."""
    kept: list[tuple[str, str, str]] = []
    closes = False
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name:
            raise ValueError(f"invalid response header {name!r}")
        key = name.lower()
        if key in _HOP_BY_HOP:
            closes = closes or (key == "connection" and "close" in value.lower())
            continue
        kept.append((name, value, key))
    return kept, closes


def own_listener(family: int, name: Any, backlog: int) -> socket.socket:
    """A listening TCP socket on ``name`` in ``SO_REUSEPORT``'s group, with the options gunicorn
    gives its own (address reuse, IPv6 only for IPv6, ``TCP_NODELAY``, which accepted sockets
    inherit)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(name)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


def _close(body: Iterable[bytes] | None) -> None:
    """Close an app's response body, as WSGI asks, if it can be closed."""
    close = getattr(body, "close", None)
    if close is not None:
        close()


def _next_piece(pieces: Iterator[bytes]) -> bytes | None:
    """The next piece of a streamed body (a pool thread), None at its end."""
    return next(pieces, None)


def _wake(waiter: asyncio.Future[bool] | None, value: bool) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(value)


@dataclass(frozen=True, slots=True)
class Peer:
    """What the environ needs from a connection, computed once per connection."""

    remote: tuple[str, int]
    server: tuple[str, str]
    scheme: str
    cert_chain: tuple[bytes, ...]


# -- access log stand-ins (gunicorn's Logger.access reads these attributes) ------------------------


@dataclass(slots=True)
class _Logged:
    status: str
    headers: list[tuple[str, str]]
    sent: int
    response_length: int


@dataclass(slots=True)
class _State:
    """A connection task's bookkeeping for shutdown."""

    conn: Connection | None = None


@dataclass(slots=True)
class _AppResult:
    data: bytes
    keep_alive: bool
    status: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body_length: int = 0
    #: The rest of a streamed body (the app's iterable), sent after ``data``.
    stream: Iterable[bytes] | None = None
    #: The streamed body is sent in chunks (else raw, ``expected`` bytes of it).
    chunked: bool = False
    expected: int = -1


# -- the worker ----------------------------------------------------------------------------------


#: glibc's malloc arenas for the worker's threads. Each thread that allocates may otherwise get an
#: arena of its own (up to eight per core), and what is freed in one stays in it: after the tier-M
#: Dial benchmark the worker held 15-18 MB that ``malloc_trim`` could give back, against 5-7 MB
#: with two arenas. Python allocates under the GIL, so more arenas buy no parallelism.
MALLOC_ARENAS = 2
#: ``M_ARENA_MAX``, ``mallopt``'s parameter number in glibc's ``malloc.h``.
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS, environ: Mapping[str, str] = os.environ) -> bool:
    """Cap glibc's malloc arenas at ``arenas`` for the threads started from now on (True when
    done): not where the C library is not glibc, nor when ``MALLOC_ARENA_MAX`` already says."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas))
    except (AttributeError, OSError, ValueError):
        return False


class TrellisWorker(Worker):  # type: ignore[misc]
    """gunicorn worker class ``controller.worker.TrellisWorker`` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.limits = Limits()
        self.nr_conns = 0
        self.max_connections = 1000
        self._quick = False
        self._accepting = False
        self._listeners: list[tuple[socket.socket, tuple[str, str]]] = []
        self._tasks: dict[asyncio.Task[None], _State] = {}
        self._inflight: set[concurrent.futures.Future[Any]] = set()
        self._wakeup: asyncio.Event | None = None
        self._default_tls: ssl.SSLContext | None = None
        self._nr_lock = threading.Lock()
        self.access_log = AccessLog(self.log)
        #: The app's ``runs_on_loop(method, path, query)``, if it has one (see the module docstring).
        self._on_loop: Callable[[str, str, str], bool] | None = None
        self._settler: _Settler | None = None
        #: Stops what the app's ``serve_alongside(loop, executor)`` started, if it has one.
        self._stop_alongside: Callable[[], Awaitable[None]] | None = None
        #: This worker's own listening sockets (several workers on one port), else None.
        self._own_listeners: list[socket.socket] | None = None
        #: Set when the worker stops: streamed bodies end (``environ["trellis.stopping"]``).
        self._stopping = threading.Event()

    # -- process set-up (after the fork) --

    def init_process(self) -> None:
        asyncio_sslproto.SSLProtocol.max_size = _TLS_READ_BUFFER  # this process only
        limit_malloc_arenas()  # before the app's threads (committer, flusher, pool) start
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.set_exception_handler(self._loop_exception)
        self.pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, int(self.cfg.threads)), thread_name_prefix="trellis-app"
        )
        limits = getattr(self.app, "serving_limits", None)
        self.limits = limits if isinstance(limits, Limits) else Limits.from_cfg(self.cfg)
        # several workers on one port: a listening socket of this worker's own (serve.py's
        # share_out_listeners); a failure to open it is a boot failure, which stops the server
        addresses = getattr(self.app, "reuse_port_addresses", None)
        if addresses:
            self._own_listeners = [
                own_listener(family, name, int(self.cfg.backlog)) for family, name in addresses
            ]
        self.max_connections = connection_capacity(int(self.cfg.worker_connections))
        if self.max_connections < self.cfg.worker_connections:
            self.log.warning("worker_connections lowered to %d by the open-file limit", self.max_connections)
        super().init_process()  # signals, load_wsgi, post_worker_init, then run()

    def init_signals(self) -> None:
        super().init_signals()
        assert self.loop is not None
        self.loop.add_signal_handler(signal.SIGTERM, self._stop, False)
        self.loop.add_signal_handler(signal.SIGINT, self._stop, True)
        self.loop.add_signal_handler(signal.SIGQUIT, self._stop, True)

    def handle_exit(self, sig: int, frame: Any) -> None:  # if signalled before the loop handlers
        self._stop(False)

    def handle_quit(self, sig: int, frame: Any) -> None:
        self._stop(True)

    def _stop(self, quick: bool) -> None:
        if quick and not self._quick:
            self._quick = True
            self.cfg.worker_int(self)
        self.alive = False
        self._stopping.set()
        if self._wakeup is not None:
            self._wakeup.set()

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError)):
            self.log.debug("connection: %s: %s", context.get("message"), exc)
        else:
            self.log.error("event loop: %s", context.get("message"), exc_info=exc)

    # -- the main loop --

    def run(self) -> None:
        assert self.loop is not None
        assert self.pool is not None
        on_loop = getattr(self.wsgi, "runs_on_loop", None)
        self._on_loop = on_loop if callable(on_loop) else None
        if self.cfg.is_ssl:
            from gunicorn.sock import ssl_context

            self._default_tls = ssl_context(self.cfg)
        try:
            self.loop.run_until_complete(self._main())
        finally:
            # Stopping already: a signal from here on has nothing left to ask (a Ctrl-C reaches
            # the worker both from the terminal and from the master, as SIGINT then SIGQUIT).
            # Left to the loop, one landing while it closes found its wake-up socket closed
            # ("Exception ignored when trying to write to the signal wakeup fd").
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                with suppress(Exception):
                    self.loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
            for s in [*self.sockets, *(self._own_listeners or ())]:
                with suppress(OSError):
                    s.close()
            self.pool.shutdown(wait=False, cancel_futures=True)
            with suppress(Exception):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._settler = _Settler(loop)
        shared = [getattr(s, "sock", s) for s in self.sockets]
        for listener in self._own_listeners if self._own_listeners is not None else shared:
            listener.setblocking(False)
            name = listener.getsockname()
            server = (str(name[0]), str(name[1])) if isinstance(name, tuple) else (str(name), "")
            self._listeners.append((listener, server))
        self._set_accepting(True)
        # what the app serves beside HTTP on this loop (the control listener routers connect to)
        alongside = getattr(self.wsgi, "serve_alongside", None)
        if callable(alongside):
            try:
                self._stop_alongside = await alongside(loop, self.pool)
            except Exception:
                self.log.exception("the app's serve_alongside() failed; serving HTTP only")
        while self.alive:
            self.notify()
            if self.ppid != os.getppid():
                self.log.info("Parent changed, shutting down: %s", self)
                self.alive = False
                break
            self._wakeup.clear()
            with suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._wakeup.wait()
        await self._shutdown(loop)

    async def _shutdown(self, loop: asyncio.AbstractEventLoop) -> None:
        """Stop accepting; quick: drop every connection; graceful: let requests in progress finish."""
        self._set_accepting(False)
        for own in self._own_listeners or ():
            own.close()  # the kernel gives the other workers' sockets the new connections
        if self._stop_alongside is not None:
            try:
                await self._stop_alongside()
            except Exception:
                self.log.exception("stopping what the app serves beside HTTP failed")
        graceful = float(self.cfg.graceful_timeout)
        budget = min(5.0, graceful / 2) if self._quick else max(graceful - 1.0, 0.5)
        deadline = loop.time() + budget
        for task, state in list(self._tasks.items()):
            if self._quick or state.conn is None or not state.conn.busy:
                task.cancel()
        while self._tasks and loop.time() < deadline:
            self.notify()
            await asyncio.wait(list(self._tasks), timeout=min(1.0, deadline - loop.time()))
        rest = list(self._tasks)
        for task in rest:
            task.cancel()
        if rest:
            await asyncio.wait(rest, timeout=1.0)
        if self._inflight:  # the app is still running for a dropped connection: let it finish
            self.log.info("waiting for %d request(s) in the app", len(self._inflight))
            concurrent.futures.wait(list(self._inflight), timeout=max(deadline - loop.time(), 0.5))

    # -- accepting --

    def _set_accepting(self, on: bool) -> None:
        if on == self._accepting or self.loop is None:
            return
        self._accepting = on
        for listener, server in self._listeners:
            if on:
                self.loop.add_reader(listener.fileno(), self._accept, listener, server)
            else:
                self.loop.remove_reader(listener.fileno())

    def _accept(self, listener: socket.socket, server: tuple[str, str]) -> None:
        assert self.loop is not None
        # A bounded batch per wake-up; the rest on the next one. With several workers on one
        # shared listening socket (not the case since each has its own, but a configuration
        # without reuse_port), one connection per wake-up: every worker is woken for each.
        batch = 1 if self.cfg.workers > 1 and self._own_listeners is None else 64
        for _ in range(batch):
            if self.nr_conns >= self.max_connections or not self.alive:
                self._set_accepting(False)
                return
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as ex:
                if ex.errno == errno.ECONNABORTED:
                    continue
                self.log.error("accept() failed: %s", ex)
                if ex.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._set_accepting(False)
                    self.loop.call_later(0.5, self._resume_accepting)
                return
            sock.setblocking(False)
            self.nr_conns += 1
            state = _State()
            task = self.loop.create_task(self._connection(sock, addr, server, state))
            self._tasks[task] = state
            task.add_done_callback(self._connection_done)

    def _resume_accepting(self) -> None:
        if self.alive and self.nr_conns < self.max_connections:
            self._set_accepting(True)

    def _connection_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self.nr_conns -= 1
        if not task.cancelled() and task.exception() is not None:
            self.log.error("connection failed", exc_info=task.exception())
        self._resume_accepting()

    def _tls_context(self) -> ssl.SSLContext | None:
        """The app's ``tls_context()`` for this connection, else the one built from the config."""
        hook = getattr(self.wsgi, "tls_context", None)
        if callable(hook):
            try:
                ctx = hook()
            except Exception:
                self.log.exception("app.tls_context() failed; using the configured context")
            else:
                if isinstance(ctx, ssl.SSLContext):
                    return ctx
        return self._default_tls

    # -- one connection --

    async def _connection(
        self, sock: socket.socket, addr: Any, server: tuple[str, str], state: _State
    ) -> None:
        assert self.loop is not None
        loop = self.loop
        limits = self.limits
        conn: Connection | None = None
        abort = True
        try:
            ctx = self._tls_context() if self.cfg.is_ssl else None
            tls: dict[str, Any] = {}
            if ctx is not None:
                tls = {
                    "ssl": ctx,
                    "ssl_handshake_timeout": limits.handshake_timeout,
                    "ssl_shutdown_timeout": limits.tls_shutdown_timeout,
                }
            try:
                transport, conn = await loop.connect_accepted_socket(
                    partial(Connection, loop, ctx is not None), sock, **tls
                )
            except (OSError, EOFError) as ex:  # ssl.SSLError is an OSError; so is the handshake timeout
                self.log.debug("TLS handshake with %s failed: %s", addr, ex)
                return
            state.conn = conn
            remote = (str(addr[0]), int(addr[1])) if isinstance(addr, tuple) else (str(addr or ""), 0)
            peer = Peer(remote, server, "https" if ctx is not None else "http", peer_cert_chain(transport))
            abort = await self._requests(conn, peer)
        finally:
            if conn is not None:
                conn.close(abort=abort)
            else:
                sock.close()

    async def _requests(self, conn: Connection, peer: Peer) -> bool:
        """Serve requests until the connection ends; True to abort it, False to close it cleanly."""
        assert self.loop is not None
        assert self.pool is not None
        loop = self.loop
        limits = self.limits
        first = True
        while True:
            if not first:  # kept alive: wait for the next request without a time limit on its head yet
                if not self.alive:
                    return False
                if not conn.buf:
                    if conn.eof:
                        return False
                    if not await conn.readable(loop.time() + limits.keepalive_timeout) or not conn.buf:
                        return False
            first = False
            try:
                head = await self._read_head(conn, loop.time() + limits.header_timeout)
                if head is None:
                    return False
                conn.busy = True
                req = parse_head(head, limits)
                body = await self._read_body(conn, req)
            except HttpError as err:
                self.log.warning("Invalid request from ip=%s: %s", peer.remote[0], err.reason)
                await conn.write(_error_response(err), loop.time() + limits.write_timeout)
                await conn.linger(1.0)
                return False
            except Timeout:
                self.log.debug("closing %s:%s: time limit on the request", *peer.remote)
                return True
            except Disconnected:
                return True
            environ = self._environ(req, body, peer)
            if self._on_loop is not None and self._on_loop(req.method, environ["PATH_INFO"], req.query):
                result = await self._respond_on_loop(req, environ)
            else:
                future = self.pool.submit(self._respond, req, environ)
                self._inflight.add(future)
                future.add_done_callback(self._inflight.discard)
                result = await asyncio.wrap_future(future)
            written = await conn.write(result.data, loop.time() + limits.write_timeout)
            if result.stream is not None:
                written = await self._send_stream(conn, req, environ, result, written)
            conn.busy = False
            if not written:
                return True
            if not result.keep_alive:
                return False

    async def _read_head(self, conn: Connection, deadline: float) -> bytes | None:
        """The head up to CRLF CRLF, None if the client closed first; 414/431 past the limits."""
        limits = self.limits
        start = 0
        line_seen = False
        while True:
            buf = conn.buf
            if buf[:2] == b"\r\n":  # RFC 9112 section 2.2: ignore empty lines before a request
                conn.take(2)
                start = 0
                continue
            end = buf.find(b"\r\n\r\n", start)
            if 0 <= end <= limits.max_head_bytes - 4:
                return conn.take(end + 4)
            start = max(0, len(buf) - 3)
            if not line_seen:
                line_end = buf.find(b"\r\n", 0, limits.max_request_line + 2)
                line_seen = line_end >= 0
                if not line_seen and len(buf) > limits.max_request_line:
                    raise uri_too_long(limits.max_request_line)
            if len(buf) > limits.max_head_bytes:
                raise head_too_large(f"the request head is longer than {limits.max_head_bytes} bytes")
            if conn.eof:
                if not buf:
                    return None
                raise Disconnected()
            if not await conn.readable(deadline):
                raise Timeout()

    async def _read_body(self, conn: Connection, req: Request) -> bytes:
        assert self.loop is not None
        limits = self.limits
        if not req.chunked and req.content_length == 0:
            return b""
        if req.content_length > limits.max_body_bytes:
            raise too_large(f"the body is longer than {limits.max_body_bytes} bytes")
        deadline = self.loop.time() + limits.body_timeout
        if req.expect_continue and not conn.buf:
            await conn.write(b"HTTP/1.1 100 Continue\r\n\r\n", deadline)
        if not req.chunked:
            await conn.need(req.content_length, deadline)
            return conn.take(req.content_length)
        body = bytearray()
        bad_line = bad_request("a chunk-size line is too long")
        while True:
            size_line = await conn.line(deadline, _CHUNK_LINE_BYTES, bad_line)
            size_text = size_line.split(b";", 1)[0].strip(b" \t")
            if not _HEX.fullmatch(size_text):
                raise bad_request("invalid chunk size")
            size = int(size_text, 16)
            if size == 0:
                break
            if len(body) + size > limits.max_body_bytes:
                raise too_large(f"the body is longer than {limits.max_body_bytes} bytes")
            await conn.need(size + 2, deadline)
            body += conn.take(size)
            if conn.take(2) != b"\r\n":
                raise bad_request("a chunk is not followed by CRLF")
        trailers = 0
        while True:  # trailer fields are read and dropped
            line = await conn.line(
                deadline, limits.max_field_bytes, head_too_large("a trailer field is too long")
            )
            if not line:
                return bytes(body)
            trailers += len(line) + 2
            if trailers > limits.max_head_bytes:
                raise head_too_large(f"the trailer is longer than {limits.max_head_bytes} bytes")

    # -- in a pool thread: the app --

    def _environ(self, req: Request, body: bytes, peer: Peer) -> dict[str, Any]:
        environ: dict[str, Any] = {
            "REQUEST_METHOD": req.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote_to_bytes(req.path).decode("latin-1"),
            "QUERY_STRING": req.query,
            "RAW_URI": req.uri,
            "SERVER_NAME": peer.server[0],
            "SERVER_PORT": peer.server[1],
            "SERVER_PROTOCOL": req.protocol,
            "REMOTE_ADDR": peer.remote[0],
            "REMOTE_PORT": str(peer.remote[1]),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": peer.scheme,
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "wsgi.input_terminated": True,
            "trellis.peer_cert_chain": peer.cert_chain,
            "trellis.stopping": self._stopping,
        }
        if req.chunked or req.content_length:
            environ["CONTENT_LENGTH"] = str(len(body))  # a chunked body arrives de-chunked
        repeated: dict[str, list[str]] = {}
        for name, value in req.headers:
            if "_" in name:  # HTTP_X_A could be X-A or X_A: drop the ambiguous ones (as gunicorn)
                continue
            key = name.upper().replace("-", "_")
            if key == "CONTENT_TYPE":
                environ[key] = value
                continue
            if key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
                continue
            key = "HTTP_" + key
            if key in environ:
                repeated.setdefault(key, [environ[key]]).append(value)
            else:
                environ[key] = value
        for key, values in repeated.items():
            environ[key] = ("; " if key == "HTTP_COOKIE" else ",").join(values)
        return environ

    def _respond(self, req: Request, environ: dict[str, Any]) -> _AppResult:
        """Run the app, serialise its response and log it (a pool thread)."""
        started = datetime.now()
        result = self._run_app(req, environ, stream=req.version >= (1, 1))
        if result.stream is None:
            self._log_request(req, environ, result, started)
        else:
            environ["trellis.started"] = started  # logged once the body is sent
        return result

    async def _send_stream(
        self, conn: Connection, req: Request, environ: dict[str, Any], result: _AppResult, written: bool
    ) -> bool:
        """Send the rest of a streamed body (see the module docstring); False if the connection
        must be dropped (the client went away, the app failed, or the length it gave was wrong)."""
        assert self.loop is not None
        assert self.pool is not None
        assert result.stream is not None
        loop = self.loop
        pieces = iter(result.stream)
        sent = 0
        try:
            while written:
                piece = await loop.run_in_executor(self.pool, _next_piece, pieces)
                if piece is None:
                    break
                if not piece:
                    continue
                sent += len(piece)
                data = b"%x\r\n%s\r\n" % (len(piece), piece) if result.chunked else piece
                written = await conn.write(data, loop.time() + self.limits.write_timeout)
            if written and result.chunked:
                written = await conn.write(b"0\r\n\r\n", loop.time() + self.limits.write_timeout)
            if written and not result.chunked and sent != result.expected:
                self.log.warning(
                    "content-length %d != streamed body length %d: dropped", result.expected, sent
                )
                written = False
        except Exception:
            self.log.exception("Error streaming the answer to %s %s", req.method, redact_uri(req.uri))
            written = False
        finally:
            with suppress(Exception):
                _close(result.stream)
            result.stream = None
            result.body_length = sent
            started = environ.get("trellis.started")
            self._log_request(
                req, environ, result, started if isinstance(started, datetime) else datetime.now()
            )
        return written

    async def _respond_on_loop(self, req: Request, environ: dict[str, Any]) -> _AppResult:
        """Run the app here, on the event loop; answer once the writes it deferred are durable
        (503 ``COMMIT_FAILED`` if one is refused or not committed within :data:`DURABLE_WAIT`)."""
        started = datetime.now()
        deferred: list[Durable] = []
        environ[DEFERRED_KEY] = deferred
        result = self._run_app(req, environ)
        if deferred:
            assert self._settler is not None
            message = await self._settler.durable(deferred)
            if message is not None:
                result = _error_result(503, "Service Unavailable", e.CommitFailedError, message)
        self._log_request(req, environ, result, started)
        return result

    def _run_app(self, req: Request, environ: dict[str, Any], *, stream: bool = False) -> _AppResult:
        keep_alive = req.keep_alive and self.alive and self.limits.keepalive_timeout > 0
        with self._nr_lock:
            self.nr += 1
            if self.nr >= self.max_requests and self.alive:
                self.log.info("Autorestarting worker after current request.")
                self.alive = False
                if self.loop is not None and self._wakeup is not None:
                    self.loop.call_soon_threadsafe(self._wakeup.set)
        if self.nr >= self.max_requests:
            keep_alive = False
        try:
            self.cfg.pre_request(self, req)
        except Exception:
            self.log.exception("Exception in pre_request hook")
        try:
            status, headers, chunks, rest = self._call_app(environ, stream=stream)
            try:
                result = self._serialise(req, status, headers, chunks, keep_alive, rest)
            except Exception:
                _close(rest)
                raise
        except Exception:
            self.log.exception("Error handling request %s %s", req.method, redact_uri(req.uri))
            unhandled = e.ControllerError
            result = _error_result(500, "Internal Server Error", unhandled, unhandled.default_message)
        return result

    def _log_request(
        self, req: Request, environ: dict[str, Any], result: _AppResult, started: datetime
    ) -> None:
        logged = _Logged(result.status, result.headers, result.body_length, result.body_length)
        self.access_log.write(self.cfg.access_log_format, logged, req, environ, datetime.now() - started)
        try:
            self.cfg.post_request(self, req, environ, logged)
        except Exception:
            self.log.exception("Exception in post_request hook")

    def _call_app(
        self, environ: dict[str, Any], *, stream: bool = False
    ) -> tuple[str, list[tuple[str, str]], list[bytes], Iterable[bytes] | None]:
        """Call the app: its status, headers and body; with ``stream``, a body that is not a list
        is left to send as it comes (the last item, None otherwise)."""
        started: list[tuple[str, list[tuple[str, str]]]] = []
        chunks: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            if started and exc_info is None:
                raise AssertionError("start_response called twice without exc_info")
            # Nothing is sent before the app returns, so an error may always replace the headers.
            started[:] = [(status, list(headers))]
            return chunks.append

        result: Iterable[bytes] = self.wsgi(environ, start_response)
        if stream and started and not isinstance(result, (list, tuple)):
            status, headers = started[0]
            return status, headers, chunks, result
        try:
            for chunk in result:
                if chunk:
                    chunks.append(chunk)
        finally:
            _close(result)
        if not started:
            raise RuntimeError("the app returned without calling start_response")
        status, headers = started[0]
        return status, headers, chunks, None

    def _serialise(
        self,
        req: Request,
        status: str,
        headers: list[tuple[str, str]],
        chunks: list[bytes],
        keep_alive: bool,
        rest: Iterable[bytes] | None = None,
    ) -> _AppResult:
        code = int(status.split(" ", 1)[0])
        if not 100 <= code <= 999:
            raise ValueError(f"invalid status {status!r}")
        no_body = req.method == "HEAD" or code < 200 or code in (204, 304)
        if rest is not None and no_body:
            _close(rest)
            rest = None
        if rest is not None:
            return self._stream_head(req, status, headers, chunks, keep_alive, rest)
        body = b"".join(chunks)
        lines = [f"HTTP/{req.version[0]}.{req.version[1]} {status}\r\n"]
        has_length = has_date = False
        sent_headers: list[tuple[str, str]] = []
        kept, closes = _end_to_end(headers)
        keep_alive = keep_alive and not closes
        for name, value, key in kept:
            if key == "content-length":
                if no_body:
                    has_length = True
                elif value.strip() != str(len(body)):
                    self.log.warning("content-length %s != body length %d: corrected", value, len(body))
                    continue
                else:
                    has_length = True
            elif key == "date":
                has_date = True
            sent_headers.append((name, value))
            lines.append(f"{name}: {value}\r\n")
        if not has_length and not no_body:
            lines.append(f"Content-Length: {len(body)}\r\n")
            sent_headers.append(("Content-Length", str(len(body))))
        if not has_date:
            lines.append(f"Date: {http_date()}\r\n")
        if not keep_alive:
            lines.append("Connection: close\r\n")
        elif req.version < (1, 1):
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        data = "".join(lines).encode("latin-1")
        if no_body:
            body = b""
        return _AppResult(data + body, keep_alive, status, sent_headers, len(body))

    def _stream_head(
        self,
        req: Request,
        status: str,
        headers: list[tuple[str, str]],
        chunks: list[bytes],
        keep_alive: bool,
        rest: Iterable[bytes],
    ) -> _AppResult:
        """The head of a streamed body (and what the app wrote before it returned): raw after a
        ``Content-Length`` the app gave, else chunked."""
        lines = [f"HTTP/{req.version[0]}.{req.version[1]} {status}\r\n"]
        sent_headers: list[tuple[str, str]] = []
        expected = -1
        has_date = False
        kept, closes = _end_to_end(headers)
        keep_alive = keep_alive and not closes
        for name, value, key in kept:
            if key == "content-length":
                if not _DIGITS.fullmatch(value.strip()):
                    raise ValueError(f"invalid content-length {value!r}")
                expected = int(value)
            elif key == "date":
                has_date = True
            sent_headers.append((name, value))
            lines.append(f"{name}: {value}\r\n")
        chunked = expected < 0
        if chunked:
            lines.append("Transfer-Encoding: chunked\r\n")
        if not has_date:
            lines.append(f"Date: {http_date()}\r\n")
        if not keep_alive:
            lines.append("Connection: close\r\n")
        lines.append("\r\n")
        data = "".join(lines).encode("latin-1")
        first = b"".join(chunks)
        if first:
            data += b"%x\r\n%s\r\n" % (len(first), first) if chunked else first
        result = _AppResult(data, keep_alive, status, sent_headers, len(first), rest, chunked, expected)
        if not chunked:
            result.expected = expected - len(first)
        return result


#: Files kept for everything but client connections (listeners, DuckDB, logs, pipes).
_SPARE_FILES = 128


def connection_capacity(wanted: int) -> int:
    """Raise the open-file limit toward ``wanted`` connections; how many this process can hold."""
    needed = wanted + _SPARE_FILES
    with suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - _SPARE_FILES))
