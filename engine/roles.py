"""Policy role lists: validation, canonical order and the ``*RolesDisplay`` view (docs/policy.md §1, §7).

A role list (``identityRoles``, ``serviceRoles``, ``edgeRouterRoles``, ``postureCheckRoles``) holds
``#attribute`` references, ``@id`` entity references and the wildcard ``#all``. OpenZiti validates a
policy write in a fixed order and reports the first failure:

1. every role field's syntax, in the policy kind's field order (:func:`check_role_syntax`);
2. the semantic (:func:`check_semantic`);
3. for each role field that changed, that every ``@id`` names an existing entity
   (:func:`check_role_ids`).

Everything here is pure: entity existence and names come in as callables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import FieldError

ROLE_PREFIX = "#"
ENTITY_PREFIX = "@"
ALL_ROLE = "#all"
SEMANTICS = ("AllOf", "AnyOf")

ALL_ONLY_REASON = "if using #all, it should be the only role specified"
# OpenZiti's message, grammar and all.
PREFIX_REASON = (
    "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)"
)


@dataclass(frozen=True)
class RoleField:
    """One role list of a policy kind.

    ``attr`` is the entity attribute, ``wire`` the REST field (the error's ``cause.field``) and
    ``target`` the OpenZiti store name used in ``no <target> found with the given ids``.
    """

    attr: str
    wire: str
    target: str


IDENTITY_ROLES = RoleField("identity_roles", "identityRoles", "identities")
SERVICE_ROLES = RoleField("service_roles", "serviceRoles", "services")
# Edge routers live in OpenZiti's router store, so the message names ``routers``.
EDGE_ROUTER_ROLES = RoleField("edge_router_roles", "edgeRouterRoles", "routers")
POSTURE_CHECK_ROLES = RoleField("posture_check_roles", "postureCheckRoles", "postureChecks")


def check_role_syntax(field: str, roles: Sequence[str]) -> None:
    """``#all`` alone, and every entry prefixed with ``#`` or ``@`` (``validateRolesAndIds``)."""
    if len(roles) > 1 and ALL_ROLE in roles:
        raise FieldError(field, ALL_ONLY_REASON, list(roles))
    invalid = [r for r in roles if not r.startswith((ROLE_PREFIX, ENTITY_PREFIX))]
    if invalid:
        raise FieldError(field, PREFIX_REASON, invalid)


def split_roles(roles: Iterable[str]) -> tuple[list[str], list[str]]:
    """(attribute names without ``#``, entity ids without ``@``), in list order."""
    attributes: list[str] = []
    ids: list[str] = []
    for role in roles:
        if role.startswith(ROLE_PREFIX):
            attributes.append(role[1:])
        elif role.startswith(ENTITY_PREFIX):
            ids.append(role[1:])
    return attributes, ids


def check_role_ids(field: RoleField, roles: Sequence[str], exists: Callable[[str], bool]) -> None:
    """Every ``@id`` names an existing entity; the error lists only the missing ids."""
    _, ids = split_roles(roles)
    missing = [i for i in ids if not exists(i)]
    if missing:
        raise FieldError(field.wire, f"no {field.target} found with the given ids", missing)


def is_semantic_valid(semantic: str) -> bool:
    """AllOf or AnyOf, compared case-insensitively as OpenZiti's store does."""
    return semantic.lower() in ("allof", "anyof")


def check_semantic(semantic: str) -> None:
    if not is_semantic_valid(semantic):
        raise FieldError("semantic", "invalid semantic", semantic)


def sort_roles(roles: Iterable[str]) -> list[str]:
    """The stored list: OpenZiti's store keeps a role list as the keys of a bucket, so it reads
    back in byte order of the UTF-8 strings (code point order: ``#`` entries come before ``@``
    entries) and without duplicates."""
    return sorted(set(roles))


def check_policy_roles(
    new: Any,
    old: Any | None,
    fields: Sequence[tuple[RoleField, Callable[[str], bool]]],
) -> None:
    """Validate a policy write in OpenZiti's order.

    ``fields`` pairs each role field of the kind (in the kind's order) with an existence test for
    its target entities. Syntax errors report ``new``'s lists in input order; ids are checked on
    the sorted lists (as OpenZiti evaluates the stored value), and only for fields whose sorted
    value differs from ``old``'s stored one (all of them on create; OpenZiti compares the sorted
    new list with the stored set, so a list holding a duplicate always differs).
    """
    for field, _ in fields:
        check_role_syntax(field.wire, getattr(new, field.attr))
    check_semantic(new.semantic)
    for field, exists in fields:
        roles = sorted(getattr(new, field.attr))
        if old is not None and sort_roles(getattr(old, field.attr)) == roles:
            continue
        check_role_ids(field, roles, exists)


def named_roles(roles: Iterable[str], name_of: Callable[[str], str | None]) -> list[dict[str, str]]:
    """The ``*RolesDisplay`` list: ``#x`` -> ``{role: "#x", name: "#x"}``, ``@id`` ->
    ``{role: "@id", name: "@" + name}``; an ``@id`` whose entity is gone is skipped."""
    out: list[dict[str, str]] = []
    for role in roles:
        if role.startswith(ENTITY_PREFIX):
            name = name_of(role[1:])
            if name is None:
                continue
            out.append({"role": role, "name": ENTITY_PREFIX + name})
        else:
            out.append({"role": role, "name": role})
    return out
