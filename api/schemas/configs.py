"""Config and config-type wire shapes: request models, filterable fields and the detail renderers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field

from api.controller import Controller
from api.wire import Tags, WireModel, base, one_of, ref
from engine.entities.services import Config, ConfigType
from engine.managers.config_types import TARGETS, ConfigTypeManager
from engine.query import Symbol, SymbolTable, SymbolType

# ``schema`` would shadow a BaseModel attribute: the field is ``json_schema``, aliased to it.


class ConfigTypeCreate(WireModel):
    name: str
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    tags: Tags = None
    #: ``service`` or ``router`` (management.yml's enum); null means ``service``. Fixed at create.
    target: Annotated[str, AfterValidator(one_of("target", TARGETS))] | None = None


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
    config_type = ctrl.managers.config_types.get(config.config_type_id)
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


def config_symbols(config_types: ConfigTypeManager) -> SymbolTable:
    """Filterable config fields; ``type``/``configTypeId`` is the type id, ``configType`` its name."""

    def type_name(config: Config) -> str | None:
        config_type = config_types.get(config.config_type_id)
        return config_type.name if config_type else None

    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda c: c.id),
            "name": Symbol(SymbolType.STRING, lambda c: c.name),
            "type": Symbol(SymbolType.STRING, lambda c: c.config_type_id),
            "configTypeId": Symbol(SymbolType.STRING, lambda c: c.config_type_id),
            "configType": Symbol(SymbolType.STRING, type_name),
            "createdAt": Symbol(SymbolType.DATETIME, lambda c: c.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda c: c.updated_at),
        },
        tags_getter=lambda c: c.tags,
    )
