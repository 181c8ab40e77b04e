"""Findings, whole-network advice and access tests against the brute-force oracle of
``test_policy_oracle`` on random networks (docs/analysis.md §6-§8)."""

from __future__ import annotations

from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.analysis.access_tests import Expectation, run_access_tests
from engine.analysis.advise import advise, service_summaries
from engine.analysis.findings import ServiceMemo, _first, evaluate
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
)
from engine.policy.bitset import select
from tests.conftest import examples
from tests.unit.engine.test_analysis_oracle import apply, batches, networks, routers_of
from tests.unit.engine.test_policy_oracle import ENTITY_POOLS, Oracle, OraclePolicy, rebuild, role_lists

SETTINGS = settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def common(oracle: Oracle, identity: str, service: str) -> set[str]:
    return routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, identity) & routers_of(
        oracle, SERVICE_EDGE_ROUTER_POLICY, SERVICE, service
    )


def expected_findings(oracle: Oracle, online: set[str], passing: set[str]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    carried = {kind: set().union(*ents.values()) if ents else set() for kind, ents in oracle.entities.items()}
    for kind, policies in oracle.policies.items():
        for pid, policy in policies.items():
            for entity_kind, roles in policy.roles.items():
                for role in roles:
                    if role.startswith("#") and role != "#all" and role[1:] not in carried[entity_kind]:
                        out.add(("dangling-role", pid, f"{entity_kind}:{role}"))
            sides = [k for k in POLICY_FIELDS[kind] if k != POSTURE_CHECK]  # type: ignore[index]
            if any(not oracle.members(kind, pid, k) for k in sides):
                out.add(("empty-policy", pid, ""))
    for kind, policies in oracle.policies.items():
        a, b = (k for k in POLICY_FIELDS[kind] if k != POSTURE_CHECK)  # type: ignore[index]
        for pid, policy in policies.items():
            ma, mb = oracle.members(kind, pid, a), oracle.members(kind, pid, b)
            if not ma or not mb:
                continue
            checks = oracle.members(kind, pid, POSTURE_CHECK) if kind == SERVICE_POLICY else set()
            for qid, other in policies.items():
                if qid == pid or (kind == SERVICE_POLICY and other.type != policy.type):
                    continue
                qa, qb = oracle.members(kind, qid, a), oracle.members(kind, qid, b)
                qchecks = oracle.members(kind, qid, POSTURE_CHECK) if kind == SERVICE_POLICY else set()
                if ma <= qa and mb <= qb and qchecks <= checks:
                    if (ma, mb, checks) == (qa, qb, qchecks) and qid > pid:
                        continue
                    out.add(("redundant-policy", pid, ""))
                    break
    serp_services = set().union(
        *(
            oracle.members(SERVICE_EDGE_ROUTER_POLICY, p, SERVICE)
            for p in oracle.policies[SERVICE_EDGE_ROUTER_POLICY]
        )
    )
    erp_identities = set().union(
        *(oracle.members(EDGE_ROUTER_POLICY, p, IDENTITY) for p in oracle.policies[EDGE_ROUTER_POLICY])
    )
    for service in oracle.entities[SERVICE]:
        if service not in serp_services:
            out.add(("service-without-router-policy", service, ""))
            continue
        granted = {i for i in erp_identities if oracle.linking(i, service, None)}
        if any(not common(oracle, i, service) for i in granted):
            out.add(("no-common-router", service, ""))
        if any(common(oracle, i, service) and not common(oracle, i, service) & online for i in granted):
            out.add(("no-online-common-router", service, ""))
    for identity in oracle.entities[IDENTITY]:
        if identity not in erp_identities:
            out.add(("identity-without-router-policy", identity, ""))
    for pid in oracle.policies[SERVICE_POLICY]:
        members = oracle.members(SERVICE_POLICY, pid, IDENTITY)
        checks = oracle.members(SERVICE_POLICY, pid, POSTURE_CHECK)
        if members and oracle.members(SERVICE_POLICY, pid, SERVICE) and checks and not checks <= passing:
            out.add(("posture-blocks-all", pid, ""))
    return out


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_findings_agree_with_the_oracle(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    routers = sorted(oracle.entities[EDGE_ROUTER])
    online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)) if routers else [])
    checks = sorted(oracle.entities[POSTURE_CHECK])
    passing = set(data.draw(st.lists(st.sampled_from(checks), unique=True)) if checks else [])
    oracle.memo.clear()

    found = evaluate(
        graph, online=online.__contains__, posture=lambda _i, ids: {c: c in passing for c in ids}
    )

    got = {(f.kind, f.subject_id, f"{f.details.get('entityType', '')}") for f in found}
    want = expected_findings(oracle, online, passing)
    assert {(k, s) for k, s, _ in got} == {(k, s) for k, s, _ in want}
    assert len({f.id for f in found}) == len(found)
    dangling = {(f.subject_id, f.details["role"]) for f in found if f.kind == "dangling-role"}
    assert dangling == {(s, p.split(":", 1)[1]) for k, s, p in want if k == "dangling-role"}


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_advice_and_summaries_agree_with_the_oracle(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    routers = sorted(oracle.entities[EDGE_ROUTER])
    online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)) if routers else [])
    oracle.memo.clear()

    rows = {
        (r.identity_id, r.service_id): r
        for r in advise(graph, online=online.__contains__)
        if r.service_id and r.identity_id
    }
    expected = {}
    for identity, service in product(oracle.entities[IDENTITY], oracle.entities[SERVICE]):
        dial, bind = oracle.linking(identity, service, "Dial"), oracle.linking(identity, service, "Bind")
        if dial or bind:
            expected[identity, service] = (dial, bind)
    assert set(rows) == set(expected)
    for (identity, service), (dial, bind) in expected.items():
        row = rows[identity, service]
        shared = common(oracle, identity, service)
        assert (row.dial_policies, row.bind_policies) == (tuple(sorted(dial)), tuple(sorted(bind)))
        assert row.common_router_count == len(shared)
        assert row.online_common_router_count == len(shared & online)
        assert row.identity_router_count == len(routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, identity))
        assert (row.status == "OKAY") == bool(shared & online)
    for summary in service_summaries(graph, online=online.__contains__):
        service = summary.service_id
        granted = [i for i in oracle.entities[IDENTITY] if (i, service) in expected]
        assert summary.ok == sum(1 for i in granted if common(oracle, i, service) & online)
        assert summary.dial_identities == sum(1 for i in granted if expected[i, service][0])


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_access_tests_agree_with_the_oracle(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    identities, services = sorted(oracle.entities[IDENTITY]), sorted(oracle.entities[SERVICE])
    if not identities or not services:
        return
    oracle.memo.clear()
    kinds = ("can_dial", "cannot_dial", "can_bind", "cannot_bind")
    expectations = [
        Expectation(
            n,
            data.draw(st.sampled_from(kinds)),
            data.draw(st.sampled_from(identities)),
            data.draw(st.sampled_from(services)),
        )
        for n in range(10)
    ]
    report = run_access_tests(graph, expectations, resolve=lambda _k, v: v)
    for outcome in report.outcomes:
        e = outcome.expectation
        policy_type = "Dial" if e.kind.endswith("dial") else "Bind"
        can = bool(oracle.linking(e.identity, e.target, policy_type)) and bool(
            common(oracle, e.identity, e.target)
        )
        assert outcome.passed == (can if e.kind.startswith("can_") else not can)


@given(
    st.sets(st.integers(0, 20_000), max_size=300),
    st.sets(st.integers(0, 20_000), max_size=50),
    st.integers(1, 30),
)
@settings(max_examples=examples(200), deadline=None)
def test_the_first_ids_of_a_bitset_are_those_select_lists_first(
    members: set[int], gaps: set[int], count: int
) -> None:
    """What a finding names of a large set (its first ``count`` ids) without listing the set."""
    bits = sum(1 << m for m in members)
    values = [None if i in gaps else f"id{i}" for i in range(20_001)]
    assert _first(bits, values, count) == [v for v in select(bits, values) if v is not None][:count]


@st.composite
def side_edits(draw: st.DrawFn, oracle: Oracle) -> list[tuple[str, str, str, object]]:
    """A batch changing one side of one existing policy (the identities of a service policy or
    of an edge router policy, say), the rest of it kept: the edit that leaves a service's own
    inputs (its policies, its routers' policies) as they were."""
    kinds = sorted(k for k in POLICY_FIELDS if oracle.policies[k])
    if not kinds:
        return []
    kind = draw(st.sampled_from(kinds))
    policy_id = draw(st.sampled_from(sorted(oracle.policies[kind])))
    spec = oracle.policies[kind][policy_id]
    side = draw(st.sampled_from([k for k in POLICY_FIELDS[kind] if k != POSTURE_CHECK]))
    roles = {**spec.roles, side: draw(role_lists(side))}
    return [("policy", kind, policy_id, OraclePolicy(spec.semantic, spec.type, roles))]


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_findings_taken_again_from_the_memo_equal_a_whole_evaluation(
    oracle: Oracle, data: st.DataObject
) -> None:
    """After each random batch (and routers coming and going), the evaluation that takes the
    per-service findings of unchanged services from its memo equals one without a memo; the
    memo is cleared on identity and service changes, as the manager clears it (names)."""
    graph = rebuild(oracle)
    routers = sorted({*oracle.entities[EDGE_ROUTER], *ENTITY_POOLS[EDGE_ROUTER]})
    memo = ServiceMemo()
    for step in range(data.draw(st.integers(1, 8))):
        if step:
            batch = data.draw(st.one_of(batches(oracle), side_edits(oracle)))
            if any(what == "entity" and kind in (IDENTITY, SERVICE) for what, kind, _, _ in batch):
                memo.clear()
            apply(graph, oracle, batch)
        online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)))
        fork = graph.copy()
        whole = evaluate(fork, online=online.__contains__)
        assert evaluate(fork, online=online.__contains__, memo=memo) == whole
        assert evaluate(graph, online=online.__contains__, memo=memo) == whole


def _small_network() -> Oracle:
    """s1 is granted to #a and #c identities; its only router r1 is in an edge router policy of
    the #c ones only."""
    oracle = Oracle()
    oracle.entities[IDENTITY].update({"i1": {"a"}, "i2": {"b"}, "i3": {"c"}})
    oracle.entities[SERVICE].update({"s1": {"x"}})
    oracle.entities[EDGE_ROUTER].update({"r1": {"r"}, "r2": {"q"}})
    oracle.policies[SERVICE_POLICY]["p1"] = OraclePolicy(
        "AnyOf", "Dial", {IDENTITY: ["#a", "#c"], SERVICE: ["#x"]}
    )
    oracle.policies[SERVICE_POLICY]["p0"] = OraclePolicy("AnyOf", "Dial", {IDENTITY: ["#c"], SERVICE: ["#x"]})
    oracle.policies[EDGE_ROUTER_POLICY]["e1"] = OraclePolicy(
        "AnyOf", None, {IDENTITY: ["#all"], EDGE_ROUTER: ["#q"]}
    )
    oracle.policies[EDGE_ROUTER_POLICY]["e2"] = OraclePolicy(
        "AnyOf", None, {IDENTITY: ["#c"], EDGE_ROUTER: ["#r"]}
    )
    oracle.policies[SERVICE_EDGE_ROUTER_POLICY]["x1"] = OraclePolicy(
        "AnyOf", None, {SERVICE: ["#x"], EDGE_ROUTER: ["#r"]}
    )
    return oracle


@pytest.mark.parametrize(
    ("kind", "policy_id", "roles", "online"),
    [
        # a granting policy's identities change, the service's policies and routers do not
        (SERVICE_POLICY, "p1", {IDENTITY: ["#a", "#b", "#c"], SERVICE: ["#x"]}, {"r1", "r2"}),
        # a granting policy stops selecting the service (another still grants it)
        (SERVICE_POLICY, "p1", {IDENTITY: ["#a", "#c"], SERVICE: ["#y"]}, {"r1", "r2"}),
        # an edge router policy reaching the service's router gains a granted identity
        (EDGE_ROUTER_POLICY, "e2", {IDENTITY: ["#c", "#a"], EDGE_ROUTER: ["#r"]}, {"r1", "r2"}),
        # the service's router goes offline
        (None, "", {}, {"r2"}),
    ],
)
def test_the_memo_sees_each_input_of_a_service_change(
    kind: str | None, policy_id: str, roles: dict[str, list[str]], online: set[str]
) -> None:
    oracle = _small_network()
    graph = rebuild(oracle)
    memo = ServiceMemo()
    before = evaluate(graph, online={"r1", "r2"}.__contains__, memo=memo)
    assert [f.kind for f in before if f.kind.endswith("common-router")] == ["no-common-router"]
    if kind is not None:
        apply(
            graph,
            oracle,
            [
                (
                    "policy",
                    kind,
                    policy_id,
                    OraclePolicy("AnyOf", None if kind != SERVICE_POLICY else "Dial", roles),
                )
            ],
        )
    whole = evaluate(graph, online=online.__contains__)
    assert whole != before
    assert evaluate(graph, online=online.__contains__, memo=memo) == whole
