"""``/service-edge-router-policies``: CRUD of service edge router policies (management API)."""

from __future__ import annotations

from typing import Any

from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.policies import (
    ServiceEdgeRouterPolicyCreate,
    ServiceEdgeRouterPolicyPatch,
    ServiceEdgeRouterPolicyUpdate,
    render_service_edge_router_policy,
)
from api.wire import WireModel
from engine.entities.policies import ServiceEdgeRouterPolicy
from engine.query import Symbol, SymbolTable, SymbolType

SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda p: p.id),
        "name": Symbol(SymbolType.STRING, lambda p: p.name),
        "semantic": Symbol(SymbolType.STRING, lambda p: p.semantic),
        "serviceRoles": Symbol(SymbolType.STRING, lambda p: p.service_roles, is_set=True),
        "edgeRouterRoles": Symbol(SymbolType.STRING, lambda p: p.edge_router_roles, is_set=True),
        "createdAt": Symbol(SymbolType.DATETIME, lambda p: p.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda p: p.updated_at),
    },
    tags_getter=lambda p: p.tags,
)


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode != "patch":
        assert isinstance(model, ServiceEdgeRouterPolicyCreate)
        model.check_required("name", "semantic")
    return model_fields(model, mode, ServiceEdgeRouterPolicy)


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    mount(
        routes,
        Family(
            entity="service-edge-router-policies",
            manager=routes.managers.service_edge_router_policies,
            render=lambda p: render_service_edge_router_policy(ctrl, p),
            symbols=SYMBOLS,
            create_model=ServiceEdgeRouterPolicyCreate,
            update_model=ServiceEdgeRouterPolicyUpdate,
            patch_model=ServiceEdgeRouterPolicyPatch,
            to_fields=_fields,
        ),
    )
