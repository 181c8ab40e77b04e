"""Identity trace wire shapes: management.yml ``traceSpec`` and ``traceDetail``."""

from __future__ import annotations

from typing import Any

from api.wire import WireModel, ts
from engine.managers.identity_traces import IdentityTrace


class TraceSpec(WireModel):
    enabled: bool | None = None
    duration: str | None = None
    trace_id: str | None = None
    channels: list[str] | None = None


def render_trace(trace: IdentityTrace | None) -> dict[str, Any]:
    """``traceDetail``: the running trace, or ``{"enabled": false}`` once tracing is switched off
    (OpenZiti answers a bare disabled detail; go-swagger omits its empty ``traceId``)."""
    if trace is None:
        return {"enabled": False}
    return {"enabled": True, "traceId": trace.trace_id, "until": ts(trace.until)}
