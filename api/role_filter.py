"""``roleFilter`` / ``roleSemantic`` on the identity, service, edge router and posture check lists,
and the ``*-role-attributes`` lists.

The request parameters are checked here; the matching (docs/policy.md §1.5: ``#attr`` entries
under AllOf or AnyOf, known ``@id`` entries unioned in, ``#all`` not special) and the attribute
index are the policy engine's (``AccessManager.role_filter`` / ``attribute_names``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar, overload

import falcon

from api.http import Loaded, list_strings
from api.middleware import ADMIN
from engine.entities import Entity
from engine.errors import FieldError
from engine.managers.access import AccessManager

E = TypeVar("E", bound=Entity)

PREFIX_REASON = (
    "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)"
)


def role_ids(req: falcon.Request, access: AccessManager, kind: type[Entity]) -> set[str] | None:
    """The ids of ``kind`` the request's ``roleFilter`` selects, or None when it has none."""
    roles = req.get_param_as_list("roleFilter") or []
    semantic = req.get_param("roleSemantic") or "AllOf"
    if semantic.lower() not in ("allof", "anyof"):
        raise FieldError("semantic", "invalid semantic", semantic)
    if not roles:
        return None
    for role in roles:
        if not role.startswith(("#", "@")):
            raise FieldError("roleFilter", PREFIX_REASON, role)
    return access.role_filter(kind, roles, semantic)


@overload
def role_filtered(
    req: falcon.Request, items: Loaded[E], access: AccessManager, kind: type[E]
) -> Loaded[E]: ...


@overload
def role_filtered(
    req: falcon.Request, items: Iterable[E], access: AccessManager, kind: type[E]
) -> Iterable[E]: ...


def role_filtered(
    req: falcon.Request, items: Iterable[E] | Loaded[E], access: AccessManager, kind: type[E]
) -> Iterable[E] | Loaded[E]:
    """``items`` narrowed by the request's ``roleFilter`` (unchanged when there is none)."""
    keep = role_ids(req, access, kind)
    if keep is None:
        return items
    if isinstance(items, Loaded):
        return Loaded([id for id in items.ids if id in keep], items.load)
    return [e for e in items if e.id in keep]


class RoleAttributes:
    """``GET /<kind>-role-attributes``: the distinct role attributes entities of a kind carry."""

    auth = ADMIN

    def __init__(self, access: AccessManager, kind: type[Entity]) -> None:
        self.access = access
        self.kind = kind

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        list_strings(req, resp, self.access.attribute_names(self.kind))
