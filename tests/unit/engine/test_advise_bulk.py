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
from engine.policy import EDGE_ROUTER, IDENTITY, PolicyGraph
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
