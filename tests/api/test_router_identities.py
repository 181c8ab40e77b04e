"""Tunneler-enabled edge routers get a router identity and a system edge router policy (§2)."""

from __future__ import annotations

from tests.conftest import Api


def _tunneler(api: Api, name: str = "er-tun") -> str:
    return api.create("/edge-routers", {"name": name, "isTunnelerEnabled": True})


def test_tunneler_router_gets_identity_and_system_policy(api: Api) -> None:
    router_id = _tunneler(api)
    identity = api.get(f"/identities/{router_id}").json["data"]
    assert identity["name"] == "er-tun"
    assert identity["typeId"] == "Router"
    assert identity["isAdmin"] is False
    policy = api.get(f"/edge-router-policies/{router_id}").json["data"]
    assert policy["name"] == f"edge-router-{router_id}-system"
    assert policy["isSystem"] is True
    assert policy["semantic"] == "AnyOf"
    assert policy["identityRoles"] == [f"@{router_id}"]
    assert policy["edgeRouterRoles"] == [f"@{router_id}"]


def test_router_without_tunneler_has_neither(api: Api) -> None:
    router_id = api.create("/edge-routers", {"name": "er-plain"})
    assert api.get(f"/identities/{router_id}").status_code == 404
    assert api.get(f"/edge-router-policies/{router_id}").status_code == 404


def test_system_policy_and_router_identity_resist_direct_changes(api: Api) -> None:
    router_id = _tunneler(api)
    patched = api.patch(f"/edge-router-policies/{router_id}", json={"name": "mine"})
    assert patched.status_code == 400
    assert patched.json["error"]["code"] == "ENTITY_CAN_NOT_BE_UPDATED"
    deleted = api.delete(f"/edge-router-policies/{router_id}")
    assert deleted.status_code == 400
    assert deleted.json["error"]["code"] == "ENTITY_CAN_NOT_BE_DELETED"
    identity_delete = api.delete(f"/identities/{router_id}")
    assert identity_delete.status_code == 400
    renamed = api.patch(f"/identities/{router_id}", json={"name": "other"})
    assert renamed.status_code == 400
    attributes = api.patch(f"/identities/{router_id}", json={"roleAttributes": ["routers"]})
    assert attributes.status_code == 200


def test_flag_rename_and_delete_keep_them_in_step(api: Api) -> None:
    router_id = api.create("/edge-routers", {"name": "er-flip"})
    assert api.patch(f"/edge-routers/{router_id}", json={"isTunnelerEnabled": True}).status_code == 200
    assert api.get(f"/identities/{router_id}").status_code == 200
    assert api.patch(f"/edge-routers/{router_id}", json={"name": "er-renamed"}).status_code == 200
    assert api.get(f"/identities/{router_id}").json["data"]["name"] == "er-renamed"
    assert api.patch(f"/edge-routers/{router_id}", json={"isTunnelerEnabled": False}).status_code == 200
    assert api.get(f"/identities/{router_id}").status_code == 404
    assert api.get(f"/edge-router-policies/{router_id}").status_code == 404
    assert api.patch(f"/edge-routers/{router_id}", json={"isTunnelerEnabled": True}).status_code == 200
    assert api.delete(f"/edge-routers/{router_id}").status_code == 200
    assert api.get(f"/identities/{router_id}").status_code == 404
    assert api.get(f"/edge-router-policies/{router_id}").status_code == 404


def test_router_name_taken_by_an_identity_is_refused_whole(api: Api) -> None:
    api.create("/identities", {"name": "taken", "isAdmin": False, "type": "Default"})
    result = api.post("/edge-routers", json={"name": "taken", "isTunnelerEnabled": True})
    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"
    listed = api.get("/edge-routers", params={"filter": 'name = "taken"'}).json
    assert listed["meta"]["pagination"]["totalCount"] == 0
