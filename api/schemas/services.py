"""Service wire shapes: request models and the service detail shared by both APIs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import falcon

from api.controller import Controller
from api.wire import Attributes, Tags, WireModel, base
from engine.entities.identities import Identity
from engine.entities.services import Config, ConfigType, Service
from engine.errors import NotFoundError


#: What an administrator may do with every service (OpenZiti gives admins both).
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


def requested_config_types(ctrl: Controller, req: falcon.Request) -> set[str]:
    """Config type ids for the service ``config`` map: ``configTypes`` (ids, names or ``all``;
    repeated or comma-separated) when given, else the ones chosen when the session authenticated."""
    raw = req.params.get("configTypes")
    if raw:
        values = [raw] if isinstance(raw, str) else list(raw)
        names = [part.strip() for value in values for part in value.split(",") if part.strip()]
        return set(ctrl.auth.resolve_config_types(names))
    session = getattr(req.context, "session", None)
    return set(session.config_types) if session is not None else set()


def service_config_map(ctrl: Controller, service: Service, config_types: Collection[str]) -> dict[str, Any]:
    """Config data of the service keyed by config type *name*, for the requested type ids only."""
    out: dict[str, Any] = {}
    if not config_types:
        return out
    store = ctrl.env.store
    for config_id in service.configs:
        config = store.get(Config, config_id)
        if config is None or config.config_type_id not in config_types:
            continue
        config_type = store.get(ConfigType, config.config_type_id)
        if config_type is not None:
            out[config_type.name] = config.data
    return out


def render_service(
    ctrl: Controller,
    service: Service,
    *,
    config_types: Collection[str] = (),
    permissions: Iterable[str] = (),
    posture_queries: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    out = base(service, "configs", "service-edge-router-policies", "service-policies", "terminators")
    out.update(
        {
            "config": service_config_map(ctrl, service, config_types),
            "configs": list(service.configs),
            "encryptionRequired": service.encryption_required,
            "maxIdleTimeMillis": service.max_idle_time_millis,
            "name": service.name,
            "permissions": list(permissions),
            "postureQueries": posture_queries or [],
            "roleAttributes": service.role_attributes,
            "terminatorStrategy": service.terminator_strategy,
        }
    )
    return out


def _as_identity(ctrl: Controller, req: falcon.Request) -> str:
    """The identity whose permissions the view shows: ``asIdentity`` (id or name) or the caller."""
    wanted = req.get_param("asIdentity")
    if not wanted:
        return str(req.context.identity.id)
    store = ctrl.env.store
    identity = store.get(Identity, wanted) or store.find_unique(Identity, "name", wanted)
    if identity is None:
        raise NotFoundError(field="asIdentity", value=wanted, reason="identity not found")
    return identity.id


def service_renderer(ctrl: Controller, req: falcon.Request) -> Callable[[Service], dict[str, Any]]:
    """Renders services for this request: its config types and the permissions of its identity."""
    config_types = requested_config_types(ctrl, req)
    identity_id = _as_identity(ctrl, req)

    def render(service: Service) -> dict[str, Any]:
        permissions = service_permissions(ctrl.access.permissions(identity_id, service.id))
        return render_service(ctrl, service, config_types=config_types, permissions=permissions)

    return render
