"""Entity <-> JSON document conversion for storage, driven by the dataclass type hints."""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from typing import Any

import orjson

from engine.entities import Entity

_FIELD_NAMES: dict[type[Entity], frozenset[str]] = {}
_DATETIME_FIELDS: dict[type[Entity], frozenset[str]] = {}


def encode(entity: Entity) -> str:
    """The entity's fields (without ``id``) as a JSON document; datetimes in RFC 3339."""
    doc = {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity) if f.name != "id"}
    try:
        return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONEncodeError as ex:
        raise TypeError(f"cannot store {type(entity).__name__} {entity.id}: {ex}") from None


def decode(kind: type[Entity], id: str, document: str) -> Entity:
    """Rebuild an entity of ``kind``; unknown keys (from newer versions) are ignored."""
    raw: dict[str, Any] = orjson.loads(document)
    for key in _datetime_fields(kind):
        value = raw.get(key)
        if isinstance(value, str):
            raw[key] = datetime.fromisoformat(value)
    known = _field_names(kind)
    if not raw.keys() <= known:
        raw = {k: v for k, v in raw.items() if k in known}
    return kind(id=id, **raw)


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
