"""Controller start-up at a tier: the DuckDB file loaded into memory and the policy graph built.

``python -m bench startup --tier L`` writes a generated topology into a fresh DuckDB file through
the store (batched commits, as the API would), then measures, in a child process, what
``create_app`` does at start: open the file and load every entity, and resolve the policy graph.
"""

from __future__ import annotations

import resource
import tempfile
import time
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path

from bench.topology import generate
from engine.entities import Entity
from engine.entities import all as _kinds  # noqa: F401  (registers every kind with storage)
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.managers.access import build_graph
from engine.ports import Put
from storage.duckdb import DuckDBStore

_BATCH = 20_000


def _entities(tier: str, seed: int) -> list[Entity]:
    topology = generate(tier, seed)
    now = datetime.now(UTC)
    out: list[Entity] = []
    for row in topology.identities:
        out.append(
            Identity(
                id=row.id, created_at=now, updated_at=now, name=row.id, role_attributes=list(row.attributes)
            )
        )
    for row in topology.services:
        out.append(
            Service(
                id=row.id, created_at=now, updated_at=now, name=row.id, role_attributes=list(row.attributes)
            )
        )
    for row in topology.edge_routers:
        out.append(
            EdgeRouter(
                id=row.id, created_at=now, updated_at=now, name=row.id, role_attributes=list(row.attributes)
            )
        )
    for row in topology.posture_checks:
        out.append(
            PostureCheck(
                id=row.id,
                created_at=now,
                updated_at=now,
                name=row.id,
                type_id="DOMAIN",
                role_attributes=list(row.attributes),
            )
        )
    for p in topology.service_policies:
        out.append(
            ServicePolicy(
                id=p.id,
                created_at=now,
                updated_at=now,
                name=p.id,
                semantic=p.semantic,
                type=p.type or "Dial",
                identity_roles=list(p.identity_roles),
                service_roles=list(p.service_roles),
                posture_check_roles=list(p.posture_check_roles),
            )
        )
    for p in topology.edge_router_policies:
        out.append(
            EdgeRouterPolicy(
                id=p.id,
                created_at=now,
                updated_at=now,
                name=p.id,
                semantic=p.semantic,
                identity_roles=list(p.identity_roles),
                edge_router_roles=list(p.edge_router_roles),
            )
        )
    for p in topology.service_edge_router_policies:
        out.append(
            ServiceEdgeRouterPolicy(
                id=p.id,
                created_at=now,
                updated_at=now,
                name=p.id,
                semantic=p.semantic,
                service_roles=list(p.service_roles),
                edge_router_roles=list(p.edge_router_roles),
            )
        )
    return out


def _measure_start(path: str, out: dict[str, float]) -> None:
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
