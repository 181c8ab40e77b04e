"""``/service-policies``: CRUD of service policies (management API)."""

from __future__ import annotations

from typing import Any

from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.policies import (
    ServicePolicyCreate,
    ServicePolicyPatch,
    ServicePolicyUpdate,
    render_service_policy,
)
from api.wire import WireModel
from engine.entities.policies import ServicePolicy
from engine.query import Symbol, SymbolTable, SymbolType

SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda p: p.id),
        "name": Symbol(SymbolType.STRING, lambda p: p.name),
        "semantic": Symbol(SymbolType.STRING, lambda p: p.semantic),
        "type": Symbol(SymbolType.STRING, lambda p: p.type),
        "identityRoles": Symbol(SymbolType.STRING, lambda p: p.identity_roles, is_set=True),
        "serviceRoles": Symbol(SymbolType.STRING, lambda p: p.service_roles, is_set=True),
        "postureCheckRoles": Symbol(SymbolType.STRING, lambda p: p.posture_check_roles, is_set=True),
        "createdAt": Symbol(SymbolType.DATETIME, lambda p: p.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda p: p.updated_at),
    },
    tags_getter=lambda p: p.tags,
)


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode != "patch":
        assert isinstance(model, ServicePolicyCreate)
        model.check_required("name", "type", "semantic")
    return model_fields(model, mode, ServicePolicy)


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    mount(
        routes,
        Family(
            entity="service-policies",
            manager=routes.managers.service_policies,
            render=lambda p: render_service_policy(ctrl, p),
            symbols=SYMBOLS,
            create_model=ServicePolicyCreate,
            update_model=ServicePolicyUpdate,
            patch_model=ServicePolicyPatch,
            to_fields=_fields,
        ),
    )
