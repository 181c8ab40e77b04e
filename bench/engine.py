"""``python -m bench engine``: the policy engine against the baseline, one tier, one table.

Each side runs in a forked child process so that its resident-memory delta is its own (the
topology is generated once in the parent and shared copy-on-write). Measured operations:

- full resolve: :meth:`PolicyGraph.build` (best of three) / :meth:`BaselineGraph.build` from the rows;
- advice: one (identity, service) pair, averaged over many random pairs; *cold* is the first pass
  (per-entity caches filled on the way), *warm* the second; *+ ids* also reads
  ``common_router_ids``;
- identity attribute change: one attribute of a random identity replaced by another;
- policy role change, few members: a random service policy gets one more ``@identity`` and loses it
  again; a random edge router policy the same with ``@edge-router``;
- policy role change, many members: one ``#attribute`` of a random service policy's identity roles
  swapped for another (hundreds of identities in and out);
- services of an identity (a listing), and ``copy()`` (what-if).

The baseline at tiers above S cannot be built in reasonable time and memory (OpenZiti-like scans
and per-pair counts: about 11 s and 150 MB per thousand identities at tier L), so it is built twice
over random identity samples (all services, routers and policies kept) and the identity-dependent
figures (resolve, memory, policy changes: their scans and pair counts grow with the identity count)
are extrapolated linearly to the tier's identity count. Advice and identity attribute changes do not
depend on the identity count and are reported as measured on the larger sample.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from bench.baseline import BaselineGraph
from bench.topology import Topology, generate
from engine.policy import EDGE_ROUTER_POLICY, IDENTITY, SERVICE_POLICY, PolicyGraph, PolicyRow

__all__ = ["Row", "format_table", "measure_baseline", "measure_engine", "run"]

Metrics = dict[str, float]


def rss_mb() -> float:
    """Current resident set size of this process, MB (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def _mean_seconds(action: Callable[[], object], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        action()
    return (time.perf_counter() - start) / repeat


def _policy_kwargs(row: PolicyRow, **changes: Any) -> dict[str, Any]:
    values = {
        "semantic": row.semantic,
        "type": row.type,
        "identity_roles": row.identity_roles,
        "service_roles": row.service_roles,
        "edge_router_roles": row.edge_router_roles,
        "posture_check_roles": row.posture_check_roles,
    }
    values.update(changes)
    return values


def _swapped(roles: tuple[str, ...], rng: random.Random, pool: list[str]) -> tuple[str, ...] | None:
    attributes = [r for r in roles if r.startswith("#") and r != "#all"]
    if not attributes:
        return None
    out = list(roles)
    out[out.index(attributes[0])] = f"#{rng.choice(pool)}"
    return tuple(out)


@dataclass
class _Plan:
    """The random choices of one run, drawn from a seed so engine and baseline see alike."""

    pairs: list[tuple[str, str]]
    attribute_changes: list[tuple[str, list[str]]]
    service_policies: list[tuple[PolicyRow, str]]
    router_policies: list[tuple[PolicyRow, str]]
    swaps: list[tuple[PolicyRow, tuple[str, ...]]]
    listing: list[str]


def _plan(topology: Topology, seed: int, pairs: int, changes: int) -> _Plan:
    rng = random.Random(seed)
    identities = [row.id for row in topology.identities]
    services = [row.id for row in topology.services]
    routers = [row.id for row in topology.edge_routers]
    pool = [f"team-{n:03d}" for n in range(topology.tier.attributes)]
    attribute_changes = []
    for entity in rng.sample(topology.identities, min(changes, len(topology.identities))):
        attributes = list(entity.attributes)
        attributes[0] = rng.choice(pool)
        attribute_changes.append((entity.id, attributes))
    swaps = []
    for row in rng.sample(topology.service_policies, len(topology.service_policies)):
        swapped = _swapped(tuple(row.identity_roles), rng, pool)
        if swapped is not None:
            swaps.append((row, swapped))
        if len(swaps) >= max(5, changes // 10):
            break
    count = min(changes, len(topology.service_policies))
    return _Plan(
        pairs=[(rng.choice(identities), rng.choice(services)) for _ in range(pairs)],
        attribute_changes=attribute_changes,
        service_policies=[
            (row, f"@{rng.choice(identities)}") for row in rng.sample(topology.service_policies, count)
        ],
        router_policies=[
            (row, f"@{rng.choice(routers)}")
            for row in rng.sample(
                topology.edge_router_policies, min(changes, len(topology.edge_router_policies))
            )
        ],
        swaps=swaps,
        listing=rng.sample(identities, min(200, len(identities))),
    )


def measure_engine(topology: Topology, seed: int = 7, pairs: int = 20_000, changes: int = 200) -> Metrics:
    """Every engine figure for one topology (run it in a fresh process for a clean memory delta)."""
    plan = _plan(topology, seed, pairs, changes)
    out: Metrics = {}
    gc.collect()
    before = rss_mb()
    start = time.perf_counter()
    graph = PolicyGraph.build(**topology.rows())
    resolve = time.perf_counter() - start
    gc.collect()
    out["memory_mb"] = rss_mb() - before
    for _ in range(2):  # best of three: the machine is shared
        start = time.perf_counter()
        PolicyGraph.build(**topology.rows())
        resolve = min(resolve, time.perf_counter() - start)
        gc.collect()
    out["resolve_s"] = resolve

    def advice_pass() -> float:
        begin = time.perf_counter()
        for identity, service in plan.pairs:
            graph.advice(identity, service)
        return (time.perf_counter() - begin) / len(plan.pairs) * 1e6

    out["advice_cold_us"] = advice_pass()
    out["advice_us"] = advice_pass()
    begin = time.perf_counter()
    dial = 0
    for identity, service in plan.pairs:
        advice = graph.advice(identity, service)
        advice.common_router_ids  # noqa: B018 - materialise the ids
        dial += advice.is_dial_allowed
    out["advice_ids_us"] = (time.perf_counter() - begin) / len(plan.pairs) * 1e6
    out["dial_share"] = dial / len(plan.pairs)

    begin = time.perf_counter()
    for identity, attributes in plan.attribute_changes:
        graph.upsert_entity(IDENTITY, identity, attributes)
    out["attribute_change_ms"] = (time.perf_counter() - begin) / len(plan.attribute_changes) * 1e3

    out["sp_change_ms"] = _policy_flips(
        lambda row, roles: graph.upsert_policy(
            SERVICE_POLICY, row.id, **_policy_kwargs(row, identity_roles=roles)
        ),
        plan.service_policies,
        "identity_roles",
    )
    out["erp_change_ms"] = _policy_flips(
        lambda row, roles: graph.upsert_policy(
            EDGE_ROUTER_POLICY, row.id, **_policy_kwargs(row, edge_router_roles=roles)
        ),
        plan.router_policies,
        "edge_router_roles",
    )
    spent = 0.0
    changed = 0
    for row, roles in plan.swaps:
        members = set(graph.policy_members(SERVICE_POLICY, row.id, IDENTITY))
        begin = time.perf_counter()
        graph.upsert_policy(SERVICE_POLICY, row.id, **_policy_kwargs(row, identity_roles=roles))
        spent += time.perf_counter() - begin
        changed += len(members ^ set(graph.policy_members(SERVICE_POLICY, row.id, IDENTITY)))
    out["swap_ms"] = spent / len(plan.swaps) * 1e3
    out["swap_members"] = changed / len(plan.swaps)

    sizes = 0
    begin = time.perf_counter()
    for identity in plan.listing:
        sizes += len(graph.services_for_identity(identity, "Dial"))
    out["listing_ms"] = (time.perf_counter() - begin) / len(plan.listing) * 1e3
    out["listing_size"] = sizes / len(plan.listing)
    out["copy_ms"] = _mean_seconds(graph.copy, 5) * 1e3
    return out


def _policy_flips(
    apply: Callable[[PolicyRow, tuple[str, ...]], None], plan: list[tuple[PolicyRow, str]], field: str
) -> float:
    """Mean ms of adding one ``@id`` to a policy side and taking it out again."""
    begin = time.perf_counter()
    for row, extra in plan:
        roles = tuple(getattr(row, field))
        apply(row, (*roles, extra))
        apply(row, roles)
    return (time.perf_counter() - begin) / (2 * len(plan)) * 1e3


def measure_baseline(topology: Topology, seed: int = 7, pairs: int = 2_000, changes: int = 20) -> Metrics:
    """The same operations on :class:`BaselineGraph` (fewer repetitions: it is slow)."""
    plan = _plan(topology, seed, pairs, changes)
    out: Metrics = {}
    gc.collect()
    before = rss_mb()
    start = time.perf_counter()
    graph, _ = BaselineGraph.build(**topology.rows())
    out["resolve_s"] = time.perf_counter() - start
    gc.collect()
    out["memory_mb"] = rss_mb() - before
    begin = time.perf_counter()
    for identity, service in plan.pairs:
        graph.advice(identity, service)
    out["advice_us"] = out["advice_cold_us"] = out["advice_ids_us"] = (
        (time.perf_counter() - begin) / len(plan.pairs) * 1e6
    )
    begin = time.perf_counter()
    for identity, attributes in plan.attribute_changes:
        graph.upsert_entity(IDENTITY, identity, attributes)
    out["attribute_change_ms"] = (time.perf_counter() - begin) / len(plan.attribute_changes) * 1e3
    out["sp_change_ms"] = _policy_flips(
        lambda row, roles: graph.upsert_policy(SERVICE_POLICY, _with(row, identity_roles=roles)),
        plan.service_policies,
        "identity_roles",
    )
    out["erp_change_ms"] = _policy_flips(
        lambda row, roles: graph.upsert_policy(EDGE_ROUTER_POLICY, _with(row, edge_router_roles=roles)),
        plan.router_policies,
        "edge_router_roles",
    )
    begin = time.perf_counter()
    for row, roles in plan.swaps:
        graph.upsert_policy(SERVICE_POLICY, _with(row, identity_roles=roles))
    out["swap_ms"] = (time.perf_counter() - begin) / len(plan.swaps) * 1e3
    begin = time.perf_counter()
    for identity in plan.listing:
        graph.services_for_identity(identity, "Dial")
    out["listing_ms"] = (time.perf_counter() - begin) / len(plan.listing) * 1e3
    return out


def _with(row: PolicyRow, **changes: Any) -> PolicyRow:
    values = _policy_kwargs(row, **changes)
    return PolicyRow(row.id, **values)


# -- running in children, extrapolating, printing --------------------------------------------------


def _child(connection: Connection, function: Callable[..., Metrics], args: tuple[Any, ...]) -> None:
    try:
        connection.send(function(*args))
    except BaseException as error:  # report, do not hang the parent
        connection.send({"error": repr(error)})
    finally:
        connection.close()


def in_child(function: Callable[..., Metrics], *args: Any) -> Metrics:
    """Run ``function(*args)`` in a forked process and return its metrics."""
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(sender, function, args))
    process.start()
    sender.close()
    result: Metrics = receiver.recv()
    process.join()
    if "error" in result:
        raise RuntimeError(f"benchmark child failed: {result['error']}")
    return result


LINEAR = ("resolve_s", "memory_mb", "sp_change_ms", "erp_change_ms", "swap_ms")
"""Baseline figures that grow with the identity count (scans and per-pair counts)."""


def extrapolate(samples: list[tuple[int, Metrics]], target: int) -> Metrics:
    """Linear in the identity count through the two samples for :data:`LINEAR`, else the larger."""
    (n1, m1), (n2, m2) = sorted(samples, key=lambda s: s[0])[-2:]
    out = dict(m2)
    for key in LINEAR:
        slope = (m2[key] - m1[key]) / (n2 - n1)
        out[key] = max(m2[key], m2[key] + slope * (target - n2))
    return out


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    label: str
    key: str
    unit_scale: float
    fmt: str
    target: str = ""


ROWS = (
    Row("full resolve (s)", "resolve_s", 1, "{:,.2f}", "<= 1 s"),
    Row("advice, warm (us)", "advice_us", 1, "{:,.2f}", "<= 5 us"),
    Row("advice, cold caches (us)", "advice_cold_us", 1, "{:,.2f}"),
    Row("advice + common router ids (us)", "advice_ids_us", 1, "{:,.2f}"),
    Row("identity attribute change (ms)", "attribute_change_ms", 1, "{:,.3f}", "<= 0.5 ms"),
    Row("SP role change, +/- one @identity (ms)", "sp_change_ms", 1, "{:,.3f}", "<= 5 ms"),
    Row("ERP role change, +/- one @router (ms)", "erp_change_ms", 1, "{:,.3f}", "<= 5 ms"),
    Row("SP role change, swap one #attribute (ms)", "swap_ms", 1, "{:,.3f}"),
    Row("services of an identity, Dial (ms)", "listing_ms", 1, "{:,.3f}"),
    Row("copy() for what-if (ms)", "copy_ms", 1, "{:,.1f}"),
    Row("memory, RSS delta (MB)", "memory_mb", 1, "{:,.0f}", "<= 1024 MB"),
)


def format_table(topology: Topology, engine: Metrics, baseline: Metrics | None, note: str) -> str:
    """The report printed by ``python -m bench engine``."""
    tier = topology.tier
    lines = [
        f"Policy engine, tier {tier.name}: {tier.identities:,} identities, {tier.services:,} services, "
        f"{tier.edge_routers:,} edge routers, {tier.posture_checks:,} posture checks; "
        f"{tier.service_policies:,} SP / {tier.edge_router_policies:,} ERP / "
        f"{tier.service_edge_router_policies:,} SERP; seed {topology.seed}; {os.cpu_count()} CPUs",
        f"share of random pairs with Dial: {engine['dial_share']:.1%}; services an identity may Dial: "
        f"{engine['listing_size']:,.0f} on average; identities in/out per #attribute swap: "
        f"{engine['swap_members']:,.0f}",
        "",
    ]
    header = f"{'operation':<44}{'engine':>12}{'baseline':>14}{'ratio':>10}  target"
    lines += [header, "-" * len(header)]
    for row in ROWS:
        value = engine.get(row.key)
        if value is None:
            continue
        cell = row.fmt.format(value * row.unit_scale)
        base = baseline.get(row.key) if baseline else None
        base_cell = row.fmt.format(base * row.unit_scale) if base is not None else "-"
        ratio = f"{base / value:,.0f}x" if base is not None and value > 0 else "-"
        if base is not None and value > 0 and base / value < 10:
            ratio = f"{base / value:,.1f}x"
        lines.append(f"{row.label:<44}{cell:>12}{base_cell:>14}{ratio:>10}  {row.target}")
    if note:
        lines += ["", note]
    return "\n".join(lines)


def run(tier: str, seed: int = 1, baseline: bool = True, samples: tuple[int, ...] = (2_000, 4_000)) -> str:
    """Generate, measure both sides in children, and return the table."""
    start = time.perf_counter()
    topology = generate(tier, seed)
    generated = time.perf_counter() - start
    engine = in_child(measure_engine, topology)
    base: Metrics | None = None
    note = f"topology generated in {generated:.1f} s. ratio = baseline / engine."
    if baseline:
        total = len(topology.identities)
        wanted = sorted({min(n, total) for n in samples})
        if wanted[-1] >= total:
            base = in_child(measure_baseline, topology)
            note += " Baseline measured on the whole topology."
        else:
            rng = random.Random(seed + 1)
            runs = []
            for count in wanted[-2:]:
                sample = topology.with_identities(rng.sample(topology.identities, count))
                runs.append((count, in_child(measure_baseline, sample)))
            base = extrapolate(runs, total)
            note += (
                f" Baseline built over {' and '.join(f'{n:,}' for n, _ in runs)} random identities (all "
                f"services, routers, policies); resolve, memory and policy-change figures extrapolated "
                f"linearly to {total:,} identities, advice and attribute change as measured on "
                f"{runs[-1][0]:,}."
            )
    else:
        note += " Baseline not run."
    return format_table(topology, engine, base, note)
