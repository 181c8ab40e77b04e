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
  in bulk with Arrow's string kernels (names sorted, Dial and Bind apart);
- the router counts as 16-bit integers (32-bit past 32,767 routers), ``onlineCommonRouterCount``
  null where online status is unknown; ``dial``, ``bind`` booleans.

Read back: ``pyarrow.parquet.read_table`` (or DuckDB's ``read_parquet``), the JSON fields with
``json.loads``.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from api.parquet_chunks import PARQUET, ParquetChunks
from engine.analysis.advise import DISABLED, IDENTITY_NO_SERVICES, SERVICE_NO_IDENTITIES
from engine.analysis.advise_bulk import AdviceBlock, AdviceTables, errors_of
from engine.analysis.advise_kernel import render_lists

__all__ = ["COLUMNS", "COMPRESSION", "PARQUET", "advice_parquet", "advice_schema", "write_advice"]

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
#: Error codes past the 16 of :func:`errors_of`: an identity with no service, a service with none.
_NO_SERVICES, _NO_IDENTITIES = 16, 17


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
    return pa.schema([(name, types[name]) for name in COLUMNS])


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
        singles = np.full((count + 1, 1), -1, dtype=np.int64)
        granted = np.asarray(sorted(names), dtype=np.int64)
        singles[granted + 1, 0] = granted
        self.base = self.render(singles)

    def render(self, sets: Any) -> tuple[Any, Any, pa.Array, pa.Array, pa.Array]:
        """Per set (a row of slots ascending, -1 padded): dial, bind and the three JSON texts."""
        valid = sets >= 0
        slot = np.where(valid, sets, 0)
        dials = _texts(render_lists(sets, self.name_rank, self.is_dial, *self.quoted, ord("["), ord("]")))
        binds = _texts(render_lists(sets, self.name_rank, self.is_bind, *self.quoted, ord("["), ord("]")))
        posture = _texts(
            render_lists(sets, self.posture_order, self.has_checks, *self.posture_pieces, ord("{"), ord("}"))
        )
        dial = (valid & self.is_dial[slot]).any(axis=1)
        bind = (valid & self.is_bind[slot]).any(axis=1)
        return dial, bind, dials, binds, posture


def _pieces(texts: list[str]) -> tuple[Any, Any]:
    """Texts as :func:`render_lists` takes them: their UTF-8 bytes and offsets."""
    encoded = [text.encode() for text in texts]
    ptr = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=ptr[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ptr


def _texts(rendered: tuple[Any, Any]) -> pa.Array:
    """:func:`render_lists`'s buffers as an Arrow string array."""
    offsets, data = rendered
    return pa.Array.from_buffers(
        pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _distinct(indices: Any, values: pa.Array) -> pa.DictionaryArray:
    """A dictionary column over texts some of which are the same (a single policy's and a set's,
    ``[]`` for many): the texts made distinct first, for a dictionary holding a value twice is
    written the slow way (each row's string hashed: five times the time at tier L)."""
    encoded = values.dictionary_encode()
    return _dictionary(encoded.indices.to_numpy()[indices], encoded.dictionary)


def _dictionary(indices: Any, values: pa.Array, mask: Any = None) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, mask=mask), values)


class _Writer:
    """Blocks as record batches of :func:`advice_schema`."""

    def __init__(self, tables: AdviceTables) -> None:
        self.tables = tables
        self.schema = advice_schema(tables)
        self.count_type = self.schema.field("commonRouterCount").type.to_pandas_dtype()
        self.identity_ids = pa.array(tables.identity_ids, pa.string())
        self.identity_names = pa.array(tables.identity_names, pa.string())
        self.service_ids = pa.array(tables.service_ids, pa.string())
        self.service_names = pa.array(tables.service_names, pa.string())
        self.empty = pa.array([""], pa.string())
        self.status = pa.array(["OKAY", "ERROR"], pa.string())
        errors = [list(errors_of(code)) for code in range(16)] + [
            [IDENTITY_NO_SERVICES],
            [SERVICE_NO_IDENTITIES],
        ]
        self.errors = pa.array([json.dumps(e) for e in errors], pa.string())
        self.problems = pa.array([json.dumps([]), json.dumps([DISABLED])], pa.string())
        self.grants = _Grants(tables)
        self.identity_router_counts = np.append(tables.identity_router_counts, 0)
        self.service_router_counts = np.append(tables.service_router_counts, 0)
        self.identity_disabled = np.append(tables.identity_disabled, False)

    def _entity(self, ranks: Any, ids: pa.Array, names: pa.Array) -> tuple[pa.Array, pa.Array]:
        present = ranks >= 0
        if not present.any():
            index = np.zeros(len(ranks), dtype=np.int32)
            return _dictionary(index, ids.slice(0, 0), ~present), _dictionary(index, self.empty)
        low = int(ranks[present].min())
        high = int(ranks.max())
        index = np.where(present, ranks - low, high - low + 1).astype(np.int32)
        span = ids.slice(low, high - low + 1)
        named = pa.concat_arrays([names.slice(low, high - low + 1), self.empty])
        return _dictionary(index, span, ~present), _dictionary(index, named)

    def batch(self, block: AdviceBlock) -> pa.RecordBatch:
        t = self.tables
        identity, service = block.identity, block.service
        real = (identity >= 0) & (service >= 0)
        error = np.where(service < 0, _NO_SERVICES, np.where(identity < 0, _NO_IDENTITIES, block.errors))
        counts = self.count_type
        # the tables' last entry (appended) for a row with no pair
        i_safe = np.where(real, identity, -1)
        s_safe = np.where(real, service, -1)
        irc = self.identity_router_counts[i_safe].astype(counts)
        src = self.service_router_counts[s_safe].astype(counts)
        if t.online_known and block.online is not None:
            online = pa.array(block.online.astype(counts), mask=~real)
        else:
            online = pa.nulls(len(block), self.schema.field("onlineCommonRouterCount").type)
        grants = self.grants
        dial_of, bind_of, *fields = grants.base
        if block.sets is not None and len(block.sets):
            extra = grants.render(block.sets)
            dial_of = np.concatenate([dial_of, extra[0]])
            bind_of = np.concatenate([bind_of, extra[1]])
            fields = [pa.concat_arrays([texts, more]) for texts, more in zip(fields, extra[2:], strict=True)]
        grant = (block.grant + 1).astype(np.int32)
        identity_id, identity_name = self._entity(identity, self.identity_ids, self.identity_names)
        service_id, service_name = self._entity(service, self.service_ids, self.service_names)
        problems = self.identity_disabled[i_safe].astype(np.int8)
        columns = {
            "status": _dictionary((error != 0).astype(np.int8), self.status),
            "identityId": identity_id,
            "identityName": identity_name,
            "serviceId": service_id,
            "serviceName": service_name,
            "identityRouterCount": pa.array(irc),
            "serviceRouterCount": pa.array(src),
            "commonRouterCount": pa.array(block.common.astype(counts)),
            "onlineCommonRouterCount": online,
            "dial": pa.array(dial_of[grant]),
            "bind": pa.array(bind_of[grant]),
            "errors": _dictionary(error.astype(np.int8), self.errors),
            "dialPolicies": _distinct(grant, fields[0]),
            "bindPolicies": _distinct(grant, fields[1]),
            "posture": _distinct(grant, fields[2]),
            "problems": _dictionary(problems, self.problems),
        }
        return pa.record_batch([columns[name] for name in COLUMNS], schema=self.schema)


#: Blocks computed at once (threads: numpy and Arrow release the GIL for most of the work).
WORKERS = 2


def _batches(maker: _Writer, blocks: Iterable[Any], workers: int = WORKERS) -> Iterator[pa.RecordBatch]:
    """The record batches of the blocks (each an :class:`AdviceBlock` or a call computing one, as
    :func:`advise_block_jobs` gives), in order, computed on ``workers`` threads up to
    ``workers + 1`` blocks ahead of the writer."""

    def make(item: Any) -> pa.RecordBatch | None:
        block = item() if callable(item) else item
        return maker.batch(block) if len(block) else None

    pending: deque[Future[pa.RecordBatch | None]] = deque()
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
                batch = pending.popleft().result()
                if batch is not None:
                    yield batch
        finally:
            for future in pending:
                future.cancel()


def _parquet_writer(where: Any, schema: pa.Schema, compression: str) -> pq.ParquetWriter:
    """A writer of :func:`advice_schema`'s batches: no column statistics (computing them looks
    every row's string up); a Parquet dictionary only for the columns that are dictionaries
    already (the counts and flags are plain: hashing each value cost more than it saved); rows
    encoded 64 Ki at a time, not 1 Ki. Together a sixth less time at tier L, 15 % more bytes."""
    dictionaries = [field.name for field in schema if pa.types.is_dictionary(field.type)]
    return pq.ParquetWriter(
        where,
        schema,
        compression=compression,
        write_statistics=False,
        use_dictionary=dictionaries,
        write_batch_size=1 << 16,
    )


def write_advice(
    tables: AdviceTables,
    blocks: Iterable[AdviceBlock | Callable[[], AdviceBlock]],
    where: str | Path | IO[bytes],
    compression: str = COMPRESSION,
) -> int:
    """Every block (of ``advise_blocks(..., local_sets=True)`` or, computed several at once, of
    ``advise_block_jobs``) into one Parquet file, a row group a block; the rows written."""
    maker = _Writer(tables)
    writer = _parquet_writer(where, maker.schema, compression)
    rows = 0
    try:
        for batch in _batches(maker, blocks):
            writer.write_batch(batch, row_group_size=len(batch))
            rows += len(batch)
    finally:
        writer.close()
    return rows


def advice_parquet(
    tables: AdviceTables,
    blocks: Iterable[AdviceBlock | Callable[[], AdviceBlock]],
    compression: str = COMPRESSION,
) -> Iterator[bytes]:
    """:func:`write_advice` as the chunks of a streamed answer, a row group at a time."""
    sink = ParquetChunks()
    maker = _Writer(tables)
    writer = _parquet_writer(sink, maker.schema, compression)
    for batch in _batches(maker, blocks):
        writer.write_batch(batch, row_group_size=len(batch))
        yield sink.take()
    writer.close()
    yield sink.take()
