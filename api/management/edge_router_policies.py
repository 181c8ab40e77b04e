"""``/edge-router-policies``: CRUD of edge router policies (management API)."""

from __future__ import annotations

from typing import Any

from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.policies import (
    EdgeRouterPolicyCreate,
    EdgeRouterPolicyPatch,
    EdgeRouterPolicyUpdate,
)
from api.wire import WireModel
from engine.entities.policies import EdgeRouterPolicy


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode != "patch":
        assert isinstance(model, EdgeRouterPolicyCreate)
        model.check_required("name", "semantic")
    return model_fields(model, mode, EdgeRouterPolicy)


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.edge_router_policies,
        routes.managers.edge_router_policies,
        create_model=EdgeRouterPolicyCreate,
        update_model=EdgeRouterPolicyUpdate,
        patch_model=EdgeRouterPolicyPatch,
        to_fields=_fields,
    )
    routes.management("/edge-router-policies", FamilyCollection(family))
    routes.management("/edge-router-policies/{id}", FamilyItem(family))
    routes.mount_sublists(views.edge_router_policies)
