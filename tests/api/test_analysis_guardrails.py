"""``/analysis/v1/guardrails`` (docs/analysis.md §10): invariants checked on every write, through
every API; 409 ``GUARDRAIL_VIOLATION`` in enforce mode with nothing written, a violation record in
report mode."""

from __future__ import annotations

from typing import Any

import pytest

from engine.managers.fleet import VersionInfo
from tests.conftest import Api

A = "/analysis/v1"


def analysis(api: Api, method: str, path: str, **kwargs: Any) -> Any:
    return api.request(method, path, base=A, **kwargs)


def guardrail(api: Api, **body: Any) -> str:
    result = analysis(api, "POST", "/guardrails", json=body)
    assert result.status_code == 201, result.text
    return str(result.json["data"]["id"])


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    """alice #staff, bob #contractor; web #web, payroll #finance; #staff may Dial #web."""
    ids = {
        "alice": api.create(
            "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
        ),
        "bob": api.create(
            "/identities", {"name": "bob", "type": "User", "isAdmin": False, "roleAttributes": ["contractor"]}
        ),
        "web": api.create(
            "/services", {"name": "web", "encryptionRequired": True, "roleAttributes": ["web"]}
        ),
        "payroll": api.create(
            "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["finance"]}
        ),
    }
    ids["dial"] = api.create(
        "/service-policies",
        {
            "name": "staff-web",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#web"],
        },
    )
    return ids


def contractors_finance(api: Api, mode: str = "enforce") -> str:
    return guardrail(
        api,
        name="no-contractor-finance",
        form="deny",
        mode=mode,
        identityRoles=["#contractor"],
        serviceRoles=["#finance"],
        type="Dial",
    )


def test_guardrails_are_created_read_listed_filtered_and_deleted(api: Api, net: dict[str, str]) -> None:
    made = contractors_finance(api)
    other = guardrail(
        api,
        name="payroll-only",
        form="only",
        serviceRoles=[f"@{net['payroll']}"],
        identityRoles=[f"@{net['alice']}"],
        mode="report",
    )
    item = analysis(api, "GET", f"/guardrails/{made}").json["data"]
    assert {k: item[k] for k in ("name", "form", "mode", "type", "semantic")} == {
        "name": "no-contractor-finance",
        "form": "deny",
        "mode": "enforce",
        "type": "Dial",
        "semantic": "AnyOf",
    }
    assert item["identityRoles"] == ["#contractor"]
    listed = analysis(api, "GET", "/guardrails", params={"filter": 'mode="report"'}).json
    assert [g["id"] for g in listed["data"]] == [other]
    assert listed["meta"]["pagination"]["totalCount"] == 1
    assert analysis(api, "PATCH", f"/guardrails/{other}", json={"mode": "enforce"}).status_code == 200
    assert analysis(api, "GET", f"/guardrails/{other}").json["data"]["mode"] == "enforce"
    assert analysis(api, "DELETE", f"/guardrails/{made}").status_code == 200
    assert analysis(api, "GET", f"/guardrails/{made}").status_code == 404


def test_a_bad_guardrail_is_400(api: Api) -> None:
    bad = analysis(api, "POST", "/guardrails", json={"name": "x", "form": "maybe", "serviceRoles": ["#a"]})
    assert bad.status_code == 400
    assert bad.json["error"]["code"] == "COULD_NOT_VALIDATE"
    no_ids = analysis(api, "POST", "/guardrails", json={"name": "x", "form": "deny", "serviceRoles": ["#a"]})
    assert no_ids.status_code == 400
    assert no_ids.json["error"]["cause"]["field"] == "identityRoles"
    syntax = analysis(
        api,
        "POST",
        "/guardrails",
        json={"name": "x", "form": "deny", "serviceRoles": ["a"], "identityRoles": ["#b"]},
    )
    assert syntax.status_code == 400
    assert syntax.json["error"]["cause"]["field"] == "serviceRoles"


def test_a_management_write_that_violates_an_enforced_guardrail_is_409_and_writes_nothing(
    api: Api, net: dict[str, str]
) -> None:
    made = contractors_finance(api)
    policies_before = api.get("/service-policies").json["meta"]["pagination"]["totalCount"]
    refused = api.post(
        "/service-policies",
        json={
            "name": "everyone-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#all"],
            "serviceRoles": [f"@{net['payroll']}"],
        },
    )
    assert refused.status_code == 409, refused.text
    error = refused.json["error"]
    assert error["code"] == "GUARDRAIL_VIOLATION"
    assert "no-contractor-finance" in error["cause"]["reason"]
    assert error["cause"]["guardrails"] == [
        {
            "id": made,
            "name": "no-contractor-finance",
            "form": "deny",
            "count": 1,
            "pairs": [{"identityId": net["bob"], "serviceId": net["payroll"], "type": "Dial"}],
        }
    ]
    assert api.get("/service-policies").json["meta"]["pagination"]["totalCount"] == policies_before
    # an attribute change is a write like any other
    alice = api.patch(f"/identities/{net['alice']}", json={"roleAttributes": ["staff", "contractor"]})
    assert alice.status_code == 200  # alice may not Dial payroll: nothing is violated
    # a write that touches no guardrail goes through
    assert api.patch(f"/identities/{net['bob']}", json={"name": "robert"}).status_code == 200


def test_a_write_that_only_keeps_an_existing_violation_is_not_refused(api: Api, net: dict[str, str]) -> None:
    api.create(
        "/service-policies",
        {
            "name": "bob-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": [f"@{net['bob']}"],
            "serviceRoles": ["#finance"],
        },
    )
    contractors_finance(api)  # bob already violates it
    assert (
        api.patch(f"/identities/{net['bob']}", json={"roleAttributes": ["contractor", "x"]}).status_code
        == 200
    )
    carol = api.post(
        "/identities",
        json={"name": "carol", "type": "User", "isAdmin": False, "roleAttributes": ["contractor"]},
    )
    assert carol.status_code == 201  # carol may not Dial payroll


def test_report_mode_lets_the_write_through_and_records_the_violation(api: Api, net: dict[str, str]) -> None:
    made = contractors_finance(api, mode="report")
    created = api.post(
        "/service-policies",
        json={
            "name": "bob-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#contractor"],
            "serviceRoles": ["#finance"],
        },
    )
    assert created.status_code == 201
    listed = analysis(api, "GET", "/guardrail-violations", params={"filter": f'guardrailId="{made}"'}).json
    assert len(listed["data"]) == 1
    record = listed["data"][0]
    assert record["guardrailName"] == "no-contractor-finance"
    assert record["count"] == 1
    assert record["pairs"] == [{"identityId": net["bob"], "serviceId": net["payroll"], "type": "Dial"}]
    assert analysis(api, "DELETE", f"/guardrail-violations/{record['id']}").status_code == 200


def test_keep_guards_removals_and_only_guards_who_may_reach(api: Api, net: dict[str, str]) -> None:
    guardrail(api, name="staff-keep-web", form="keep", identityRoles=["#staff"], serviceRoles=["#web"])
    removed = api.delete(f"/service-policies/{net['dial']}")
    assert removed.status_code == 409
    assert "staff-keep-web" in removed.json["error"]["cause"]["reason"]
    assert "may no longer Dial" in removed.json["error"]["cause"]["reason"]
    guardrail(
        api, name="web-only-alice", form="only", identityRoles=[f"@{net['alice']}"], serviceRoles=["#web"]
    )
    bob_staff = api.patch(f"/identities/{net['bob']}", json={"roleAttributes": ["staff"]})
    assert bob_staff.status_code == 409
    assert bob_staff.json["error"]["cause"]["guardrails"][0]["name"] == "web-only-alice"


def test_a_router_change_that_leaves_a_pair_without_an_online_router_is_refused(
    api: Api, net: dict[str, str]
) -> None:
    r1 = api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]})
    api.create(
        "/edge-router-policies",
        {"name": "all-edge", "semantic": "AnyOf", "identityRoles": ["#all"], "edgeRouterRoles": ["#edge"]},
    )
    api.create(
        "/service-edge-router-policies",
        {"name": "web-edge", "semantic": "AnyOf", "serviceRoles": ["#all"], "edgeRouterRoles": ["#edge"]},
    )
    api.ctrl.managers.fleet.connect(
        r1,
        name="r1",
        fingerprint="",
        hostname="r1",
        protocols={},
        link_listener="",
        version=VersionInfo("v1.6.0", "", "", "linux", "amd64"),
        tunneler=False,
    )
    guardrail(api, name="reachable", form="routers")
    losing = api.patch(f"/edge-routers/{r1}", json={"roleAttributes": ["elsewhere"]})
    assert losing.status_code == 409, losing.text
    assert losing.json["error"]["cause"]["guardrails"][0]["pairs"] == [
        {"identityId": net["alice"], "serviceId": net["web"], "type": "Dial"}
    ]
    assert api.get(f"/edge-routers/{r1}").json["data"]["roleAttributes"] == ["edge"]


def test_what_if_names_the_guardrails_a_batch_would_violate_and_apply_refuses_it(
    api: Api, net: dict[str, str]
) -> None:
    contractors_finance(api)
    items = [
        {
            "op": "patch",
            "kind": "identities",
            "id": net["bob"],
            "body": {"roleAttributes": ["contractor", "staff"]},
        },
        {
            "op": "patch",
            "kind": "service-policies",
            "id": net["dial"],
            "body": {"serviceRoles": ["#web", "#finance"]},
        },
    ]
    answer = analysis(api, "POST", "/what-if", json={"items": items}).json["data"]
    assert [(g["name"], g["count"]) for g in answer["guardrails"]] == [("no-contractor-finance", 1)]
    applied = analysis(api, "POST", "/apply", json={"items": items, "revision": answer["revision"]})
    assert applied.status_code == 409
    assert applied.json["error"]["code"] == "GUARDRAIL_VIOLATION"
    assert api.get(f"/identities/{net['bob']}").json["data"]["roleAttributes"] == ["contractor"]


def test_guardrails_are_for_administrators(anon: Api) -> None:
    assert anon.request("GET", "/guardrails", base=A).status_code == 401
