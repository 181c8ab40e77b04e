"""Whole-network advice as Parquet (``trellis advise --format parquet``, docs/analysis.md §7).

The rows of :func:`engine.analysis.advise.advise`, in its order, written from the numpy blocks of
:func:`engine.analysis.advise_bulk.advise_blocks` without a Python step per row: one row group per
block, every string column dictionary-encoded, so no string is copied per row:

- ``identityId``/``identityName``, ``serviceId``/``serviceName``: indices over the entity tables
  (the slice of the ranks a block covers); a missing entity (the ``ERROR`` row of an identity
  with no service, of a service with no identity) has a null id and an empty name, as in a JSON row;
- ``status``, ``errors``, ``problems``: indices over their few values;
- ``dialPolicies``, ``bindPolicies``, ``posture``: indices over the *grants*: a pair's set of
  granting policies, written as the JSON text of the row's field (``["p1", "p2"]``,
  ``{"p1": ["check"]}``): exact for any name, one flat column each. The single policies are
  rendered once; a block's distinct sets of several policies (its ``sets``) rendered per block
  by a compiled join (:func:`~engine.analysis.advise_kernel.grant_texts`: names sorted, Dial and
  Bind apart, each distinct text once: a Parquet dictionary holding a value twice is written the
  slow way, each row's string hashed);
- the router counts as 16-bit integers (32-bit past 32,767 routers), ``onlineCommonRouterCount``
  null where online status is unknown; ``dial``, ``bind`` booleans.

A block's columns are made in one compiled pass over its rows
(:func:`~engine.analysis.advise_kernel.advice_columns`) and wrapped as Arrow arrays without a
copy. Only ``identityId``, ``serviceId`` and ``onlineCommonRouterCount`` may be null; the others
are written as required columns (no definition levels to encode).

Read back: ``pyarrow.parquet.read_table`` (or DuckDB's ``read_parquet``), the JSON fields with
``json.loads``.
"""

from __future__ import annotations

import io
import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from api.parquet_chunks import PARQUET
from api.parquet_join import Joined
from engine.analysis.advise import DISABLED, IDENTITY_NO_SERVICES, SERVICE_NO_IDENTITIES
from engine.analysis.advise_bulk import (
    AdviceBlock,
    AdviceTables,
    advise_block_jobs,
    advise_blocks,
    errors_of,
    render,
)
from engine.policy import EntityRow, PolicyGraph, PolicyRow

__all__ = ["COLUMNS", "COMPRESSION", "PARQUET", "advice_parquet", "advice_schema", "warm", "write_advice"]

#: The columns, in the order of a JSON advice row.
COLUMNS = (
    "status",
    "identityId",
    "identityName",
    "serviceId",
    "serviceName",
    "identityRouterCount",
    "serviceRouterCount",
    "commonRouterCount",
    "onlineCommonRouterCount",
    "dial",
    "bind",
    "errors",
    "dialPolicies",
    "bindPolicies",
    "posture",
    "problems",
)
#: What pages are compressed with (lz4 measured the fastest of none, snappy, zstd, lz4 at tier L).
COMPRESSION = "lz4"
#: The columns that hold nulls (a row with no pair; online status unknown): the others are
#: written as required, with no definition levels.
NULLABLE = ("identityId", "serviceId", "onlineCommonRouterCount")


def _count_type(tables: AdviceTables) -> pa.DataType:
    top = max(
        int(tables.identity_router_counts.max(initial=0)), int(tables.service_router_counts.max(initial=0))
    )
    return pa.int16() if top <= 32767 else pa.int32()


def advice_schema(tables: AdviceTables) -> pa.Schema:
    def words(index: pa.DataType) -> pa.DataType:
        return pa.dictionary(index, pa.string())

    count = _count_type(tables)
    types = {
        "status": words(pa.int8()),
        "identityId": words(pa.int32()),
        "identityName": words(pa.int32()),
        "serviceId": words(pa.int32()),
        "serviceName": words(pa.int32()),
        "identityRouterCount": count,
        "serviceRouterCount": count,
        "commonRouterCount": count,
        "onlineCommonRouterCount": count,
        "dial": pa.bool_(),
        "bind": pa.bool_(),
        "errors": words(pa.int8()),
        "dialPolicies": words(pa.int32()),
        "bindPolicies": words(pa.int32()),
        "posture": words(pa.int32()),
        "problems": words(pa.int8()),
    }
    return pa.schema([pa.field(name, types[name], nullable=name in NULLABLE) for name in COLUMNS])


class _Grants:
    """The grant columns' dictionaries: index 0 no grant (an ``ERROR`` row of its own), 1 + slot a
    single policy, then the block's sets."""

    def __init__(self, tables: AdviceTables) -> None:
        count = tables.policy_count
        self.count = count
        names = tables.policy_names
        size = max(count, 1)
        # policies by name: the order a pair's lists are in
        ranked = sorted(names, key=lambda s: names[s])
        self.name_rank = np.zeros(size, dtype=np.int64)
        self.name_rank[ranked] = np.arange(len(ranked), dtype=np.int64)
        self.is_dial = np.zeros(size, dtype=bool)
        self.is_bind = np.zeros(size, dtype=bool)
        for slot in names:
            self.is_dial[slot] = bool((tables.dial_policies >> slot) & 1)
            self.is_bind[slot] = not self.is_dial[slot]
        self.has_checks = np.zeros(size, dtype=bool)
        for slot, checks in tables.policy_checks.items():
            self.has_checks[slot] = bool(checks)
        # posture: the Dial policies with checks (by slot), then the Bind ones
        self.posture_order = np.arange(size, dtype=np.int64) + np.where(self.is_bind, size, 0)
        self.quoted = _pieces([json.dumps(names.get(s, "")) for s in range(size)])
        self.posture_pieces = _pieces(
            [
                f"{json.dumps(names[s])}: {json.dumps(list(tables.policy_checks[s]))}" if s in names else ""
                for s in range(size)
            ]
        )
        # per grant (code + 1: 0 none, 1 + slot a single policy), whether it dials, binds
        self.dial_of = np.concatenate([[False], self.is_dial[:count]])
        self.bind_of = np.concatenate([[False], self.is_bind[:count]])

    def fields(self, sets: Any) -> tuple[Any, Any, list[tuple[Any, pa.Array]]]:
        """For each grant (the single policies, then the block's ``sets``: rows of slots
        ascending, -1 padded): whether it dials, binds, and for each JSON text field the grants'
        indices among its distinct texts, and those texts."""
        from engine.analysis.advise_kernel import grant_texts  # numba: loaded when advice is made

        valid = sets >= 0
        slot = np.where(valid, sets, 0)
        dial_of = np.concatenate([self.dial_of, (valid & self.is_dial[slot]).any(axis=1)])
        bind_of = np.concatenate([self.bind_of, (valid & self.is_bind[slot]).any(axis=1)])
        texts = []
        for order, kept, pieces, left, right in (
            (self.name_rank, self.is_dial, self.quoted, "[", "]"),
            (self.name_rank, self.is_bind, self.quoted, "[", "]"),
            (self.posture_order, self.has_checks, self.posture_pieces, "{", "}"),
        ):
            index, offsets, data = grant_texts(self.count, sets, order, kept, *pieces, ord(left), ord(right))
            values = pa.Array.from_buffers(
                pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
            )
            texts.append((index, values))
        return dial_of, bind_of, texts


def _pieces(texts: list[str]) -> tuple[Any, Any]:
    """Texts as :func:`grant_texts` takes them: their UTF-8 bytes and offsets."""
    encoded = [text.encode() for text in texts]
    ptr = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=ptr[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ptr


class _Writer:
    """Blocks as record batches of :func:`advice_schema`."""

    def __init__(self, tables: AdviceTables) -> None:
        self.tables = tables
        self.schema = advice_schema(tables)
        self.count_type = self.schema.field("commonRouterCount").type.to_pandas_dtype()
        #: per side, its ids and names (by rank)
        self.entities = {
            "identity": (
                pa.array(tables.identity_ids, pa.string()),
                pa.array(tables.identity_names, pa.string()),
            ),
            "service": (
                pa.array(tables.service_ids, pa.string()),
                pa.array(tables.service_names, pa.string()),
            ),
        }
        self.empty = pa.array([""], pa.string())
        self.status = pa.array(["OKAY", "ERROR"], pa.string())
        # (advice_columns's codes: the 16 of errors_of, then no service, no identity)
        errors = [list(errors_of(code)) for code in range(16)] + [
            [IDENTITY_NO_SERVICES],
            [SERVICE_NO_IDENTITIES],
        ]
        self.errors = pa.array([json.dumps(e) for e in errors], pa.string())
        self.problems = pa.array([json.dumps([]), json.dumps([DISABLED])], pa.string())
        self.grants = _Grants(tables)

    def batch(self, block: AdviceBlock) -> pa.RecordBatch:
        from engine.analysis.advise_kernel import advice_columns  # numba: loaded when advice is made

        sets = block.sets if block.sets is not None else np.zeros((0, 1), dtype=np.int64)
        dial_of, bind_of, texts = self.grants.fields(sets)
        text_maps = np.stack([index for index, _ in texts])
        rows = len(block)
        online = block.online if block.online is not None else np.zeros(0, np.int32)
        has_online = self.tables.online_known and block.online is not None
        counts = np.empty((4, rows), dtype=self.count_type)
        ranks, lows, highs, valid, small, indices, flags = advice_columns(
            block.identity,
            block.service,
            block.common,
            online,
            has_online,
            block.grant,
            block.errors,
            self.tables.identity_router_counts,
            self.tables.service_router_counts,
            self.tables.identity_disabled,
            dial_of,
            bind_of,
            text_maps,
            counts,
        )
        kind = {field.name: field.type for field in self.schema}
        columns = {
            "status": _indexed(kind["status"], small[0], self.status),
            "identityRouterCount": _plain(kind["identityRouterCount"], rows, counts[0]),
            "serviceRouterCount": _plain(kind["serviceRouterCount"], rows, counts[1]),
            "commonRouterCount": _plain(kind["commonRouterCount"], rows, counts[2]),
            "onlineCommonRouterCount": _plain(kind["onlineCommonRouterCount"], rows, counts[3], valid[2])
            if has_online
            else pa.nulls(rows, kind["onlineCommonRouterCount"]),
            "dial": _plain(pa.bool_(), rows, flags[0]),
            "bind": _plain(pa.bool_(), rows, flags[1]),
            "errors": _indexed(kind["errors"], small[1], self.errors),
            "dialPolicies": _indexed(kind["dialPolicies"], indices[0], texts[0][1]),
            "bindPolicies": _indexed(kind["bindPolicies"], indices[1], texts[1][1]),
            "posture": _indexed(kind["posture"], indices[2], texts[2][1]),
            "problems": _indexed(kind["problems"], small[2], self.problems),
        }
        for side, name in enumerate(("identity", "service")):
            ids, names = self.entities[name]
            low, span = int(lows[side]), int(highs[side] - lows[side] + 1)
            columns[name + "Id"] = _indexed(kind[name + "Id"], ranks[side], ids.slice(low, span), valid[side])
            named = pa.concat_arrays([names.slice(low, span), self.empty])
            columns[name + "Name"] = _indexed(kind[name + "Name"], ranks[side], named)
        return pa.record_batch([columns[name] for name in COLUMNS], schema=self.schema)


def _indexed(kind: pa.DataType, index: Any, values: pa.Array, valid: Any = None) -> pa.Array:
    """A dictionary column over ``values``: its indices (and validity bitmap) as numpy arrays."""
    bitmap = None if valid is None else pa.py_buffer(valid)
    return pa.DictionaryArray.from_buffers(kind, len(index), [bitmap, pa.py_buffer(index)], values)


def _plain(kind: pa.DataType, rows: int, data: Any, valid: Any = None) -> pa.Array:
    """An integer or (bit-packed) boolean column from numpy arrays (and a validity bitmap)."""
    bitmap = None if valid is None else pa.py_buffer(valid)
    return pa.Array.from_buffers(kind, rows, [bitmap, pa.py_buffer(data)])


#: Blocks computed and encoded at once (threads: numba, numpy and Arrow release the GIL).
WORKERS = 2


def _encoded(schema: pa.Schema, compression: str, batches: Iterable[pa.RecordBatch]) -> memoryview:
    """A Parquet file of the batches, a row group each: no column statistics (computing them
    looks every row's string up); a Parquet dictionary only for the columns that are dictionaries
    already (the counts and flags are plain: hashing each value cost more than it saved); rows
    encoded 64 Ki at a time, not 1 Ki."""
    sink = pa.BufferOutputStream()
    dictionaries = [field.name for field in schema if pa.types.is_dictionary(field.type)]
    writer = pq.ParquetWriter(
        sink,
        schema,
        compression=compression,
        write_statistics=False,
        use_dictionary=dictionaries,
        write_batch_size=1 << 16,
    )
    for batch in batches:
        writer.write_batch(batch, row_group_size=len(batch))
    writer.close()
    return memoryview(sink.getvalue())


def _parts(
    maker: _Writer, blocks: Iterable[Any], compression: str, counted: list[int], workers: int = WORKERS
) -> Iterator[memoryview]:
    """Each block (an :class:`AdviceBlock` or a call computing one, as :func:`advise_block_jobs`
    gives) as a Parquet file of one row group, in order, computed and encoded on ``workers``
    threads up to ``workers + 1`` blocks ahead; each one's rows appended to ``counted``."""

    def make(item: Any) -> tuple[memoryview, int] | None:
        block = item() if callable(item) else item
        if not len(block):
            return None
        return _encoded(maker.schema, compression, [maker.batch(block)]), len(block)

    pending: deque[Future[tuple[memoryview, int] | None]] = deque()
    items = iter(blocks)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="advice-parquet") as pool:
        try:
            while True:
                while len(pending) <= workers:
                    item = next(items, None)
                    if item is None:
                        break
                    pending.append(pool.submit(make, item))
                if not pending:
                    return
                part = pending.popleft().result()
                if part is not None:
                    counted.append(part[1])
                    yield part[0]
        finally:
            for future in pending:
                future.cancel()


def _joined(
    tables: AdviceTables,
    blocks: Iterable[AdviceBlock | Callable[[], AdviceBlock]],
    compression: str,
    counted: list[int],
) -> Iterator[bytes | memoryview]:
    """The Parquet file of the blocks, a row group each, as bytes: row groups encoded on threads
    and joined (:class:`~api.parquet_join.Joined`)."""
    maker = _Writer(tables)
    joined = Joined(_encoded(maker.schema, compression, []))
    return joined.all(_parts(maker, blocks, compression, counted))


def write_advice(
    tables: AdviceTables,
    blocks: Iterable[AdviceBlock | Callable[[], AdviceBlock]],
    where: str | Path | IO[bytes],
    compression: str = COMPRESSION,
) -> int:
    """Every block (of ``advise_blocks(..., local_sets=True)`` or, computed several at once, of
    ``advise_block_jobs``) into one Parquet file, a row group a block; the rows written."""
    counted: list[int] = []
    chunks = _joined(tables, blocks, compression, counted)
    if isinstance(where, (str, Path)):
        with open(where, "wb") as sink:
            for chunk in chunks:
                sink.write(chunk)
    else:
        for chunk in chunks:
            where.write(chunk)
    return sum(counted)


def advice_parquet(
    tables: AdviceTables,
    blocks: Iterable[AdviceBlock | Callable[[], AdviceBlock]],
    compression: str = COMPRESSION,
) -> Iterator[bytes]:
    """:func:`write_advice` as the chunks of a streamed answer, a row group at a time."""
    for chunk in _joined(tables, blocks, compression, []):
        yield bytes(chunk)


def warm() -> None:
    """Every compiled kernel of the bulk advice (:mod:`engine.analysis.advise_kernel`) compiled,
    or loaded from numba's cache, by the calls a real run makes, on a network of a few entities.
    Compiling them takes some 15 s: ``make`` runs this once after installing (``python -m
    api.advice_parquet``), so a first ``trellis advise`` does not wait for it."""
    graph = PolicyGraph.build(
        identities=[EntityRow("i1", ("a",)), EntityRow("i2", ("a", "b"))],
        services=[EntityRow("s1", ("x",)), EntityRow("s2", ())],
        edge_routers=[EntityRow("r1")],
        service_policies=[
            PolicyRow("p1", "AnyOf", "Dial", identity_roles=("#a",), service_roles=("#x",)),
            PolicyRow("p2", "AnyOf", "Bind", identity_roles=("#b",), service_roles=("#x",)),
        ],
        edge_router_policies=[
            PolicyRow("e1", "AnyOf", identity_roles=("#all",), edge_router_roles=("#all",))
        ],
        service_edge_router_policies=[
            PolicyRow("x1", "AnyOf", service_roles=("#all",), edge_router_roles=("#all",))
        ],
    )
    for order in ("identities", "services"):
        tables, jobs = advise_block_jobs(graph, online=lambda _: True, order=order, local_sets=True)
        write_advice(tables, jobs, io.BytesIO())
        tables, blocks = advise_blocks(graph, order=order)
        for _ in render(tables, blocks, "csv"):
            pass


if __name__ == "__main__":
    warm()
