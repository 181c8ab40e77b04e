"""``roleFilter`` / ``roleSemantic`` on the identity, service, edge router and posture check lists.

OpenZiti (``baseStore.getRoleAttributesCursorProvider``): ``#attr`` entries select entities by
their role attributes, every one under AllOf (the default) or any one under AnyOf; ``@id``
entries are unioned in when the entity exists, unknown ids are dropped; ``#all`` is not special.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import falcon

from engine.entities import Entity
from engine.errors import FieldError

E = TypeVar("E", bound=Entity)


def role_filtered(
    req: falcon.Request, items: Iterable[E], attributes: Callable[[E], list[str]]
) -> Iterable[E]:
    """``items`` narrowed by the request's ``roleFilter`` (unchanged when there is none)."""
    roles = req.get_param_as_list("roleFilter") or []
    semantic = (req.get_param("roleSemantic") or "AllOf").lower()
    if semantic not in ("allof", "anyof"):
        raise FieldError("semantic", "invalid semantic", req.get_param("roleSemantic"))
    if not roles:
        return items
    attrs: set[str] = set()
    ids: set[str] = set()
    for role in roles:
        if role.startswith("#"):
            attrs.add(role[1:])
        elif role.startswith("@"):
            ids.add(role[1:])
        else:
            raise FieldError(
                "roleFilter",
                "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)",
                role,
            )

    def keep(entity: E) -> bool:
        if entity.id in ids:
            return True
        if not attrs:
            return False
        have = set(attributes(entity))
        return attrs <= have if semantic == "allof" else bool(attrs & have)

    return [e for e in items if keep(e)]


def attribute_values(items: Iterable[E], attributes: Callable[[E], list[str]]) -> list[str]:
    """The distinct role attributes carried by ``items`` (the ``*-role-attributes`` lists)."""
    out: set[str] = set()
    for entity in items:
        out.update(attributes(entity))
    return sorted(out)
