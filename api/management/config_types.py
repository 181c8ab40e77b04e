"""``/config-types``: CRUD, ``/config-types/{id}/configs``, and the built-in types at start-up."""

from __future__ import annotations

from typing import Any

from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.configs import ConfigTypeCreate, ConfigTypePatch, ConfigTypeUpdate
from api.wire import WireModel
from engine.entities.services import ConfigType


def config_type_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    """Manager fields: the wire ``schema`` (model field ``json_schema``) is the entity's ``schema``;
    a replacement without one clears it."""
    values = model_fields(model, mode, ConfigType)
    if "json_schema" in values:
        values["schema"] = values.pop("json_schema") or {}
    elif mode == "update":
        values["schema"] = {}
    return values


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.config_types,
        routes.managers.config_types,
        create_model=ConfigTypeCreate,
        update_model=ConfigTypeUpdate,
        patch_model=ConfigTypePatch,
        to_fields=config_type_fields,
    )
    routes.management("/config-types", FamilyCollection(family))
    routes.management("/config-types/{id}", FamilyItem(family))
    routes.mount_sublists(views.config_types)
