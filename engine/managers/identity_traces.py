"""Data-flow tracing of an identity's circuits: switched on for a while, kept in memory.

OpenZiti (``controller/internal/routes/identity_router.go`` ``updateTracing``, and its
``TraceManager``): the identity must exist; ``enabled`` with a Go duration (``90s``, ``5m``,
``1h30m``) traces until now + duration, under the given ``traceId`` or a new UUID, on the
channels asked for (none or ``all`` means ``select-path`` and ``establish-path``); an unparsable
duration is a field error on ``duration`` carrying Go's message. ``enabled: false`` removes the
identity's trace. Traces live in the controller's memory only: a restart forgets them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.entities.identities import Identity
from engine.errors import FieldError, NotFoundError
from engine.managers._base import Env

#: The channels a trace covers when none (or ``all``) is asked for.
DEFAULT_CHANNELS = ("select-path", "establish-path")
ALL_CHANNELS = "all"

_NANOS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek small letter mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_INT64_MAX = 2**63 - 1
_COMPONENT = re.compile(r"(\d*)(?:\.(\d*))?([^\d.]*)")


def parse_go_duration(text: str) -> timedelta:
    """A duration in Go's ``time.ParseDuration`` syntax; ``ValueError`` with Go's message if not."""
    quoted = f'"{text}"'
    rest = text
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return timedelta(0)
    if not rest:
        raise ValueError(f"time: invalid duration {quoted}")
    total = 0
    while rest:
        match = _COMPONENT.match(rest)
        assert match is not None  # every group may be empty
        whole, fraction, unit = match.group(1), match.group(2), match.group(3)
        if not whole and not fraction:
            raise ValueError(f"time: invalid duration {quoted}")
        if not unit:
            raise ValueError(f"time: missing unit in duration {quoted}")
        scale = _NANOS.get(unit)
        if scale is None:
            raise ValueError(f'time: unknown unit "{unit}" in duration {quoted}')
        total += int(whole or "0") * scale
        if fraction:
            total += int(fraction) * scale // 10 ** len(fraction)
        if total > _INT64_MAX:
            raise ValueError(f"time: invalid duration {quoted}")
        rest = rest[match.end() :]
    return timedelta(microseconds=(-total if negative else total) // 1000)


@dataclass(frozen=True)
class IdentityTrace:
    identity_id: str
    trace_id: str
    until: datetime
    channels: tuple[str, ...]


class IdentityTraceManager:
    """The traces switched on per identity (one each), held in memory."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self._traces: dict[str, IdentityTrace] = {}
        self._lock = threading.Lock()

    def enable(
        self, identity_id: str, duration: str, trace_id: str | None, channels: Sequence[str]
    ) -> IdentityTrace:
        self._require_identity(identity_id)
        try:
            length = parse_go_duration(duration)
        except ValueError as ex:
            raise FieldError("duration", str(ex), duration) from None
        chosen = DEFAULT_CHANNELS if not channels or ALL_CHANNELS in channels else tuple(channels)
        trace = IdentityTrace(
            identity_id=identity_id,
            trace_id=trace_id or self.env.ids.new_token(),
            until=self.env.clock.now() + length,
            channels=chosen,
        )
        with self._lock:
            self._traces[identity_id] = trace
        return trace

    def disable(self, identity_id: str) -> None:
        self._require_identity(identity_id)
        with self._lock:
            self._traces.pop(identity_id, None)

    def active(self, identity_id: str) -> IdentityTrace | None:
        """The identity's trace while it runs (``until`` still ahead and the identity still there)."""
        with self._lock:
            trace = self._traces.get(identity_id)
            if trace is not None and (
                trace.until <= self.env.clock.now() or self.env.store.get(Identity, identity_id) is None
            ):
                del self._traces[identity_id]
                trace = None
        return trace

    def _require_identity(self, identity_id: str) -> None:
        if self.env.store.get(Identity, identity_id) is None:
            raise NotFoundError()
