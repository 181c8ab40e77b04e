"""``/edge-routers``: CRUD, ``roleFilter`` listing, re-enrollment and ``/edge-router-role-attributes``."""

from __future__ import annotations

from typing import Any

import falcon

from api.http import empty
from api.resources import Family, Mode, model_fields, mount
from api.role_filter import RoleAttributes, role_filtered
from api.routing import Routes
from api.schemas.routers import EdgeRouterCreate, EdgeRouterPatch, EdgeRouterUpdate, render_edge_router
from api.wire import WireModel, require_field
from engine.entities.routers import EdgeRouter
from engine.managers.edge_routers import EdgeRouterManager
from engine.query import Symbol, SymbolTable, SymbolType

SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda r: r.id),
        "name": Symbol(SymbolType.STRING, lambda r: r.name),
        "roleAttributes": Symbol(SymbolType.STRING, lambda r: r.role_attributes, is_set=True),
        "isOnline": Symbol(SymbolType.BOOL, lambda r: False),
        "isVerified": Symbol(SymbolType.BOOL, lambda r: r.is_verified),
        "isTunnelerEnabled": Symbol(SymbolType.BOOL, lambda r: r.is_tunneler_enabled),
        "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
        "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
        "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
        "fingerprint": Symbol(SymbolType.STRING, lambda r: r.fingerprint),
        "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
    },
    tags_getter=lambda r: r.tags,
)


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
    ctrl = routes.ctrl
    manager = routes.managers.edge_routers
    mount(
        routes,
        Family(
            entity="edge-routers",
            manager=manager,
            render=lambda r: render_edge_router(ctrl, r),
            symbols=SYMBOLS,
            create_model=EdgeRouterCreate,
            update_model=EdgeRouterUpdate,
            patch_model=EdgeRouterPatch,
            to_fields=_fields,
            list_items=lambda req: role_filtered(req, manager.list(), ctrl.access, EdgeRouter),
        ),
    )
    routes.management("/edge-routers/{id}/re-enroll", EdgeRouterReEnroll(manager))
    routes.management("/edge-router-role-attributes", RoleAttributes(ctrl.access, EdgeRouter))
