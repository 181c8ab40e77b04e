"""``GET /summary``: entity counts keyed as OpenZiti's ``Stores.GetEntityCounts`` keys them
(:func:`engine.managers.summary.entity_counts`)."""

from __future__ import annotations

import falcon

from api.http import ok
from api.routing import Routes
from engine.managers._base import Env
from engine.managers.summary import entity_counts


class Summary:
    def __init__(self, env: Env) -> None:
        self.env = env

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, entity_counts(self.env))


def register(routes: Routes) -> None:
    routes.management("/summary", Summary(routes.managers.env))
