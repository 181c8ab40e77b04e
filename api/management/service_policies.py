"""``/service-policies``: CRUD of service policies (management API)."""

from __future__ import annotations

from typing import Any

from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.policies import (
    ServicePolicyCreate,
    ServicePolicyPatch,
    ServicePolicyUpdate,
)
from api.wire import WireModel
from engine.entities.policies import ServicePolicy


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if mode != "patch":
        assert isinstance(model, ServicePolicyCreate)
        model.check_required("name", "type", "semantic")
    return model_fields(model, mode, ServicePolicy)


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.service_policies,
        routes.managers.service_policies,
        create_model=ServicePolicyCreate,
        update_model=ServicePolicyUpdate,
        patch_model=ServicePolicyPatch,
        to_fields=_fields,
    )
    routes.management("/service-policies", FamilyCollection(family))
    routes.management("/service-policies/{id}", FamilyItem(family))
    routes.mount_sublists(views.service_policies)
