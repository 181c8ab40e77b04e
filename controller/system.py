"""Real implementations of the engine's Clock and IdGenerator ports."""

from __future__ import annotations

import secrets
import time
import uuid
from datetime import UTC, datetime

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-"
#: A random byte -> an id character: 64 characters, so ``byte & 63`` picks each equally often.
_BYTE_TO_CHAR = bytes(ord(_ALPHABET[b & 63]) for b in range(256))


class SystemClock:
    """The wall clock in whole milliseconds (OpenZiti's timestamps' precision), UTC.

    A request asks for the time several times (its API session's expiry and activity, posture,
    the entities it writes): the datetime of the current millisecond is made once and shared.
    """

    def __init__(self) -> None:
        self._last: tuple[int, datetime] = (-1, datetime.fromtimestamp(0, UTC))

    def now(self) -> datetime:
        ms = time.time_ns() // 1_000_000
        last = self._last
        if last[0] == ms:
            return last[1]
        seconds, millis = divmod(ms, 1000)
        now = datetime.fromtimestamp(seconds, UTC).replace(microsecond=millis * 1000)
        self._last = (ms, now)
        return now


class ShortIds:
    """OpenZiti-style short ids (alphabet ``0-9a-zA-Z.-``) and UUIDv4 tokens."""

    def __init__(self, length: int = 10) -> None:
        self.length = length

    def new_id(self) -> str:
        # First and last characters are alphanumeric so ids never start or end with . or -:
        # drawn again when they do (unbiased; one id in about 16). One call to the OS's random
        # source per id, mapped with a table: ids are made on every request and every write.
        while True:
            candidate = secrets.token_bytes(self.length).translate(_BYTE_TO_CHAR).decode("ascii")
            if candidate[0] not in ".-" and candidate[-1] not in ".-":
                return candidate

    def new_token(self) -> str:
        return str(uuid.uuid4())
