"""Routers: edge routers (with the edge extension) and transit (fabric) routers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.entities import Entity, register


@dataclass(kw_only=True)
class RouterBase(Entity):
    name: str
    cost: int = 0
    no_traversal: bool = False
    disabled: bool = False
    fingerprint: str | None = None
    cert_pem: str | None = None
    is_verified: bool = False
    enrollment_token: str | None = None
    enrollment_created_at: datetime | None = None
    enrollment_expires_at: datetime | None = None
    #: The enrollment JWT, signed once when the enrollment token is issued.
    enrollment_jwt: str | None = None
    #: Control-channel listener address -> its groups (OpenZiti ``ctrlChanListeners``), set by
    #: administrators; empty until one is set.
    ctrl_chan_listeners: dict[str, list[str]] = field(default_factory=dict)
    #: Ids of the router-targeted configs that configure this router, at most one per config type
    #: (OpenZiti keeps them as a set of ids, so sorted).
    configs: list[str] = field(default_factory=list)


@register
@dataclass(kw_only=True)
class EdgeRouter(RouterBase):
    ENTITY = "edge-routers"
    UNIQUE = ("name", "enrollment_token", "fingerprint")
    MULTI_INDEXED = ("role_attributes",)

    role_attributes: list[str] = field(default_factory=list)
    is_tunneler_enabled: bool = False
    app_data: dict[str, Any] = field(default_factory=dict)
    hostname: str = ""
    supported_protocols: dict[str, str] = field(default_factory=dict)
    unverified_cert_pem: str | None = None
    unverified_fingerprint: str | None = None


@register
@dataclass(kw_only=True)
class Router(RouterBase):
    ENTITY = "transit-routers"
    UNIQUE = ("name", "enrollment_token", "fingerprint")

    unverified_cert_pem: str | None = None
    unverified_fingerprint: str | None = None
