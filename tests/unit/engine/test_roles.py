"""Role-list rules (docs/policy.md §1.3, §7) on plain values."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from engine.errors import FieldError
from engine.roles import (
    EDGE_ROUTER_ROLES,
    IDENTITY_ROLES,
    SERVICE_ROLES,
    check_policy_roles,
    check_role_ids,
    check_role_syntax,
    check_semantic,
    is_semantic_valid,
    named_roles,
    sort_roles,
    split_roles,
)

PREFIX_REASON = (
    "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)"
)


@dataclass
class FakePolicy:
    semantic: str = "AllOf"
    identity_roles: list[str] = field(default_factory=list)
    service_roles: list[str] = field(default_factory=list)


def nothing_exists(_: str) -> bool:
    return False


@pytest.mark.parametrize("roles", [[], ["#all"], ["#a", "@b"], ["#"], ["@"]])
def test_valid_syntax_passes(roles: list[str]) -> None:
    check_role_syntax("identityRoles", roles)


@pytest.mark.parametrize("roles", [["#all", "#x"], ["#x", "#all"], ["#all", "#all"], ["#all", "bad"]])
def test_all_must_be_alone_and_reports_the_whole_list(roles: list[str]) -> None:
    with pytest.raises(FieldError) as info:
        check_role_syntax("serviceRoles", roles)

    assert info.value.cause() == {
        "field": "serviceRoles",
        "reason": "if using #all, it should be the only role specified",
        "value": "[" + " ".join(roles) + "]",
    }


def test_unprefixed_entries_are_reported_alone() -> None:
    with pytest.raises(FieldError) as info:
        check_role_syntax("identityRoles", ["#a", "b", "", "@c", "d"])

    assert info.value.cause() == {"field": "identityRoles", "reason": PREFIX_REASON, "value": "[b  d]"}


def test_split_strips_prefixes() -> None:
    assert split_roles(["#a", "@b", "#", "#all"]) == (["a", "", "all"], ["b"])


def test_missing_ids_name_the_target_store() -> None:
    with pytest.raises(FieldError) as info:
        check_role_ids(EDGE_ROUTER_ROLES, ["#x", "@a", "@b", "@c"], lambda i: i == "b")

    assert info.value.cause() == {
        "field": "edgeRouterRoles",
        "reason": "no routers found with the given ids",
        "value": "[a c]",
    }


def test_semantic_is_case_insensitive_in_the_store() -> None:
    assert is_semantic_valid("allof")
    assert is_semantic_valid("ANYOF")
    with pytest.raises(FieldError) as info:
        check_semantic("OneOf")
    assert info.value.cause() == {"field": "semantic", "reason": "invalid semantic", "value": "OneOf"}


def test_sort_is_byte_order() -> None:
    assert sort_roles(["@b", "#b", "#B", "#a", "@A", "#é"]) == ["#B", "#a", "#b", "#é", "@A", "@b"]


def test_check_policy_roles_syntax_before_semantic_before_ids() -> None:
    fields = [(IDENTITY_ROLES, nothing_exists), (SERVICE_ROLES, nothing_exists)]

    with pytest.raises(FieldError) as syntax:
        check_policy_roles(FakePolicy("bogus", ["@x"], ["bad"]), None, fields)
    with pytest.raises(FieldError) as semantic:
        check_policy_roles(FakePolicy("bogus", ["@x"], ["@y"]), None, fields)
    with pytest.raises(FieldError) as ids:
        check_policy_roles(FakePolicy("AnyOf", ["#a"], ["@y"]), None, fields)

    assert syntax.value.field == "serviceRoles"
    assert semantic.value.field == "semantic"
    assert ids.value.field == "serviceRoles"


def test_check_policy_roles_skips_id_checks_for_unchanged_fields() -> None:
    fields = [(IDENTITY_ROLES, nothing_exists), (SERVICE_ROLES, nothing_exists)]
    old = FakePolicy(identity_roles=["#a", "@gone"])

    check_policy_roles(FakePolicy(identity_roles=["@gone", "#a"], service_roles=["#s"]), old, fields)
    with pytest.raises(FieldError):
        check_policy_roles(FakePolicy(identity_roles=["@gone"]), old, fields)


def test_named_roles_resolves_and_skips_missing() -> None:
    names = {"i1": "alice"}

    display = named_roles(["#x", "@i1", "@gone", "#all"], names.get)

    assert display == [
        {"role": "#x", "name": "#x"},
        {"role": "@i1", "name": "@alice"},
        {"role": "#all", "name": "#all"},
    ]
