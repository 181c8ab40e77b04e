"""Capturing what Trellis logs, formatted as ``trellis serve`` formats it (``controller.logs``)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from controller.logs import RequestIdFilter, StructuredFormatter, parse_logfmt


class Captured:
    """The lines logged while :func:`capture` was on, and their fields."""

    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def records(self) -> list[dict[str, str]]:
        return [parse_logfmt(line) for line in self.lines]

    def events(self, name: str, **fields: Any) -> list[dict[str, str]]:
        """The parsed lines of event ``name`` whose fields include ``fields`` (compared as text)."""
        wanted = {k: str(v) for k, v in fields.items()}
        return [
            r
            for r in self.records()
            if r.get("event") == name and all(r.get(k) == v for k, v in wanted.items())
        ]

    def clear(self) -> None:
        self.stream.seek(0)
        self.stream.truncate()


@contextmanager
def capture(level: int = logging.DEBUG, *, json: bool = False) -> Iterator[Captured]:
    """Every record at ``level`` and above, from any logger, formatted by the structured formatter
    (key=value, or JSON); the root logger's level and handlers are put back afterwards."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(StructuredFormatter(json=json))
    handler.addFilter(RequestIdFilter())
    handler.setLevel(level)
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield Captured(stream)
    finally:
        root.removeHandler(handler)
        root.setLevel(saved)
