"""pytest-benchmark cases for the policy engine at tier S (``make bench`` times them).

In the normal suite ``--benchmark-disable`` runs each body once, untimed: they double as smoke
tests of the benchmark code paths. No timing is asserted anywhere.
"""

from __future__ import annotations

import random

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from bench.baseline import BaselineGraph
from bench.engine import format_table, measure_baseline, measure_engine
from bench.topology import Topology, generate
from engine.policy import EDGE_ROUTER_POLICY, IDENTITY, SERVICE_POLICY, PolicyGraph, explain

pytestmark = pytest.mark.bench


@pytest.fixture(scope="module")
def topology() -> Topology:
    return generate("S", seed=1)


@pytest.fixture(scope="module")
def graph(topology: Topology) -> PolicyGraph:
    return PolicyGraph.build(**topology.rows())


@pytest.fixture(scope="module")
def pairs(topology: Topology) -> list[tuple[str, str]]:
    rng = random.Random(3)
    return [(rng.choice(topology.identities).id, rng.choice(topology.services).id) for _ in range(500)]


def test_full_resolve(benchmark: BenchmarkFixture, topology: Topology) -> None:
    """PolicyGraph.build over tier S."""
    built = benchmark(lambda: PolicyGraph.build(**topology.rows()))
    assert built.counts()[IDENTITY] == topology.tier.identities


def test_baseline_full_resolve(benchmark: BenchmarkFixture, topology: Topology) -> None:
    """The OpenZiti-like baseline over tier S, for comparison."""
    built, resolved = benchmark(lambda: BaselineGraph.build(**topology.rows()))
    assert resolved == 1.0
    assert len(built.entities[IDENTITY]) == topology.tier.identities


def test_advice(benchmark: BenchmarkFixture, graph: PolicyGraph, pairs: list[tuple[str, str]]) -> None:
    """Advice for 500 random pairs."""
    results = benchmark(lambda: [graph.advice(i, s) for i, s in pairs])
    assert len(results) == len(pairs)


def test_identity_attribute_change(benchmark: BenchmarkFixture, topology: Topology) -> None:
    """One identity's attributes flipped back and forth."""
    scratch = PolicyGraph.build(**topology.rows())
    row = topology.identities[0]
    flipped = [*row.attributes[1:], "team-499"]

    def flip() -> None:
        scratch.upsert_entity(IDENTITY, row.id, flipped)
        scratch.upsert_entity(IDENTITY, row.id, row.attributes)

    benchmark(flip)
    assert scratch.entity_attributes(IDENTITY, row.id) == frozenset(row.attributes)


def test_policy_role_change(benchmark: BenchmarkFixture, topology: Topology) -> None:
    """A service policy gains and loses one @identity; an edge router policy one @router."""
    scratch = PolicyGraph.build(**topology.rows())
    sp = topology.service_policies[0]
    erp = topology.edge_router_policies[0]
    extra_identity = f"@{topology.identities[-1].id}"
    extra_router = f"@{topology.edge_routers[-1].id}"

    def change() -> None:
        for roles in ((*sp.identity_roles, extra_identity), sp.identity_roles):
            scratch.upsert_policy(
                SERVICE_POLICY,
                sp.id,
                semantic=sp.semantic,
                type=sp.type,
                identity_roles=roles,
                service_roles=sp.service_roles,
                posture_check_roles=sp.posture_check_roles,
            )
        for roles in ((*erp.edge_router_roles, extra_router), erp.edge_router_roles):
            scratch.upsert_policy(
                EDGE_ROUTER_POLICY,
                erp.id,
                semantic=erp.semantic,
                identity_roles=erp.identity_roles,
                edge_router_roles=roles,
            )

    benchmark(change)
    assert scratch.policy(SERVICE_POLICY, sp.id).roles[IDENTITY] == tuple(sp.identity_roles)


def test_copy(benchmark: BenchmarkFixture, graph: PolicyGraph) -> None:
    """A what-if copy."""
    scratch = benchmark(graph.copy)
    assert scratch.counts() == graph.counts()


def test_explain(benchmark: BenchmarkFixture, graph: PolicyGraph, pairs: list[tuple[str, str]]) -> None:
    """Explanations (grants or nearest misses) for 50 pairs."""
    results = benchmark(lambda: [explain(graph, i, s, "Dial") for i, s in pairs[:50]])
    assert all(r.allowed == ("Dial" in graph.permissions(r.identity_id, r.service_id)) for r in results)


def test_runner_table(topology: Topology) -> None:
    """The ``python -m bench engine`` measurements and table, in-process, at tier S."""
    engine = measure_engine(topology, pairs=200, changes=10)
    baseline = measure_baseline(topology, pairs=200, changes=5)
    table = format_table(topology, engine, baseline, "note")
    assert "full resolve (s)" in table
    assert "advice, warm (us)" in table
    assert table.endswith("note")


def test_service_update_tracker_runner_at_tier_s() -> None:
    """``python -m bench updates`` runs end to end at tier S (its table has the measured rows)."""
    from bench.updates import run

    table = run("S")
    assert "| service policy gains one `@identity` |" in table
    assert "| identity attribute change |" in table
