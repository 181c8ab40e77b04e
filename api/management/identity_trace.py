"""``PUT /identities/{id}/trace``: switch data-flow tracing of an identity on or off.

management.yml has this operation (``updateIdentityTracing``) as a PUT only; the trace lives in
the controller's memory (:class:`~engine.managers.identity_traces.IdentityTraceManager`).
"""

from __future__ import annotations

import falcon

from api.http import ok, read_model
from api.routing import Routes
from api.schemas.identity_traces import TraceSpec, render_trace
from engine.managers.identity_traces import IdentityTraceManager


class IdentityTrace:
    def __init__(self, manager: IdentityTraceManager) -> None:
        self.manager = manager

    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        spec = read_model(req, TraceSpec)
        if spec.enabled:
            trace = self.manager.enable(id, spec.duration or "", spec.trace_id, spec.channels or [])
            ok(resp, render_trace(trace))
        else:
            self.manager.disable(id)
            ok(resp, render_trace(None))


def register(routes: Routes) -> None:
    routes.management("/identities/{id}/trace", IdentityTrace(routes.managers.identity_traces))
