"""The service-update tracker marks exactly the identities whose Dial/Bind service sets changed,
checked against a brute-force comparison for random service policy changes."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from engine.entities.policies import ServicePolicy
from engine.managers import service_updates as su
from engine.managers.access import apply_changes
from engine.managers.service_updates import ServiceUpdates
from engine.policy import SERVICE_POLICY, EntityRow, PolicyGraph
from engine.ports import Change, Delete, Put
from engine.testing import FixedClock

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ATTRS = ["a", "b", "c", "d"]


class _NoStore:
    def all(self, kind: Any) -> list[Any]:
        return []

    def get(self, kind: Any, id: str) -> None:
        return None


def _roles(rng: random.Random, ids: list[str]) -> list[str]:
    choice = rng.random()
    if choice < 0.1:
        return ["#all"]
    roles = [f"#{a}" for a in rng.sample(ATTRS, rng.randint(0, 2))]
    roles += [f"@{i}" for i in rng.sample(ids, rng.randint(0, 2))]
    return roles


def _policy(rng: random.Random, id: str, identities: list[str], services: list[str]) -> ServicePolicy:
    return ServicePolicy(
        id=id,
        created_at=NOW,
        updated_at=NOW,
        name=id,
        semantic=rng.choice(["AnyOf", "AllOf"]),
        type=rng.choice(["Dial", "Bind"]),
        identity_roles=_roles(rng, identities),
        service_roles=_roles(rng, services),
    )


def _access(graph: PolicyGraph, identities: list[str]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    return {
        i: (
            frozenset(graph.services_for_identity(i, "Dial")),
            frozenset(graph.services_for_identity(i, "Bind")),
        )
        for i in identities
    }


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("pair_checks", [0, 64])
def test_marks_equal_the_identities_whose_access_changed(
    seed: int, pair_checks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both strategies (pair checks and set differences) give the brute-force answer."""
    monkeypatch.setattr(su, "PAIR_CHECKS", pair_checks)
    rng = random.Random(seed)
    identities = [f"i{n}" for n in range(30)]
    services = [f"s{n}" for n in range(12)]
    graph = PolicyGraph.build(
        identities=[EntityRow(i, rng.sample(ATTRS, rng.randint(0, 3))) for i in identities],
        services=[EntityRow(s, rng.sample(ATTRS, rng.randint(0, 3))) for s in services],
        edge_routers=[],
        posture_checks=[],
        service_policies=[],
        edge_router_policies=[],
        service_edge_router_policies=[],
    )
    policies = {f"p{n}": _policy(rng, f"p{n}", identities, services) for n in range(8)}
    apply_changes(graph, [Put(p) for p in policies.values()])
    tracker = ServiceUpdates(_NoStore(), FixedClock(NOW))  # type: ignore[arg-type]

    for _ in range(10):
        target = rng.choice(sorted(policies))
        changes: list[Change]
        if rng.random() < 0.2:
            changes = [Delete(ServicePolicy, target)]
            policies.pop(target)
        else:
            policies[target] = _policy(rng, target, identities, services)
            changes = [Put(policies[target])]
        before_access = _access(graph, identities)
        state = tracker.before(graph, changes)
        apply_changes(graph, changes)
        marked = su._policy_marks(graph, target, state.policies[target], su._policy_state(graph, target))
        after_access = _access(graph, identities)

        assert marked == {i for i in identities if before_access[i] != after_access[i]}
        if not graph.has_policy(SERVICE_POLICY, target):
            policies.setdefault(target, _policy(rng, target, identities, services))
            apply_changes(graph, [Put(policies[target])])
