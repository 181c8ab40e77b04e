"""``POST /analysis/v1/query`` and ``/export`` (docs/analysis.md §13): the views agree with the
engine, and hostile SQL gets a 400 with nothing changed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from controller.cli import main
from controller.settings import Settings
from tests.api.session_helpers import user
from tests.conftest import Api

A = "/analysis/v1"


def call(api: Api, method: str, path: str, **kwargs: Any) -> Any:
    return api.request(method, path, base=A, **kwargs)


def query(api: Api, sql: str, **body: Any) -> Any:
    return call(api, "POST", "/query", json={"sql": sql, **body})


def rows(api: Api, sql: str, **body: Any) -> list[list[Any]]:
    result = query(api, sql, **body)
    assert result.status_code == 200, result.text
    return [list(r) for r in result.json["data"]["rows"]]


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    ids = {
        "alice": api.create(
            "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
        ),
        "bob": api.create("/identities", {"name": "bob", "type": "User", "isAdmin": False}),
        "carol": api.create(
            "/identities",
            {"name": "carol", "type": "User", "isAdmin": False, "roleAttributes": ["staff", "ops"]},
        ),
        "payroll": api.create(
            "/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["payroll"]}
        ),
        "wiki": api.create(
            "/services", {"name": "wiki", "encryptionRequired": True, "roleAttributes": ["wiki"]}
        ),
        "r1": api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]}),
    }
    ids["dial"] = api.create(
        "/service-policies",
        {
            "name": "staff-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#payroll", "#wiki"],
        },
    )
    ids["bind"] = api.create(
        "/service-policies",
        {
            "name": "bob-binds-wiki",
            "type": "Bind",
            "semantic": "AllOf",
            "identityRoles": ["@" + ids["bob"]],
            "serviceRoles": ["#wiki"],
        },
    )
    ids["erp"] = api.create(
        "/edge-router-policies",
        {"name": "ops-edge", "semantic": "AnyOf", "identityRoles": ["#ops"], "edgeRouterRoles": ["#edge"]},
    )
    return ids


def test_access_pairs_agree_with_the_engine(api: Api, net: dict[str, str]) -> None:
    got = rows(api, "SELECT identity_id, service_id, type FROM access_pairs ORDER BY ALL")
    graph = api.ctrl.managers.access.snapshot()
    want = sorted(
        [i, s, t]
        for i in graph.entity_ids("identity")
        for s in graph.entity_ids("service")
        for t in ("Bind", "Dial")
        if t in graph.permissions(i, s)
    )
    assert got == want
    assert rows(
        api,
        "SELECT identity_name FROM access_pairs WHERE service_name = 'payroll' AND type = 'Dial' ORDER BY 1",
    ) == [["alice"], ["carol"]]


def test_what_an_identity_may_reach_by_identity_filter(api: Api, net: dict[str, str]) -> None:
    """Filtered by identity (the identity-driven twins, docs/analysis.md §13): the same rows."""
    assert rows(
        api,
        f"SELECT service_name, type FROM access_pairs WHERE identity_id = '{net['bob']}' ORDER BY ALL",
    ) == [["wiki", "Bind"]]
    assert rows(
        api,
        "SELECT service_name FROM access_pairs WHERE identity_name IN ('alice', 'carol')"
        " AND type = 'Dial' ORDER BY ALL",
    ) == [["payroll"], ["payroll"], ["wiki"], ["wiki"]]
    assert rows(
        api,
        "SELECT service_name, policy_name, identity_roles_matched FROM access_paths"
        " WHERE identity_name = 'carol' ORDER BY ALL",
    ) == [["payroll", "staff-payroll", ["#staff"]], ["wiki", "staff-payroll", ["#staff"]]]
    joined = "SELECT p.service_name FROM access_pairs p JOIN identities i ON i.id = p.identity_id"
    assert rows(api, joined + " WHERE i.name = 'alice' ORDER BY 1") == [["payroll"], ["wiki"]]


def test_paths_routers_members_and_entity_tables(api: Api, net: dict[str, str]) -> None:
    paths = rows(
        api,
        "SELECT identity_name, service_name, type, policy_name, identity_roles_matched, service_roles_matched"
        " FROM access_paths WHERE service_name = 'wiki' ORDER BY ALL",
    )
    assert paths == [
        ["alice", "wiki", "Dial", "staff-payroll", ["#staff"], ["#wiki"]],
        ["bob", "wiki", "Bind", "bob-binds-wiki", ["@" + net["bob"]], ["#wiki"]],
        ["carol", "wiki", "Dial", "staff-payroll", ["#staff"], ["#wiki"]],
    ]
    reach = rows(api, "SELECT identity_name, edge_router_name, online FROM router_reach ORDER BY ALL")
    assert reach == [["carol", "r1", False]]
    members = rows(
        api,
        "SELECT entity_kind, entity_name FROM policy_members WHERE policy_name = 'staff-payroll' ORDER BY ALL",
    )
    assert members == [
        ["identity", "alice"],
        ["identity", "carol"],
        ["service", "payroll"],
        ["service", "wiki"],
    ]
    policies = rows(
        api, "SELECT name, kind, type, semantic, service_roles FROM policies WHERE name = 'bob-binds-wiki'"
    )
    assert policies == [["bob-binds-wiki", "service-policy", "Bind", "AllOf", ["#wiki"]]]
    joined = rows(
        api,
        "SELECT i.name, count(*) FROM identities i JOIN access_pairs p ON p.identity_id = i.id"
        " GROUP BY i.name ORDER BY 1",
    )
    assert joined == [["alice", 2], ["bob", 1], ["carol", 2]]


def test_findings_view(api: Api, net: dict[str, str]) -> None:
    kinds = {r[0] for r in rows(api, "SELECT kind FROM findings")}
    assert "service-without-router-policy" in kinds
    assert "identity-without-router-policy" in kinds
    # the findings GET /findings lists as not RESOLVED, message for message
    listed = api.request("GET", "/findings", base="/analysis/v1", params={"limit": "500"}).json["data"]
    current = sorted((f["id"], f["kind"], f["message"]) for f in listed if f["status"] != "RESOLVED")
    assert sorted(tuple(r) for r in rows(api, "SELECT id, kind, message FROM findings")) == current


def test_answer_shape_row_budget_and_a_new_revision(api: Api, net: dict[str, str]) -> None:
    result = query(api, "SELECT * FROM range(50) t(n)", limit=10)
    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["columns"] == [{"name": "n", "type": "BIGINT"}]
    assert data["rows"] == [[n] for n in range(10)]
    assert data["truncated"] is True
    assert result.json["meta"]["rowCount"] == 10
    assert query(api, "SELECT 1", limit=10).json["data"]["truncated"] is False
    before = result.json["meta"]["revision"]
    api.create("/identities", {"name": "dave", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]})
    after = query(api, "SELECT count(*) FROM access_pairs WHERE identity_name = 'dave'")
    assert after.json["data"]["rows"] == [[2]]
    assert after.json["meta"]["revision"] > before


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE x (a INT)",
        "INSERT INTO _identities VALUES (99, 'x', 'x', [])",
        "DELETE FROM _identities",
        "DROP VIEW access_pairs",
        "UPDATE _services SET name = 'x'",
        "COPY (SELECT 1) TO 'out.csv'",
        "COPY _identities FROM 'in.csv'",
        "ATTACH 'other.duckdb' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA version",
        "SET threads = 64",
        "CALL pragma_version()",
        "EXPLAIN SELECT 1",
        "SELECT 1; SELECT 2",
        "SELECT 1; DROP VIEW access_pairs",
        "CHECKPOINT",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM read_parquet('x.parquet')",
        "SELECT * FROM glob('/*')",
        "SELECT * FROM query('DROP VIEW access_pairs')",
        "SELECT * FROM nothing_here",
        "SELEC 1",
        "",
    ],
)
def test_hostile_sql_is_refused_and_nothing_changes(api: Api, net: dict[str, str], sql: str) -> None:
    result = query(api, sql)
    assert result.status_code == 400, result.text
    error = result.json["error"]
    assert error["code"] in ("INVALID_QUERY", "COULD_NOT_VALIDATE")
    assert error["cause"]["field"] == "sql"
    assert rows(api, "SELECT count(*) FROM access_pairs") == [[5]]
    assert rows(api, "SELECT count(*) FROM identities WHERE name IN ('alice', 'bob', 'carol')") == [[3]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM range(1000000000) a, range(1000000000) b",
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT max(n) FROM r",
    ],
)
def test_a_query_that_runs_forever_is_stopped(api: Api, net: dict[str, str], sql: str) -> None:
    result = query(api, sql, timeoutSeconds=1)
    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] in ("QUERY_TIMEOUT", "QUERY_TOO_LARGE")
    assert result.json["error"]["cause"]["field"] == "sql"
    assert rows(api, "SELECT count(*) FROM access_pairs") == [[5]]


def test_bad_bodies(api: Api) -> None:
    for body in ({}, {"sql": "SELECT 1", "limit": -1}, {"sql": "SELECT 1", "limit": 10**6}, {"sql": 5}):
        result = call(api, "POST", "/query", json=body)
        assert result.status_code == 400, (body, result.text)
    result = call(api, "POST", "/query", json={"sql": "SELECT '" + "x" * 2_000_000 + "'"})
    assert result.status_code == 413, result.text


def test_export_streams_parquet_of_a_view_or_a_query(api: Api, net: dict[str, str]) -> None:
    result = call(api, "POST", "/export", json={"view": "access_pairs"})
    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/vnd.apache.parquet"
    table = pq.read_table(io.BytesIO(result.content))
    assert table.num_rows == 5
    assert table.column_names == ["identity_id", "identity_name", "service_id", "service_name", "type"]
    result = call(
        api,
        "POST",
        "/export",
        json={"sql": "SELECT identity_name FROM access_pairs WHERE service_name = 'wiki'"},
    )
    assert result.status_code == 200, result.text
    assert sorted(pq.read_table(io.BytesIO(result.content)).column("identity_name").to_pylist()) == [
        "alice",
        "bob",
        "carol",
    ]
    empty = call(api, "POST", "/export", json={"sql": "SELECT * FROM identities WHERE false"})
    assert pq.read_table(io.BytesIO(empty.content)).num_rows == 0
    for body, field in (
        ({"view": "nope"}, "view"),
        ({"sql": "COPY (SELECT 1) TO 'x.parquet' (FORMAT parquet)"}, "sql"),
        ({"sql": "SELECT 1", "view": "identities"}, "sql"),
        ({}, "sql"),
    ):
        refused = call(api, "POST", "/export", json=body)
        assert refused.status_code == 400, (body, refused.text)
        assert refused.json["error"]["cause"]["field"] == field


@pytest.mark.parametrize("path", ["/query", "/export"])
def test_non_admins_get_401(api: Api, path: str) -> None:
    someone = user(api)
    result = call(api, "POST", path, token=someone.token, json={"sql": "SELECT 1"})
    assert result.status_code == 401, result.text
    assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert call(api, "POST", path, token="", json={"sql": "SELECT 1"}).status_code == 401


def test_the_swagger_document_lists_the_routes(api: Api) -> None:
    paths = call(api, "GET", "/swagger.json").json["paths"]
    for path in ("/query", "/export"):
        responses = paths[path]["post"]["responses"]
        assert {"200", "400", "401", "413", "429"} <= set(responses)


# -- trellis query, offline on a snapshot -----------------------------------------------------------


@pytest.fixture
def snapshot(api: Api, settings: Settings, net: dict[str, str]) -> Path:
    assert api.post("/database/snapshot").status_code == 200
    [path] = [
        p
        for p in settings.db_path.parent.glob(settings.db_path.name + "-*")
        if not p.name.endswith(".partial")
    ]
    return path


@pytest.mark.durable
def test_trellis_query_offline_on_a_snapshot(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sql = "SELECT identity_name, type FROM access_pairs WHERE service_name = 'wiki' ORDER BY ALL"
    assert main(["query", "--snapshot", str(snapshot), sql]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "identity_name  type",
        "alice          Dial",
        "bob            Bind",
        "carol          Dial",
        "(3 rows)",
    ]
    assert main(["query", "--snapshot", str(snapshot), "--format", "json", sql]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert json.loads(lines[0]) == {"identity_name": "alice", "type": "Dial"}
    assert main(["query", "--snapshot", str(snapshot), "--format", "csv", "--limit", "1", sql]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == ["identity_name,type", "alice,Dial"]
    assert "truncated" in captured.err
    target = tmp_path / "pairs.parquet"
    assert (
        main(["query", "--snapshot", str(snapshot), "--parquet", str(target), "SELECT * FROM access_pairs"])
        == 0
    )
    assert pq.read_table(target).num_rows == 5
    assert main(["query", "--snapshot", str(snapshot), "DROP VIEW access_pairs"]) == 2
    assert "INVALID_QUERY" in capsys.readouterr().err
    assert (
        main(["query", "--snapshot", str(snapshot), "SELECT kind FROM findings WHERE kind = 'empty-policy'"])
        == 0
    )
