"""``GET /analysis/v1/identities/{id}/services/{serviceId}`` and ``/edge-routers/{id}``
(docs/analysis.md §2): granting paths, routers, posture and ranked misses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.session_helpers import user
from tests.conftest import Api

A = "/analysis/v1"


def explain(api: Api, path: str, **kwargs: Any) -> Any:
    return api.request("GET", path, base=A, **kwargs)


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    def identity(name: str, *attributes: str) -> str:
        return api.create(
            "/identities",
            {"name": name, "type": "User", "isAdmin": False, "roleAttributes": list(attributes)},
        )

    ids = {
        "alice": identity("alice", "staff", "finance"),
        "bob": identity("bob", "staff"),
        "payroll": api.create(
            "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["payroll"]}
        ),
        "r1": api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]}),
        "domain": api.create(
            "/posture-checks",
            {"name": "corp-domain", "typeId": "DOMAIN", "domains": ["corp"], "roleAttributes": ["dom"]},
        ),
    }
    ids["dial"] = api.create(
        "/service-policies",
        {
            "name": "finance-payroll",
            "type": "Dial",
            "semantic": "AllOf",
            "identityRoles": ["#staff", "#finance"],
            "serviceRoles": ["#payroll"],
        },
    )
    ids["erp"] = api.create(
        "/edge-router-policies",
        {"name": "all-edge", "semantic": "AnyOf", "identityRoles": ["#all"], "edgeRouterRoles": ["#edge"]},
    )
    ids["serp"] = api.create(
        "/service-edge-router-policies",
        {
            "name": "payroll-edge",
            "semantic": "AnyOf",
            "serviceRoles": ["#payroll"],
            "edgeRouterRoles": ["@" + ids["r1"]],
        },
    )
    return ids


def test_a_granted_pair_names_its_path_and_its_offline_router(api: Api, net: dict[str, str]) -> None:
    result = explain(api, f"/identities/{net['alice']}/services/{net['payroll']}", params={"type": "Dial"})

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["checks"] == {
        "policy": True,
        "posture": True,
        "commonRouter": True,
        "onlineRouter": False,
        "identityEnabled": True,
    }
    assert data["allowed"] is False  # the only common router is not connected
    [grant] = data["grants"]
    assert grant["policyName"] == "finance-payroll"
    assert grant["identityRoles"] == ["#finance", "#staff"]
    assert grant["serviceRoles"] == ["#payroll"]
    [router] = data["routers"]
    assert router["name"] == "r1"
    assert router["isOnline"] is False
    assert router["edgeRouterPolicies"] == [net["erp"]]
    assert router["serviceEdgeRouterPolicies"] == [net["serp"]]
    assert data["misses"][0]["kind"] == "router-offline"
    assert data["misses"][0]["message"] == "no common router online: r1 offline"


def test_a_denied_pair_names_the_missing_attribute_first(api: Api, net: dict[str, str]) -> None:
    data = explain(api, f"/identities/{net['bob']}/services/{net['payroll']}").json["data"]

    assert data["allowed"] is False
    assert data["checks"]["policy"] is False
    first = data["misses"][0]
    assert first["kind"] == "attribute"
    assert first["missing"] == ["finance"]
    assert first["policyId"] == net["dial"]
    assert first["message"].startswith("identity bob lacks attribute #finance")


def test_bind_is_denied_with_the_other_type_named(api: Api, net: dict[str, str]) -> None:
    data = explain(
        api, f"/identities/{net['alice']}/services/{net['payroll']}", params={"type": "Bind"}
    ).json["data"]

    assert data["type"] == "Bind"
    assert data["allowed"] is False
    assert any(m["kind"] == "policy-type" and "grants Dial, not Bind" in m["message"] for m in data["misses"])


def test_posture_checks_of_the_granting_policy_are_evaluated(api: Api, net: dict[str, str]) -> None:
    api.patch(f"/service-policies/{net['dial']}", json={"postureCheckRoles": ["#dom"]})

    data = explain(api, f"/identities/{net['alice']}/services/{net['payroll']}").json["data"]

    assert data["checks"]["posture"] is False
    [check] = data["grants"][0]["postureChecks"]
    assert check["name"] == "corp-domain"
    assert check["isPassing"] is False
    posture = next(m for m in data["misses"] if m["kind"] == "posture")
    assert posture["message"].startswith("posture check corp-domain fails: domain (expected [corp]")


def test_no_common_router_names_the_policies_that_would_give_one(api: Api, net: dict[str, str]) -> None:
    api.patch(f"/edge-router-policies/{net['erp']}", json={"identityRoles": ["#ops"]})

    data = explain(api, f"/identities/{net['alice']}/services/{net['payroll']}").json["data"]

    assert data["checks"]["commonRouter"] is False
    kinds = [m["kind"] for m in data["misses"]]
    assert "router-attribute" in kinds
    assert "no-common-router" in kinds
    fix = next(m for m in data["misses"] if m["kind"] == "router-attribute")
    assert fix["missing"] == ["ops"]
    assert fix["policyKind"] == "edge-router-policies"


def test_identity_and_router(api: Api, net: dict[str, str]) -> None:
    data = explain(api, f"/identities/{net['bob']}/edge-routers/{net['r1']}").json["data"]

    assert data["checks"] == {"policy": True, "online": False, "identityEnabled": True}
    assert data["grants"][0]["identityRoles"] == ["#all"]
    assert data["grants"][0]["edgeRouterRoles"] == ["#edge"]
    assert data["misses"][0]["kind"] == "router-offline"


def test_a_disabled_identity_is_denied(api: Api, net: dict[str, str]) -> None:
    assert api.post(f"/identities/{net['alice']}/disable", json={"durationMinutes": 0}).status_code == 200

    data = explain(api, f"/identities/{net['alice']}/services/{net['payroll']}").json["data"]

    assert data["checks"]["identityEnabled"] is False
    assert data["misses"][0]["kind"] == "identity-disabled"


def test_unknown_entities_are_404_and_a_bad_type_400(api: Api, net: dict[str, str]) -> None:
    assert explain(api, f"/identities/nope/services/{net['payroll']}").status_code == 404
    assert explain(api, f"/identities/{net['alice']}/edge-routers/nope").status_code == 404
    bad = explain(api, f"/identities/{net['alice']}/services/{net['payroll']}", params={"type": "Fly"})
    assert bad.status_code == 400
    assert bad.json["error"]["cause"]["field"] == "type"


def test_non_admins_and_anonymous_callers_are_refused(api: Api, net: dict[str, str]) -> None:
    path = f"/identities/{net['alice']}/services/{net['payroll']}"
    assert explain(api, path, token="").status_code == 401
    refused = explain(api, path, token=user(api).token)
    assert refused.status_code == 401
    assert refused.json["error"]["code"] == "UNAUTHORIZED"
