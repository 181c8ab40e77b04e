"""Policies' role lists come back as OpenZiti's store keeps them: the keys of a bucket, so sorted
in byte order and without duplicates (``GetAndSetStringList`` in each policy store's
``PersistEntity``). Syntax is checked on the list as given."""

from __future__ import annotations

import pytest

from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.conftest import Api

api = shared_admin_api("policy-role-sets")

#: (path, the body's role fields, its other required fields)
POLICIES = [
    ("/service-policies", ("identityRoles", "serviceRoles", "postureCheckRoles"), {"type": "Dial"}),
    ("/edge-router-policies", ("identityRoles", "edgeRouterRoles"), {}),
    ("/service-edge-router-policies", ("serviceRoles", "edgeRouterRoles"), {}),
]


@pytest.mark.parametrize(("path", "fields", "extra"), POLICIES, ids=[p[0] for p in POLICIES])
def test_role_lists_are_kept_sorted_without_duplicates(
    api: Api, path: str, fields: tuple[str, ...], extra: dict[str, str]
) -> None:
    identity = api.create("/identities", {"name": unique("i"), "type": "User", "isAdmin": False})
    roles = ["#west", "#east", "#west", "#East"]
    body = {"name": unique("p"), "semantic": "AnyOf", **extra, **dict.fromkeys(fields, roles)}
    if "identityRoles" in fields:
        body["identityRoles"] = [f"@{identity}", "#b", f"@{identity}", "#a"]

    id = api.create(path, body)
    created = api.get(f"{path}/{id}").json["data"]
    patched_ok = api.patch(f"{path}/{id}", json={fields[-1]: ["#z", "#y", "#z"]}).status_code
    patched = api.get(f"{path}/{id}").json["data"]

    for field in fields:
        if field == "identityRoles":
            assert created[field] == ["#a", "#b", f"@{identity}"]
            assert [r["role"] for r in created["identityRolesDisplay"]] == ["#a", "#b", f"@{identity}"]
        else:
            assert created[field] == ["#East", "#east", "#west"]
    assert patched_ok == 200
    assert patched[fields[-1]] == ["#y", "#z"]


def test_all_twice_is_still_refused(api: Api) -> None:
    body = {
        "name": unique("p"),
        "semantic": "AnyOf",
        "identityRoles": ["#all", "#all"],
        "edgeRouterRoles": [],
    }

    result = api.post("/edge-router-policies", json=body)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "identityRoles"
