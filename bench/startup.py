"""Controller start-up at a tier: the DuckDB file loaded into memory and the policy graph built.

``python -m bench startup --tier L`` writes a generated topology into a fresh DuckDB file through
the store (batched commits, as the API would), then measures, in a child process, what
``create_app`` does at start: open the file and load every entity, and resolve the policy graph.
"""

from __future__ import annotations

import gc
import resource
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench.topology import generate
from engine.entities import Entity
from engine.entities import all as _kinds  # noqa: F401  (registers every kind with storage)
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.managers.access import build_graph
from engine.policy import EntityRow, PolicyRow
from engine.ports import Put
from storage.duckdb import DuckDBStore

_BATCH = 20_000


def _entities(tier: str, seed: int) -> list[Entity]:
    topology = generate(tier, seed)
    now = datetime.now(UTC)

    def common(row_id: str) -> dict[str, Any]:
        return {"id": row_id, "created_at": now, "updated_at": now, "name": row_id}

    out: list[Entity] = []
    entity_rows: list[tuple[Callable[..., Entity], list[EntityRow], dict[str, Any]]] = [
        (Identity, topology.identities, {}),
        (Service, topology.services, {}),
        (EdgeRouter, topology.edge_routers, {}),
        (PostureCheck, topology.posture_checks, {"type_id": "DOMAIN"}),
    ]
    for cls, rows, extra in entity_rows:
        out.extend(cls(**common(r.id), role_attributes=list(r.attributes), **extra) for r in rows)
    policy_rows: list[tuple[Callable[..., Entity], list[PolicyRow], tuple[str, ...]]] = [
        (
            ServicePolicy,
            topology.service_policies,
            ("identity_roles", "service_roles", "posture_check_roles"),
        ),
        (EdgeRouterPolicy, topology.edge_router_policies, ("identity_roles", "edge_router_roles")),
        (
            ServiceEdgeRouterPolicy,
            topology.service_edge_router_policies,
            ("service_roles", "edge_router_roles"),
        ),
    ]
    for cls, policies, fields in policy_rows:
        for p in policies:
            roles = {f: list(getattr(p, f)) for f in fields}
            typed = {"type": p.type or "Dial"} if cls is ServicePolicy else {}
            out.append(cls(**common(p.id), semantic=p.semantic, **typed, **roles))
    return out


def _measure_start(path: str, out: dict[str, float]) -> None:
    gc.disable()  # as the serving worker loads (controller.serve): nothing made at start is garbage
    began = time.perf_counter()
    store = DuckDBStore(Path(path))
    loaded = time.perf_counter()
    graph = build_graph(store)
    built = time.perf_counter()
    out["load_s"] = loaded - began
    out["graph_s"] = built - loaded
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["entities"] = float(sum(graph.counts().values()))
    store.close()


def run(tier: str, seed: int = 1) -> str:
    entities = _entities(tier, seed)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "bench.duckdb"
        store = DuckDBStore(path)
        began = time.perf_counter()
        for start in range(0, len(entities), _BATCH):
            store.commit([Put(e) for e in entities[start : start + _BATCH]])
        written = time.perf_counter() - began
        store.close()
        ctx = get_context("spawn")
        with ctx.Manager() as manager:
            result = manager.dict()
            child = ctx.Process(target=_measure_start, args=(str(path), result))
            child.start()
            child.join()
            figures = dict(result)
    rate = len(entities) / written
    return "\n".join(
        [
            f"start-up, tier {tier} (seed {seed}): {len(entities):,} entities and policies",
            "| step | figure |\n| --- | --- |",
            f"| write through the store ({_BATCH:,} per commit) | {written:.1f} s ({rate:,.0f} rows/s) |",
            f"| open DuckDB and load every entity | {figures['load_s']:.2f} s |",
            f"| resolve the policy graph | {figures['graph_s']:.2f} s |",
            f"| peak resident memory of the start-up process | {figures['rss_mb']:.0f} MB |",
        ]
    )
