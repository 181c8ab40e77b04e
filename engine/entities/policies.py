"""The three policy kinds that tie identities, services and edge routers together."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.entities import Entity, register

ALL_OF = "AllOf"
ANY_OF = "AnyOf"


@dataclass(kw_only=True)
class Policy(Entity):
    name: str
    semantic: str = ALL_OF


@register
@dataclass(kw_only=True)
class ServicePolicy(Policy):
    ENTITY = "service-policies"
    UNIQUE = ("name",)

    type: str = "Dial"  # Dial or Bind
    identity_roles: list[str] = field(default_factory=list)
    service_roles: list[str] = field(default_factory=list)
    posture_check_roles: list[str] = field(default_factory=list)


@register
@dataclass(kw_only=True)
class EdgeRouterPolicy(Policy):
    ENTITY = "edge-router-policies"
    UNIQUE = ("name",)

    identity_roles: list[str] = field(default_factory=list)
    edge_router_roles: list[str] = field(default_factory=list)
    is_system: bool = False


@register
@dataclass(kw_only=True)
class ServiceEdgeRouterPolicy(Policy):
    ENTITY = "service-edge-router-policies"
    UNIQUE = ("name",)

    service_roles: list[str] = field(default_factory=list)
    edge_router_roles: list[str] = field(default_factory=list)
