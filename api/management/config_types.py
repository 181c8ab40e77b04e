"""``/config-types``: CRUD, ``/config-types/{id}/configs``, and the built-in types at start-up."""

from __future__ import annotations

from typing import Any

import falcon

from api.http import list_response
from api.management.configs import config_symbols
from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields
from api.routing import Routes
from api.schemas.configs import (
    ConfigTypeCreate,
    ConfigTypePatch,
    ConfigTypeUpdate,
    render_config,
    render_config_type,
)
from api.wire import WireModel
from engine.entities.services import Config, ConfigType
from engine.query import Symbol, SymbolTable, SymbolType

CONFIG_TYPE_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda t: t.id),
        "name": Symbol(SymbolType.STRING, lambda t: t.name),
        "target": Symbol(SymbolType.STRING, lambda t: t.target),
        "createdAt": Symbol(SymbolType.DATETIME, lambda t: t.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda t: t.updated_at),
    },
    tags_getter=lambda t: t.tags,
)


def config_type_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    """Manager fields: the wire ``schema`` (model field ``json_schema``) is the entity's ``schema``;
    a replacement without one clears it."""
    values = model_fields(model, mode, ConfigType)
    if "json_schema" in values:
        values["schema"] = values.pop("json_schema") or {}
    elif mode == "update":
        values["schema"] = {}
    return values


class ConfigTypeItem(FamilyItem[ConfigType]):
    def on_get_configs(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        config_type = self.family.manager.require(id)
        ctrl = self.family.extra["ctrl"]
        configs = ctrl.env.store.find_by(Config, "config_type_id", config_type.id)
        list_response(
            req, resp, configs, config_symbols(ctrl.env.store), lambda config: render_config(ctrl, config)
        )


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    family: Family[ConfigType] = Family(
        entity="config-types",
        manager=routes.managers.config_types,
        render=render_config_type,
        symbols=CONFIG_TYPE_SYMBOLS,
        create_model=ConfigTypeCreate,
        update_model=ConfigTypeUpdate,
        patch_model=ConfigTypePatch,
        to_fields=config_type_fields,
        extra={"ctrl": ctrl},
    )
    item = ConfigTypeItem(family)
    routes.management("/config-types", FamilyCollection(family))
    routes.management("/config-types/{id}", item)
    routes.management("/config-types/{id}/configs", item, suffix="configs")
