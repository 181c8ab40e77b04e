"""``trellis advise`` in bulk (engine/analysis/advise_bulk.py) against the per-pair path
(engine/analysis/advise.py, the oracle here) on random networks: the same rows in the same order,
and the same bytes in each format as the per-pair rows rendered one by one."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.topology import generate
from engine.analysis.advise import advise
from engine.analysis.advise_bulk import FORMATS, LINES, _csv_cell, advise_blocks, csv_header, render, rows_of
from engine.policy import EDGE_ROUTER, IDENTITY, EntityRow, PolicyGraph, PolicyRow
from tests.conftest import examples
from tests.unit.engine.test_analysis_oracle import apply, batches, networks
from tests.unit.engine.test_policy_oracle import Oracle, rebuild

SETTINGS = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Names with what CSV and JSON must quote or escape, and names shared by several entities.
NAMES = st.sampled_from(["a", "b,c", 'd"e', "f\ng", "é", "", "a"])


def _same(graph: PolicyGraph, block_rows: int, **options: object) -> None:
    slow = list(advise(graph, **options))  # type: ignore[arg-type]
    tables, blocks = advise_blocks(graph, block_rows=block_rows, **options)  # type: ignore[arg-type]
    fast = [row for block in blocks for row in rows_of(tables, block)]
    assert fast == slow
    for fmt in FORMATS:
        tables, blocks = advise_blocks(graph, block_rows=block_rows, **options)  # type: ignore[arg-type]
        got = b"".join(render(tables, blocks, fmt)).decode()
        expected = (csv_header() if fmt == "csv" else "") + "".join(LINES[fmt](r.as_dict()) for r in slow)
        assert got == expected, fmt


def random_case(oracle: Oracle, data: st.DataObject) -> tuple[PolicyGraph, int, dict[str, Any]]:
    """A random network (changed or not: free slots, entities and policies gone), a block size
    and the options of an advice run: online routers or unknown, disabled identities, names
    CSV and JSON must quote, order, errors only."""
    graph = rebuild(oracle)
    if data.draw(st.booleans()):
        apply(graph, oracle, data.draw(batches(oracle)))
    routers = sorted(oracle.entities[EDGE_ROUTER])
    online = set(data.draw(st.lists(st.sampled_from(routers), unique=True)) if routers else [])
    identities = sorted(oracle.entities[IDENTITY])
    disabled = set(data.draw(st.lists(st.sampled_from(identities), unique=True)) if identities else [])
    named = (
        data.draw(st.dictionaries(st.sampled_from(identities or ["x"]), NAMES))
        if data.draw(st.booleans())
        else {}
    )

    def names(kind: str, entity_id: str) -> str:
        return named.get(entity_id, entity_id)

    options = {
        "online": online.__contains__ if data.draw(st.booleans()) else None,
        "names": names,
        "disabled": disabled.__contains__,
        "order": data.draw(st.sampled_from(["identities", "services"])),
        "errors_only": data.draw(st.booleans()),
    }
    return graph, data.draw(st.sampled_from([1, 3, 1 << 20])), options


def tier_cases() -> Iterator[tuple[PolicyGraph, int, dict[str, Any]]]:
    """A generated tier S, in both orders, with some identities disabled and routers online."""
    topology = generate("S", seed=3)
    graph = PolicyGraph.build(**topology.rows())
    disabled = {row.id for row in topology.identities[::5]}
    online = {row.id for row in topology.edge_routers[::3]}
    for order in ("identities", "services"):
        yield graph, 500, {"online": online.__contains__, "disabled": disabled.__contains__, "order": order}
        yield graph, 500, {"disabled": disabled.__contains__, "order": order, "errors_only": True}


def crowded_cases() -> Iterator[tuple[PolicyGraph, int, dict[str, Any]]]:
    """Entities granted by more service policies than one 52-bit mask of the bulk path holds
    (130: three masks), with overlapping services, so pairs are granted by sets of policies from
    every mask, and pairs granted by one policy far down an entity's list; in both orders."""
    import random

    rng = random.Random(7)
    identities = [EntityRow(f"i{n}", ("crowd",) if n < 3 else (f"t{n % 2}",)) for n in range(5)]
    identities.append(EntityRow("i5", ("t1", "late")))
    services = [EntityRow(f"s{n:02d}", tuple(f"a{k}" for k in range(6) if (n >> k) & 1)) for n in range(40)]
    services.append(EntityRow("s-late", ("late",)))
    routers = [EntityRow(f"r{n}", (f"z{n % 3}",)) for n in range(5)]
    checks = [EntityRow("pc1", ("check",))]
    policies = [
        PolicyRow(
            f"sp{n:03d}",
            rng.choice(["AnyOf", "AllOf"]),
            "Dial" if n % 4 else "Bind",
            identity_roles=["#crowd"] if n % 9 else ["#all"],
            service_roles=[f"#a{k}" for k in rng.sample(range(6), rng.choice([1, 1, 2]))],
            posture_check_roles=["#check"] if n % 11 == 0 else (),
        )
        for n in range(128)
    ]
    # the only grant of (crowd, s-late), and of (i5, #a5 services): last in their lists
    policies.append(PolicyRow("sp128", "AnyOf", "Dial", identity_roles=["#crowd"], service_roles=["#late"]))
    policies.append(PolicyRow("sp129", "AnyOf", "Bind", identity_roles=["#late"], service_roles=["#a5"]))
    erps = [
        PolicyRow("erp1", "AnyOf", identity_roles=["#crowd", "#t0"], edge_router_roles=["#z0", "#z1"]),
        PolicyRow("erp2", "AnyOf", identity_roles=["#t1"], edge_router_roles=["#z2"]),
    ]
    serps = [PolicyRow("serp1", "AnyOf", service_roles=["#a0", "#a2"], edge_router_roles=["#all"])]
    graph = PolicyGraph.build(
        identities=identities,
        services=services,
        edge_routers=routers,
        posture_checks=checks,
        service_policies=policies,
        edge_router_policies=erps,
        service_edge_router_policies=serps,
    )
    online = {"r0", "r2"}
    for order in ("identities", "services"):
        yield graph, 1 << 20, {"online": online.__contains__, "order": order}
        yield graph, 7, {"disabled": {"i1"}.__contains__, "order": order}


def test_bulk_equals_per_pair_past_one_mask_of_policies() -> None:
    for graph, block_rows, options in crowded_cases():
        _same(graph, block_rows, **options)


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_bulk_rows_equal_the_per_pair_rows(oracle: Oracle, data: st.DataObject) -> None:
    graph, block_rows, options = random_case(oracle, data)
    _same(graph, block_rows, **options)


def test_bulk_equals_per_pair_on_a_generated_tier() -> None:
    for graph, block_rows, options in tier_cases():
        _same(graph, block_rows, **options)


@given(st.text())
def test_a_csv_cell_is_quoted_as_the_csv_module_quotes_it(text: str) -> None:
    out = io.StringIO()
    csv.writer(out).writerow([text, ""])
    assert _csv_cell(text) == out.getvalue()[:-2]
