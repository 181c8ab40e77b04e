"""Posture checks: a common header plus type-specific fields kept by type id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.entities import Entity, register


@register
@dataclass(kw_only=True)
class PostureCheck(Entity):
    ENTITY = "posture-checks"
    UNIQUE = ("name",)
    MULTI_INDEXED = ("role_attributes",)

    name: str
    type_id: str
    role_attributes: list[str] = field(default_factory=list)
    version: int = 1
    # Type-specific fields in wire (camelCase) form, e.g. {"domains": [...]}, {"operatingSystems": [...]}.
    details: dict[str, Any] = field(default_factory=dict)
