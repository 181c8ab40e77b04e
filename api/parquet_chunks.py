"""A write-only file a Parquet writer writes into, emptied chunk by chunk as an answer streams
(the SQL exports of ``api/analysis_sql.py`` and the advice of ``api/advice_parquet.py``)."""

from __future__ import annotations

from typing import Any

#: The media type of a Parquet answer.
PARQUET = "application/vnd.apache.parquet"


class ParquetChunks:
    """A write-only file Parquet is written into, emptied as the answer is sent."""

    closed = False

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.position = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.size += len(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True

    def take(self) -> bytes:
        out = b"".join(self.parts)
        self.parts, self.size = [], 0
        return out
