"""Entity <-> JSON document conversion for storage, driven by the dataclass type hints."""

from __future__ import annotations

import dataclasses
import json
import typing
from datetime import datetime
from typing import Any

from engine.entities import Entity


def encode(entity: Entity) -> str:
    """The entity's fields (without ``id``) as a JSON document; datetimes in ISO 8601."""
    doc = {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity) if f.name != "id"}
    return json.dumps(doc, default=_default, separators=(",", ":"), sort_keys=True)


def decode(kind: type[Entity], id: str, document: str) -> Entity:
    """Rebuild an entity of ``kind``; unknown keys (from newer versions) are ignored."""
    raw = json.loads(document)
    datetime_fields = _datetime_fields(kind)
    known = _field_names(kind)
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            continue
        if key in datetime_fields and isinstance(value, str):
            value = datetime.fromisoformat(value)
        values[key] = value
    return kind(id=id, **values)


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__}")


_FIELD_NAMES: dict[type[Entity], frozenset[str]] = {}
_DATETIME_FIELDS: dict[type[Entity], frozenset[str]] = {}


def _field_names(kind: type[Entity]) -> frozenset[str]:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = frozenset(f.name for f in dataclasses.fields(kind))
    return names


def _datetime_fields(kind: type[Entity]) -> frozenset[str]:
    cached = _DATETIME_FIELDS.get(kind)
    if cached is None:
        hints = typing.get_type_hints(kind)
        cached = frozenset(
            name for name, hint in hints.items() if hint is datetime or datetime in typing.get_args(hint)
        )
        _DATETIME_FIELDS[kind] = cached
    return cached
