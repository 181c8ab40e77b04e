"""``python -m bench updates --tier L``: what the service-update tracker adds to a write.

Every committed batch passes through :class:`engine.managers.service_updates.ServiceUpdates`
(``before`` and ``after`` around the graph update, under the store's write lock). This measures
the graph update and the tracker's share for the writes that touch service access: a service
policy gaining one ``@identity``, an identity's attributes changing, and an ``#all``-identity
policy gaining a service (the worst case: every identity is a candidate). Medians of repeated runs.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bench.topology import generate
from engine.entities.identities import Identity
from engine.entities.policies import ServicePolicy
from engine.managers.access import apply_changes
from engine.managers.service_updates import ServiceUpdates
from engine.policy import PolicyGraph, PolicyRow
from engine.ports import Change, Put
from engine.testing import FixedClock

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _NoStore:
    """The tracker reads the store only for configs and overrides, which these writes do not touch."""

    def all(self, kind: Any) -> list[Any]:
        return []

    def get(self, kind: Any, id: str) -> None:
        return None


def _policy(row: PolicyRow, **changes: Any) -> ServicePolicy:
    fields: dict[str, Any] = {
        "id": row.id,
        "created_at": NOW,
        "updated_at": NOW,
        "name": row.id,
        "semantic": row.semantic,
        "type": row.type or "Dial",
        "identity_roles": list(row.identity_roles),
        "service_roles": list(row.service_roles),
        "posture_check_roles": list(row.posture_check_roles),
    }
    fields.update(changes)
    return ServicePolicy(**fields)


def _measure(
    graph: PolicyGraph, tracker: ServiceUpdates, make: Callable[[int], list[Change]], runs: int
) -> tuple[float, float]:
    """Median milliseconds of the graph update and of the tracker's before + after."""
    graph_ms, tracker_ms = [], []
    for n in range(runs):
        changes = make(n)
        start = time.perf_counter()
        state = tracker.before(graph, changes)
        observed = time.perf_counter()
        apply_changes(graph, changes)
        applied = time.perf_counter()
        tracker.after(graph, changes, state)
        done = time.perf_counter()
        graph_ms.append((applied - observed) * 1e3)
        tracker_ms.append(((observed - start) + (done - applied)) * 1e3)
    return statistics.median(graph_ms), statistics.median(tracker_ms)


def run(tier: str, seed: int = 1) -> str:
    topology = generate(tier, seed)
    graph = PolicyGraph.build(**topology.rows())
    tracker = ServiceUpdates(_NoStore(), FixedClock(NOW))  # type: ignore[arg-type]
    rng = random.Random(seed)
    identity_ids = [row.id for row in topology.identities]
    policies = topology.service_policies

    def one_identity(n: int) -> list[Change]:
        row = policies[n % len(policies)]
        extra = "@" + rng.choice(identity_ids)
        return [Put(_policy(row, identity_roles=[*row.identity_roles, extra]))]

    def attributes(n: int) -> list[Change]:
        row = topology.identities[rng.randrange(len(identity_ids))]
        kept = list(row.attributes)[:-1]
        return [Put(Identity(id=row.id, created_at=NOW, updated_at=NOW, name=row.id, role_attributes=kept))]

    lines = [f"service-update tracker, tier {tier} ({len(identity_ids):,} identities)", ""]
    lines.append("| write | graph update | tracker |")
    lines.append("| --- | --- | --- |")
    cases: list[tuple[str, Callable[[int], list[Change]], int]] = [
        ("service policy gains one `@identity`", one_identity, 50),
        ("identity attribute change", attributes, 50),
    ]
    everyone = next((row for row in policies if tuple(row.identity_roles) == ("#all",)), None)
    if everyone is not None:

        def gains_service(n: int) -> list[Change]:
            added = "@" + topology.services[n].id
            return [Put(_policy(everyone, service_roles=[*everyone.service_roles, added]))]

        cases.append(("`#all`-identity policy gains a service", gains_service, 5))
    for label, make, runs in cases:
        graph_ms, tracker_ms = _measure(graph, tracker, make, runs)
        lines.append(f"| {label} | {graph_ms:.2f} ms | {tracker_ms:.2f} ms |")
    return "\n".join(lines)
