"""Wire helpers shared by every resource: request models, timestamps, links, entity refs."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from engine.entities import Entity
from engine.errors import FieldError
from engine.memo import PerObject

#: OpenZiti's integers are Go ``int64``s; no number outside this range is ever stored.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: The longest Go ``time.Duration`` in whole seconds (about 292 years). OpenZiti multiplies a
#: seconds field such as ``timeoutSeconds`` into a Duration, which wraps around beyond it; here a
#: larger value is refused (Python's date arithmetic would overflow on it).
MAX_DURATION_SECONDS = INT64_MAX // 1_000_000_000


def json_number_problem(value: Any) -> tuple[str, str] | None:
    """``(path, reason)`` for the first number in a JSON value that cannot be stored: an integer
    outside ``int64`` or a non-finite float (pydantic reads ``NaN``/``Infinity`` and ``1e400``,
    which are no JSON numbers for a Go client). Walks without recursion; ``path`` is relative
    (``""`` for ``value`` itself, ``a.b[2]`` inside it). Nested wire models are skipped: they
    check their own fields."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, bool) or item is None or isinstance(item, str | BaseModel):
            continue
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                return path, f"integer {item} does not fit in a signed 64-bit integer"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, f"{item} is not a JSON number"
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(item))))
    return None


class WireModel(BaseModel):
    """A request body: camelCase on the wire, unknown keys ignored (as go-swagger does).

    Every field, free-form maps (``appData``, config ``data``, a config type's ``schema``)
    included, is refused with COULD_NOT_VALIDATE when it holds a number no Go client could send
    and storage could not keep: an integer outside ``int64``, ``NaN`` or an infinity.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True, allow_inf_nan=False
    )

    @field_validator("*", mode="after")
    @classmethod
    def _storable_numbers(cls, value: Any) -> Any:
        if value is None or isinstance(value, str | bool | BaseModel):
            return value
        problem = json_number_problem(value)
        if problem is not None:
            path, reason = problem
            text = f"{path}: {reason}" if path else reason
            raise PydanticCustomError("number_range", "{reason}", {"reason": text})
        return value

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
    return _rfc3339(value)


def _format(value: datetime) -> str:
    v = value.astimezone(UTC)
    return (
        f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}."
        f"{v.microsecond // 1000:03d}Z"
    )


#: :func:`_format` memoised: the same entities' timestamps are rendered on every list (a page of
#: 286 services renders ~600 of them).
_rfc3339 = functools.lru_cache(maxsize=16384)(_format)


def ts_fresh(value: datetime) -> str:
    """:func:`ts` of an instant just computed (an API session's expiry on every answer), not
    memoised: such an instant is rarely rendered twice, and would push the entities' timestamps
    out of the memo."""
    return _format(value)


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
    out = {
        "_links": {"self": link(entity.ENTITY, entity.id)},
        "entity": entity.ENTITY,
        "id": entity.id,
    }
    shown = name if name is not None else getattr(entity, "name", "")
    if shown:  # Go's omitempty: an entity without a name (an API session) has no ``name``
        out["name"] = shown
    return out


def base(entity: Entity, *subs: str) -> dict[str, Any]:
    """The common entity fields."""
    return {
        "_links": links(entity.ENTITY, entity.id, *subs),
        "id": entity.id,
        "createdAt": ts(entity.created_at),
        "updatedAt": ts(entity.updated_at),
        "tags": entity.tags,
    }


E = TypeVar("E", bound=Entity)

#: How many entities' forms a :class:`Forms` keeps (then it starts afresh).
FORMS_KEPT = 8192


class Forms(Generic[E]):
    """The part of a kind's wire form that depends on the entity alone (``make``), made once per
    entity version (:class:`~engine.memo.PerObject`): a list that renders the same entities
    again and again copies their forms instead of building them. Each call answers a new dict (a
    shallow copy: the nested values are shared and never changed)."""

    def __init__(self, make: Callable[[E], dict[str, Any]], kept: int = FORMS_KEPT) -> None:
        self._forms: PerObject[E, dict[str, Any]] = PerObject(make, kept)

    def __call__(self, entity: E) -> dict[str, Any]:
        return dict(self._forms(entity))


def require_field(value: object, field: str) -> None:
    if value is None:
        raise FieldError(field, f"{field} in body is required")
