"""Access analysis against the brute-force oracle (docs/analysis.md §5).

Random networks (the universes and strategies of ``test_policy_oracle``: AllOf/AnyOf and odd
casings, ``#all``, ``@id`` of present and missing entities) with random online routers, posture
verdicts and disabled identities:

- every explanation agrees with the oracle: the granting policies, the common routers, posture
  (OR over granting policies, AND within one), ``allowed``; every attribute miss, applied to the
  oracle, does grant what it says it would;
- every what-if diff of a random batch of changes (entity attributes, creates, deletes; policy
  creates, role / semantic / type changes, deletes) equals the brute-force comparison of all
  pairs before and after; and the history rewinds a graph to exactly its earlier answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.analysis import PostureVerdict, access_diff, explain_router, explain_service
from engine.analysis.diff import compare
from engine.analysis.history import AccessHistory
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from engine.ports import Change, Delete
from tests.conftest import examples
from tests.unit.engine.test_policy_oracle import (
    ENTITY_POOLS,
    POLICY_POOL,
    Oracle,
    OraclePolicy,
    apply_policy,
    attribute_sets,
    canonical_type,
    policy_specs,
    rebuild,
)

SETTINGS = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def networks(draw: st.DrawFn) -> Oracle:
    oracle = Oracle()
    for kind, pool in ENTITY_POOLS.items():
        for entity_id in draw(st.lists(st.sampled_from(pool), unique=True, max_size=len(pool) // 2 + 2)):
            oracle.entities[kind][entity_id] = set(draw(attribute_sets))
    for policy_kind in POLICY_FIELDS:
        for policy_id in draw(st.lists(st.sampled_from(POLICY_POOL), unique=True, max_size=4)):
            oracle.policies[policy_kind][policy_id] = canonical(draw(policy_specs(policy_kind)))
    return oracle


def canonical(spec: OraclePolicy) -> OraclePolicy:
    return OraclePolicy(spec.semantic, canonical_type(spec.type) if spec.type else None, spec.roles)


def routers_of(oracle: Oracle, policy_kind: str, kind: str, entity_id: str) -> set[str]:
    return oracle.linked(policy_kind, kind, entity_id, EDGE_ROUTER)


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_explanations_agree_with_the_oracle(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    routers = sorted(oracle.entities[EDGE_ROUTER])
    online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)) if routers else [])
    checks = sorted(oracle.entities[POSTURE_CHECK])
    passing = set(data.draw(st.lists(st.sampled_from(checks), unique=True)) if checks else [])
    identities = sorted(oracle.entities[IDENTITY])
    disabled = set(
        data.draw(st.lists(st.sampled_from(identities), unique=True, max_size=2)) if identities else []
    )

    def posture(ids: Sequence[str]) -> Mapping[str, PostureVerdict]:
        return {c: PostureVerdict(c, c in passing, "" if c in passing else "fails") for c in ids}

    oracle.memo.clear()
    for identity, service, policy_type in product(
        identities, sorted(oracle.entities[SERVICE]), ("Dial", "Bind")
    ):
        answer = explain_service(
            graph,
            identity,
            service,
            policy_type,
            online=online.__contains__,
            posture=posture,
            identity_disabled=identity in disabled,
        )
        linking = oracle.linking(identity, service, policy_type)
        common = routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, identity) & routers_of(
            oracle, SERVICE_EDGE_ROUTER_POLICY, SERVICE, service
        )
        if checks:
            posture_ok = any(oracle.members(SERVICE_POLICY, p, POSTURE_CHECK) <= passing for p in linking)
        else:
            posture_ok = bool(linking)
        assert [g.policy_id for g in answer.grants] == sorted(linking)
        assert answer.policy == bool(linking)
        assert answer.posture == posture_ok
        assert [r.router_id for r in answer.routers] == sorted(common)
        assert answer.common_router == bool(common)
        assert answer.online_router == bool(common & online)
        assert answer.allowed == (
            bool(linking) and posture_ok and bool(common & online) and identity not in disabled
        )
        assert answer.allowed == (not answer.misses)
        for miss in answer.misses:
            if miss.kind not in ("attribute", "router-attribute"):
                continue
            fixed = oracle.copy()
            kind = miss.entity
            entity = identity if kind == IDENTITY else service
            added = {miss.missing[0]} if miss.any_of else set(miss.missing)
            fixed.entities[kind][entity] |= added  # type: ignore[index]
            if miss.kind == "attribute":
                assert miss.policy_id in fixed.linking(identity, service, policy_type)
            else:
                assert routers_of(fixed, EDGE_ROUTER_POLICY, IDENTITY, identity) & routers_of(
                    fixed, SERVICE_EDGE_ROUTER_POLICY, SERVICE, service
                )
    for identity, router in product(identities, routers):
        answer_r = explain_router(
            graph, identity, router, online=router in online, identity_disabled=identity in disabled
        )
        linked = router in routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, identity)
        assert answer_r.policy == linked
        assert answer_r.allowed == (linked and router in online and identity not in disabled)
        for miss in answer_r.misses:
            if miss.kind == "attribute":
                fixed = oracle.copy()
                entity = identity if miss.entity == IDENTITY else router
                fixed.entities[miss.entity][entity] |= {miss.missing[0]} if miss.any_of else set(miss.missing)  # type: ignore[index]
                assert router in routers_of(fixed, EDGE_ROUTER_POLICY, IDENTITY, identity)


@st.composite
def batches(draw: st.DrawFn, oracle: Oracle) -> list[tuple[str, str, str, object]]:
    """Random changes: ("entity", kind, id, attributes | None) and ("policy", kind, id, spec | None)."""
    out: list[tuple[str, str, str, object]] = []
    for _ in range(draw(st.integers(1, 5))):
        if draw(st.booleans()):
            kind = draw(st.sampled_from(sorted(ENTITY_POOLS)))
            entity_id = draw(st.sampled_from(ENTITY_POOLS[kind]))
            attributes = draw(st.one_of(st.none(), attribute_sets))
            out.append(("entity", kind, entity_id, None if attributes is None else set(attributes)))
        else:
            kind = draw(st.sampled_from(sorted(POLICY_FIELDS)))
            policy_id = draw(st.sampled_from(POLICY_POOL))
            spec = draw(st.one_of(st.none(), policy_specs(kind)))
            out.append(("policy", kind, policy_id, None if spec is None else canonical(spec)))
    return out


def grants(oracle: Oracle) -> tuple[set[tuple[str, str, str]], set[tuple[str, str]]]:
    oracle.memo.clear()
    services = {
        (i, s, t)
        for i, s, t in product(oracle.entities[IDENTITY], oracle.entities[SERVICE], ("Dial", "Bind"))
        if oracle.linking(i, s, t)
    }
    routers = {
        (i, r) for i in oracle.entities[IDENTITY] for r in routers_of(oracle, EDGE_ROUTER_POLICY, IDENTITY, i)
    }
    return services, routers


def apply(
    graph: PolicyGraph, oracle: Oracle, batch: list[tuple[str, str, str, object]]
) -> dict[str, set[str]]:
    touched: dict[str, set[str]] = {}
    for what, kind, item_id, value in batch:
        touched.setdefault(kind, set()).add(item_id)
        if what == "entity":
            if value is None:
                oracle.entities[kind].pop(item_id, None)
                if graph.has_entity(kind, item_id):  # type: ignore[arg-type]
                    graph.remove_entity(kind, item_id)  # type: ignore[arg-type]
            else:
                assert isinstance(value, set)
                oracle.entities[kind][item_id] = set(value)
                graph.upsert_entity(kind, item_id, value)  # type: ignore[arg-type]
        elif value is None:
            oracle.policies[kind].pop(item_id, None)
            if graph.has_policy(kind, item_id):  # type: ignore[arg-type]
                graph.remove_policy(kind, item_id)  # type: ignore[arg-type]
        else:
            assert isinstance(value, OraclePolicy)
            oracle.policies[kind][item_id] = value
            apply_policy(graph, kind, item_id, value)
    oracle.memo.clear()
    return touched


#: The lists of an AccessDiff that a cut listing shortens.
LISTS = ("services_added", "services_removed", "routers_added", "routers_removed", "identities")


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_what_if_diffs_agree_with_the_oracle(oracle: Oracle, data: st.DataObject) -> None:
    before_graph = rebuild(oracle)
    batch = data.draw(batches(oracle))
    before = grants(oracle)
    after_oracle = oracle.copy()
    after_graph = before_graph.copy()
    touched = apply(after_graph, after_oracle, batch)
    after = grants(after_oracle)

    diff = access_diff(before_graph, after_graph, touched)

    assert set(diff.services_added) == after[0] - before[0]
    assert set(diff.services_removed) == before[0] - after[0]
    assert set(diff.routers_added) == after[1] - before[1]
    assert set(diff.routers_removed) == before[1] - after[1]
    assert diff.services_added == sorted(diff.services_added)
    by_identity = {c.id: c for c in diff.identities}
    for i, s, t in diff.services_added:
        assert s in (by_identity[i].dial_added if t == "Dial" else by_identity[i].bind_added)
    # cut at any length, each list is the whole one's start and the totals are its lengths
    listed = data.draw(st.integers(min_value=1, max_value=4), label="listed")
    cut = compare(before_graph, after_graph, touched).diff(listed=listed)
    for name in LISTS:
        whole = getattr(diff, name)
        assert getattr(cut, name) == whole[:listed], name
        assert cut.total(name) == len(whole), name
    assert cut.policies == diff.policies
    # the copy taken first is untouched: forking is what makes a what-if write nothing
    assert grants_of(before_graph, oracle) == before


def grants_of(graph: PolicyGraph, oracle: Oracle) -> tuple[set[tuple[str, str, str]], set[tuple[str, str]]]:
    services = {
        (i, s, t)
        for i, s in product(graph.entity_ids(IDENTITY), graph.entity_ids(SERVICE))
        for t in graph.permissions(i, s)
    }
    routers = {(i, r) for i in graph.entity_ids(IDENTITY) for r in graph.edge_routers_for_identity(i)}
    return services, routers


class _Revision:
    value = 0


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_the_history_rewinds_to_each_revision(oracle: Oracle, data: st.DataObject) -> None:
    """Batches observed as the access manager shows them, then undone: the graph at each earlier
    revision answers as the oracle did then."""
    graph = rebuild(oracle)
    revision = _Revision()
    history = AccessHistory(lambda: revision.value)
    seen = [(0, grants(oracle))]
    for step in range(1, data.draw(st.integers(1, 4)) + 1):
        batch = data.draw(batches(oracle))
        state = history.before(graph, _changes(batch))
        apply(graph, oracle, batch)
        revision.value = step
        history.after(graph, _changes(batch), state)
        seen.append((step, grants(oracle)))
    for at, expected in seen:
        assert grants_of(history.rewind(graph, at), oracle) == expected
        assert history.changed_since(at) == (at < revision.value)


def _changes(batch: list[tuple[str, str, str, object]]) -> list[Change]:
    """Store changes naming what ``batch`` touches (only kinds and ids matter to the history)."""
    from engine.entities.identities import Identity
    from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
    from engine.entities.posture import PostureCheck
    from engine.entities.routers import EdgeRouter
    from engine.entities.services import Service

    classes = {
        IDENTITY: Identity,
        SERVICE: Service,
        EDGE_ROUTER: EdgeRouter,
        POSTURE_CHECK: PostureCheck,
        SERVICE_POLICY: ServicePolicy,
        EDGE_ROUTER_POLICY: EdgeRouterPolicy,
        SERVICE_EDGE_ROUTER_POLICY: ServiceEdgeRouterPolicy,
    }
    return [Delete(classes[kind], item_id) for _, kind, item_id, _ in batch]
