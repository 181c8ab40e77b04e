"""``GET /current-api-session/service-updates``: when the caller's service list last changed.

SDKs poll it and list their services again when ``lastChangeAt`` moves (docs/policy.md §3.3).
"""

from __future__ import annotations

import falcon

from api.http import ok
from api.middleware import SESSION
from api.routing import Routes
from api.wire import ts
from engine.managers.service_updates import ServiceUpdates


class ServiceUpdatesResource:
    auth = SESSION

    def __init__(self, updates: ServiceUpdates) -> None:
        self.updates = updates

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, {"lastChangeAt": ts(self.updates.last_change_at(req.context.session))})


def register(routes: Routes) -> None:
    routes.client(
        "/current-api-session/service-updates", ServiceUpdatesResource(routes.managers.service_updates)
    )
