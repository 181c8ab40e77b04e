"""``/services`` on the client API: the services the caller's policies grant.

As OpenZiti's ``routes/service_router.go`` (2.x): every authenticated identity lists and reads
exactly the services it may Dial or Bind, never in an admin capacity (docs/policy.md §5.1); a
service it can do neither with is 404. Each service carries ``permissions``, ``config`` (by config
type name, for the ``configTypes`` asked for on the request, else at authentication; ``all``
means all) with the identity's service-config overrides, and ``postureQueries``. Lists take
``filter``, ``sort``, paging and ``roleFilter``/``roleSemantic``. Replace, patch and delete are
the management operations, for administrators only (seed 000).
"""

from __future__ import annotations

import falcon

from api.http import LOOP_READS, list_response, ok
from api.middleware import SESSION
from api.resources import Family, FamilyItem, view_family
from api.role_filter import role_filtered
from api.routing import Routes
from api.schemas.services import ServicePatch, ServiceUpdate
from api.views import ServiceView
from engine.entities.services import Service
from engine.errors import UnauthorizedError
from engine.managers.access import AccessManager


def _require_admin(req: falcon.Request) -> None:
    if not req.context.identity.is_admin:
        raise UnauthorizedError()


class ClientServiceCollection:
    auth = SESSION
    loop_methods = LOOP_READS

    def __init__(self, view: ServiceView, access: AccessManager) -> None:
        self.view = view
        self.access = access

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        items = role_filtered(req, self.view.for_identity(req.context.identity), self.access, Service)
        list_response(req, resp, items, self.view.symbols, self.view.client_renderer(req))


class ClientServiceItem(FamilyItem[Service]):
    """Read for any authenticated identity that may use the service; change for admins only."""

    def __init__(self, family: Family[Service], view: ServiceView) -> None:
        super().__init__(family)
        self.view = view

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        service = self.view.visible(req.context.identity, id)
        ok(resp, self.view.client_renderer(req)(service))

    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        _require_admin(req)
        super().on_put(req, resp, id)

    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        _require_admin(req)
        super().on_patch(req, resp, id)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        _require_admin(req)
        super().on_delete(req, resp, id)


def register(routes: Routes) -> None:
    view = routes.views.services
    family = view_family(
        view,
        routes.managers.services,
        update_model=ServiceUpdate,
        patch_model=ServicePatch,
        auth=SESSION,
    )
    routes.client("/services", ClientServiceCollection(view, routes.managers.access))
    routes.client("/services/{id}", ClientServiceItem(family, view))
