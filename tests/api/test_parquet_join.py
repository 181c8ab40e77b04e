"""Parquet files of one schema joined into one (api/parquet_join.py): read back by pyarrow and
DuckDB as the parts' rows in order, with the row groups' offsets, ordinals and count right."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.parquet_join import Joined, decode, encode

SCHEMA = pa.schema(
    [
        pa.field("n", pa.int64(), nullable=False),
        pa.field("word", pa.dictionary(pa.int32(), pa.string())),
        pa.field("flag", pa.bool_(), nullable=False),
        pa.field("score", pa.float64()),
    ]
)


def _file(batches: list[pa.RecordBatch], **options: Any) -> bytes:
    sink = pa.BufferOutputStream()
    writer = pq.ParquetWriter(sink, SCHEMA, compression="lz4", **options)
    for batch in batches:
        writer.write_batch(batch, row_group_size=len(batch))
    writer.close()
    return bytes(sink.getvalue())


def _batch(start: int, size: int) -> pa.RecordBatch:
    words = pa.array([f"w{start}", "shared", "ü ünïcode"])
    return pa.record_batch(
        [
            pa.array(range(start, start + size), pa.int64()),
            pa.DictionaryArray.from_arrays(
                pa.array([i % 3 if i % 5 else None for i in range(size)], pa.int32()), words
            ),
            pa.array([i % 2 == 0 for i in range(size)]),
            pa.array([i / 7 if i % 4 else None for i in range(size)]),
        ],
        schema=SCHEMA,
    )


def _joined(parts: list[bytes], **options: Any) -> bytes:
    return b"".join(Joined(_file([], **options)).all(iter(parts)))


def _footer(data: bytes) -> bytes:
    size = int.from_bytes(data[-8:-4], "little")
    return data[-8 - size : -8]


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.lists(st.integers(1, 300), min_size=1, max_size=3), max_size=20))
def test_the_joined_file_is_the_parts_rows_in_order(sizes: list[list[int]]) -> None:
    """Parts of one or more row groups each, any number of parts (past 15: Thrift's long list
    header): the joined file has every row group, in order, and its rows are the parts'."""
    start = 0
    parts, batches = [], []
    for part in sizes:
        mine = []
        for size in part:
            mine.append(_batch(start, size))
            start += size
        parts.append(_file(mine))
        batches += mine
    data = _joined(parts)
    table = pq.read_table(io.BytesIO(data))
    assert table.to_pylist() == pa.Table.from_batches(batches, SCHEMA).to_pylist()
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert meta.num_rows == start
    assert meta.num_row_groups == len(batches)
    for index, batch in enumerate(batches):
        assert pq.ParquetFile(io.BytesIO(data)).read_row_group(index).num_rows == len(batch)


def test_duckdb_reads_the_joined_file(tmp_path: Path) -> None:
    parts = [_file([_batch(1000 * k, 50 + k)]) for k in range(17)]
    target = tmp_path / "joined.parquet"
    target.write_bytes(_joined(parts))
    count, total, words = (
        duckdb.connect()
        .execute(f"SELECT count(*), sum(n), count(DISTINCT word) FROM read_parquet('{target}')")
        .fetchall()[0]
    )
    rows = [r for k in range(17) for r in range(1000 * k, 1000 * k + 50 + k)]
    assert (count, total, words) == (len(rows), sum(rows), 17 + 2)


def _indexes(data: bytes) -> list[tuple[bytes, bytes]]:
    """Each column chunk's offset index and column index, as the bytes their footer points at."""
    out = []
    for group in decode(_footer(data))[4][1][1]:
        for chunk in group[1][1][1]:
            offset, size = chunk[4][1], chunk[5][1]
            column, length = chunk[6][1], chunk[7][1]
            out.append((data[offset : offset + size], data[column : column + length]))
    return out


def test_page_indexes_move_with_their_row_groups() -> None:
    """A writer's page indexes (written after the column chunks) are in a part's bytes too: the
    joined footer points at the same bytes the parts' did."""
    parts = [_file([_batch(100 * k, 80 + k)], write_page_index=True) for k in range(3)]
    data = _joined(parts, write_page_index=True)
    assert _indexes(data) == [index for part in parts for index in _indexes(part)]
    table = pq.read_table(io.BytesIO(data), filters=[("n", ">=", 150), ("n", "<", 230)])
    assert table.column("n").to_pylist() == list(range(150, 181)) + list(range(200, 230))


def test_no_part_is_the_template_an_empty_file() -> None:
    data = _joined([])
    assert pq.read_table(io.BytesIO(data)).schema == SCHEMA
    assert pq.ParquetFile(io.BytesIO(data)).metadata.num_rows == 0


def test_a_footer_reads_and_writes_back_byte_for_byte() -> None:
    for data in (
        _file([]),
        _file([_batch(0, 10), _batch(10, 20)]),
        _file([_batch(0, 5)], write_page_index=True),
    ):
        footer = _footer(data)
        assert encode(decode(footer)) == footer


def test_what_is_not_parquet_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Parquet file"):
        Joined(b"PAR1 but not one")
    joined = Joined(_file([]))
    with pytest.raises(ValueError, match="not a Parquet file"):
        joined.add(b"not parquet at all")
