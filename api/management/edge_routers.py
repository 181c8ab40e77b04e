"""``/edge-routers``: CRUD, ``roleFilter`` listing, re-enrollment and ``/edge-router-role-attributes``."""

from __future__ import annotations

from typing import Any

import falcon

from api.http import empty
from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.role_filter import RoleAttributes, role_ids
from api.routing import Routes
from api.schemas.routers import EdgeRouterCreate, EdgeRouterPatch, EdgeRouterUpdate
from api.wire import WireModel, require_field
from engine.entities.routers import EdgeRouter
from engine.managers.edge_routers import EdgeRouterManager


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    assert isinstance(model, EdgeRouterCreate)
    if mode != "patch":
        require_field(model.name, "name")
    return model_fields(model, mode, EdgeRouter)


class EdgeRouterReEnroll:
    """``POST /edge-routers/{id}/re-enroll``: a new enrollment JWT, the old certificate revoked."""

    def __init__(self, manager: EdgeRouterManager) -> None:
        self.manager = manager

    def on_post(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.re_enroll(id)
        empty(resp)


def register(routes: Routes) -> None:
    views = routes.views
    manager = routes.managers.edge_routers
    access = routes.managers.access
    family = view_family(
        views.edge_routers,
        manager,
        create_model=EdgeRouterCreate,
        update_model=EdgeRouterUpdate,
        patch_model=EdgeRouterPatch,
        to_fields=_fields,
        role_ids=lambda req: role_ids(req, access, EdgeRouter),
    )
    routes.management("/edge-routers", FamilyCollection(family))
    routes.management("/edge-routers/{id}", FamilyItem(family))
    routes.mount_sublists(views.edge_routers)
    routes.management("/edge-routers/{id}/re-enroll", EdgeRouterReEnroll(manager))
    routes.management("/edge-router-role-attributes", RoleAttributes(access, EdgeRouter))
