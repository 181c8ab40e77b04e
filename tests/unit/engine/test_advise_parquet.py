"""``trellis advise --format parquet`` (api/advice_parquet.py) against the per-pair path
(engine/analysis/advise.py, the oracle): the Parquet rows read back are ``advise()``'s rows, in
order, on random networks and on a generated tier."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from api.advice_parquet import COLUMNS, advice_parquet, warm, write_advice
from bench.topology import generate
from engine.analysis import advise_kernel
from engine.analysis.advise import advise
from engine.analysis.advise_bulk import advise_block_jobs, advise_blocks, render
from engine.policy import PolicyGraph
from tests.unit.engine.test_advise_bulk import SETTINGS, crowded_cases, random_case, tier_cases
from tests.unit.engine.test_analysis_oracle import networks
from tests.unit.engine.test_policy_oracle import Oracle

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
    graph, block_rows, options = random_case(oracle, data)
    _same(graph, block_rows, **options)


def test_parquet_equals_per_pair_on_a_generated_tier() -> None:
    for graph, block_rows, options in tier_cases():
        _same(graph, block_rows, **options)


def test_parquet_equals_per_pair_past_one_mask_of_policies() -> None:
    for graph, block_rows, options in crowded_cases():
        _same(graph, block_rows, **options)


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


def test_the_warm_up_compiles_every_kernel_a_run_calls() -> None:
    """``make`` compiles the kernels once after installing (:func:`warm`): a real run afterwards,
    in either order, online status known or not, Parquet or CSV, compiles nothing more."""
    warm()
    kernels = (advise_kernel.block_pairs, advise_kernel.set_bits, advise_kernel.grant_texts)
    kernels += (advise_kernel.advice_columns, advise_kernel.or_rows)
    before = [list(kernel.signatures) for kernel in kernels]
    assert all(before), "each kernel compiled"
    graph = PolicyGraph.build(**generate("S").rows())
    for order in ("identities", "services"):
        for online in (None, lambda _: True):
            tables, jobs = advise_block_jobs(graph, online=online, order=order, local_sets=True)
            write_advice(tables, jobs, io.BytesIO())
            tables, blocks = advise_blocks(graph, online=online, order=order)
            assert b"".join(render(tables, blocks, "csv"))
    assert [list(kernel.signatures) for kernel in kernels] == before


def test_numba_is_loaded_only_when_advice_is_made() -> None:
    """numba costs a process about 0.7 s and 100 MB to import: the controller's modules, those
    of the advice included, leave it out until a block of advice is computed."""
    script = (
        "import sys, controller.app, controller.access_cli, api.advice_parquet, engine.analysis.advise_bulk\n"
        "assert 'numba' not in sys.modules, 'numba imported'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).resolve().parents[3])
