"""``/service-edge-router-policies``: CRUD of service edge router policies (management API)."""

from __future__ import annotations

from typing import Any

from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.policies import (
    ServiceEdgeRouterPolicyCreate,
    ServiceEdgeRouterPolicyPatch,
    ServiceEdgeRouterPolicyUpdate,
)
from api.wire import WireModel
from engine.entities.policies import ServiceEdgeRouterPolicy


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode != "patch":
        assert isinstance(model, ServiceEdgeRouterPolicyCreate)
        model.check_required("name", "semantic")
    return model_fields(model, mode, ServiceEdgeRouterPolicy)


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.service_edge_router_policies,
        routes.managers.service_edge_router_policies,
        create_model=ServiceEdgeRouterPolicyCreate,
        update_model=ServiceEdgeRouterPolicyUpdate,
        patch_model=ServiceEdgeRouterPolicyPatch,
        to_fields=_fields,
    )
    routes.management("/service-edge-router-policies", FamilyCollection(family))
    routes.management("/service-edge-router-policies/{id}", FamilyItem(family))
    routes.mount_sublists(views.service_edge_router_policies)
