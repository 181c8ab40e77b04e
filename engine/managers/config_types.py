"""Config types: named JSON schemas that configs must match, and the built-in ones.

OpenZiti (``controller/model/config_type_model.go``): a type's schema, when given, must itself be a
valid JSON schema (else a field error on ``schema``); ``all`` is reserved (it means "every type" in
``configTypes`` lists); a type with configs cannot be deleted. The target (service or router) is
fixed at create.
"""

from __future__ import annotations

import json
from typing import Any

from engine.entities.services import Config, ConfigType
from engine.errors import FieldError, ReferencedEntityError
from engine.managers._base import EntityManager, Env
from engine.managers.builtin_config_types import BUILTIN_CONFIG_TYPES
from engine.ports import SchemaChecker, UnitOfWork

#: Keyword for "every config type" in ``configTypes`` lists; not usable as a type name.
ALL_CONFIG_TYPES = "all"
TARGETS = ("service", "router")
#: Store setting listing the built-in types already created (a deleted one is not recreated).
BUILTINS_SETTING = "config_types.builtins"


def check_schema(checker: SchemaChecker, schema: dict[str, Any]) -> None:
    """Raise a field error on ``schema`` unless it is a valid JSON schema."""
    if not schema:
        return
    reason = checker.schema_error(schema)
    if reason is not None:
        raise FieldError("schema", f"invalid schema {reason}")


class ConfigTypeManager(EntityManager[ConfigType]):
    kind = ConfigType

    def validate(self, uow: UnitOfWork, new: ConfigType, old: ConfigType | None) -> None:
        if not new.name:
            raise FieldError("name", "name is required", new.name)
        if new.name == ALL_CONFIG_TYPES:
            raise FieldError(
                "name", f"{new.name} is a keyword and may not be used as a config type name", new.name
            )
        if old is None and new.target not in TARGETS:
            raise FieldError("target", f"target must be one of {list(TARGETS)}", new.target)
        check_schema(self.env.schemas, new.schema)

    def apply(self, uow: UnitOfWork, old: ConfigType, fields: dict[str, Any]) -> ConfigType:
        fields = {k: v for k, v in fields.items() if k != "target"}  # fixed at create
        return super().apply(uow, old, fields)

    def before_delete(self, uow: UnitOfWork, entity: ConfigType) -> None:
        ids = sorted(c.id for c in uow.find_by(Config, "config_type_id", entity.id))
        if ids:
            raise ReferencedEntityError(
                field="type",
                value=ids,
                reason=f"entity type configTypes referenced by configs: [{' '.join(ids)}]",
            )


def ensure_builtin_config_types(env: Env) -> list[ConfigType]:
    """Create OpenZiti's built-in config types that this database has not had yet (idempotent).

    Each built-in is created once: a type an administrator deleted later is not brought back, and
    one whose name a user type already holds is skipped. Returns the types created.
    """
    store = env.store
    created: list[ConfigType] = []
    with store.write_lock():
        recorded = set(filter(None, (store.get_setting(BUILTINS_SETTING) or "").split(",")))
        seeded = set(recorded)
        uow = UnitOfWork(store)
        now = env.clock.now()
        for builtin in BUILTIN_CONFIG_TYPES:
            if builtin.name in seeded:
                continue
            seeded.add(builtin.name)
            if store.get(ConfigType, builtin.id) or store.find_unique(ConfigType, "name", builtin.name):
                continue
            entity = ConfigType(
                id=builtin.id,
                created_at=now,
                updated_at=now,
                name=builtin.name,
                schema=json.loads(builtin.schema_text),  # a copy of its own, 20x faster than deepcopy
                target=builtin.target,
            )
            uow.put(entity)
            created.append(entity)
        env.commit(uow)
        if seeded != recorded:
            store.put_setting(BUILTINS_SETTING, ",".join(sorted(seeded)))
    return created
