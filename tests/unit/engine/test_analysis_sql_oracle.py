"""The SQL views over access (docs/analysis.md §13) against the brute-force oracle of
``test_policy_oracle`` on random networks and after random change batches."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.analysis_sql import BY_IDENTITY, SqlEngine, by_identity
from engine.analysis.sql import snapshot_of
from engine.policy import (
    EDGE_ROUTER,
    IDENTITY,
    POLICY_FIELDS,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from tests.conftest import examples
from tests.unit.engine.test_analysis_oracle import apply, batches, grants, networks, routers_of
from tests.unit.engine.test_policy_oracle import Oracle, rebuild, selects

SETTINGS = settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture(scope="module")
def engine() -> SqlEngine:
    return SqlEngine(memory_limit="256MB", threads=1)


def views(engine: SqlEngine, graph: PolicyGraph, online: set[str]) -> dict[str, set[tuple[object, ...]]]:
    database = engine.of(snapshot_of(graph, 1), online=lambda router: router in online)
    try:

        def rows(sql: str) -> set[tuple[object, ...]]:
            answer = engine.query(database, sql, limit=100_000)
            assert not answer.truncated
            out = {tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in answer.rows}
            assert len(out) == len(answer.rows), f"duplicate rows in {sql}"
            return out

        return {
            "pairs": rows("SELECT identity_id, service_id, type FROM access_pairs"),
            "routers": rows("SELECT identity_id, edge_router_id, online FROM router_reach"),
            "service_routers": rows("SELECT service_id, edge_router_id, online FROM service_routers"),
            "paths": rows(
                "SELECT identity_id, service_id, type, policy_id, identity_roles_matched,"
                " service_roles_matched FROM access_paths"
            ),
            "members": rows("SELECT policy_kind, policy_id, entity_kind, entity_id FROM policy_members"),
            "entities": rows(
                "SELECT 'identity', id, role_attributes FROM identities UNION ALL"
                " SELECT 'service', id, role_attributes FROM services UNION ALL"
                " SELECT 'edge-router', id, role_attributes FROM edge_routers"
            ),
            "policies": rows("SELECT kind, id, type FROM policies"),
            "filtered": rows(
                "SELECT identity_id, service_id, type FROM access_pairs"
                " WHERE service_id IN (SELECT min(id) FROM services) AND type = 'Dial'"
            ),
            # the identity-driven shapes (by_identity), whole, then as an identity filter reads them
            "pairs_by_identity": rows(
                f"SELECT identity_id, service_id, type FROM {BY_IDENTITY}.access_pairs"
            ),
            "paths_by_identity": rows(
                "SELECT identity_id, service_id, type, policy_id, identity_roles_matched,"
                f" service_roles_matched FROM {BY_IDENTITY}.access_paths"
            ),
            "identity_filtered": rows(
                "SELECT identity_id, service_id, type FROM access_pairs"
                " WHERE identity_id IN (SELECT min(id) FROM identities) AND type = 'Dial'"
            ),
            "identity_name_filtered": rows(
                "SELECT p.identity_id, p.service_id, p.type FROM access_pairs p"
                " WHERE p.identity_name = (SELECT max(name) FROM identities)"
            ),
            "identity_paths_filtered": rows(
                "SELECT identity_id, service_id, type, policy_id, identity_roles_matched,"
                " service_roles_matched FROM access_paths"
                " WHERE identity_id = (SELECT min(id) FROM identities)"
            ),
        }
    finally:
        database.close()


def matched(roles: list[str], entity_id: str, attributes: set[str]) -> tuple[str, ...]:
    return tuple(
        r
        for r in sorted(set(roles))
        if r == "#all" or r == "@" + entity_id or (r.startswith("#") and r[1:] in attributes)
    )


def expected(oracle: Oracle, online: set[str]) -> dict[str, set[tuple[object, ...]]]:
    pairs, routers = grants(oracle)
    paths = set()
    for pid, policy in oracle.policies[SERVICE_POLICY].items():
        for i in oracle.members(SERVICE_POLICY, pid, IDENTITY):
            for s in oracle.members(SERVICE_POLICY, pid, SERVICE):
                paths.add(
                    (
                        i,
                        s,
                        policy.type,
                        pid,
                        matched(policy.roles.get(IDENTITY, []), i, oracle.entities[IDENTITY][i]),
                        matched(policy.roles.get(SERVICE, []), s, oracle.entities[SERVICE][s]),
                    )
                )
    members = {
        (kind, pid, entity_kind, e)
        for kind, policies in oracle.policies.items()
        for pid in policies
        for entity_kind in POLICY_FIELDS[kind]  # type: ignore[index]
        for e in oracle.members(kind, pid, entity_kind)
    }
    entities = {
        (kind, e, tuple(sorted(attributes)))
        for kind in (IDENTITY, SERVICE, EDGE_ROUTER)
        for e, attributes in oracle.entities[kind].items()
    }
    services = oracle.entities[SERVICE]
    first = min(services) if services else None
    identities = oracle.entities[IDENTITY]
    least = min(identities) if identities else None
    most = max(identities) if identities else None
    return {
        "pairs": pairs,
        "routers": {(i, r, r in online) for i, r in routers},
        "service_routers": {
            (s, r, r in online)
            for s in services
            for r in routers_of(oracle, SERVICE_EDGE_ROUTER_POLICY, SERVICE, s)
        },
        "paths": paths,
        "members": members,
        "entities": entities,
        "policies": {
            (kind, pid, p.type) for kind, policies in oracle.policies.items() for pid, p in policies.items()
        },
        "filtered": {(i, s, t) for i, s, t in pairs if s == first and t == "Dial"},
        "pairs_by_identity": pairs,
        "paths_by_identity": paths,
        "identity_filtered": {(i, s, t) for i, s, t in pairs if i == least and t == "Dial"},
        "identity_name_filtered": {(i, s, t) for i, s, t in pairs if i == most},
        "identity_paths_filtered": {p for p in paths if p[0] == least},
    }


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_views_agree_with_the_oracle(engine: SqlEngine, oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    online = set(data.draw(st.sets(st.sampled_from(sorted(oracle.entities[EDGE_ROUTER]) or ["none"]))))
    assert views(engine, graph, online) == expected(oracle, online)
    # after random changes the graph moved: a new snapshot sees exactly the new access
    apply(graph, oracle, data.draw(batches(oracle)))
    assert views(engine, graph, online) == expected(oracle, online)


def test_the_oracle_selects_as_the_views_match() -> None:
    """``matched`` (the views' matched roles) lists what selects: ``@id`` under both semantics."""
    assert selects(["@x", "#a"], "AllOf", "x", set())
    assert matched(["@x", "#a", "#b"], "x", {"a"}) == ("#a", "@x")
    assert matched(["#all"], "y", set()) == ("#all",)


def test_identity_filters_read_the_views_driven_by_identity() -> None:
    """``by_identity``: a statement comparing an identity column of access_pairs or access_paths,
    and no service column, reads the identity-driven shapes; strings and comments do not count."""
    assert by_identity("SELECT service_id FROM access_pairs WHERE identity_id = 'x' AND type = 'Dial'")
    assert by_identity("SELECT * FROM access_pairs WHERE identity_id IN ('x', 'y')")
    assert by_identity("SELECT * FROM access_pairs p WHERE p.\"identity_name\"=='x'")
    assert by_identity("SELECT count(*) FROM access_paths WHERE 'x' = identity_id")
    assert by_identity("SELECT * FROM access_pairs p JOIN identities i ON i.id = p.identity_id")
    assert by_identity(
        "SELECT s.role_attributes FROM access_pairs p JOIN services s ON s.id = p.service_id"
        " WHERE p.identity_id = 'x'"
    )
    assert by_identity("SELECT * FROM access_pairs WHERE identity_id IN (SELECT min(id) FROM identities)")
    assert not by_identity(
        "SELECT * FROM access_pairs p JOIN identities i ON i.id = p.identity_id WHERE p.service_id = 's'"
    )
    assert not by_identity("SELECT * FROM access_pairs p JOIN services s ON s.id = p.service_id")
    assert not by_identity("SELECT * FROM access_pairs WHERE service_id = 's'")
    assert not by_identity("SELECT * FROM access_pairs WHERE service_id = 's' AND identity_id = 'x'")
    assert not by_identity("SELECT 'identity_id = 1' FROM access_pairs")
    assert not by_identity("SELECT * FROM access_pairs -- identity_id = 'x'")
    assert not by_identity("SELECT * FROM router_reach WHERE identity_id = 'x'")
    assert not by_identity("SELECT identity_id FROM access_pairs")


def test_hostile_statements_are_refused_offline(engine: SqlEngine) -> None:
    from api.analysis_sql import QueryError

    database = engine.of(snapshot_of(PolicyGraph(), 0))
    try:
        for sql in (
            "DROP VIEW access_pairs",
            "SELECT 1; SELECT 2",
            "SELECT * FROM read_csv('x')",
            "PRAGMA version",
        ):
            with pytest.raises(QueryError):
                engine.query(database, sql)
        assert engine.query(database, "SELECT count(*) FROM access_pairs").rows == [[0]]
        with pytest.raises(QueryError) as stopped:
            engine.query(database, "SELECT count(*) FROM range(100000000000) a", seconds=0.5)
        assert stopped.value.code in ("QUERY_TIMEOUT", "QUERY_TOO_LARGE")
    finally:
        database.close()
