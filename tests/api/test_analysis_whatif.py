"""``POST /analysis/v1/what-if`` and ``/apply`` (docs/analysis.md §3): exact access diffs with
nothing written, apply-if-unchanged, 409 on a stale revision, one winner of two appliers."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.api.test_analysis_stream import changes_after
from tests.conftest import Api

A = "/analysis/v1"


def analysis(api: Api, method: str, path: str, **kwargs: Any) -> Any:
    return api.request(method, path, base=A, **kwargs)


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    """Two identities, two services, one router, Dial for #staff on #web through the router."""
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
        "db": api.create(
            "/services", {"name": "db", "encryptionRequired": True, "roleAttributes": ["finance"]}
        ),
        "r1": api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]}),
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
    ids["erp"] = api.create(
        "/edge-router-policies",
        {
            "name": "staff-edge",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "edgeRouterRoles": ["#edge"],
        },
    )
    return ids


def what_if(api: Api, items: list[dict[str, Any]], **kwargs: Any) -> Any:
    return analysis(api, "POST", "/what-if", json={"items": items}, **kwargs)


def test_what_if_answers_the_exact_diff_and_writes_nothing(api: Api, net: dict[str, str]) -> None:
    before = api.get("/service-policies").json["meta"]["pagination"]["totalCount"]
    items = [
        {"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}},
        {
            "op": "create",
            "kind": "service-policies",
            "body": {
                "name": "staff-db",
                "type": "Bind",
                "semantic": "AllOf",
                "identityRoles": ["#staff"],
                "serviceRoles": ["#finance"],
            },
        },
    ]
    result = what_if(api, items)

    assert result.status_code == 200, result.text
    data = result.json["data"]
    added = {(p["identityId"], p["serviceId"], p["type"]) for p in data["services"]["added"]}
    assert added == {
        (net["bob"], net["web"], "Dial"),
        (net["bob"], net["db"], "Bind"),
        (net["alice"], net["db"], "Bind"),
    }
    assert data["services"]["removed"] == []
    assert data["routers"]["added"] == [{"identityId": net["bob"], "edgeRouterId": net["r1"]}]
    assert data["summary"]["servicesAdded"] == 3
    assert data["revision"] == analysis(api, "GET", "/revision").json["data"]["revision"]
    created = data["created"]
    assert [(c["index"], c["kind"], c["name"]) for c in created] == [(1, "service-policies", "staff-db")]
    by_policy = {p["name"]: p for p in data["policies"]}
    assert by_policy["staff-db"]["change"] == "created"
    assert by_policy["staff-db"]["accessAdded"] == 2
    assert by_policy["staff-web"]["change"] == "members"
    bob = next(i for i in data["identities"] if i["id"] == net["bob"])
    assert bob["dialAdded"] == [net["web"]]
    assert bob["routersAdded"] == [net["r1"]]
    # nothing was written
    assert api.get("/service-policies").json["meta"]["pagination"]["totalCount"] == before
    assert api.get(f"/identities/{net['bob']}").json["data"]["roleAttributes"] == ["contractor"]


def test_lists_past_the_limit_are_cut_and_the_counts_stay_exact(
    api: Api, net: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.analysis as resources

    items = [
        {"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}},
        {
            "op": "create",
            "kind": "service-policies",
            "body": {
                "name": "all-bind",
                "type": "Bind",
                "semantic": "AnyOf",
                "identityRoles": ["#all"],
                "serviceRoles": ["#all"],
            },
        },
    ]
    whole = what_if(api, items).json["data"]
    monkeypatch.setattr(resources, "PAIR_LIMIT", 2)
    cut = what_if(api, items).json["data"]

    assert whole["summary"]["servicesAdded"] == len(whole["services"]["added"]) > 2
    assert whole["summary"]["identities"] == len(whole["identities"]) > 2
    assert cut["summary"] == whole["summary"]
    assert whole["truncated"] is False
    assert cut["truncated"] is True
    assert cut["services"]["added"] == whole["services"]["added"][:2]
    assert cut["routers"] == whole["routers"]
    assert cut["identities"] == whole["identities"][:2]

    assert len(whole["policies"]) == 3
    assert len(cut["policies"]) == 2


def test_deleting_an_identity_removes_its_pairs_and_strips_nothing_else(
    api: Api, net: dict[str, str]
) -> None:
    result = what_if(api, [{"op": "delete", "kind": "identities", "id": net["alice"]}])

    data = result.json["data"]
    assert {(p["identityId"], p["serviceId"]) for p in data["services"]["removed"]} == {
        (net["alice"], net["web"])
    }
    assert data["routers"]["removed"] == [{"identityId": net["alice"], "edgeRouterId": net["r1"]}]


def test_a_bad_item_gets_the_management_api_400_with_its_index(api: Api, net: dict[str, str]) -> None:
    body = {"name": "x", "type": "Dial", "semantic": "AnyOf", "identityRoles": ["#all", "#x"]}
    direct = api.post("/service-policies", json=body)
    items: list[dict[str, Any]] = [
        {"op": "delete", "kind": "service-policies", "id": net["dial"]},
        {"op": "create", "kind": "service-policies", "body": body},
    ]
    result = what_if(api, items)

    assert direct.status_code == result.status_code == 400
    assert result.json["error"]["code"] == direct.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "items[1]." + direct.json["error"]["cause"]["field"]
    assert result.json["error"]["cause"]["reason"] == direct.json["error"]["cause"]["reason"]


@pytest.mark.parametrize(
    ("items", "field"),
    [
        (
            [{"op": "create", "kind": "service-policies", "body": {"name": "x", "semantic": "AnyOf"}}],
            "items[0].type",
        ),
        ([{"op": "update", "kind": "services", "body": {"name": "x"}}], "items[0].id"),
        ([{"op": "explode", "kind": "services", "id": "x"}], "items.op"),
        ([{"op": "delete", "kind": "configs", "id": "x"}], "items.kind"),
    ],
)
def test_malformed_items_are_400(
    api: Api, net: dict[str, str], items: list[dict[str, Any]], field: str
) -> None:
    result = what_if(api, items)

    assert result.status_code == 400, result.text
    assert result.json["error"]["cause"]["field"] == field


def test_an_unknown_id_is_404_naming_the_item(api: Api, net: dict[str, str]) -> None:
    result = what_if(api, [{"op": "patch", "kind": "services", "id": "nope", "body": {"name": "y"}}])

    assert result.status_code == 404
    assert result.json["error"]["cause"]["field"] == "items[0]"


def test_a_batch_over_the_bound_is_400(api: Api) -> None:
    items = [{"op": "delete", "kind": "services", "id": "x"}] * 10_001
    result = what_if(api, items)

    assert result.status_code in (400, 413)
    assert result.json["error"]["code"] in ("COULD_NOT_VALIDATE", "REQUEST_ENTITY_TOO_LARGE")


def test_not_json_and_not_an_object_are_400(api: Api) -> None:
    assert (
        analysis(api, "POST", "/what-if", body="{", headers={"content-type": "application/json"}).status_code
        == 400
    )
    assert analysis(api, "POST", "/what-if", json=[1]).status_code == 400
    assert analysis(api, "POST", "/apply", json={"items": []}).status_code == 400  # no revision


def test_apply_commits_the_batch_at_its_revision(api: Api, net: dict[str, str]) -> None:
    items = [{"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}}]
    revision = what_if(api, items).json["data"]["revision"]

    result = analysis(api, "POST", "/apply", json={"revision": revision, "items": items})

    assert result.status_code == 200, result.text
    assert result.json["data"]["summary"]["servicesAdded"] == 1
    assert result.json["data"]["appliedRevision"] > revision
    assert api.get(f"/identities/{net['bob']}").json["data"]["roleAttributes"] == ["staff"]
    advice = api.get(f"/identities/{net['bob']}/policy-advice/{net['web']}").json["data"]
    assert advice["isDialAllowed"] is True


def test_an_applied_batch_is_on_the_access_change_stream_with_its_actor(
    api: Api, net: dict[str, str]
) -> None:
    items = [{"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}}]
    revision = what_if(api, items).json["data"]["revision"]
    assert analysis(api, "POST", "/apply", json={"revision": revision, "items": items}).status_code == 200

    (record,) = changes_after(api, revision)
    (write,) = record["writes"]
    assert write["actor"]["identityName"] == "Default Admin"
    assert write["actor"]["request"] == "POST /analysis/v1/apply"
    assert write["changes"] == [{"kind": "identities", "id": net["bob"], "op": "put"}]


def test_apply_with_a_stale_revision_is_409_with_the_intervening_diff(api: Api, net: dict[str, str]) -> None:
    items = [{"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}}]
    revision = what_if(api, items).json["data"]["revision"]
    assert api.patch(f"/services/{net['db']}", json={"roleAttributes": ["web"]}).status_code == 200

    result = analysis(api, "POST", "/apply", json={"revision": revision, "items": items})

    assert result.status_code == 409, result.text
    error = result.json["error"]
    assert error["code"] == "ACCESS_CHANGED"
    assert error["cause"]["revision"] == revision
    assert error["cause"]["currentRevision"] > revision
    assert error["cause"]["changes"]["services"]["added"] == [
        {"identityId": net["alice"], "serviceId": net["db"], "type": "Dial"}
    ]
    assert api.get(f"/identities/{net['bob']}").json["data"]["roleAttributes"] == ["contractor"]


def test_unrelated_writes_do_not_make_a_revision_stale(api: Api, net: dict[str, str]) -> None:
    items = [{"op": "delete", "kind": "service-policies", "id": net["dial"]}]
    revision = what_if(api, items).json["data"]["revision"]
    api.create(
        "/configs",
        {
            "name": "c1",
            "configTypeId": "intercept.v1",
            "data": {"protocols": ["tcp"], "addresses": ["a.b"], "portRanges": [{"low": 80, "high": 80}]},
        },
    )

    result = analysis(api, "POST", "/apply", json={"revision": revision, "items": items})

    assert result.status_code == 200, result.text
    assert api.get(f"/service-policies/{net['dial']}").status_code == 404


def test_a_revision_ahead_or_before_history_is_refused(api: Api, net: dict[str, str]) -> None:
    ahead = analysis(api, "POST", "/apply", json={"revision": 10**9, "items": []})
    old = analysis(api, "POST", "/apply", json={"revision": 0, "items": []})

    assert ahead.status_code == 400
    assert ahead.json["error"]["cause"]["field"] == "revision"
    assert old.status_code == 409
    assert "older than" in old.json["error"]["cause"]["reason"]


def test_two_concurrent_appliers_one_wins(api: Api, net: dict[str, str]) -> None:
    revision = analysis(api, "GET", "/revision").json["data"]["revision"]
    batches = [
        [{"op": "patch", "kind": "identities", "id": net["bob"], "body": {"roleAttributes": ["staff"]}}],
        [{"op": "patch", "kind": "services", "id": net["db"], "body": {"roleAttributes": ["web"]}}],
    ]
    results: list[Any] = [None, None]
    start = threading.Barrier(2)

    def run(n: int) -> None:
        start.wait()
        results[n] = analysis(api, "POST", "/apply", json={"revision": revision, "items": batches[n]})

    threads = [threading.Thread(target=run, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 409], [r.text for r in results]
    bob = api.get(f"/identities/{net['bob']}").json["data"]["roleAttributes"]
    db = api.get(f"/services/{net['db']}").json["data"]["roleAttributes"]
    winner = 0 if results[0].status_code == 200 else 1
    assert (bob, db) == ((["staff"], ["finance"]) if winner == 0 else (["contractor"], ["web"]))


def test_only_admins_may_ask(api: Api, net: dict[str, str]) -> None:
    api.create(
        "/identities",
        {"name": "carol", "type": "User", "isAdmin": False, "enrollment": {"updb": "carol"}},
    )
    anonymous = analysis(api, "POST", "/what-if", json={"items": []}, token="")
    assert anonymous.status_code == 401
    assert anonymous.json["error"]["code"] == "UNAUTHORIZED"
    invalid = analysis(api, "GET", "/revision", token="not-a-token")
    assert invalid.status_code == 401


def test_paths_outside_the_api_are_404(api: Api) -> None:
    result = analysis(api, "GET", "/nothing-here")

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


def test_the_swagger_document_lists_every_operation(api: Api) -> None:
    spec = analysis(api, "GET", "/swagger.json").json

    assert spec["basePath"] == A
    assert set(spec["paths"]) >= {
        "/revision",
        "/what-if",
        "/apply",
        "/identities/{id}/services/{service_id}",
        "/identities/{id}/edge-routers/{edge_router_id}",
    }
    assert "409" in spec["paths"]["/apply"]["post"]["responses"]
