"""``/analysis/v1/findings``, ``/finding-archive-rules``, ``/advice`` and ``/access-tests``
(docs/analysis.md §6-§8): findings with their lifecycle, archive rules, paging and filters."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.api.session_helpers import user
from tests.conftest import Api

A = "/analysis/v1"


def call(api: Api, method: str, path: str, **kwargs: Any) -> Any:
    return api.request(method, path, base=A, **kwargs)


def findings(api: Api, filter: str | None = None, **params: Any) -> list[dict[str, Any]]:
    if filter is not None:
        params["filter"] = filter
    result = call(api, "GET", "/findings", params=params)
    assert result.status_code == 200, result.text
    return list(result.json["data"])


def by_kind(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in items if f["kind"] == kind]


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    ids = {
        "alice": api.create(
            "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
        ),
        "carol": api.create(
            "/identities", {"name": "carol", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
        ),
        "payroll": api.create(
            "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["payroll"]}
        ),
        "r1": api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]}),
    }
    ids["dial"] = api.create(
        "/service-policies",
        {
            "name": "staff-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff", "#finance"],
            "serviceRoles": ["#payroll"],
        },
    )
    ids["dup"] = api.create(
        "/service-policies",
        {
            "name": "alice-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["@" + ids["alice"]],
            "serviceRoles": ["@" + ids["payroll"]],
        },
    )
    return ids


def test_findings_name_the_problems_of_the_policy(api: Api, net: dict[str, str]) -> None:
    items = findings(api)

    [dangling] = by_kind(items, "dangling-role")
    assert dangling["subjectId"] == net["dial"]
    assert dangling["details"]["role"] == "#finance"
    assert dangling["status"] == "ACTIVE"
    assert "#finance" in dangling["message"]
    [redundant] = by_kind(items, "redundant-policy")
    assert redundant["subjectName"] == "alice-payroll"
    assert redundant["details"]["supersetPolicyId"] == net["dial"]
    assert {f["subjectName"] for f in by_kind(items, "service-without-router-policy")} == {"payroll"}
    assert "alice" in {f["subjectName"] for f in by_kind(items, "identity-without-router-policy")}
    assert all(f["firstSeenAt"] and f["lastSeenAt"] and f["resolvedAt"] is None for f in items)


def test_a_finding_is_resolved_by_the_fixing_write(api: Api, net: dict[str, str]) -> None:
    [missing] = by_kind(findings(api), "service-without-router-policy")
    first_seen = missing["firstSeenAt"]

    api.create(
        "/service-edge-router-policies",
        {
            "name": "payroll-edge",
            "semantic": "AnyOf",
            "serviceRoles": ["#payroll"],
            "edgeRouterRoles": ["#edge"],
        },
    )

    [after] = [f for f in findings(api) if f["id"] == missing["id"]]
    assert after["status"] == "RESOLVED"
    assert after["resolvedAt"] is not None
    assert after["firstSeenAt"] == first_seen
    # staff get a router payroll is not on: their grants now lack a common router
    r2 = api.create("/edge-routers", {"name": "r2"})
    api.create(
        "/edge-router-policies",
        {"name": "staff-r2", "semantic": "AnyOf", "identityRoles": ["#staff"], "edgeRouterRoles": ["@" + r2]},
    )
    [no_router] = by_kind(findings(api), "no-common-router")
    assert no_router["subjectName"] == "payroll"
    assert no_router["details"] == {"identityCount": 2, "identities": ["alice", "carol"]}


def test_once_read_findings_follow_writes_in_the_background(api: Api, net: dict[str, str]) -> None:
    """After a read, the fixing write is evaluated without another read (the record is resolved
    in the store); a controller nobody asked about findings evaluates only at the next read."""
    found = api.app._router.find(A + "/findings")  # the resource serving the list, and its manager
    assert found is not None
    manager = found[0].findings
    [missing] = by_kind(findings(api), "service-without-router-policy")

    api.create(
        "/service-edge-router-policies",
        {
            "name": "payroll-edge",
            "semantic": "AnyOf",
            "serviceRoles": ["#payroll"],
            "edgeRouterRoles": ["#edge"],
        },
    )

    deadline = time.monotonic() + 30
    while manager.records[missing["id"]].resolved_at is None:
        assert time.monotonic() < deadline, "the write was not evaluated in the background"
        time.sleep(0.05)


def test_ids_are_stable_and_a_finding_comes_back_active(api: Api, net: dict[str, str]) -> None:
    [dangling] = by_kind(findings(api), "dangling-role")
    api.create(
        "/identities", {"name": "fin", "type": "User", "isAdmin": False, "roleAttributes": ["finance"]}
    )
    assert [f["status"] for f in findings(api) if f["id"] == dangling["id"]] == ["RESOLVED"]
    fin = findings(api, 'subjectName = "fin"')
    api.delete(f"/identities/{fin[0]['subjectId']}")
    [back] = [f for f in findings(api) if f["id"] == dangling["id"]]
    assert back["status"] == "ACTIVE"
    assert back["resolvedAt"] is None


def test_archive_rules_apply_to_findings_there_and_to_later_ones(api: Api, net: dict[str, str]) -> None:
    result = call(
        api,
        "POST",
        "/finding-archive-rules",
        json={"name": "no-routers-yet", "kind": "identity-without-router-policy"},
    )
    assert result.status_code == 201, result.text
    rule_id = result.json["data"]["id"]
    items = by_kind(findings(api), "identity-without-router-policy")
    assert items
    assert {f["status"] for f in items} == {"ARCHIVED"}
    assert {f["archivedBy"] for f in items} == {rule_id}

    api.create("/identities", {"name": "bob", "type": "User", "isAdmin": False})
    [bob] = findings(api, 'kind = "identity-without-router-policy" and subjectName = "bob"')
    assert bob["status"] == "ARCHIVED"

    assert call(api, "DELETE", f"/finding-archive-rules/{rule_id}").status_code == 200
    assert findings(api, 'subjectName = "bob"')[0]["status"] == "ACTIVE"


def test_an_archive_rule_with_a_filter(api: Api, net: dict[str, str]) -> None:
    result = call(
        api,
        "POST",
        "/finding-archive-rules",
        json={"name": "low", "filter": 'severity = "LOW" and kind contains "role"'},
    )
    assert result.status_code == 201, result.text
    [dangling] = by_kind(findings(api), "dangling-role")
    assert dangling["status"] == "ARCHIVED"
    [redundant] = by_kind(findings(api), "redundant-policy")
    assert redundant["status"] == "ACTIVE"
    rule = call(api, "GET", f"/finding-archive-rules/{result.json['data']['id']}").json["data"]
    assert rule["name"] == "low"
    assert rule["filter"].startswith("severity")
    listed = call(api, "GET", "/finding-archive-rules", params={"filter": 'name = "low"'}).json
    assert [r["name"] for r in listed["data"]] == ["low"]
    patched = call(
        api, "PATCH", f"/finding-archive-rules/{rule['id']}", json={"filter": 'kind = "redundant-policy"'}
    )
    assert patched.status_code == 200, patched.text
    assert by_kind(findings(api), "dangling-role")[0]["status"] == "ACTIVE"
    assert by_kind(findings(api), "redundant-policy")[0]["status"] == "ARCHIVED"


def test_patch_archives_and_unarchives_a_finding(api: Api, net: dict[str, str]) -> None:
    [redundant] = by_kind(findings(api), "redundant-policy")
    path = f"/findings/{redundant['id']}"

    result = call(api, "PATCH", path, json={"status": "ARCHIVED"})
    assert result.status_code == 200, result.text
    assert result.json["data"]["status"] == "ARCHIVED"
    assert result.json["data"]["archivedBy"] == "administrator"
    assert call(api, "GET", path).json["data"]["status"] == "ARCHIVED"
    assert call(api, "PATCH", path, json={"status": "ACTIVE"}).json["data"]["status"] == "ACTIVE"


def test_filters_and_paging_use_ziti_ql_and_the_envelope(api: Api, net: dict[str, str]) -> None:
    everything = findings(api)
    assert len(everything) >= 4
    result = call(api, "GET", "/findings", params={"limit": 2, "offset": 1, "sort": "kind desc"})
    assert result.status_code == 200, result.text
    pagination = result.json["meta"]["pagination"]
    assert pagination == {"limit": 2, "offset": 1, "totalCount": len(everything)}
    assert len(result.json["data"]) == 2
    assert "status" in result.json["meta"]["filterableFields"]
    assert [f["kind"] for f in findings(api, 'status = "ACTIVE" and kind = "dangling-role"')] == [
        "dangling-role"
    ]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "/findings", None, 400, "INVALID_FILTER"),
        ("PATCH", "/findings/nope", {"status": "ARCHIVED"}, 404, "NOT_FOUND"),
        ("PATCH", "/findings/nope", {"status": "RESOLVED"}, 400, "COULD_NOT_VALIDATE"),
        ("POST", "/finding-archive-rules", {"name": "x"}, 400, "COULD_NOT_VALIDATE"),
        ("POST", "/finding-archive-rules", {"name": "x", "filter": "nosuch = 1"}, 400, "COULD_NOT_VALIDATE"),
        ("POST", "/finding-archive-rules", {"name": "x", "kind": "nope"}, 400, "COULD_NOT_VALIDATE"),
        ("GET", "/finding-archive-rules/nope", None, 404, "NOT_FOUND"),
        ("GET", "/advice?order=sideways", None, 400, "COULD_NOT_VALIDATE"),
        ("POST", "/access-tests", {"expectations": [{"can_fly": {}}]}, 400, "COULD_NOT_VALIDATE"),
    ],
)
def test_bad_requests_get_openziti_error_shapes(
    api: Api, method: str, path: str, body: Any, status: int, code: str
) -> None:
    params = {"filter": "bogus ="} if path == "/findings" else None
    result = call(api, method, path, json=body, params=params)
    assert result.status_code == status, result.text
    assert result.json["error"]["code"] == code


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/findings"),
        ("PATCH", "/findings/x"),
        ("GET", "/finding-archive-rules"),
        ("POST", "/finding-archive-rules"),
        ("GET", "/advice"),
        ("POST", "/access-tests"),
    ],
)
def test_non_admins_get_401(api: Api, method: str, path: str) -> None:
    someone = user(api)
    result = call(api, method, path, token=someone.token, json={})
    assert result.status_code == 401, result.text
    assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert call(api, method, path, token="", json={}).status_code == 401


def test_the_swagger_document_lists_the_routes(api: Api) -> None:
    paths = call(api, "GET", "/swagger.json").json["paths"]
    for path in ("/findings", "/findings/{id}", "/finding-archive-rules", "/advice", "/access-tests"):
        assert path in paths


def test_advice_pages_every_pair_with_policy_names(api: Api, net: dict[str, str]) -> None:
    api.create(
        "/service-edge-router-policies",
        {
            "name": "payroll-edge",
            "semantic": "AnyOf",
            "serviceRoles": ["#payroll"],
            "edgeRouterRoles": ["#edge"],
        },
    )
    api.create(
        "/edge-router-policies",
        {
            "name": "staff-edge",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "edgeRouterRoles": ["#edge"],
        },
    )
    result = call(api, "GET", "/advice", params={"limit": 1})
    assert result.status_code == 200, result.text
    rows = result.json["data"]
    assert result.json["meta"]["pagination"]["more"] is True
    everything = call(api, "GET", "/advice", params={"limit": 100}).json["data"]
    [pair] = [r for r in everything if r["identityName"] == "alice"]
    assert pair["serviceName"] == "payroll"
    assert pair["dial"] is True
    assert pair["bind"] is False
    assert pair["dialPolicies"] == ["alice-payroll", "staff-payroll"]
    assert (pair["commonRouterCount"], pair["onlineCommonRouterCount"]) == (1, 0)
    assert pair["status"] == "ERROR"  # r1 is not connected
    assert rows[0] == everything[0]
    summary = call(api, "GET", "/advice", params={"level": "services"}).json["data"]
    assert [(s["serviceName"], s["dialIdentities"], s["allOffline"]) for s in summary] == [("payroll", 2, 2)]


def test_access_tests_report_failures_and_coverage(api: Api, net: dict[str, str]) -> None:
    expectations = [
        {"can_dial": {"identity": "alice", "service": "payroll"}},
        {"cannot_bind": {"identity": "alice", "service": "payroll"}},
        {"reaches_router": {"identity": "alice", "router": "r1"}},
        {"expected_access": {"identity": "alice", "dial": ["payroll"]}},
    ]
    result = call(api, "POST", "/access-tests", json={"expectations": expectations})
    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert (data["passed"], data["total"], data["failed"]) == (False, 4, 2)
    messages = {f["kind"]: f["message"] for f in data["failures"]}
    assert "share no edge router" in messages["can_dial"]
    assert "no edge router policy" in messages["reaches_router"]
    assert data["coverage"]["policies"] == 2
    assert "coverage: 2/2 policies exercised" in data["report"]


def test_posture_that_blocks_every_grantee_is_found_until_one_passes(api: Api) -> None:
    """``posture-blocks-all``: identities with no posture data and no API session share one
    verdict (asked once, not per identity); one with data or a session is asked on its own."""
    from tests.api.session_helpers import client_post
    from tests.api.test_openziti_scenarios_services import domain_check, domain_response, guarded

    g = guarded(api)
    check = domain_check(api, ["corp.example"], g.posture_role)
    roles = api.get(f"/identities/{g.user.id}").json["data"]["roleAttributes"]
    for n in range(3):  # grantees that never logged in: no data, no session
        api.create(
            "/identities", {"name": f"idle-{n}", "type": "User", "isAdmin": False, "roleAttributes": roles}
        )
    [blocked] = [f for f in by_kind(findings(api), "posture-blocks-all") if f["subjectId"] == g.dial]
    assert blocked["status"] == "ACTIVE"
    assert blocked["details"]["checks"] == [check]

    answer = client_post(api, "/posture-response", g.user.token, json=domain_response(check, "corp.example"))
    assert answer.status_code == 201, answer.text
    [after] = [f for f in findings(api) if f["id"] == blocked["id"]]
    assert after["status"] == "RESOLVED"
