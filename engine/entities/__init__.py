"""Entities: plain dataclasses, one module per area, no behaviour beyond field defaults.

Every entity carries the OpenZiti common fields (``id``, ``created_at``, ``updated_at``,
``tags``). ``ENTITY`` is the OpenZiti entity (collection) name used in entity references and
links; ``UNIQUE`` names fields whose non-null values are unique within the kind; ``INDEXED`` names
fields looked up often (foreign keys); ``MULTI_INDEXED`` names collection fields indexed by each
value they hold (role attributes: ``anyOf(roleAttributes) = "x"`` in a list's filter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar


@dataclass(kw_only=True)
class Entity:
    ENTITY: ClassVar[str] = ""
    UNIQUE: ClassVar[tuple[str, ...]] = ()
    #: Fields with a non-unique lookup index (``Store.find_by``).
    INDEXED: ClassVar[tuple[str, ...]] = ()
    #: Collection fields (of hashable values) with a lookup by each value they hold.
    MULTI_INDEXED: ClassVar[tuple[str, ...]] = ()

    id: str
    created_at: datetime
    updated_at: datetime
    tags: dict[str, Any] = field(default_factory=dict)


ALL_KINDS: list[type[Entity]] = []


def register(kind: type[Entity]) -> type[Entity]:
    """Class decorator: make the kind known to storage (one table per kind)."""
    ALL_KINDS.append(kind)
    return kind
