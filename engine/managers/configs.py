"""Configs: named data documents of a config type, checked against the type's JSON schema.

OpenZiti (``controller/model/config_model.go``, ``tests/config_test.go``):

- the type is given as ``configTypeId`` at create and cannot change later (an update or patch that
  names another type is ignored); an empty or unknown type is a field error on ``type``;
- ``data`` must match the type's schema; the first schema error is reported as a field error
  whose field is the failing location (``(root)`` for the document itself, else a dotted path such
  as ``port`` or ``portRanges.0``) and whose reason is ``<field> is invalid: <field>: <message>``;
- numbers that are whole are stored as integers (22.0 becomes 22);
- deleting a config drops it from the services and the routers (edge and transit) that list it; a
  config an identity uses as a service-config override may not be deleted (409,
  ``configStore.DeleteById``).

Routers list configs too (``router_model.go``'s ``validateRouterConfigs``): each must exist and be
of a config type whose target is ``router``, and no two may share a config type, else a field error
on ``configs`` (:func:`router_configs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from engine.entities.routers import EdgeRouter, Router, RouterBase
from engine.entities.services import Config, ConfigType, Service
from engine.errors import FieldError
from engine.managers._base import EntityManager
from engine.managers.identities import check_config_not_overridden
from engine.ports import SchemaChecker, SchemaViolation, UnitOfWork

TYPE_FIELD = "type"


class ConfigManager(EntityManager[Config]):
    kind = Config

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Config:
        fields = dict(fields)
        fields["config_type_id"] = resolve_config_type(uow, fields.get("config_type_id")).id
        fields["data"] = narrow_numbers(fields.get("data") or {})
        return super().build(uow, fields)

    def apply(self, uow: UnitOfWork, old: Config, fields: dict[str, Any]) -> Config:
        fields = {k: v for k, v in fields.items() if k != "config_type_id"}  # fixed at create
        if "data" in fields:
            fields["data"] = narrow_numbers(fields["data"] or {})
        return super().apply(uow, old, fields)

    def validate(self, uow: UnitOfWork, new: Config, old: Config | None) -> None:
        if not new.name:
            raise FieldError("name", "name is required", new.name)
        config_type = uow.get(ConfigType, new.config_type_id)
        if config_type is not None and config_type.schema:
            check_data(self.env.schemas, config_type.schema, new.data)

    def before_delete(self, uow: UnitOfWork, entity: Config) -> None:
        check_config_not_overridden(uow, entity.id)

    def after_delete(self, uow: UnitOfWork, entity: Config) -> None:
        now = self.env.clock.now()
        holders: list[Service | RouterBase] = [*uow.all(Service), *uow.all(EdgeRouter), *uow.all(Router)]
        for holder in holders:
            if entity.id in holder.configs:
                kept = [c for c in holder.configs if c != entity.id]
                uow.put(dataclasses.replace(holder, configs=kept, updated_at=now))

    def of_type(self, config_type_id: str) -> list[Config]:
        """The configs of a config type (``/config-types/{id}/configs``)."""
        return self.find_by("config_type_id", config_type_id)


#: The config type target a router's configs must have (``service`` types configure services).
ROUTER_TARGET = "router"
CONFIGS_FIELD = "configs"


def find_config(uow: UnitOfWork, value: str) -> Config | None:
    """The config with this id, else the one with this (unique) name."""
    found = uow.get(Config, value) if value else None
    if found is None and value:
        by_name = uow.store.find_unique(Config, "name", value)
        found = uow.get(Config, by_name.id) if by_name is not None else None
    return found


def router_configs(uow: UnitOfWork, values: list[str]) -> list[str]:
    """A router's ``configs`` as stored: the ids of the configs given (by id or, as for services,
    by name), sorted (OpenZiti keeps them as a set of ids).

    OpenZiti's checks, in its order and words, each a field error on ``configs`` whose value is the
    list as given: every config exists; its config type exists and targets routers; no two configs
    (the same one given twice included) share a config type.
    """
    by_type: dict[str, Config] = {}
    for value in values:
        config = find_config(uow, value)
        if config is None:
            raise FieldError(CONFIGS_FIELD, f"config with id or name '{value}' not found", value)
        config_type = uow.get(ConfigType, config.config_type_id)
        if config_type is None:
            reason = (
                f"config {config.name} references config type {config.config_type_id} which does not exist"
            )
            raise FieldError(CONFIGS_FIELD, reason, values)
        if config_type.target != ROUTER_TARGET:
            reason = f"config {config.name} has config type {config_type.name} which does not target routers"
            raise FieldError(CONFIGS_FIELD, reason, values)
        other = by_type.get(config.config_type_id)
        if other is not None:
            raise FieldError(
                CONFIGS_FIELD,
                f"duplicate configs named {other.name} and {config.name} found for config type "
                f"{config_type.name}. Only one config of a given type is allowed per router",
                values,
            )
        by_type[config.config_type_id] = config
    return sorted(c.id for c in by_type.values())


def resolve_config_type(uow: UnitOfWork, value: str | None) -> ConfigType:
    """The config type named by id (or, as older OpenZiti controllers allowed, by name)."""
    if not value:
        raise FieldError(TYPE_FIELD, "config type must be specified", value or "")
    found = uow.get(ConfigType, value)
    if found is None:
        by_name = uow.store.find_unique(ConfigType, "name", value)
        found = uow.get(ConfigType, by_name.id) if by_name is not None else None
    if found is None:
        raise FieldError(TYPE_FIELD, "invalid config type", value)
    return found


def check_data(checker: SchemaChecker, schema: dict[str, Any], data: dict[str, Any]) -> None:
    """Raise a field error describing the first way ``data`` fails ``schema``."""
    error = checker.first_violation(schema, data)
    if error is None:
        return
    field = _location(error.path)
    message = f"{field}: {_describe(error, field)}"
    raise FieldError(field, f"{field} is invalid: {message}", go_value(error.instance))


def _location(path: Iterable[Any]) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "(root)"


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _describe(error: SchemaViolation, field: str) -> str:
    """The message gojsonschema (OpenZiti's validator) gives for the common keywords."""
    keyword, instance = error.keyword, error.instance
    expected: Any = error.expected
    schema: Any = error.schema
    if keyword == "required" and isinstance(instance, dict):
        missing = [name for name in expected if name not in instance]
        if missing:
            return f"{missing[0]} is required"
    if keyword == "type":
        wanted = "/".join(expected) if isinstance(expected, list) else str(expected)
        return f"Invalid type. Expected: {wanted}, given: {_json_type(instance)}"
    if keyword == "additionalProperties" and isinstance(instance, dict):
        known = set(schema.get("properties", {})) if isinstance(schema, dict) else set()
        extra = sorted(k for k in instance if k not in known)
        if extra:
            return f"Additional property {extra[0]} is not allowed"
    if keyword == "enum":
        allowed = ", ".join(f'"{v}"' if isinstance(v, str) else go_value(v) for v in expected)
        return f"{field} must be one of the following: {allowed}"
    if keyword == "minimum":
        return f"Must be greater than or equal to {go_value(expected)}"
    if keyword == "maximum":
        return f"Must be less than or equal to {go_value(expected)}"
    if keyword == "minItems":
        return f"Array must have at least {expected} items"
    if keyword == "maxItems":
        return f"Array must have at most {expected} items"
    if keyword == "pattern":
        return f"Does not match pattern '{expected}'"
    return error.message


def go_value(value: Any) -> str:
    """``value`` as Go's ``%v`` prints the decoded JSON (maps sorted by key, lists space-separated)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_value(v) for v in value) + "]"
    return str(value)


def narrow_numbers(value: Any) -> Any:
    """Whole floats become ints, recursively (OpenZiti narrows JSON numbers the same way)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: narrow_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [narrow_numbers(v) for v in value]
    return value
