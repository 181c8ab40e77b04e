"""Config types, configs and services at the manager level, on the in-memory store."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from api.json_schemas import JsonSchemaChecker
from engine.entities.services import Config, ConfigType, Service
from engine.errors import FieldError, ReferencedEntityError
from engine.managers._base import Env
from engine.managers.builtin_config_types import BUILTIN_CONFIG_TYPES, HOST_V1_ID, INTERCEPT_V1_ID
from engine.managers.config_types import ConfigTypeManager, ensure_builtin_config_types
from engine.managers.configs import ConfigManager, check_data, go_value, narrow_numbers
from engine.managers.services import ServiceManager
from engine.testing import CheapHasher, CountingIds, FixedClock
from storage.memory import MemoryStore

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def env(authority: Any, signer: Any) -> Env:
    return Env(
        store=MemoryStore(),
        clock=FixedClock(NOW),
        ids=CountingIds(),
        hasher=CheapHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=signer,
    )


def test_builtins_are_created_once_with_openziti_ids(env: Env) -> None:
    first = ensure_builtin_config_types(env)
    second = ensure_builtin_config_types(env)

    assert {t.name for t in first} == {b.name for b in BUILTIN_CONFIG_TYPES}
    assert second == []
    intercept = env.store.get(ConfigType, INTERCEPT_V1_ID)
    host = env.store.get(ConfigType, HOST_V1_ID)
    assert intercept is not None
    assert intercept.name == "intercept.v1"
    assert host is not None
    assert host.name == "host.v1"


def test_a_deleted_builtin_is_not_recreated(env: Env) -> None:
    ensure_builtin_config_types(env)
    ConfigTypeManager(env).delete(HOST_V1_ID)

    assert ensure_builtin_config_types(env) == []
    assert env.store.get(ConfigType, HOST_V1_ID) is None


def test_a_user_type_holding_a_builtin_name_is_left_alone(env: Env) -> None:
    mine = ConfigTypeManager(env).create({"name": "host.v1"})

    ensure_builtin_config_types(env)

    assert env.store.get(ConfigType, HOST_V1_ID) is None
    assert env.store.find_unique(ConfigType, "name", "host.v1") == mine


def test_all_is_not_a_config_type_name(env: Env) -> None:
    with pytest.raises(FieldError) as info:
        ConfigTypeManager(env).create({"name": "all"})

    assert info.value.field == "name"


def test_type_with_configs_cannot_be_deleted(env: Env) -> None:
    config_type = ConfigTypeManager(env).create({"name": "t"})
    config = ConfigManager(env).create({"name": "c", "config_type_id": config_type.id, "data": {}})

    with pytest.raises(ReferencedEntityError) as info:
        ConfigTypeManager(env).delete(config_type.id)

    assert info.value.value == [config.id]


def test_config_type_of_a_config_never_changes(env: Env) -> None:
    first = ConfigTypeManager(env).create({"name": "one"})
    second = ConfigTypeManager(env).create({"name": "two"})
    config = ConfigManager(env).create({"name": "c", "config_type_id": first.id, "data": {}})

    updated = ConfigManager(env).update(config.id, {"config_type_id": second.id, "name": "c2"})

    assert (updated.config_type_id, updated.name) == (first.id, "c2")


def test_one_config_per_type_per_service(env: Env) -> None:
    config_type = ConfigTypeManager(env).create({"name": "t"})
    a = ConfigManager(env).create({"name": "a", "config_type_id": config_type.id, "data": {}})
    b = ConfigManager(env).create({"name": "b", "config_type_id": config_type.id, "data": {}})

    with pytest.raises(FieldError) as info:
        ServiceManager(env).create({"name": "s", "configs": [a.id, b.id]})

    assert info.value.field == "configs"
    assert env.store.all(Service) == []


def test_encryption_required_is_read_only_after_create(env: Env) -> None:
    created = ServiceManager(env).create({"name": "s", "encryption_required": False})

    updated = ServiceManager(env).update(created.id, {"encryption_required": True, "name": "t"})

    assert (updated.encryption_required, updated.name) == (False, "t")


def test_deleting_a_config_detaches_it_from_services(env: Env) -> None:
    config_type = ConfigTypeManager(env).create({"name": "t"})
    config = ConfigManager(env).create({"name": "c", "config_type_id": config_type.id, "data": {}})
    created = ServiceManager(env).create({"name": "s", "configs": ["c"]})

    ConfigManager(env).delete(config.id)

    service = env.store.get(Service, created.id)
    assert service is not None
    assert service.configs == []
    assert env.store.get(Config, config.id) is None


SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["a"],
    "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": 1}},
}


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({}, "(root)", "(root) is invalid: (root): a is required"),
        ({"a": []}, "a", "a is invalid: a: Array must have at least 1 items"),
        ({"a": [1, "x"]}, "a.1", "a.1 is invalid: a.1: Invalid type. Expected: integer, given: string"),
    ],
)
def test_schema_errors_read_like_openzitis(data: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(FieldError) as info:
        check_data(JsonSchemaChecker(), SCHEMA, data)

    assert (info.value.field, info.value.reason) == (field, reason)


def test_values_print_like_go() -> None:
    assert go_value({"b": [1, True], "a": None, "c": 2.0}) == "map[a:<nil> b:[1 true] c:2]"


def test_whole_numbers_are_narrowed_to_int() -> None:
    assert narrow_numbers({"a": 1.0, "b": [2.0, 2.5], "c": {"d": 3.0}}) == {
        "a": 1,
        "b": [2, 2.5],
        "c": {"d": 3},
    }
