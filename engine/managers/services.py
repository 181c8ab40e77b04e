"""Services: create, update and delete, with their configs checked.

OpenZiti (``controller/model/edge_service_model.go``, ``edge_service_manager.go``):

- ``configs`` lists config ids; every one must exist and at most one config of each config type
  may be attached (a field error on ``configs`` otherwise). Names are accepted too and stored as
  ids (the ``ziti`` CLI resolves names itself; accepting them here costs nothing).
- ``encryptionRequired`` is read-only after create: updates silently keep the stored value.
- an empty ``terminatorStrategy`` means ``smartrouting``.
- deleting a service drops its ``@id`` from policy role lists.
"""

from __future__ import annotations

from typing import Any

from engine.entities.services import Config, ConfigType, Service
from engine.errors import FieldError
from engine.managers._base import EntityManager, check_attributes
from engine.managers.references import remove_entity_references
from engine.ports import UnitOfWork

DEFAULT_TERMINATOR_STRATEGY = "smartrouting"


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
        check_one_config_per_type(uow, new.configs)

    def after_delete(self, uow: UnitOfWork, entity: Service) -> None:
        remove_entity_references(uow, entity, self.env.clock)


def resolve_configs(uow: UnitOfWork, values: list[str]) -> list[str]:
    """Config ids for ids or names, in order, without duplicates; unknown ones are field errors."""
    out: list[str] = []
    for value in values:
        found = uow.get(Config, value) if value else None
        if found is None and value:
            by_name = uow.store.find_unique(Config, "name", value)
            found = uow.get(Config, by_name.id) if by_name is not None else None
        if found is None:
            raise FieldError("configs", f"config with id or name '{value}' not found", value)
        if found.id not in out:
            out.append(found.id)
    return out


def check_one_config_per_type(uow: UnitOfWork, config_ids: list[str]) -> None:
    by_type: dict[str, Config] = {}
    for config_id in config_ids:
        config = uow.get(Config, config_id)
        if config is None:
            raise FieldError("configs", f"config with id or name '{config_id}' not found", config_id)
        other = by_type.get(config.config_type_id)
        if other is not None:
            config_type = uow.get(ConfigType, config.config_type_id)
            type_name = config_type.name if config_type else "<not found>"
            raise FieldError(
                "configs",
                f"duplicate configs named {other.name} and {config.name} found for config type "
                f"{type_name}. Only one config of a given typed is allowed per service ",
                config_ids,
            )
        by_type[config.config_type_id] = config
