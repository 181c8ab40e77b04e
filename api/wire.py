"""Wire helpers shared by every resource: request models, timestamps, links, entity refs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from engine.entities import Entity
from engine.errors import FieldError


class WireModel(BaseModel):
    """A request body: camelCase on the wire, unknown keys ignored (as go-swagger does)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    def fields_set(self) -> dict[str, Any]:
        """The fields the client sent, snake_case (a PATCH's changes)."""
        return {name: getattr(self, name) for name in self.model_fields_set}

    def all_fields(self) -> dict[str, Any]:
        """Every field with defaults for absent ones (a PUT's replacement)."""
        return {name: getattr(self, name) for name in type(self).model_fields}


def _check_tags(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    for key, item in value.items():
        # The seeds and the spec limit tag values to null, string and boolean.
        if item is not None and not isinstance(item, (str, bool)):
            raise ValueError(f"tag '{key}' must be null, a string or a boolean")
    return value


Tags = Annotated[dict[str, Any] | None, AfterValidator(_check_tags)]
Cost = Annotated[int, Field(ge=0, le=65535)]
Attributes = list[str] | None


def one_of(field: str, allowed: tuple[str, ...]) -> Callable[[str], str]:
    """A validator for a REST enum, failing with go-swagger's wording."""

    def check(value: str) -> str:
        if value not in allowed:
            raise PydanticCustomError("enum", f"{field} in body should be one of [{' '.join(allowed)}]")
        return value

    return check


#: The REST ``semantic`` enum (exact match; OpenZiti's store would also take other casings).
Semantic = Annotated[str, AfterValidator(one_of("semantic", ("AllOf", "AnyOf")))]


def ts(value: datetime | None) -> str | None:
    """RFC 3339 with milliseconds and ``Z``, as OpenZiti's strfmt.DateTime renders."""
    if value is None:
        return None
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def link(entity: str, id: str, sub: str | None = None) -> dict[str, str]:
    href = f"./{entity}/{id}" if sub is None else f"./{entity}/{id}/{sub}"
    return {"href": href}


def links(entity: str, id: str, *subs: str) -> dict[str, Any]:
    out: dict[str, Any] = {"self": link(entity, id)}
    for sub in subs:
        out[sub] = link(entity, id, sub)
    return out


def ref(entity: Entity | None, name: str | None = None) -> dict[str, Any] | None:
    """An OpenZiti entity reference ``{_links, entity, id, name}``."""
    if entity is None:
        return None
    return {
        "_links": {"self": link(entity.ENTITY, entity.id)},
        "entity": entity.ENTITY,
        "id": entity.id,
        "name": name if name is not None else getattr(entity, "name", ""),
    }


def base(entity: Entity, *subs: str) -> dict[str, Any]:
    """The common entity fields."""
    return {
        "_links": links(entity.ENTITY, entity.id, *subs),
        "id": entity.id,
        "createdAt": ts(entity.created_at),
        "updatedAt": ts(entity.updated_at),
        "tags": entity.tags,
    }


def require_field(value: object, field: str) -> None:
    if value is None:
        raise FieldError(field, f"{field} in body is required")
