"""Engine-backed access listings and policy advice through the real app (docs/policy.md §9)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.settings import Settings
from tests.conftest import Api, open_app


def _ids(api: Api, path: str, **params: str) -> set[str]:
    result = api.get(path, params={"limit": "-1", **params})
    assert result.status_code == 200, result.text
    return {row["id"] for row in result.json["data"]}


def _identity(api: Api, name: str, attrs: list[str]) -> str:
    return api.create(
        "/identities", {"name": name, "isAdmin": False, "type": "Default", "roleAttributes": attrs}
    )


def _service(api: Api, name: str, attrs: list[str]) -> str:
    return api.create("/services", {"name": name, "encryptionRequired": True, "roleAttributes": attrs})


def _router(api: Api, name: str, attrs: list[str]) -> str:
    return api.create("/edge-routers", {"name": name, "roleAttributes": attrs})


def _sp(
    api: Api, name: str, semantic: str, services: list[str], identities: list[str], type: str = "Dial"
) -> str:
    body = {
        "name": name,
        "semantic": semantic,
        "type": type,
        "serviceRoles": services,
        "identityRoles": identities,
    }
    return api.create("/service-policies", body)


@pytest.fixture
def s1(api: Api) -> dict[str, str]:
    """Scenario S1's entities and policies (all Dial)."""
    ids = {
        "S1": _service(api, "S1", ["s1"]),
        "S2": _service(api, "S2", ["s1", "s2"]),
        "S3": _service(api, "S3", []),
        "I1": _identity(api, "I1", ["i1"]),
        "I2": _identity(api, "I2", ["i1", "i2"]),
        "I3": _identity(api, "I3", ["i2"]),
    }
    ids["P1"] = _sp(api, "P1", "AllOf", ["#s1"], ["#i1"])
    ids["P2"] = _sp(api, "P2", "AllOf", ["#s1", "@" + ids["S3"]], ["#i1", "@" + ids["I3"]])
    ids["P3"] = _sp(
        api, "P3", "AllOf", ["@" + ids["S2"], "@" + ids["S3"]], ["@" + ids["I2"], "@" + ids["I3"]]
    )
    ids["P4"] = _sp(api, "P4", "AllOf", ["#all"], ["#all"])
    ids["P5"] = _sp(api, "P5", "AllOf", ["#s1", "#s2"], ["#i1", "#i2"])
    ids["P6"] = _sp(api, "P6", "AnyOf", ["#s1", "#s2"], ["#i1", "#i2"])
    return ids


def _names(ids: dict[str, str], *names: str) -> set[str]:
    return {ids[n] for n in names}


def test_s1_policy_members(api: Api, s1: dict[str, str]) -> None:
    expected = {
        "P1": (("S1", "S2"), ("I1", "I2")),
        "P2": (("S1", "S2", "S3"), ("I1", "I2", "I3")),
        "P3": (("S2", "S3"), ("I2", "I3")),
        "P5": (("S2",), ("I2",)),
        "P6": (("S1", "S2"), ("I1", "I2", "I3")),
    }
    for policy, (services, identities) in expected.items():
        assert _ids(api, f"/service-policies/{s1[policy]}/services") == _names(s1, *services), policy
        assert _ids(api, f"/service-policies/{s1[policy]}/identities") == _names(s1, *identities), policy
    assert _names(s1, "S1", "S2", "S3") <= _ids(api, f"/service-policies/{s1['P4']}/services")
    admin_id = api.get("/current-identity").json["data"]["id"]
    assert admin_id in _ids(api, f"/service-policies/{s1['P4']}/identities")


def test_s1_updates_and_deletes_are_reflected_at_once(api: Api, s1: dict[str, str]) -> None:
    patched = api.patch(
        f"/service-policies/{s1['P1']}", json={"serviceRoles": ["#s1", "#s2"], "identityRoles": ["#i2"]}
    )
    assert patched.status_code == 200
    assert _ids(api, f"/service-policies/{s1['P1']}/services") == _names(s1, "S2")
    assert _ids(api, f"/service-policies/{s1['P1']}/identities") == _names(s1, "I2", "I3")
    assert api.delete(f"/service-policies/{s1['P2']}").status_code == 200
    assert _ids(api, f"/services/{s1['S3']}/service-policies") == _names(s1, "P3", "P4")
    assert _ids(api, f"/identities/{s1['I1']}/service-policies") == _names(s1, "P4", "P6")


def test_identity_services_and_service_identities_follow_policy_type(api: Api, s1: dict[str, str]) -> None:
    assert _ids(api, f"/identities/{s1['I1']}/services") == _names(s1, "S1", "S2", "S3")
    assert _ids(api, f"/identities/{s1['I1']}/services", policyType="bind") == set()
    bind = _sp(api, "bind-s3", "AnyOf", ["@" + s1["S3"]], ["@" + s1["I1"]], type="Bind")
    assert _ids(api, f"/identities/{s1['I1']}/services", policyType="bind") == _names(s1, "S3")
    assert s1["I1"] in _ids(api, f"/services/{s1['S3']}/identities", policyType="Bind")
    assert api.patch(f"/service-policies/{bind}", json={"type": "Dial"}).status_code == 200
    assert _ids(api, f"/identities/{s1['I1']}/services", policyType="bind") == set()
    bad = api.get(f"/identities/{s1['I1']}/services", params={"policyType": "sometimes"})
    assert bad.status_code == 400
    assert bad.json["error"]["cause"]["field"] == "policyType"


def test_attribute_change_moves_an_identity_between_policies(api: Api, s1: dict[str, str]) -> None:
    assert api.patch(f"/identities/{s1['I3']}", json={"roleAttributes": ["i1", "i2"]}).status_code == 200
    assert s1["P5"] in _ids(api, f"/identities/{s1['I3']}/service-policies")
    assert api.patch(f"/identities/{s1['I3']}", json={"roleAttributes": []}).status_code == 200
    assert _ids(api, f"/identities/{s1['I3']}/service-policies") == _names(s1, "P2", "P3", "P4")


def test_semantic_only_change_is_re_evaluated(api: Api, s1: dict[str, str]) -> None:
    """A deliberate difference from OpenZiti, which keeps the old links until a role changes."""
    assert api.patch(f"/service-policies/{s1['P5']}", json={"semantic": "AnyOf"}).status_code == 200
    assert _ids(api, f"/service-policies/{s1['P5']}/identities") == _names(s1, "I1", "I2", "I3")


def test_entity_delete_drops_it_from_listings(api: Api, s1: dict[str, str]) -> None:
    assert api.delete(f"/identities/{s1['I3']}").status_code == 200
    assert _ids(api, f"/service-policies/{s1['P3']}/identities") == _names(s1, "I2")
    roles = api.get(f"/service-policies/{s1['P3']}").json["data"]["identityRoles"]
    assert roles == ["@" + s1["I2"]]


def test_sub_lists_page_and_filter(api: Api, s1: dict[str, str]) -> None:
    result = api.get(
        f"/identities/{s1['I2']}/services",
        params={"filter": 'name in ["S1", "S2"] sort by name desc', "limit": "1"},
    )
    assert result.json["meta"]["pagination"] == {"limit": 1, "offset": 0, "totalCount": 2}
    assert [row["name"] for row in result.json["data"]] == ["S2"]
    assert api.get("/identities/nope/services").status_code == 404


def test_edge_router_listings(api: Api) -> None:
    er1, er2, er3 = _router(api, "ER1", ["e1"]), _router(api, "ER2", ["e1", "e2"]), _router(api, "ER3", [])
    alice = _identity(api, "alice", ["ops"])
    svc = _service(api, "svc", ["web"])
    erp = api.create(
        "/edge-router-policies",
        {
            "name": "erp",
            "semantic": "AnyOf",
            "edgeRouterRoles": ["#e2", "@" + er3],
            "identityRoles": ["#ops"],
        },
    )
    serp = api.create(
        "/service-edge-router-policies",
        {"name": "serp", "semantic": "AllOf", "edgeRouterRoles": ["#e1"], "serviceRoles": ["#web"]},
    )
    assert _ids(api, f"/identities/{alice}/edge-routers") == {er2, er3}
    assert _ids(api, f"/services/{svc}/edge-routers") == {er1, er2}
    assert _ids(api, f"/edge-routers/{er2}/identities") == {alice}
    assert _ids(api, f"/edge-routers/{er1}/services") == {svc}
    assert _ids(api, f"/edge-routers/{er3}/edge-router-policies") == {erp}
    assert _ids(api, f"/edge-routers/{er2}/service-edge-router-policies") == {serp}
    assert _ids(api, f"/edge-router-policies/{erp}/edge-routers") == {er2, er3}
    assert _ids(api, f"/edge-router-policies/{erp}/identities") == {alice}
    assert _ids(api, f"/service-edge-router-policies/{serp}/services") == {svc}
    assert _ids(api, f"/service-edge-router-policies/{serp}/edge-routers") == {er1, er2}
    assert _ids(api, f"/services/{svc}/service-edge-router-policies") == {serp}
    assert _ids(api, f"/identities/{alice}/edge-router-policies") == {erp}


def test_policy_advice(api: Api) -> None:
    r1, r2 = _router(api, "R1", ["a"]), _router(api, "R2", ["a", "b"])
    alice = _identity(api, "alice", ["ops"])
    svc = _service(api, "svc", ["web"])
    denied = api.get(f"/identities/{alice}/policy-advice/{svc}").json["data"]
    assert denied["commonRouters"] is None
    for omitted in ("isDialAllowed", "isBindAllowed", "identityRouterCount", "serviceRouterCount"):
        assert omitted not in denied
    assert denied["identity"]["id"] == alice
    assert denied["serviceId"] == svc
    _sp(api, "dial", "AllOf", ["#web"], ["#ops"])
    api.create(
        "/edge-router-policies",
        {"name": "erp", "semantic": "AnyOf", "edgeRouterRoles": ["#a"], "identityRoles": ["#ops"]},
    )
    api.create(
        "/service-edge-router-policies",
        {"name": "serp", "semantic": "AnyOf", "edgeRouterRoles": ["#b"], "serviceRoles": ["#web"]},
    )
    advice = api.get(f"/identities/{alice}/policy-advice/{svc}").json["data"]
    assert advice["isDialAllowed"] is True
    assert "isBindAllowed" not in advice
    assert advice["identityRouterCount"] == 2
    assert advice["serviceRouterCount"] == 1
    assert [r["id"] for r in advice["commonRouters"]] == [r2]
    assert advice["commonRouters"][0]["isOnline"] is False
    assert r1 != r2
    assert api.get(f"/identities/{alice}/policy-advice/nope").status_code == 404


def test_service_permissions_follow_the_callers_policies(api: Api) -> None:
    svc = _service(api, "svc", ["web"])
    alice = _identity(api, "alice", ["ops"])
    _sp(api, "bind", "AllOf", ["#web"], ["#ops"], type="Bind")
    assert api.get(f"/services/{svc}").json["data"]["permissions"] == ["Invalid"]
    as_alice = api.get(f"/services/{svc}", params={"asIdentity": "alice"}).json["data"]
    assert as_alice["permissions"] == ["Bind"]
    _sp(api, "dial", "AllOf", ["#web"], ["@" + alice])
    listed = api.get("/services", params={"asIdentity": alice}).json["data"]
    assert listed[0]["permissions"] == ["Bind", "Dial"]


def test_tunneler_router_identity_reaches_its_router(api: Api) -> None:
    """Scenario S7: the system policy links the router identity to its own router."""
    router = api.create("/edge-routers", {"name": "tun", "isTunnelerEnabled": True})
    other = _router(api, "other", [])
    assert _ids(api, f"/identities/{router}/edge-routers") == {router}
    api.create(
        "/edge-router-policies",
        {"name": "all", "semantic": "AnyOf", "edgeRouterRoles": ["#all"], "identityRoles": ["#all"]},
    )
    assert _ids(api, f"/identities/{router}/edge-routers") == {router, other}
    assert api.patch(f"/edge-routers/{router}", json={"isTunnelerEnabled": False}).status_code == 200
    assert api.get(f"/identities/{router}/edge-routers").status_code == 404


@pytest.mark.durable
def test_the_graph_is_rebuilt_from_storage_on_restart(
    settings: Settings, api: Api, s1: dict[str, Any]
) -> None:
    before = _ids(api, f"/identities/{s1['I2']}/services")
    api.ctrl.env.store.close()
    app = open_app(settings, durable=True)
    try:
        again = Api(app)
        again.token = api.token
        assert _ids(again, f"/identities/{s1['I2']}/services") == before
        assert _ids(again, f"/service-policies/{s1['P6']}/identities") == _names(s1, "I1", "I2", "I3")
    finally:
        app.ctrl.env.store.close()


def test_s2_edge_router_policy_members(api: Api) -> None:
    er = {
        "ER1": _router(api, "ER1", ["e1"]),
        "ER2": _router(api, "ER2", ["e1", "e2"]),
        "ER3": _router(api, "ER3", []),
    }
    body = {"identityRoles": ["#all"]}
    cases = {
        "P1": ("AllOf", ["#e1"], ("ER1", "ER2")),
        "P2": ("AllOf", ["#e1", "@" + er["ER3"]], ("ER1", "ER2", "ER3")),
        "P3": ("AllOf", ["@" + er["ER2"], "@" + er["ER3"]], ("ER2", "ER3")),
        "P5": ("AllOf", ["#e1", "#e2"], ("ER2",)),
        "P6": ("AnyOf", ["#e1", "#e2"], ("ER1", "ER2")),
    }
    for name, (semantic, roles, expected) in cases.items():
        policy = api.create(
            "/edge-router-policies", {"name": name, "semantic": semantic, "edgeRouterRoles": roles, **body}
        )
        assert _ids(api, f"/edge-router-policies/{policy}/edge-routers") == {er[n] for n in expected}, name


def test_s3_service_edge_router_policy_members_and_update(api: Api) -> None:
    er = {
        "ER1": _router(api, "ER1", ["e1"]),
        "ER2": _router(api, "ER2", ["e1", "e2"]),
        "ER3": _router(api, "ER3", []),
    }
    sv = {
        "S1": _service(api, "S1", ["s1"]),
        "S2": _service(api, "S2", ["s1", "s2"]),
        "S3": _service(api, "S3", ["s2"]),
    }
    cases = {
        "P1": ("AllOf", ["#e1"], ["#s1"], ("ER1", "ER2"), ("S1", "S2")),
        "P2": (
            "AllOf",
            ["#e1", "@" + er["ER3"]],
            ["#s1", "@" + sv["S3"]],
            ("ER1", "ER2", "ER3"),
            ("S1", "S2", "S3"),
        ),
        "P3": (
            "AllOf",
            ["@" + er["ER2"], "@" + er["ER3"]],
            ["@" + sv["S2"], "@" + sv["S3"]],
            ("ER2", "ER3"),
            ("S2", "S3"),
        ),
        "P5": ("AllOf", ["#e1", "#e2"], ["#s1", "#s2"], ("ER2",), ("S2",)),
        "P6": ("AnyOf", ["#e1", "#e2"], ["#s1", "#s2"], ("ER1", "ER2"), ("S1", "S2", "S3")),
    }
    ids = {}
    for name, (semantic, routers, services, want_er, want_sv) in cases.items():
        body = {"name": name, "semantic": semantic, "edgeRouterRoles": routers, "serviceRoles": services}
        ids[name] = api.create("/service-edge-router-policies", body)
        assert _ids(api, f"/service-edge-router-policies/{ids[name]}/edge-routers") == {
            er[n] for n in want_er
        }, name
        assert _ids(api, f"/service-edge-router-policies/{ids[name]}/services") == {sv[n] for n in want_sv}, (
            name
        )
    patch = {"edgeRouterRoles": ["#e1", "#e2"], "serviceRoles": ["#s2"]}
    assert api.patch(f"/service-edge-router-policies/{ids['P1']}", json=patch).status_code == 200
    assert _ids(api, f"/service-edge-router-policies/{ids['P1']}/edge-routers") == {er["ER2"]}
    assert _ids(api, f"/service-edge-router-policies/{ids['P1']}/services") == {sv["S2"], sv["S3"]}


def test_permissions_of_a_service_deleted_meanwhile_are_empty(api: Api, s1: dict[str, str]) -> None:
    """A list that read a service just before another request deleted it renders it, not a 500
    (found by the soak: the graph no longer knew the service when its permissions were asked)."""
    access = api.app.ctrl.access
    assert api.delete(f"/services/{s1['S1']}").status_code == 200

    assert access.permissions(s1["I1"], s1["S1"]) == []
    assert access.permissions("no-such-identity", s1["S2"]) == []
