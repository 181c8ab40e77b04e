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
    MULTI_INDEXED = ("role_attributes",)

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


@register
@dataclass(kw_only=True)
class Terminator(Entity):
    """Where a service's traffic leaves the overlay: a router, a binding and an address on it."""

    ENTITY = "terminators"
    #: ``host_id``: the terminators a Bind session hosts end with it (``engine.managers.edge_control``).
    INDEXED = ("service_id", "router_id", "host_id")

    service_id: str
    router_id: str
    binding: str
    address: str
    instance_id: str = ""
    instance_secret: str | None = None
    cost: int = 0
    precedence: str = "default"
    #: The hosting identity's id, for SDK-hosted terminators ("" when an administrator made it).
    identity: str = ""
    host_id: str = ""
    saved_precedence: str | None = None
