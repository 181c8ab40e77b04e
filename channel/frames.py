"""Channel v2 frames: the wire format OpenZiti's SDKs, routers and controllers share.

A frame is a 20-byte little-endian head, then the headers, then the body::

    magic 03 06 09 0C | content type int32 | sequence int32 | headers length uint32 | body length uint32
    headers: repeated (key int32, length uint32, value bytes), no padding, no count

A reply is any message whose header ``REPLY_FOR`` (1) holds the request's sequence number.
Integers in header values are little-endian: 4 bytes for (u)int32, 8 for uint64, 1 for a bool
(``01`` is true). Peers may send shorter integers (the C SDK sends 1-4 bytes); :meth:`Message.u32`
reads 1-4 bytes zero-extended.

Nothing here does I/O: :class:`Decoder` turns bytes into messages within limits and
:func:`encode` turns a message into bytes (``channel.connection`` runs them over asyncio).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

MAGIC = b"\x03\x06\x09\x0c"
HEAD = struct.Struct("<4siiII")
_HEADER = struct.Struct("<iI")

#: Content types of the channel itself (the edge and control ones are in channel.edge / .control).
HELLO = 0
PING = 1
RESULT = 2
LATENCY = 3
LATENCY_RESPONSE = 4
HEARTBEAT = 5

#: Header ids of the channel itself.
CONNECTION_ID = 0
REPLY_FOR = 1
RESULT_SUCCESS = 2
HELLO_VERSION = 4
HEARTBEAT_REQUEST = 5
HEARTBEAT_RESPONSE = 6
#: Headers 128-255 are reflected: a reply carries them back unchanged (128: latency probe time).
LATENCY_PROBE_TIME = 128
REFLECTED = range(128, 256)

#: Default bounds: a frame beyond them closes the channel (OpenZiti keeps none for SDK messages;
#: the C SDK sends at most 32 KiB of data per message, so these leave room and bound memory).
MAX_HEADERS_BYTES = 16 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024
#: Bounds for a hello (the first message), as OpenZiti's listeners: 16 KiB of headers, 4 KiB body.
MAX_HELLO_BODY_BYTES = 4192


class FrameError(Exception):
    """The peer sent something that is not a channel v2 frame within the limits: close the channel."""


@dataclass(slots=True)
class Message:
    """One channel message. ``seq`` is set by the sending channel; ``headers`` map id -> raw bytes."""

    content_type: int
    body: bytes = b""
    headers: dict[int, bytes] = field(default_factory=dict)
    seq: int = 0

    # -- reading headers ------------------------------------------------------------------------
    def u32(self, key: int) -> int | None:
        """A 1-4 byte little-endian unsigned header (None when absent or longer)."""
        value = self.headers.get(key)
        if value is None or not 1 <= len(value) <= 4:
            return None
        return int.from_bytes(value, "little")

    def i32(self, key: int) -> int | None:
        value = self.headers.get(key)
        if value is None or len(value) != 4:
            return None
        return int.from_bytes(value, "little", signed=True)

    def u64(self, key: int) -> int | None:
        value = self.headers.get(key)
        if value is None or len(value) != 8:
            return None
        return int.from_bytes(value, "little")

    def text(self, key: int) -> str | None:
        value = self.headers.get(key)
        return None if value is None else value.decode("utf-8", "replace")

    def flag(self, key: int) -> bool:
        value = self.headers.get(key)
        return bool(value) and value[0] != 0  # type: ignore[index]

    @property
    def reply_for(self) -> int | None:
        return self.i32(REPLY_FOR)

    # -- writing headers ------------------------------------------------------------------------
    def set_u32(self, key: int, value: int) -> Message:
        self.headers[key] = (value & 0xFFFFFFFF).to_bytes(4, "little")
        return self

    def set_i32(self, key: int, value: int) -> Message:
        self.headers[key] = value.to_bytes(4, "little", signed=True)
        return self

    def set_u64(self, key: int, value: int) -> Message:
        self.headers[key] = (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little")
        return self

    def set_text(self, key: int, value: str) -> Message:
        self.headers[key] = value.encode()
        return self

    def set_flag(self, key: int, value: bool = True) -> Message:
        self.headers[key] = b"\x01" if value else b"\x00"
        return self

    def reply_to(self, request: Message) -> Message:
        """Make this the reply to ``request``: ``REPLY_FOR`` and the reflected headers."""
        self.set_i32(REPLY_FOR, request.seq)
        for key, value in request.headers.items():
            if key in REFLECTED and key not in self.headers:
                self.headers[key] = value
        return self

    def __repr__(self) -> str:  # bodies may be secrets or megabytes: never print them
        keys = ",".join(str(k) for k in sorted(self.headers))
        return f"<Message ct={self.content_type} seq={self.seq} hdrs=[{keys}] body={len(self.body)}B>"


def encode(message: Message) -> bytes:
    """The frame of ``message`` (its ``seq`` as it stands)."""
    parts = []
    for key, value in message.headers.items():
        parts.append(_HEADER.pack(key, len(value)))
        parts.append(value)
    headers = b"".join(parts)
    head = HEAD.pack(MAGIC, message.content_type, message.seq, len(headers), len(message.body))
    return b"".join((head, headers, message.body))


def decode_headers(block: bytes | memoryview) -> dict[int, bytes]:
    headers: dict[int, bytes] = {}
    at, end = 0, len(block)
    while at < end:
        if end - at < _HEADER.size:
            raise FrameError("a header is cut short")
        key, length = _HEADER.unpack_from(block, at)
        at += _HEADER.size
        if length > end - at:
            raise FrameError("a header value runs past the header block")
        headers[key] = bytes(block[at : at + length])
        at += length
    return headers


class Decoder:
    """Bytes in, whole messages out, within the limits (a violation is :class:`FrameError`).

    The first message may be held to tighter limits (a hello: ``first_body_limit``)."""

    __slots__ = ("_buffer", "_first_body_limit", "_max_body", "_max_headers", "_seen_first")

    def __init__(
        self,
        *,
        max_headers: int = MAX_HEADERS_BYTES,
        max_body: int = MAX_BODY_BYTES,
        first_body_limit: int | None = None,
    ) -> None:
        self._buffer = bytearray()
        self._max_headers = max_headers
        self._max_body = max_body
        self._first_body_limit = first_body_limit
        self._seen_first = False

    @property
    def pending(self) -> int:
        """Bytes received that do not yet make a whole message."""
        return len(self._buffer)

    def feed(self, data: bytes) -> Iterator[Message]:
        """Take ``data``; yield every message it completes, in order.

        Only what does not make a whole message yet is copied into the decoder's buffer (the end
        of a message begun earlier, the start of one that ``data`` does not finish); whole
        messages are read from ``data`` where they lie. What a caller that stops early has not
        taken stays pending for the next call."""
        buffer = self._buffer
        view = memoryview(data)
        size = len(view)
        at = 0  # bytes of data taken: into the buffer, or into messages handed out
        try:
            while buffer:
                # Left from an earlier call: a message begun (take from data only the bytes it
                # lacks), or whole ones a caller that stopped early did not take.
                if len(buffer) < HEAD.size:
                    more = min(HEAD.size - len(buffer), size - at)
                    buffer += view[at : at + more]
                    at += more
                    if len(buffer) < HEAD.size:
                        return
                content_type, seq, headers_len, end = self._head(buffer, 0)
                if len(buffer) < end:
                    more = min(end - len(buffer), size - at)
                    buffer += view[at : at + more]
                    at += more
                    if len(buffer) < end:
                        return
                message = self._message(buffer, content_type, seq, headers_len, end)
                del buffer[:end]
                yield message
            while size - at >= HEAD.size:
                content_type, seq, headers_len, end = self._head(view, at)
                if end > size:
                    break
                message = self._message(view[at:end], content_type, seq, headers_len, end - at)
                at = end
                yield message
        finally:
            if at < size:
                buffer += view[at:]
            view.release()

    def _head(self, block: bytes | bytearray | memoryview, at: int) -> tuple[int, int, int, int]:
        """(content type, seq, headers length, end offset) of the frame whose head is at ``at``,
        checked against the limits."""
        magic, content_type, seq, headers_len, body_len = HEAD.unpack_from(block, at)
        if magic != MAGIC:
            raise FrameError("not a channel v2 frame (bad magic)")
        body_limit = self._max_body
        if not self._seen_first and self._first_body_limit is not None:
            body_limit = self._first_body_limit
        if headers_len > self._max_headers:
            raise FrameError(f"headers of {headers_len} bytes exceed {self._max_headers}")
        if body_len > body_limit:
            raise FrameError(f"a body of {body_len} bytes exceeds {body_limit}")
        return content_type, seq, headers_len, at + HEAD.size + headers_len + body_len

    def _message(
        self, frame: bytearray | memoryview, content_type: int, seq: int, headers_len: int, end: int
    ) -> Message:
        """The message of the whole frame at the start of ``frame`` (``end`` bytes long)."""
        view = memoryview(frame)
        try:
            # A copy (headers are small): a FrameError's traceback must hold no view of the buffer.
            headers = decode_headers(bytes(view[HEAD.size : HEAD.size + headers_len]))
            body = bytes(view[HEAD.size + headers_len : end])
        finally:
            view.release()
        self._seen_first = True
        return Message(content_type, body, headers, seq)


def result(request: Message, success: bool = True, text: str = "") -> Message:
    """A ``RESULT`` answering ``request`` (hello, latency probe)."""
    reply = Message(RESULT, text.encode())
    reply.set_flag(RESULT_SUCCESS, success)
    return reply.reply_to(request)


def header_map(headers: Mapping[int, bytes]) -> str:
    """Header ids and sizes, for logs (never values: tokens travel in headers)."""
    return ",".join(f"{k}:{len(v)}" for k, v in sorted(headers.items()))
