"""``/identities/{id}/posture-data`` and ``/identities/{id}/failed-service-requests``.

Both read the in-memory posture cache: what the identity reported (per API session for MFA and
endpoint state), and its recent session requests refused for posture.
"""

from __future__ import annotations

import falcon

from api.http import ok
from api.middleware import ADMIN
from api.routing import Routes
from api.schemas.posture import render_failed_service_request, render_posture_data
from engine.managers.posture import PostureManager


class PostureDataResource:
    auth = ADMIN

    def __init__(self, manager: PostureManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, render_posture_data(self.manager.posture_data(id)))


class FailedServiceRequestsResource:
    auth = ADMIN

    def __init__(self, manager: PostureManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, [render_failed_service_request(f) for f in self.manager.failed_requests(id)])


def register(routes: Routes) -> None:
    manager = routes.managers.posture
    routes.management("/identities/{id}/posture-data", PostureDataResource(manager))
    routes.management("/identities/{id}/failed-service-requests", FailedServiceRequestsResource(manager))
