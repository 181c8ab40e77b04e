"""``/service-policies``: CRUD, role-list validation (docs/policy.md §1.3), display, filters."""

from __future__ import annotations

from typing import Any

import pytest

from engine.entities.identities import Identity
from engine.entities.services import Service
from engine.managers.identities import IdentityManager
from tests.api.policy_helpers import field_error, make_identity, make_posture_check, make_service, remove
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

PATH = "/service-policies"
PREFIX_REASON = (
    "role entries must prefixed with # (to indicate role attributes) or @ (to indicate a name or id)"
)


def body(**overrides: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "sp-1", "type": "Dial", "semantic": "AllOf"}
    out.update(overrides)
    return out


# -- CRUD ---------------------------------------------------------------------------------------
def test_create_returns_201_with_self_link(api: Api) -> None:
    result = api.post(PATH, json=body())

    assert result.status_code == 201
    new_id = result.json["data"]["id"]
    assert result.json["data"] == {"_links": {"self": {"href": f"./service-policies/{new_id}"}}, "id": new_id}


def test_read_renders_service_policy_detail(api: Api) -> None:
    sp = api.create(PATH, body(identityRoles=["#b", "#a"], serviceRoles=["#all"], tags={"k": "v"}))

    data = api.get(f"{PATH}/{sp}").json["data"]

    assert data["id"] == sp
    assert data["name"] == "sp-1"
    assert data["type"] == "Dial"
    assert data["semantic"] == "AllOf"
    assert data["identityRoles"] == ["#a", "#b"]
    assert data["identityRolesDisplay"] == [{"role": "#a", "name": "#a"}, {"role": "#b", "name": "#b"}]
    assert data["serviceRoles"] == ["#all"]
    assert data["serviceRolesDisplay"] == [{"role": "#all", "name": "#all"}]
    assert data["postureCheckRoles"] == []
    assert data["postureCheckRolesDisplay"] == []
    assert data["tags"] == {"k": "v"}
    assert data["_links"] == {
        "self": {"href": f"./service-policies/{sp}"},
        "identities": {"href": f"./service-policies/{sp}/identities"},
        "posture-checks": {"href": f"./service-policies/{sp}/posture-checks"},
        "services": {"href": f"./service-policies/{sp}/services"},
    }
    assert data["createdAt"].endswith("Z")


def test_unknown_id_is_404(api: Api) -> None:
    for method in (api.get, api.delete):
        result = method(f"{PATH}/nope")
        assert result.status_code == 404
        assert result.json["error"]["code"] == "NOT_FOUND"
    assert api.put(f"{PATH}/nope", json=body()).status_code == 404
    assert api.patch(f"{PATH}/nope", json={"name": "x"}).status_code == 404


def test_put_replaces_and_resets_omitted_roles(api: Api) -> None:
    sp = api.create(PATH, body(identityRoles=["#a"], serviceRoles=["#s"], tags={"k": "1"}))

    result = api.put(f"{PATH}/{sp}", json={"name": "renamed", "type": "Bind", "semantic": "AnyOf"})

    assert result.status_code == 200
    assert result.json["data"] == {}
    data = api.get(f"{PATH}/{sp}").json["data"]
    assert (data["name"], data["type"], data["semantic"]) == ("renamed", "Bind", "AnyOf")
    assert data["identityRoles"] == []
    assert data["serviceRoles"] == []
    assert data["tags"] == {}


def test_patch_changes_only_given_fields(api: Api) -> None:
    sp = api.create(PATH, body(identityRoles=["#a"], serviceRoles=["#s"]))

    result = api.patch(f"{PATH}/{sp}", json={"serviceRoles": ["#t", "#r"]})

    assert result.status_code == 200
    data = api.get(f"{PATH}/{sp}").json["data"]
    assert data["identityRoles"] == ["#a"]
    assert data["serviceRoles"] == ["#r", "#t"]
    assert data["type"] == "Dial"


def test_delete_removes_the_policy(api: Api) -> None:
    sp = api.create(PATH, body())

    assert api.delete(f"{PATH}/{sp}").json["data"] == {}
    assert api.get(f"{PATH}/{sp}").status_code == 404


def test_duplicate_name_is_rejected(api: Api) -> None:
    api.create(PATH, body())

    cause = field_error(api.post(PATH, json=body()))

    assert cause["field"] == "name"
    assert cause["reason"] == "duplicate value 'sp-1' in unique index on servicePolicies store"


def test_requires_admin(anon: Api) -> None:
    assert anon.get(PATH).status_code == 401
    assert anon.post(PATH, json=body()).status_code == 401


# -- required fields and enums ------------------------------------------------------------------
@pytest.mark.parametrize("field", ["name", "type", "semantic"])
def test_create_requires_name_type_and_semantic(api: Api, field: str) -> None:
    payload = body()
    del payload[field]

    cause = field_error(api.post(PATH, json=payload))

    assert cause["field"] == field
    assert cause["reason"] == f"{field} in body is required"


@pytest.mark.parametrize("field", ["name", "type", "semantic"])
def test_put_requires_name_type_and_semantic(api: Api, field: str) -> None:
    sp = api.create(PATH, body())
    payload = body()
    del payload[field]

    assert field_error(api.put(f"{PATH}/{sp}", json=payload))["field"] == field


def test_null_required_field_counts_as_missing(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(semantic=None)))

    assert cause == {"field": "semantic", "reason": "semantic in body is required"}


def test_semantic_enum_is_exact(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(semantic="allof")))

    assert cause["field"] == "semantic"
    assert cause["reason"] == "semantic in body should be one of [AllOf AnyOf]"
    assert cause["value"] == "allof"


def test_type_outside_the_rest_enum_is_rejected(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(type="dial")))

    assert cause["field"] == "type"
    assert cause["reason"] == "type in body should be one of [Dial Bind Invalid]"


def test_type_invalid_is_refused_by_the_model(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(type="Invalid")))

    assert cause == {
        "field": "policyType",
        "reason": "invalid policy type. valid types are 'Dial' and 'Bind'",
        "value": "Invalid",
    }


def test_patch_may_change_the_type(api: Api) -> None:
    sp = api.create(PATH, body())

    api.patch(f"{PATH}/{sp}", json={"type": "Bind"})

    assert api.get(f"{PATH}/{sp}").json["data"]["type"] == "Bind"


# -- role validation (docs/policy.md §1.3) ------------------------------------------------------
def test_all_must_be_alone(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(identityRoles=["#all", "#other"])))

    assert cause == {
        "field": "identityRoles",
        "reason": "if using #all, it should be the only role specified",
        "value": "[#all #other]",
    }


def test_duplicate_all_also_fails(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(serviceRoles=["#all", "#all"])))

    assert cause["field"] == "serviceRoles"
    assert cause["value"] == "[#all #all]"


def test_all_error_value_keeps_input_order(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(postureCheckRoles=["#z", "#all"])))

    assert cause["field"] == "postureCheckRoles"
    assert cause["value"] == "[#z #all]"


def test_entries_need_a_prefix(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(identityRoles=["#ok", "bare", "", "@x"])))

    assert cause["field"] == "identityRoles"
    assert cause["reason"] == PREFIX_REASON
    assert cause["value"] == "[bare ]"


def test_lone_hash_is_a_valid_empty_attribute(api: Api) -> None:
    sp = api.create(PATH, body(identityRoles=["#"]))

    assert api.get(f"{PATH}/{sp}").json["data"]["identityRoles"] == ["#"]


def test_unknown_identity_id_is_rejected_with_only_invalid_ids(api: Api, app: Any) -> None:
    known = make_identity(app, "alice")

    cause = field_error(api.post(PATH, json=body(identityRoles=[f"@{known}", "@ghost", "#a"])))

    assert cause == {
        "field": "identityRoles",
        "reason": "no identities found with the given ids",
        "value": "[ghost]",
    }


def test_unknown_service_id_is_rejected(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(serviceRoles=["@s1"])))

    assert cause == {
        "field": "serviceRoles",
        "reason": "no services found with the given ids",
        "value": "[s1]",
    }


def test_unknown_posture_check_id_is_rejected(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(postureCheckRoles=["@p2", "@p1"])))

    assert cause == {
        "field": "postureCheckRoles",
        "reason": "no postureChecks found with the given ids",
        "value": "[p1 p2]",
    }


def test_name_is_not_an_id(api: Api, app: Any) -> None:
    make_identity(app, "alice")

    cause = field_error(api.post(PATH, json=body(identityRoles=["@alice"])))

    assert cause["reason"] == "no identities found with the given ids"


def test_syntax_errors_of_later_fields_win_over_id_errors_of_earlier_ones(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(identityRoles=["@ghost"], postureCheckRoles=["bad"])))

    assert cause["field"] == "postureCheckRoles"
    assert cause["reason"] == PREFIX_REASON


def test_syntax_checks_run_in_field_order(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(serviceRoles=["bad"], identityRoles=["#all", "#x"])))

    assert cause["field"] == "identityRoles"


def test_id_checks_run_in_field_order(api: Api) -> None:
    cause = field_error(api.post(PATH, json=body(postureCheckRoles=["@p"], serviceRoles=["@s"])))

    assert cause["field"] == "serviceRoles"


def test_ids_are_checked_only_for_changed_fields(api: Api, app: Any) -> None:
    identity = make_identity(app, "bob")
    sp = api.create(PATH, body(identityRoles=[f"@{identity}"]))
    # Remove the identity behind the API's back: the stored reference is now dangling.
    remove(app, Identity, identity)

    unchanged = api.patch(f"{PATH}/{sp}", json={"serviceRoles": ["#s"]})
    changed = api.patch(f"{PATH}/{sp}", json={"identityRoles": [f"@{identity}", "#x"]})

    assert unchanged.status_code == 200
    assert field_error(changed)["reason"] == "no identities found with the given ids"


def test_reordered_roles_do_not_count_as_changed(api: Api, app: Any) -> None:
    identity = make_identity(app, "carol")
    sp = api.create(PATH, body(identityRoles=[f"@{identity}", "#a"]))
    remove(app, Identity, identity)

    result = api.patch(f"{PATH}/{sp}", json={"identityRoles": ["#a", f"@{identity}"]})

    assert result.status_code == 200


def test_refused_write_changes_nothing(api: Api) -> None:
    sp = api.create(PATH, body(identityRoles=["#a"]))

    api.patch(f"{PATH}/{sp}", json={"identityRoles": ["#all", "#b"]})

    assert api.get(f"{PATH}/{sp}").json["data"]["identityRoles"] == ["#a"]


# -- sorting and display ------------------------------------------------------------------------
def test_roles_are_stored_in_byte_order(api: Api, app: Any) -> None:
    ident = make_identity(app, "dave")
    sp = api.create(PATH, body(identityRoles=[f"@{ident}", "#b", "#B", "#a"]))

    assert api.get(f"{PATH}/{sp}").json["data"]["identityRoles"] == ["#B", "#a", "#b", f"@{ident}"]


def test_roles_display_names_entities(api: Api, app: Any) -> None:
    ident = make_identity(app, "erin")
    service = make_service(app, "web")
    check = make_posture_check(app, "mfa")

    sp = api.create(
        PATH,
        body(
            identityRoles=[f"@{ident}", "#x"], serviceRoles=[f"@{service}"], postureCheckRoles=[f"@{check}"]
        ),
    )
    data = api.get(f"{PATH}/{sp}").json["data"]

    assert data["identityRolesDisplay"] == [
        {"role": "#x", "name": "#x"},
        {"role": f"@{ident}", "name": "@erin"},
    ]
    assert data["serviceRolesDisplay"] == [{"role": f"@{service}", "name": "@web"}]
    assert data["postureCheckRolesDisplay"] == [{"role": f"@{check}", "name": "@mfa"}]


def test_deleting_an_identity_drops_its_id_from_policies(api: Api, app: Any) -> None:
    ident = make_identity(app, "frank")
    sp = api.create(PATH, body(identityRoles=[f"@{ident}", "#keep"]))

    IdentityManager(app.ctrl.env).delete(ident)

    data = api.get(f"{PATH}/{sp}").json["data"]
    assert data["identityRoles"] == ["#keep"]
    assert data["identityRolesDisplay"] == [{"role": "#keep", "name": "#keep"}]


def test_display_skips_a_dangling_reference(api: Api, app: Any) -> None:
    service = make_service(app, "gone")
    sp = api.create(PATH, body(serviceRoles=[f"@{service}"]))
    remove(app, Service, service)

    data = api.get(f"{PATH}/{sp}").json["data"]
    assert data["serviceRoles"] == [f"@{service}"]
    assert data["serviceRolesDisplay"] == []


# -- listing ------------------------------------------------------------------------------------
def test_list_filters_and_pages(api: Api) -> None:
    for i in range(5):
        api.create(PATH, body(name=f"p{i}", type="Dial" if i % 2 else "Bind", identityRoles=[f"#r{i}"]))

    dial = api.get(PATH, params={"filter": 'type = "Dial"'}).json
    by_role = api.get(PATH, params={"filter": 'anyOf(identityRoles) = "#r3"'}).json
    page = api.get(PATH, params={"limit": "2", "offset": "1", "sort": "name"}).json

    assert sorted(p["name"] for p in dial["data"]) == ["p1", "p3"]
    assert [p["name"] for p in by_role["data"]] == ["p3"]
    assert [p["name"] for p in page["data"]] == ["p1", "p2"]
    assert page["meta"]["pagination"] == {"limit": 2, "offset": 1, "totalCount": 5}
    assert page["meta"]["filterableFields"] == sorted(
        [
            "id",
            "name",
            "semantic",
            "type",
            "identityRoles",
            "serviceRoles",
            "postureCheckRoles",
            "identities",
            "services",
            "createdAt",
            "updatedAt",
            "isSystem",
            "tags",
        ]
    )


def test_list_filters_on_semantic_and_tags(api: Api) -> None:
    api.create(PATH, body(name="a", semantic="AnyOf", tags={"team": "x"}))
    api.create(PATH, body(name="b"))

    any_of = api.get(PATH, params={"filter": 'semantic = "AnyOf"'}).json["data"]
    tagged = api.get(PATH, params={"filter": 'tags.team = "x"'}).json["data"]

    assert [p["name"] for p in any_of] == ["a"]
    assert [p["name"] for p in tagged] == ["a"]


@pytest.mark.durable
def test_policies_survive_a_restart(api: Api, app: Any, settings: Any) -> None:
    ident = make_identity(app, "gina")
    sp = api.create(PATH, body(identityRoles=[f"@{ident}", "#a"], type="Bind"))
    app.ctrl.env.store.close()

    again = open_app(settings, durable=True)
    try:
        client = Api(again)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        data = client.get(f"{PATH}/{sp}").json["data"]
    finally:
        again.ctrl.env.store.close()

    assert data["type"] == "Bind"
    assert data["identityRoles"] == ["#a", f"@{ident}"]
    assert data["identityRolesDisplay"][1] == {"role": f"@{ident}", "name": "@gina"}
