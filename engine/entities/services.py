"""Services and their configuration: services, configs, config types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.entities import Entity, register


@register
@dataclass(kw_only=True)
class Service(Entity):
    ENTITY = "services"
    UNIQUE = ("name",)

    name: str
    encryption_required: bool = True
    configs: list[str] = field(default_factory=list)
    max_idle_time_millis: int = 0
    role_attributes: list[str] = field(default_factory=list)
    terminator_strategy: str = "smartrouting"


@register
@dataclass(kw_only=True)
class ConfigType(Entity):
    ENTITY = "config-types"
    UNIQUE = ("name",)

    name: str
    schema: dict[str, Any] = field(default_factory=dict)
    #: What the type configures: "service" (the default) or "router"; fixed at create.
    target: str = "service"


@register
@dataclass(kw_only=True)
class Config(Entity):
    ENTITY = "configs"
    UNIQUE = ("name",)
    INDEXED = ("config_type_id",)

    name: str
    config_type_id: str
    data: dict[str, Any] = field(default_factory=dict)
