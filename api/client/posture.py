"""Client posture responses: ``POST /posture-response`` (201) and ``/posture-response-bulk`` (200).

The answer lists the services whose MFA posture timers the responses shortened (a wake or unlock
event); it is empty otherwise. Seed 000 gives the bulk form 200 (OpenZiti answers 201 for both).
"""

from __future__ import annotations

from typing import Any

import falcon

from api.http import ok, read_json
from api.middleware import SESSION
from api.routing import Routes
from api.schemas.posture import parse_posture_responses, render_posture_response
from engine.managers.posture import PostureManager


def _json(req: falcon.Request) -> Any:
    return read_json(req)


class PostureResponseResource:
    auth = SESSION

    def __init__(self, manager: PostureManager, *, bulk: bool) -> None:
        self.manager = manager
        self.bulk = bulk

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        responses = parse_posture_responses(_json(req), bulk=self.bulk)
        session = req.context.session
        timeouts = self.manager.respond(session.identity_id, session.id, responses)
        ok(resp, render_posture_response(timeouts))
        resp.status = falcon.HTTP_200 if self.bulk else falcon.HTTP_201


def register(routes: Routes) -> None:
    manager = routes.managers.posture
    routes.client("/posture-response", PostureResponseResource(manager, bulk=False))
    routes.client("/posture-response-bulk", PostureResponseResource(manager, bulk=True))
