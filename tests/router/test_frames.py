"""The channel v2 decoder cuts a byte stream into the same messages however it arrives
(docs/dataplane.md §4): in one piece, byte by byte, or in the pieces TLS records make, with a
caller that stops early; and a malformed frame is a FrameError wherever it lies."""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import cast

import pytest

from channel.frames import Decoder, FrameError, Message, encode


def messages(rng: random.Random, count: int) -> list[Message]:
    out = []
    for i in range(count):
        message = Message(60786 + i, rng.randbytes(rng.choice([0, 1, 20, 3000, 40_000])), seq=i + 1)
        for key in range(rng.randrange(0, 4)):
            message.headers[1000 + key] = rng.randbytes(rng.randrange(0, 9))
        out.append(message)
    return out


def pieces(stream: bytes, rng: random.Random) -> list[bytes]:
    cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(0, 12)))
    return [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]


def seen(message: Message) -> tuple[int, int, dict[int, bytes], bytes]:
    return message.content_type, message.seq, message.headers, message.body


@pytest.mark.parametrize("seed", range(40))
def test_any_cutting_of_the_stream_gives_the_same_messages(seed: int) -> None:
    rng = random.Random(seed)
    sent = messages(rng, rng.randrange(1, 8))
    stream = b"".join(encode(m) for m in sent)
    decoder = Decoder()
    got = []
    chunks = pieces(stream, rng) if seed % 4 else [stream[i : i + 1] for i in range(min(len(stream), 5000))]
    if not seed % 4:
        chunks.append(stream[5000:])
    for chunk in chunks:
        feed = cast(Generator[Message, None, None], decoder.feed(chunk))
        for message in feed:
            got.append(seen(message))
            if rng.random() < 0.3:  # a caller that stops early: the rest waits for the next call
                feed.close()
                break
    got += [seen(m) for m in decoder.feed(b"")]
    while decoder.pending:
        before = len(got)
        got += [seen(m) for m in decoder.feed(b"")]
        assert len(got) > before
    assert got == [seen(m) for m in sent]
    assert decoder.pending == 0


def test_a_bad_header_block_after_a_whole_message_is_a_frame_error() -> None:
    good = encode(Message(60786, b"x" * 100, {1000: b"\x01\x00\x00\x00"}, seq=1))
    bad = bytearray(encode(Message(60786, b"y", {1000: b"\x02\x00\x00\x00"}, seq=2)))
    bad[24:28] = (999).to_bytes(4, "little")  # the header's length runs past the header block
    decoder = Decoder()

    assert list(decoder.feed(good[:50])) == []
    feed = decoder.feed(good[50:] + bytes(bad))
    assert next(feed).body == b"x" * 100
    with pytest.raises(FrameError, match="runs past the header block"):
        next(feed)


def test_limits_are_checked_as_soon_as_the_head_arrives() -> None:
    decoder = Decoder(max_body=10)
    frame = encode(Message(60786, b"z" * 11))

    assert list(decoder.feed(frame[:10])) == []
    with pytest.raises(FrameError, match="exceeds 10"):
        list(decoder.feed(frame[10:20]))
