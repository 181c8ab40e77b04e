"""``GET /analysis/v1/access-changes``: the access-change stream (docs/analysis.md §15).

Two forms of one read, from a cursor (``since``, or the ``Last-Event-ID`` header: ``REV`` or
``REV.OFFSET``, as the answers give it):

- JSON (the default): a page of records, at most ``limit`` pairs (1,000; up to 10,000), in
  OpenZiti's envelope, ``meta.next`` the cursor to ask from next;
- Server-Sent Events (``Accept: text/event-stream``): one ``access-change`` event per record part,
  its ``id:`` the cursor after it, sent as the records are kept. The answer stays open for
  ``duration`` seconds (300 by default, at most 3,600), with a ``: heartbeat`` comment after each
  ``wait`` seconds (15 by default) without a record; then it ends and ``retry:`` has the client
  ask again at once with ``Last-Event-ID`` (an ``EventSource`` does so by itself). With
  ``duration=0``, or where the server cannot stream (an HTTP/1.0 client; Falcon's test client),
  the answer is bounded: what is there, or the first record within ``wait`` seconds, or a
  heartbeat. At most ``TRELLIS_ACCESS_CHANGES_STREAMS`` such answers are open at once (429
  beyond), so waiting clients can never hold every request thread.

A cursor older than what the stream keeps is 410 ``ACCESS_CHANGES_EXPIRED``; one ahead of the
controller or malformed is 400.

The module also installs the middleware that tells writes who makes them
(:data:`engine.analysis.stream.current_actor`), and adds what the generated Swagger document
cannot say of this operation (its media types and query parameters).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import falcon
import orjson

from api.bodies import ReleasingBody, Slots
from api.errors import envelope
from api.http import ok
from api.middleware import ADMIN
from engine.analysis import AnalysisManager
from engine.analysis.stream import AccessChangeStream, Actor, Cursor, RevisionExpiredError, current_actor
from engine.errors import FieldError

PATH = "/access-changes"
EVENT_STREAM = "text/event-stream"
#: The pairs of one SSE event at most, and of one SSE answer.
EVENT_PAIRS = 1000
ANSWER_PAIRS = 10_000
#: The longest an SSE answer waits for a first record (the heartbeat interval).
MAX_WAIT_SECONDS = 15.0
#: How long a streamed SSE answer stays open, by default and at most.
STREAM_SECONDS = 300.0
MAX_STREAM_SECONDS = 3600.0
#: The longest one wait for a record (how soon a stopping worker ends an open answer).
_WAIT_SLICE_SECONDS = 1.0
MAX_LIMIT = 10_000
EXPIRED_CODE = "ACCESS_CHANGES_EXPIRED"
BUSY_CODE = "SERVER_TOO_MANY_REQUESTS"

_STREAMS: weakref.WeakKeyDictionary[AnalysisManager, AccessChangeStream] = weakref.WeakKeyDictionary()
_STREAMS_LOCK = threading.Lock()


def stream_for(analysis: AnalysisManager, retain: timedelta) -> AccessChangeStream:
    """The controller's one stream, attached on first use."""
    with _STREAMS_LOCK:
        found = _STREAMS.get(analysis)
        if found is None:
            found = AccessChangeStream(analysis.store, analysis.access, analysis.env.clock, retain=retain)
            found.attach(analysis.env.checks)
            _STREAMS[analysis] = found
        return found


def _wants_events(req: falcon.Request) -> bool:
    return EVENT_STREAM in (req.get_header("Accept") or "").lower()


def _cursor(req: falcon.Request, stream: AccessChangeStream) -> Cursor:
    text = req.get_param("since")
    if text is None:
        text = req.get_header("Last-Event-ID")
    if text is None or not text.strip():
        return Cursor(stream.revision)
    try:
        cursor = Cursor.parse(text)
        stream.check(cursor)
    except ValueError as ex:
        raise FieldError("since", str(ex), text) from None
    return cursor


def _number(req: falcon.Request, name: str, default: float, low: float, high: float) -> float:
    text = req.get_param(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise FieldError(name, f"must be a number from {low:g} to {high:g}", text) from None
    if not low <= value <= high:
        raise FieldError(name, f"must be a number from {low:g} to {high:g}", text)
    return value


def _frame(part: dict[str, Any]) -> bytes:
    return b"id: %s\nevent: access-change\ndata: %s\n\n" % (part["cursor"].encode(), orjson.dumps(part))


def _events(
    stream: AccessChangeStream,
    cursor: Cursor,
    wait: float,
    duration: float = 0.0,
    stopping: threading.Event | None = None,
) -> Iterator[bytes]:
    """An SSE answer's frames: bounded (``duration`` 0: what is there, else the first records
    within ``wait``, else a heartbeat) or open for ``duration`` seconds with a heartbeat after
    each ``wait`` (at least a second) without a record, until ``stopping`` is set."""
    yield b"retry: 1000\n\n"
    now = time.monotonic()
    end = now + duration
    beat = wait if duration <= 0 else max(wait, _WAIT_SLICE_SECONDS)
    quiet_since = now
    sent = 0
    while True:
        room = EVENT_PAIRS if duration > 0 else min(EVENT_PAIRS, ANSWER_PAIRS - sent)
        parts, cursor = stream.read(cursor, room)
        for part in parts:
            yield _frame(part)
            sent += max(1, sum(len(v) for side in ("services", "routers") for v in part[side].values()))
        now = time.monotonic()
        if parts:
            quiet_since = now
            if duration > 0:
                if now >= end or (stopping is not None and stopping.is_set()):
                    return  # records arriving without a pause end an open answer on time too
                continue  # more may be there already
            if sent < ANSWER_PAIRS:
                continue
            return
        if duration <= 0 and sent:
            return
        if stopping is not None and stopping.is_set():
            return
        if now >= quiet_since + beat:
            yield b": heartbeat\n\n"
            quiet_since = now
            if duration <= 0:
                return
        if duration > 0 and now >= end:
            return
        left = quiet_since + beat - now
        if duration > 0:
            left = min(left, end - now, _WAIT_SLICE_SECONDS)
        stream.wait(cursor, max(0.0, left))


class AccessChanges:
    """The access changes after a revision: added and removed pairs with the write and its actor."""

    auth = ADMIN
    responses = {
        "410": {"description": "the revision is older than the access changes kept"},
        "429": {"description": "too many Server-Sent Events answers are waiting"},
    }
    #: This operation's media types and query parameters in the served Swagger document.
    operation_spec = {
        "get": {
            "produces": ["application/json", EVENT_STREAM],
            "parameters": [
                {"name": "since", "in": "query", "type": "string"},
                {"name": "limit", "in": "query", "type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                {"name": "wait", "in": "query", "type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS},
                {
                    "name": "duration",
                    "in": "query",
                    "type": "number",
                    "minimum": 0,
                    "maximum": MAX_STREAM_SECONDS,
                },
                {"name": "Last-Event-ID", "in": "header", "type": "string"},
            ],
        }
    }

    def __init__(self, stream: AccessChangeStream, streams: int) -> None:
        self.stream = stream
        self.slots = Slots(streams)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The access changes after a revision (JSON pages, or Server-Sent Events)."""
        try:
            cursor = _cursor(req, self.stream)
        except RevisionExpiredError as ex:
            resp.status = falcon.HTTP_410
            resp.media = envelope(
                EXPIRED_CODE,
                "the access changes after this revision are no longer kept: read the state anew",
                str(getattr(req.context, "request_id", "")),
                {"field": "since", "revision": ex.revision, "oldestRevision": ex.floor, "reason": str(ex)},
            )
            return
        if _wants_events(req):
            wait = _number(req, "wait", MAX_WAIT_SECONDS, 0, MAX_WAIT_SECONDS)
            stopping = req.env.get("trellis.stopping")
            streams = isinstance(stopping, threading.Event) and req.env.get("SERVER_PROTOCOL") == "HTTP/1.1"
            duration = _number(req, "duration", STREAM_SECONDS, 0, MAX_STREAM_SECONDS) if streams else 0.0
            if not self.slots.take():
                resp.status = falcon.HTTP_429
                resp.set_header("Retry-After", "1")
                resp.media = envelope(
                    BUSY_CODE,
                    "too many access-change streams are waiting; try again later",
                    str(getattr(req.context, "request_id", "")),
                    None,
                )
                return
            resp.content_type = EVENT_STREAM
            resp.set_header("Cache-Control", "no-cache")
            frames = _events(self.stream, cursor, wait, duration, stopping if streams else None)
            resp.stream = ReleasingBody(frames, self.slots.give)
            return
        limit = int(_number(req, "limit", 1000, 1, MAX_LIMIT))
        parts, after = self.stream.read(cursor, limit)
        ok(
            resp,
            parts,
            {"next": str(after), "revision": self.stream.revision, "oldestRevision": self.stream.floor()},
        )


class ActorContext:
    """Middleware: the request's caller as :data:`current_actor` while its responder runs (what a
    write it makes records as its actor)."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: Any
    ) -> None:
        identity = getattr(req.context, "identity", None)
        if identity is None:
            return
        session = getattr(req.context, "session", None)
        actor = Actor(
            identity.id,
            getattr(identity, "name", "") or "",
            getattr(session, "id", "") or "",
            f"{req.method} {req.path}",
        )
        req.context.actor_token = current_actor.set(actor)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any, done: bool) -> None:
        token = getattr(req.context, "actor_token", None)
        if token is not None:
            req.context.actor_token = None
            current_actor.reset(token)


def mount_stream(routes: Any, analysis: AnalysisManager, mount: Callable[[str, Any], None]) -> None:
    """Mount ``/access-changes`` with ``register``'s ``mount`` and install :class:`ActorContext`."""
    settings = routes.ctrl.settings
    stream = stream_for(analysis, timedelta(days=settings.access_changes_retain_days))
    mount(PATH, AccessChanges(stream, settings.access_changes_streams))
    routes.app.add_middleware(ActorContext())
