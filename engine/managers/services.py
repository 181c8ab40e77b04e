"""Services: create, update and delete, with their configs checked.

OpenZiti (``controller/model/edge_service_model.go``, ``edge_service_manager.go``):

- ``configs`` lists config ids; every one must exist, its config type must target services (not
  routers), and at most one config of each config type may be attached (a field error on
  ``configs`` otherwise). Names are accepted too and stored as
  ids (the ``ziti`` CLI resolves names itself; accepting them here costs nothing).
- ``encryptionRequired`` is read-only after create: updates silently keep the stored value.
- an empty ``terminatorStrategy`` means ``smartrouting``.
- deleting a service drops its ``@id`` from policy role lists and deletes its terminators; its
  entries in identities' hosting cost and precedence maps go too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from engine.entities.identities import Identity
from engine.entities.services import Config, ConfigType, Service
from engine.errors import FieldError
from engine.managers._base import EntityManager, Env, check_attributes
from engine.managers.config_types import ALL_CONFIG_TYPES
from engine.managers.configs import find_config
from engine.managers.identities import drop_service_config_overrides
from engine.managers.references import remove_entity_references
from engine.managers.terminators import delete_terminators_of
from engine.ports import UnitOfWork

DEFAULT_TERMINATOR_STRATEGY = "smartrouting"
#: The config type target a service's configs must have (router-targeted types configure routers).
SERVICE_TARGET = "service"


class ServiceManager(EntityManager[Service]):
    kind = Service

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Service:
        return super().build(uow, self._normalise(uow, fields))

    def apply(self, uow: UnitOfWork, old: Service, fields: dict[str, Any]) -> Service:
        fields = {k: v for k, v in fields.items() if k != "encryption_required"}  # set at create
        return super().apply(uow, old, self._normalise(uow, fields))

    def _normalise(self, uow: UnitOfWork, fields: dict[str, Any]) -> dict[str, Any]:
        fields = dict(fields)
        if "configs" in fields:
            fields["configs"] = resolve_configs(uow, fields["configs"] or [])
        if "terminator_strategy" in fields and not fields["terminator_strategy"]:
            fields["terminator_strategy"] = DEFAULT_TERMINATOR_STRATEGY
        if "role_attributes" in fields and fields["role_attributes"] is None:
            fields["role_attributes"] = []
        return fields

    def validate(self, uow: UnitOfWork, new: Service, old: Service | None) -> None:
        if not new.name:
            raise FieldError("name", "name is required", new.name)
        check_attributes(new.role_attributes)
        check_service_configs(uow, new.configs)

    def after_delete(self, uow: UnitOfWork, entity: Service) -> None:
        remove_entity_references(uow, entity, self.env.clock)
        delete_terminators_of(uow, "service_id", entity.id)
        _drop_hosting_entries(uow, entity.id, self.env.clock.now())
        drop_service_config_overrides(uow, self.env.clock, entity.id)

    # -- reads: the service as an identity sees it ------------------------------------------------
    def configs_of(self, id: str) -> list[Config]:
        """The configs the service lists (``/services/{id}/configs``)."""
        return _configs(self.env, self.require(id))

    def using_config(self, config_id: str) -> list[Service]:
        """The services that list the config (``/configs/{id}/services``)."""
        return [s for s in self.list() if config_id in s.configs]

    def wanted_config_types(self, requested: Iterable[str]) -> frozenset[str]:
        """Config type ids for ``configTypes`` as asked: ids, names or ``all``, resolved now.

        Unknown entries are ignored, as OpenZiti's ``MapConfigTypeNamesToIds`` ignores them.
        """
        values = list(requested)
        if not values:  # the common case: none asked, on the request or at login
            return frozenset()
        types = self.env.store.all(ConfigType)
        if ALL_CONFIG_TYPES in values:
            return frozenset(t.id for t in types)
        by_name = {t.name: t.id for t in types}
        ids = {t.id for t in types}
        return frozenset(v if v in ids else by_name[v] for v in values if v in ids or v in by_name)

    def config_map(
        self, service: Service, wanted: Collection[str], overrides: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """The service's ``config``: data of its configs of the wanted type ids, keyed by type name.

        ``overrides`` (config type id -> config id, an identity's service configs for this service)
        replace the service's own config of the same type (OpenZiti's ``mergeConfigs``).
        """
        return dict(self.config_entries(service, wanted, overrides))

    def config_entries(
        self, service: Service, wanted: Collection[str], overrides: Mapping[str, str] | None = None
    ) -> list[tuple[str, dict[str, Any]]]:
        """:meth:`config_map`'s entries in its order, (config type name, the config's data): the
        data objects are the (immutable) configs' own, so a renderer may tell them by identity."""
        if not wanted:
            return []
        store = self.env.store
        by_type: dict[str, dict[str, Any]] = {}
        for config in _configs(self.env, service):
            if config.config_type_id in wanted:
                by_type[config.config_type_id] = config.data
        for type_id, config_id in (overrides or {}).items():
            override = store.get(Config, config_id) if type_id in wanted else None
            if override is not None:
                by_type[type_id] = override.data
        out: list[tuple[str, dict[str, Any]]] = []
        for type_id, data in by_type.items():
            config_type = store.get(ConfigType, type_id)
            if config_type is not None:
                out.append((config_type.name, data))
        return out


def _configs(env: Env, service: Service) -> list[Config]:
    found = (env.store.get(Config, id) for id in service.configs)
    return [config for config in found if config is not None]


def _drop_hosting_entries(uow: UnitOfWork, service_id: str, now: datetime) -> None:
    """Remove a deleted service from identities' ``serviceHostingCosts``/``Precedences`` (their keys
    must name existing services, so a stale key would make every later replacement fail)."""
    for identity in uow.find_by(Identity, "has_hosting_entries", True):
        if service_id in identity.service_hosting_costs or service_id in identity.service_hosting_precedences:
            costs = {k: v for k, v in identity.service_hosting_costs.items() if k != service_id}
            precedences = {k: v for k, v in identity.service_hosting_precedences.items() if k != service_id}
            uow.put(
                dataclasses.replace(
                    identity,
                    service_hosting_costs=costs,
                    service_hosting_precedences=precedences,
                    updated_at=now,
                )
            )


def resolve_configs(uow: UnitOfWork, values: list[str]) -> list[str]:
    """Config ids for ids or names, in order, without duplicates; unknown ones are field errors."""
    out: list[str] = []
    for value in values:
        found = find_config(uow, value)
        if found is None:
            raise FieldError("configs", f"config with id or name '{value}' not found", value)
        if found.id not in out:
            out.append(found.id)
    return out


def check_service_configs(uow: UnitOfWork, config_ids: list[str]) -> None:
    """Every config targets services (not routers), and no two share a config type."""
    by_type: dict[str, Config] = {}
    for config_id in config_ids:
        config = uow.get(Config, config_id)
        if config is None:
            raise FieldError("configs", f"config with id or name '{config_id}' not found", config_id)
        config_type = uow.get(ConfigType, config.config_type_id)
        type_name = config_type.name if config_type else "<not found>"
        if config_type is not None and config_type.target != SERVICE_TARGET:
            raise FieldError(
                "configs",
                f"config {config.name} has config type {type_name} which does not target services",
                config_ids,
            )
        other = by_type.get(config.config_type_id)
        if other is not None:
            raise FieldError(
                "configs",
                f"duplicate configs named {other.name} and {config.name} found for config type "
                f"{type_name}. Only one config of a given typed is allowed per service ",
                config_ids,
            )
        by_type[config.config_type_id] = config
