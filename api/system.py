"""Real implementations of the engine's Clock and IdGenerator ports."""

from __future__ import annotations

import secrets
import uuid
from datetime import UTC, datetime

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-"


class SystemClock:
    def now(self) -> datetime:
        now = datetime.now(UTC)
        return now.replace(microsecond=now.microsecond // 1000 * 1000)


class ShortIds:
    """OpenZiti-style short ids (alphabet ``0-9a-zA-Z.-``) and UUIDv4 tokens."""

    def __init__(self, length: int = 10) -> None:
        self.length = length

    def new_id(self) -> str:
        # First and last characters are alphanumeric so ids never start or end with . or -.
        body = "".join(secrets.choice(_ALPHABET) for _ in range(self.length - 2))
        return secrets.choice(_ALPHABET[:62]) + body + secrets.choice(_ALPHABET[:62])

    def new_token(self) -> str:
        return str(uuid.uuid4())
