"""Config and config-type wire shapes: request models and the detail renderers."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from api.controller import Controller
from api.wire import Tags, WireModel, base, ref
from engine.entities.services import Config, ConfigType

# ``schema`` would shadow a BaseModel attribute: the field is ``json_schema``, aliased to it.


class ConfigTypeCreate(WireModel):
    name: str
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    tags: Tags = None
    target: str | None = None


class ConfigTypeUpdate(WireModel):
    name: str
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    tags: Tags = None


class ConfigTypePatch(WireModel):
    name: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    tags: Tags = None


class ConfigCreate(WireModel):
    name: str
    config_type_id: str
    data: dict[str, Any]
    tags: Tags = None


class ConfigUpdate(WireModel):
    name: str
    data: dict[str, Any]
    tags: Tags = None


class ConfigPatch(WireModel):
    name: str | None = None
    data: dict[str, Any] | None = None
    tags: Tags = None


def render_config_type(config_type: ConfigType) -> dict[str, Any]:
    out = base(config_type)
    out.update(
        {
            "name": config_type.name,
            # OpenZiti stores an empty schema as absent and renders it as null.
            "schema": config_type.schema or None,
            "target": config_type.target,
        }
    )
    return out


def render_config(ctrl: Controller, config: Config) -> dict[str, Any]:
    config_type = ctrl.env.store.get(ConfigType, config.config_type_id)
    out = base(config)
    out.update(
        {
            "configType": ref(config_type)
            or {
                "_links": {"self": {"href": f"./config-types/{config.config_type_id}"}},
                "entity": ConfigType.ENTITY,
                "id": config.config_type_id,
                "name": "",
            },
            "configTypeId": config.config_type_id,
            "data": config.data,
            "name": config.name,
        }
    )
    return out
