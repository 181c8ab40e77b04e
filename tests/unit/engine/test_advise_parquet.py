"""``trellis advise --format parquet`` (api/advice_parquet.py) against the per-pair path
(engine/analysis/advise.py, the oracle): the Parquet rows read back are ``advise()``'s rows, in
order, on random networks and on a generated tier."""

from __future__ import annotations

import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from api.advice_parquet import COLUMNS, advice_parquet, write_advice
from bench.topology import generate
from engine.analysis.advise import advise
from engine.analysis.advise_bulk import advise_block_jobs, advise_blocks
from engine.policy import EDGE_ROUTER, IDENTITY, PolicyGraph
from tests.unit.engine.test_advise_bulk import NAMES, SETTINGS
from tests.unit.engine.test_analysis_oracle import apply, batches, networks
from tests.unit.engine.test_policy_oracle import Oracle, rebuild

#: The columns holding a JSON row's lists and mappings as JSON text.
JSON_COLUMNS = ("errors", "dialPolicies", "bindPolicies", "posture", "problems")


def read_rows(data: bytes) -> list[dict[str, Any]]:
    """A Parquet file's rows as JSON advice rows."""
    table = pq.read_table(io.BytesIO(data))
    assert tuple(table.column_names) == COLUMNS
    rows = table.to_pylist()
    for row in rows:
        for name in JSON_COLUMNS:
            row[name] = json.loads(row[name])
    return rows


def _same(graph: PolicyGraph, block_rows: int, **options: Any) -> None:
    slow = [row.as_dict() for row in advise(graph, **options)]
    tables, blocks = advise_blocks(graph, block_rows=block_rows, local_sets=True, **options)
    out = io.BytesIO()
    assert write_advice(tables, blocks, out) == len(slow)
    assert read_rows(out.getvalue()) == slow
    # computed several blocks at once, as the CLI and the API do
    tables, jobs = advise_block_jobs(graph, block_rows=block_rows, local_sets=True, **options)
    assert read_rows(b"".join(advice_parquet(tables, jobs))) == slow


@SETTINGS
@given(oracle=networks(), data=st.data())
def test_parquet_rows_equal_the_per_pair_rows(oracle: Oracle, data: st.DataObject) -> None:
    graph = rebuild(oracle)
    if data.draw(st.booleans()):  # free slots, entities and policies gone
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

    _same(
        graph,
        data.draw(st.sampled_from([1, 3, 1 << 20])),
        online=online.__contains__ if data.draw(st.booleans()) else None,
        names=names,
        disabled=disabled.__contains__,
        order=data.draw(st.sampled_from(["identities", "services"])),
        errors_only=data.draw(st.booleans()),
    )


def test_parquet_equals_per_pair_on_a_generated_tier() -> None:
    topology = generate("S", seed=3)
    graph = PolicyGraph.build(**topology.rows())
    disabled = {row.id for row in topology.identities[::5]}
    online = {row.id for row in topology.edge_routers[::3]}
    for order in ("identities", "services"):
        _same(graph, 500, online=online.__contains__, disabled=disabled.__contains__, order=order)
        _same(graph, 500, disabled=disabled.__contains__, order=order, errors_only=True)


def test_names_are_dictionary_encoded_and_counts_small() -> None:
    topology = generate("S", seed=3)
    graph = PolicyGraph.build(**topology.rows())
    tables, blocks = advise_blocks(graph, block_rows=500, local_sets=True)
    out = io.BytesIO()
    write_advice(tables, blocks, out)
    file = pq.ParquetFile(io.BytesIO(out.getvalue()))
    assert file.metadata.num_row_groups > 1
    schema = file.schema_arrow
    for name in ("identityId", "identityName", "serviceName", "dialPolicies", "posture", "status"):
        assert pa.types.is_dictionary(schema.field(name).type), name
    assert schema.field("commonRouterCount").type == pa.int16()
    assert file.read(columns=["onlineCommonRouterCount"]).column(0).null_count == file.metadata.num_rows
