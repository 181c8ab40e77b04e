"""Service wire shapes: request models, filterable fields and the service detail of both APIs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from api.wire import Attributes, Tags, WireModel, base
from engine.entities.services import Service
from engine.query import Symbol, SymbolTable, SymbolType


def service_permissions(granted: Iterable[str]) -> list[str]:
    """OpenZiti's ``permissions``: ``Bind`` before ``Dial``; ``["Invalid"]`` when neither."""
    have = set(granted)
    out: list[str] = [p for p in ("Bind", "Dial") if p in have]
    return out or ["Invalid"]


class ServiceUpdate(WireModel):
    name: str
    #: Read-only after create; accepted and ignored.
    encryption_required: bool | None = None
    configs: list[str] | None = None
    max_idle_time_millis: int | None = None
    role_attributes: Attributes = None
    tags: Tags = None
    terminator_strategy: str | None = None


class ServiceCreate(ServiceUpdate):
    """A replacement's fields; ``encryptionRequired`` is required (and fixed) at creation."""

    encryption_required: bool


class ServicePatch(WireModel):
    name: str | None = None
    encryption_required: bool | None = None
    configs: list[str] | None = None
    max_idle_time_millis: int | None = None
    role_attributes: Attributes = None
    tags: Tags = None
    terminator_strategy: str | None = None


SERVICE_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda s: s.id),
        "name": Symbol(SymbolType.STRING, lambda s: s.name),
        "roleAttributes": Symbol(SymbolType.STRING, lambda s: s.role_attributes, is_set=True),
        "configs": Symbol(SymbolType.STRING, lambda s: s.configs, is_set=True),
        "terminatorStrategy": Symbol(SymbolType.STRING, lambda s: s.terminator_strategy),
        "encryptionRequired": Symbol(SymbolType.BOOL, lambda s: s.encryption_required),
        "createdAt": Symbol(SymbolType.DATETIME, lambda s: s.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda s: s.updated_at),
    },
    tags_getter=lambda s: s.tags,
)


def service_form(service: Service) -> dict[str, Any]:
    """What ``serviceDetail`` takes from the service alone (see :class:`~api.wire.Forms`)."""
    out = base(service, "configs", "service-edge-router-policies", "service-policies", "terminators")
    out.update(
        {
            "configs": list(service.configs),
            "encryptionRequired": service.encryption_required,
            "maxIdleTimeMillis": service.max_idle_time_millis,
            "name": service.name,
            "roleAttributes": service.role_attributes,
            "terminatorStrategy": service.terminator_strategy,
        }
    )
    return out


def render_service(
    service: Service,
    *,
    config: dict[str, Any] | None = None,
    permissions: Iterable[str] = (),
    posture_queries: list[dict[str, Any]] | None = None,
    form: Callable[[Service], dict[str, Any]] = service_form,
) -> dict[str, Any]:
    """``serviceDetail``: ``config`` is the map by config type name the caller asked for;
    ``form`` makes the service's own part (a :class:`~api.wire.Forms` keeps it)."""
    out = form(service)
    out["config"] = config or {}
    out["permissions"] = list(permissions)
    out["postureQueries"] = posture_queries or []
    return out
