"""Streamed answer bodies with a bounded number running at once: the access-change stream's SSE
answers (``api/analysis_stream.py``) and whole-network advice as Parquet
(``api/analysis_findings.py``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator


class Slots:
    """How many long answers (SSE, large downloads) may run at once."""

    def __init__(self, size: int) -> None:
        self._free = threading.BoundedSemaphore(size)

    def take(self) -> bool:
        return self._free.acquire(blocking=False)

    def give(self) -> None:
        self._free.release()


class ReleasingBody:
    """A streamed answer's body that gives its slot back when done or closed (and closes the
    chunks it reads, so a generator's clean-up runs at once)."""

    def __init__(self, frames: Iterator[bytes], release: Callable[[], None]) -> None:
        self._frames = frames
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> ReleasingBody:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._frames)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            try:
                closing = getattr(self._frames, "close", None)
                if closing is not None:
                    closing()
            except ValueError:
                pass  # a generator running in another thread: it ends with its next piece
            finally:
                release()
