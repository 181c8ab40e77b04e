"""One channel v2 connection over an asyncio transport (TLS): framing, replies, back-pressure.

A :class:`Channel` is an ``asyncio.Protocol``. It cuts the byte stream into messages
(:class:`~channel.frames.Decoder`, within limits: a violation closes the channel), numbers what
it sends, hands a message that answers a pending :meth:`Channel.request` (header ``REPLY_FOR``)
to that request, and every other message to its :class:`Handler`, on the event loop, in order.

Back-pressure: a relay writes what it read from one channel into another with
:meth:`Channel.relay`. While the receiving channel's transport holds more than its high-water mark
(a slow reader), the sending channel stops reading from its socket, so a slow reader holds back
its writer instead of filling memory; reading resumes once the receiver has drained. A sink that
is no channel (a TCP connection a router opens itself) does the same with
:meth:`Channel.hold_reading` / :meth:`Channel.release_reading`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Protocol

from channel.frames import (
    MAX_BODY_BYTES,
    MAX_HEADERS_BYTES,
    Decoder,
    FrameError,
    Message,
    encode,
)
from pki.tls import peer_cert_chain

log = logging.getLogger(__name__)

#: Bytes a channel's transport may hold unsent before the channels relaying into it pause.
WRITE_HIGH_WATER = 1024 * 1024
WRITE_LOW_WATER = 256 * 1024


class ChannelClosed(Exception):
    """The channel closed before the answer came."""


class Handler(Protocol):
    """What a channel tells its owner: every message that is not an awaited reply, and its end."""

    def on_message(self, channel: Channel, message: Message) -> None: ...

    def on_close(self, channel: Channel, error: BaseException | None) -> None: ...


class Channel(asyncio.Protocol):
    """A channel v2 peer. ``handler`` gets messages; set it before the first byte arrives."""

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        name: str = "",
        max_headers: int = MAX_HEADERS_BYTES,
        max_body: int = MAX_BODY_BYTES,
        first_body_limit: int | None = None,
        first_message_timeout: float | None = None,
        on_connected: Callable[[Channel], None] | None = None,
    ) -> None:
        self.handler = handler
        self.name = name
        self.transport: asyncio.Transport | None = None
        #: The peer's certificate chain as sent (DER, leaf first), unverified; () without one.
        self.peer_chain: tuple[bytes, ...] = ()
        self.closed = asyncio.Event() if _has_loop() else None
        self._decoder = Decoder(max_headers=max_headers, max_body=max_body, first_body_limit=first_body_limit)
        self._seq = itertools.count(1)
        self._waiters: dict[int, asyncio.Future[Message]] = {}
        self._first_timeout = first_message_timeout
        self._first_timer: asyncio.TimerHandle | None = None
        self._on_connected = on_connected
        self._is_closed = False
        self._paused_by: set[object] = set()  # sinks (channels or others) whose full buffers hold our reading
        self._holding: set[Channel] = set()  # channels whose reading we hold
        self._writable = True
        self._reading_paused = False
        self.error: BaseException | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        self.peer_chain = peer_cert_chain(transport)
        if self.closed is None:
            self.closed = asyncio.Event()
        if self._first_timeout is not None:
            loop = asyncio.get_running_loop()
            self._first_timer = loop.call_later(self._first_timeout, self._first_too_late)
        if self._on_connected is not None:
            self._on_connected(self)

    def data_received(self, data: bytes) -> None:
        if self._is_closed:
            return
        try:
            for message in self._decoder.feed(data):
                if self._first_timer is not None:
                    self._first_timer.cancel()
                    self._first_timer = None
                self._dispatch(message)
                if self._is_closed:
                    return
        except FrameError as ex:
            log.info("channel %s: closing: %s", self.name, ex)
            self.abort(ex)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: BaseException | None) -> None:
        self._finish(exc)

    def pause_writing(self) -> None:
        self._writable = False

    def resume_writing(self) -> None:
        self._writable = True
        held, self._holding = self._holding, set()
        for source in held:
            source._release(self)

    # -- sending -------------------------------------------------------------------------------
    @property
    def is_open(self) -> bool:
        return not self._is_closed and self.transport is not None

    @property
    def writable(self) -> bool:
        """Whether the transport is below its high-water mark."""
        return self._writable

    def send(self, message: Message) -> int:
        """Number ``message`` and write it; its sequence number. Nothing happens once closed."""
        message.seq = next(self._seq)
        if self._is_closed or self.transport is None:
            return message.seq
        self.transport.write(encode(message))
        return message.seq

    def relay(self, message: Message, source: Channel | None) -> None:
        """Send ``message`` read from ``source``; while this channel's buffer is full, ``source``
        reads no more (back-pressure)."""
        self.send(message)
        if (
            source is not None
            and source is not self
            and not self._writable
            and not self._is_closed
            and source not in self._holding
        ):
            self._holding.add(source)
            source._hold(self)

    def hold_reading(self, holder: object) -> None:
        """Read no more from the socket until ``holder`` lets go (:meth:`release_reading`), nor while
        any other holder holds: back-pressure from a sink that is no channel."""
        self._hold(holder)

    def release_reading(self, holder: object) -> None:
        self._release(holder)

    async def request(self, message: Message, timeout: float) -> Message:
        """Send ``message``; its reply (``REPLY_FOR`` = its seq). :class:`TimeoutError` after
        ``timeout`` seconds, :class:`ChannelClosed` if the channel ends first."""
        if self._is_closed:
            raise ChannelClosed(self.name)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Message] = loop.create_future()
        seq = self.send(message)
        self._waiters[seq] = waiter
        try:
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self._waiters.pop(seq, None)

    def close(self) -> None:
        """Close after what is buffered is written."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self._finish(None)

    def abort(self, error: BaseException | None = None) -> None:
        """Close at once, dropping what is buffered."""
        if self.transport is not None:
            self.transport.abort()
        self._finish(error)

    # -- internals -----------------------------------------------------------------------------
    def _dispatch(self, message: Message) -> None:
        reply_for = message.reply_for
        if reply_for is not None:
            waiter = self._waiters.pop(reply_for, None)
            if waiter is not None:
                if not waiter.done():
                    waiter.set_result(message)
                return
        if self.handler is not None:
            try:
                self.handler.on_message(self, message)
            except Exception as ex:  # a bug of ours must not leave a channel half-handled
                log.exception("channel %s: handling %r failed: closing", self.name, message)
                self.abort(ex)

    def _first_too_late(self) -> None:
        self._first_timer = None
        log.info("channel %s: no first message within %.1f s: closing", self.name, self._first_timeout)
        self.abort(TimeoutError("no first message in time"))

    def _hold(self, sink: object) -> None:
        self._paused_by.add(sink)
        if not self._reading_paused and self.transport is not None and not self._is_closed:
            self._reading_paused = True
            self.transport.pause_reading()

    def _release(self, sink: object) -> None:
        self._paused_by.discard(sink)
        if not self._paused_by and self._reading_paused:
            self._reading_paused = False
            if self.transport is not None and not self._is_closed:
                self.transport.resume_reading()

    def _finish(self, error: BaseException | None) -> None:
        if self._is_closed:
            return
        self._is_closed = True
        self.error = error
        if self._first_timer is not None:
            self._first_timer.cancel()
            self._first_timer = None
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(ChannelClosed(self.name))
        self._waiters.clear()
        held, self._holding = self._holding, set()
        for source in held:
            source._release(self)
        for sink in list(self._paused_by):
            if isinstance(sink, Channel):
                sink._holding.discard(self)
        self._paused_by.clear()
        if self.closed is not None:
            self.closed.set()
        if self.handler is not None:
            try:
                self.handler.on_close(self, error)
            except Exception:
                log.exception("channel %s: close handler failed", self.name)


def _has_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
