"""Advice for every pair in bulk: the rows of :func:`engine.analysis.advise.advise` as columns.

:func:`advise` there builds one :class:`~engine.analysis.advise.AdviceRow` per (identity, service)
pair: at tier L (250 million pairs) over an hour. Here the same rows, in the same order, come as
:class:`AdviceBlock` s of numpy columns (about a million rows each) over shared
:class:`AdviceTables`, and :func:`render` turns a block into bytes (CSV, JSON lines, text) without
a Python step per row:

- **Pairs.** Entities are ranked by (name, id), each service policy's members listed as ranks of the
  other kind. A block of consecutive entities of the walking kind (identities for
  ``order="identities"``) is computed by one compiled loop (:func:`block_pairs`): per entity its
  policies' members are counted, and the members counted, in rank order, are its pairs.
- **Granting policies.** A pair granted by one policy (most) is coded by that policy's slot; a
  pair granted by several by the set of their slots, numbered in the block (and, unless
  ``local_sets``, once over the network). The names, posture checks and Dial/Bind flags are
  rendered once per code.
- **Routers.** Each entity's routers are 64-bit words; a pair's common routers are the popcounts
  of the ANDs of its two entities' words (online: ANDed with the online routers too).
- **Rendering.** Every field of a row is a piece taken from a per-code table (the identity's
  ``name,id``, the grant's policy names, a count, ...); a block's rows are laid out as numpy
  records of fixed-width pieces padded with NUL bytes, and the NULs dropped: the bytes of the
  rows, in order. Strings holding a NUL byte are refused (:func:`bulk_supported`), as is posture
  evaluation: those go the per-pair way.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from engine.analysis.advise import (
    ALL_OFFLINE,
    DISABLED,
    IDENTITY_NO_SERVICES,
    NO_COMMON,
    NO_IDENTITY_ROUTERS,
    NO_SERVICE_ROUTERS,
    SERVICE_NO_IDENTITIES,
    AdviceRow,
    Bits,
    Names,
    _ids_name,
)
from engine.policy import IDENTITY, POSTURE_CHECK, SERVICE, SERVICE_POLICY, PolicyGraph
from engine.policy.bitset import slots

__all__ = [
    "CSV_FIELDS",
    "FORMATS",
    "AdviceBlock",
    "AdviceTables",
    "advise_block_jobs",
    "advise_blocks",
    "render",
    "rows_of",
]

#: The CSV columns of ``trellis advise --format csv`` (and of ``GET /advice?stream=csv``).
CSV_FIELDS = (
    "status",
    "identityName",
    "identityId",
    "serviceName",
    "serviceId",
    "identityRouterCount",
    "serviceRouterCount",
    "commonRouterCount",
    "onlineCommonRouterCount",
    "dial",
    "bind",
    "dialPolicies",
    "bindPolicies",
    "posture",
    "errors",
    "problems",
)
FORMATS = ("csv", "json", "text")

#: Rows per block (about).
BLOCK_ROWS = 1 << 20

# A pair's error bits: no identity routers, no service routers, no common router, all offline.
_E_MINE, _E_THEIRS, _E_COMMON, _E_OFFLINE = 1, 2, 4, 8


def errors_of(code: int) -> tuple[str, ...]:
    out = []
    if code & _E_MINE:
        out.append(NO_IDENTITY_ROUTERS)
    if code & _E_THEIRS:
        out.append(NO_SERVICE_ROUTERS)
    if code & _E_COMMON:
        out.append(NO_COMMON)
    if code & _E_OFFLINE:
        out.append(ALL_OFFLINE)
    return tuple(out)


@dataclass
class _Kind:
    """One entity kind in rank order (by name, then id)."""

    ids: list[str]
    names: list[str]
    #: (n, words) uint64: each entity's routers.
    routers: Any
    router_counts: Any
    #: CSR: rank -> the granting service policy slots selecting it, ascending.
    ptr: Any
    policies: Any
    #: slot -> rank (-1 for a free slot).
    rank_of_slot: Any


@dataclass
class _Members:
    """CSR: service policy slot -> the ranks (ascending) of the entities of one kind it selects."""

    ptr: Any
    ranks: Any

    def lengths(self, policies: Any) -> Any:
        return self.ptr[policies + 1] - self.ptr[policies]


@dataclass
class Grant:
    """What one set of granting policies renders as."""

    dial: bool
    bind: bool
    dial_policies: tuple[str, ...]
    bind_policies: tuple[str, ...]
    posture: dict[str, tuple[str, ...]]


@dataclass
class AdviceTables:
    """What the blocks' codes index: entities (by rank), grants (by code), error sets (by code)."""

    identity_ids: list[str]
    identity_names: list[str]
    identity_router_counts: Any
    identity_disabled: Any
    service_ids: list[str]
    service_names: list[str]
    service_router_counts: Any
    online_known: bool
    #: code -> grant; codes below the policy count are single policies (by slot).
    grants: dict[int, Grant] = field(default_factory=dict)
    #: Service policy slots: how many; the granting ones' names and posture check names; the
    #: Dial ones (a bitset).
    policy_count: int = 0
    policy_names: dict[int, str] = field(default_factory=dict)
    policy_checks: dict[int, tuple[str, ...]] = field(default_factory=dict)
    dial_policies: int = 0


@dataclass
class AdviceBlock:
    """Consecutive advice rows as columns. ``identity`` -1: a service no one may use;
    ``service`` -1: an identity that may use no service."""

    identity: Any
    service: Any
    common: Any
    online: Any
    grant: Any
    errors: Any
    #: With ``local_sets``: the block's own policy sets (rows of slots ascending, -1 padded); a
    #: grant code ``c`` past the policy count is the set in row ``c - policy_count``.
    sets: Any = None

    def __len__(self) -> int:
        return len(self.identity)


def bulk_supported(graph: PolicyGraph, names: Names = _ids_name) -> bool:
    """Whether the bulk path can render this graph (no name holds a NUL byte)."""
    return True


def _words(bits_list: Sequence[int], words: int) -> Any:
    size = words * 8
    data = b"".join(bits.to_bytes(size, "little") for bits in bits_list)
    return np.frombuffer(data, dtype="<u8").reshape(len(bits_list), words).astype(np.uint64)


def _kind(
    table: Any,
    cache: Any,
    links_side: Any,
    granted: int,
    kind: str,
    names: Names,
    words: int,
) -> _Kind:
    pairs = [(names(kind, str(entity_id)), str(entity_id), slot) for entity_id, slot in table.slot_of.items()]
    pairs.sort()
    ids = [p[1] for p in pairs]
    rank_of_slot = np.full(len(table.ids), -1, dtype=np.int64)
    rank_of_slot[[p[2] for p in pairs]] = np.arange(len(pairs), dtype=np.int64)
    ptr, flat = _slots_of([links_side.effective_links(slot) & granted for _, _, slot in pairs])
    matrix = _routers(cache, [slot for _, _, slot in pairs], words)
    return _Kind(
        ids=ids,
        names=[p[0] for p in pairs],
        routers=matrix,
        router_counts=np.bitwise_count(matrix).sum(axis=1, dtype=np.int64),
        ptr=ptr,
        policies=flat,
        rank_of_slot=rank_of_slot,
    )


def _members(side: Any, policy_count: int, granted: int, rank_of_slot: Any) -> _Members:
    policies = slots(granted)
    found, flat = _slots_of([side.member_bits(policy) for policy in policies])
    sizes = np.diff(found)
    lengths = np.zeros(policy_count, dtype=np.int64)
    lengths[policies] = sizes
    ranks = rank_of_slot[flat]
    # each policy's ranks ascending: sorted by (policy, rank)
    owner = np.repeat(np.arange(len(policies), dtype=np.int64), sizes)
    ranks = ranks[np.lexsort((ranks, owner))]
    ptr = np.zeros(policy_count + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    return _Members(ptr, ranks)


def _routers(cache: Any, entity_slots: list[int], words: int) -> Any:
    """Each entity's routers as rows of 64-bit words, in bulk: what the graph's entity cache
    holds (the union of the router members of the edge router policies, or service edge router
    policies, selecting the entity; ``#all`` resolved), from the policies' words."""
    from engine.analysis.advise_kernel import or_rows  # numba: loaded when advice is made

    source, target = cache.source, cache.target
    ptr, policies = _slots_of([source.effective_links(slot) for slot in entity_slots])
    top = int(policies.max(initial=-1)) + 1
    policy_words = _words([target.member_bits(policy) for policy in range(top)], words)
    return or_rows(ptr, policies, policy_words)


#: Bitsets turned into slots at once: at most this many bytes of words.
_SLOT_CHUNK = 1 << 26


def _slots_of(bitsets: Sequence[int]) -> tuple[Any, Any]:
    """The set bits of each bitset, ascending, as CSR (``ptr``, ``slots``): a chunk of bitsets
    at a time as rows of 64-bit words (:func:`set_bits`)."""
    from engine.analysis.advise_kernel import set_bits  # numba: loaded when advice is made

    words = max(1, max((b.bit_length() for b in bitsets), default=0) + 63 >> 6)
    step = max(1, _SLOT_CHUNK // (8 * words))
    lengths, parts = [], []
    for start in range(0, len(bitsets), step):
        count, found = set_bits(_words(bitsets[start : start + step], words))
        lengths.append(count)
        parts.append(found)
    ptr = np.zeros(len(bitsets) + 1, dtype=np.int64)
    if parts:
        np.cumsum(np.concatenate(lengths), out=ptr[1:])
    return ptr, np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def advise_block_jobs(
    graph: PolicyGraph,
    *,
    online: Callable[[str], bool] | None = None,
    names: Names = _ids_name,
    disabled: Callable[[str], bool] = lambda _: False,
    order: str = "identities",
    errors_only: bool = False,
    block_rows: int = BLOCK_ROWS,
    local_sets: bool = False,
) -> tuple[AdviceTables, Iterator[Callable[[], AdviceBlock]]]:
    """:func:`advise_blocks`, each block as a call that computes it (a block may be empty): what a
    caller computing several blocks at once runs, in any order. With ``local_sets`` the calls
    share nothing they change but the single policies' grants, which a call may add to."""
    bits = Bits(graph)
    granted = bits.dial | bits.bind
    words = max(1, (len(bits.routers.ids) + 63) // 64)
    identities = _kind(
        bits.identities, bits.identity_cache, bits.sp_identity, granted, IDENTITY, names, words
    )
    services = _kind(bits.services, bits.service_cache, bits.sp_service, granted, SERVICE, names, words)
    online_words = None
    if online is not None:
        mask = 0
        for slot, router_id in enumerate(bits.routers.ids):
            if router_id is not None and online(router_id):
                mask |= 1 << slot
        online_words = _words([mask], words)[0]
    policy_count = len(bits.policy_tables[SERVICE_POLICY].ids)
    tables = AdviceTables(
        identity_ids=identities.ids,
        identity_names=identities.names,
        identity_router_counts=identities.router_counts,
        identity_disabled=np.asarray([disabled(i) for i in identities.ids], dtype=bool),
        service_ids=services.ids,
        service_names=services.names,
        service_router_counts=services.router_counts,
        online_known=online is not None,
    )
    grants = _Grants(bits, names, policy_count, tables.grants, local=local_sets)
    tables.policy_count = policy_count
    tables.policy_names = grants.policy_names
    tables.policy_checks = {
        slot: tuple(grants.check_name(c) for c in bits.checks_of(slot)) if grants.any_checks else ()
        for slot in grants.policy_names
    }
    tables.dial_policies = bits.dial
    if order == "services":
        major, minor = services, identities
        members = _members(bits.sp_identity, policy_count, granted, identities.rank_of_slot)
    else:
        major, minor = identities, services
        members = _members(bits.sp_service, policy_count, granted, services.rank_of_slot)
    by_service = order == "services"

    def spans() -> Iterator[tuple[int, int, int]]:
        total = len(major.ids)
        # the rows of each entity at most: its policies' members (overlaps counted twice, never
        # more than the other kind), or its own row
        sums = np.zeros(len(major.policies) + 1, dtype=np.int64)
        np.cumsum(members.lengths(major.policies), out=sums[1:])
        most = np.minimum(sums[major.ptr[1:]] - sums[major.ptr[:-1]], len(minor.ids))
        upper = np.cumsum(np.maximum(most, 1))
        start = 0
        while start < total:
            done = int(upper[start - 1]) if start else 0
            end = int(np.searchsorted(upper, done + block_rows, side="right"))
            end = min(max(end, start + 1), total)
            yield start, end, int(upper[end - 1]) - done
            start = end

    def one(start: int, end: int, capacity: int) -> AdviceBlock:
        block = _block(major, minor, members, start, end, capacity, grants, online_words, by_service)
        if errors_only:
            real = (block.identity >= 0) & (block.service >= 0)
            keep = ~real | (block.errors != 0)
            # (a row with no pair reads the False appended: there may be no identity at all)
            keep |= np.append(tables.identity_disabled, False)[np.where(real, block.identity, -1)]
            sets = block.sets
            block = AdviceBlock(*(None if col is None else col[keep] for col in _columns(block)))
            block.sets = sets
        return block

    return tables, (partial(one, *span) for span in spans())


def advise_blocks(
    graph: PolicyGraph,
    *,
    online: Callable[[str], bool] | None = None,
    names: Names = _ids_name,
    disabled: Callable[[str], bool] = lambda _: False,
    order: str = "identities",
    errors_only: bool = False,
    block_rows: int = BLOCK_ROWS,
    local_sets: bool = False,
) -> tuple[AdviceTables, Iterator[AdviceBlock]]:
    """The rows of :func:`engine.analysis.advise.advise` (without posture evaluation) as blocks:
    the tables now, the blocks as they are iterated. Reads the graph while iterated: the caller
    keeps it unchanged until the iterator is done.

    ``local_sets``: a pair granted by several policies is not numbered over the whole network
    (no :class:`Grant` made for it): its code indexes the block's own ``sets`` (what a writer
    rendering each block's distinct sets in bulk wants, :mod:`api.advice_parquet`)."""
    tables, jobs = advise_block_jobs(
        graph,
        online=online,
        names=names,
        disabled=disabled,
        order=order,
        errors_only=errors_only,
        block_rows=block_rows,
        local_sets=local_sets,
    )

    def blocks() -> Iterator[AdviceBlock]:
        for job in jobs:
            block = job()
            if len(block):
                yield block

    return tables, blocks()


def _columns(block: AdviceBlock) -> tuple[Any, ...]:
    return (block.identity, block.service, block.common, block.online, block.grant, block.errors)


class _Grants:
    """Grant codes: a single policy is its slot; a set of several is numbered past the slots."""

    def __init__(
        self, bits: Bits, names: Names, policy_count: int, table: dict[int, Grant], *, local: bool = False
    ) -> None:
        self.bits = bits
        self.names = names
        self.policy_count = policy_count
        self.table = table
        self.sets: dict[tuple[int, ...], int] = {}
        sp_ids = bits.policy_tables[SERVICE_POLICY].ids
        self.policy_names = {s: names(SERVICE_POLICY, str(sp_ids[s])) for s in slots(bits.dial | bits.bind)}
        self.any_checks = bool(bits.sp_posture.table.all_bits)
        self.check_names: dict[str, str] = {}
        self.local = local
        #: The single policies :attr:`table` holds a grant of, by slot.
        self.seen = np.zeros(max(policy_count, 1), dtype=bool)
        self.seen[[slot for slot in table if slot < policy_count]] = True
        #: A random word per slot: a set's hash is the sum of its slots' (:func:`block_pairs`).
        self.slot_keys = (
            np.random.default_rng(20261129)
            .integers(1, 2**63, size=max(policy_count, 1), dtype=np.int64)
            .astype(np.uint64)
        )

    def single(self, policy_slots: Any) -> None:
        new = policy_slots[~self.seen[policy_slots]]
        if len(new):
            for slot in np.unique(new).tolist():
                self.table[slot] = self._grant((slot,))
            self.seen[new] = True

    def several(self, policy_set: tuple[int, ...]) -> int:
        code = self.sets.get(policy_set)
        if code is None:
            code = self.sets[policy_set] = self.policy_count + len(self.sets)
            self.table[code] = self._grant(policy_set)
        return code

    def check_name(self, check_id: str) -> str:
        name = self.check_names.get(check_id)
        if name is None:
            name = self.check_names[check_id] = self.names(POSTURE_CHECK, check_id)
        return name

    def _grant(self, policy_set: tuple[int, ...]) -> Grant:
        dial = [s for s in policy_set if (self.bits.dial >> s) & 1]
        bind = [s for s in policy_set if (self.bits.bind >> s) & 1]
        posture: dict[str, tuple[str, ...]] = {}
        for group in (dial, bind):
            for slot in group:
                checks = self.bits.checks_of(slot) if self.any_checks else []
                if checks:
                    posture[self.policy_names[slot]] = tuple(self.check_name(c) for c in checks)
        return Grant(
            dial=bool(dial),
            bind=bool(bind),
            dial_policies=tuple(sorted(self.policy_names[s] for s in dial)),
            bind_policies=tuple(sorted(self.policy_names[s] for s in bind)),
            posture=posture,
        )


def _block(
    major: _Kind,
    minor: _Kind,
    members: _Members,
    start: int,
    end: int,
    capacity: int,
    grants: _Grants,
    online_words: Any,
    by_service: bool,
) -> AdviceBlock:
    """The rows of the entities ``start``-``end`` of the walking kind (:func:`block_pairs`)."""
    from engine.analysis.advise_kernel import block_pairs  # numba: loaded when advice is made

    mine, theirs, common, online, codes, errors, sets = block_pairs(
        start,
        end,
        major.ptr,
        major.policies,
        members.ptr,
        members.ranks,
        major.routers,
        minor.routers,
        online_words if online_words is not None else np.zeros(major.routers.shape[1], np.uint64),
        online_words is not None,
        major.router_counts,
        minor.router_counts,
        by_service,
        grants.policy_count,
        grants.slot_keys,
        capacity,
    )
    several = codes >= grants.policy_count
    grants.single(codes[(codes >= 0) & ~several])
    local_sets = None
    if grants.local:
        local_sets = sets
    elif len(sets):
        mapped = np.asarray(
            [grants.several(tuple(int(s) for s in row if s >= 0)) for row in sets.tolist()], dtype=np.int64
        )
        codes[several] = mapped[codes[several] - grants.policy_count]
    identity, service = (theirs, mine) if by_service else (mine, theirs)
    return AdviceBlock(
        identity, service, common, online if online_words is not None else None, codes, errors, local_sets
    )


def rows_of(tables: AdviceTables, block: AdviceBlock) -> Iterator[AdviceRow]:
    """The block's rows as :class:`AdviceRow` s."""
    known = tables.online_known
    for i, s, common, online, code, errors in zip(
        block.identity.tolist(),
        block.service.tolist(),
        block.common.tolist(),
        (block.online.tolist() if block.online is not None else [None] * len(block)),
        block.grant.tolist(),
        block.errors.tolist(),
        strict=True,
    ):
        if s < 0:
            yield AdviceRow(
                "ERROR",
                tables.identity_ids[i],
                tables.identity_names[i],
                None,
                "",
                errors=(IDENTITY_NO_SERVICES,),
            )
            continue
        if i < 0:
            yield AdviceRow(
                "ERROR",
                None,
                "",
                tables.service_ids[s],
                tables.service_names[s],
                errors=(SERVICE_NO_IDENTITIES,),
            )
            continue
        grant = tables.grants[code]
        message = errors_of(errors)
        yield AdviceRow(
            status="ERROR" if message else "OKAY",
            identity_id=tables.identity_ids[i],
            identity_name=tables.identity_names[i],
            service_id=tables.service_ids[s],
            service_name=tables.service_names[s],
            identity_router_count=int(tables.identity_router_counts[i]),
            service_router_count=int(tables.service_router_counts[s]),
            common_router_count=common,
            online_common_router_count=online if known else None,
            dial=grant.dial,
            bind=grant.bind,
            errors=message,
            dial_policies=grant.dial_policies,
            bind_policies=grant.bind_policies,
            posture=grant.posture,
            problems=(DISABLED,) if tables.identity_disabled[i] else (),
        )


# -- rendering ----------------------------------------------------------------------------------


def _csv_cell(value: Any) -> str:
    """One CSV field as :class:`csv.writer` writes it (quoted where needed), with its comma."""
    text = "" if value is None else str(value)
    if "," in text or '"' in text or "\r" in text or "\n" in text:
        text = '"' + text.replace('"', '""') + '"'
    return text + ","


def csv_header() -> str:
    out = io.StringIO()
    csv.writer(out).writerow(CSV_FIELDS)
    return out.getvalue()


def csv_line(row: dict[str, Any]) -> str:
    """One advice row (as :meth:`AdviceRow.as_dict` gives it) as a CSV line."""
    flat = {k: (";".join(map(str, v)) if isinstance(v, list) else v) for k, v in row.items()}
    if isinstance(row.get("posture"), dict):
        flat["posture"] = ";".join(f"{p}={'+'.join(c)}" for p, c in row["posture"].items())
    out = io.StringIO()
    csv.writer(out).writerow([flat.get(name) for name in CSV_FIELDS])
    return out.getvalue()


def json_line(row: dict[str, Any]) -> str:
    return json.dumps(row) + "\n"


def text_line(row: dict[str, Any]) -> str:
    """One advice row as ``trellis advise`` prints it (``ziti edge policy-advisor``'s line)."""
    errors = "".join(f"\n  - {e}" for e in row["errors"])
    if row["serviceId"] is None or row["identityId"] is None:
        name = row["identityName"] if row["serviceId"] is None else row["serviceName"]
        return f"ERROR: {name} {errors}\n\n"
    online = "?" if row["onlineCommonRouterCount"] is None else row["onlineCommonRouterCount"]
    status = "OKAY " if row["status"] == "OKAY" else row["status"]
    return (
        f"{status}: {row['identityName']} ({row['identityRouterCount']}) -> {row['serviceName']} "
        f"({row['serviceRouterCount']}) Common Routers: ({online}/{row['commonRouterCount']}) "
        f"Dial: {'Y' if row['dial'] else 'N'} Bind: {'Y' if row['bind'] else 'N'} {errors}"
        f"{_text_extra(row['dialPolicies'], row['bindPolicies'], row['posture'])}"
        + "".join(f"\n  ! {p}" for p in row["problems"])
        + "\n\n"
    )


def _text_extra(dial: Sequence[str], bind: Sequence[str], posture: dict[str, Any]) -> str:
    extra = ""
    if dial:
        extra += f"\n  dial policies: {', '.join(dial)}"
    if bind:
        extra += f"\n  bind policies: {', '.join(bind)}"
    for policy, checks in posture.items():
        extra += f"\n  posture of {policy}: {', '.join(checks)}"
    return extra


LINES: dict[str, Callable[[dict[str, Any]], str]] = {"csv": csv_line, "json": json_line, "text": text_line}


class _Pieces:
    """A field's pieces as one numpy array of fixed-width (NUL-padded) byte strings."""

    def __init__(self, pieces: Sequence[str]) -> None:
        encoded = [p.encode() for p in pieces]
        self.width = max((len(p) for p in encoded), default=0)
        self.array: Any = None
        self.clean = not any(b"\0" in p for p in encoded)
        if self.width:
            joined = b"".join(p.ljust(self.width, b"\0") for p in encoded)
            self.array = np.frombuffer(joined, dtype=f"V{self.width}")


class Renderer:
    """Blocks of :func:`advise_blocks` as the bytes of one format (``csv``, ``json``, ``text``)."""

    def __init__(self, tables: AdviceTables, fmt: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}")
        self.tables = tables
        self.format = fmt
        self.line = LINES[fmt]
        t = tables
        top = int(max(t.identity_router_counts.max(initial=0), t.service_router_counts.max(initial=0))) + 1
        numbers = [str(n) for n in range(top)]
        errors = [errors_of(code) for code in range(16)]
        status = ["ERROR" if e else "OKAY" for e in errors]
        disabled = [(), (DISABLED,)]
        q, dumps = _csv_cell, json.dumps
        self.grant_cache: dict[int, tuple[str, ...]] = {}
        if fmt == "csv":
            self.fields = {
                "status": [q(s) for s in status],
                "identity": [q(n) + q(i) for n, i in zip(t.identity_names, t.identity_ids, strict=True)],
                "service": [q(n) + q(i) for n, i in zip(t.service_names, t.service_ids, strict=True)],
                "irc": [n + "," for n in numbers],
                "src": [n + "," for n in numbers],
                "common": [n + "," for n in numbers],
                "online": [n + "," for n in numbers] if t.online_known else [","],
                "grant": [],
                "tail": [q(";".join(e)) + q(";".join(p))[:-1] + "\r\n" for e in errors for p in disabled],
            }
        elif fmt == "json":
            self.fields = {
                "status": ['{"status": ' + dumps(s) + ", " for s in status],
                "identity": [
                    f'"identityId": {dumps(i)}, "identityName": {dumps(n)}, '
                    for n, i in zip(t.identity_names, t.identity_ids, strict=True)
                ],
                "service": [
                    f'"serviceId": {dumps(i)}, "serviceName": {dumps(n)}, '
                    for n, i in zip(t.service_names, t.service_ids, strict=True)
                ],
                "irc": [f'"identityRouterCount": {n}, ' for n in numbers],
                "src": [f'"serviceRouterCount": {n}, ' for n in numbers],
                "common": [f'"commonRouterCount": {n}, ' for n in numbers],
                "online": [f'"onlineCommonRouterCount": {n}, ' for n in numbers]
                if t.online_known
                else ['"onlineCommonRouterCount": null, '],
                "grant": [],
                "errors": [f'"errors": {dumps(list(e))}, ' for e in errors],
                "grant2": [],
                "tail": [f'"problems": {dumps(list(p))}}}\n' for p in disabled],
            }
        else:
            self.fields = {
                "status": [("OKAY " if s == "OKAY" else s) + ": " for s in status],
                "identity": [f"{n} (" for n in t.identity_names],
                "irc": [f"{n}) -> " for n in numbers],
                "service": [f"{n} (" for n in t.service_names],
                "src": [f"{n}) Common Routers: (" for n in numbers],
                "online": [f"{n}/" for n in numbers] if t.online_known else ["?/"],
                "common": [f"{n}) " for n in numbers],
                "grant": [],
                "errors": ["".join(f"\n  - {x}" for x in e) for e in errors],
                "grant2": [],
                "tail": ["".join(f"\n  ! {x}" for x in p) + "\n\n" for p in disabled],
            }
        self.pieces = {name: _Pieces(v) for name, v in self.fields.items() if name not in ("grant", "grant2")}

    def header(self) -> bytes:
        return csv_header().encode() if self.format == "csv" else b""

    def _grant_pieces(self, code: int) -> tuple[str, ...]:
        g = self.tables.grants[code]
        if self.format == "csv":
            q = _csv_cell
            return (
                q(g.dial)
                + q(g.bind)
                + q(";".join(g.dial_policies))
                + q(";".join(g.bind_policies))
                + q(";".join(f"{p}={'+'.join(c)}" for p, c in g.posture.items())),
            )
        if self.format == "json":
            dumps = json.dumps
            return (
                f'"dial": {dumps(g.dial)}, "bind": {dumps(g.bind)}, ',
                f'"dialPolicies": {dumps(list(g.dial_policies))}, "bindPolicies": '
                f"{dumps(list(g.bind_policies))}, "
                f'"posture": {dumps({k: list(v) for k, v in g.posture.items()})}, ',
            )
        return (
            f"Dial: {'Y' if g.dial else 'N'} Bind: {'Y' if g.bind else 'N'} ",
            _text_extra(g.dial_policies, g.bind_policies, g.posture),
        )

    def _grants(self, codes: Any) -> Any:
        """The block's grant pieces (of its distinct codes); the codes' places among them."""
        distinct = np.unique(codes)
        cache = self.grant_cache
        listed = distinct.tolist()
        for code in listed:
            if code not in cache:
                cache[code] = self._grant_pieces(code)
        self.pieces["grant"] = _Pieces([cache[c][0] for c in listed])
        if self.format != "csv":
            self.pieces["grant2"] = _Pieces([cache[c][1] for c in listed])
        return np.searchsorted(distinct, codes)

    def render(self, block: AdviceBlock) -> bytes:
        """The block's rows, in order, as bytes."""
        special = np.flatnonzero((block.identity < 0) | (block.service < 0))
        if not all(p.clean for name, p in self.pieces.items() if name not in ("grant", "grant2")):
            return "".join(self.line(r.as_dict()) for r in rows_of(self.tables, block)).encode()
        out: list[bytes] = []
        begin = 0
        for at in [*special.tolist(), len(block)]:
            if at > begin:
                out.append(self._bulk(block, begin, at))
            if at < len(block):
                row = next(rows_of(self.tables, _slice(block, at, at + 1)))
                out.append(self.line(row.as_dict()).encode())
            begin = at + 1
        return b"".join(out)

    def _bulk(self, block: AdviceBlock, begin: int, end: int) -> bytes:
        t = self.tables
        identity = block.identity[begin:end]
        service = block.service[begin:end]
        errors = block.errors[begin:end]
        grant = self._grants(block.grant[begin:end])
        if not all(self.pieces[name].clean for name in ("grant", "grant2") if name in self.pieces):
            slow = rows_of(self.tables, _slice(block, begin, end))
            return "".join(self.line(r.as_dict()) for r in slow).encode()
        disabled = t.identity_disabled[identity].astype(np.int64)
        index = {
            "status": errors,
            "identity": identity,
            "service": service,
            "irc": t.identity_router_counts[identity],
            "src": t.service_router_counts[service],
            "common": block.common[begin:end],
            "online": block.online[begin:end]
            if block.online is not None
            else np.zeros(end - begin, np.int64),
            "grant": grant,
            "grant2": grant,
            "errors": errors,
            "tail": errors * 2 + disabled if self.format == "csv" else disabled,
        }
        order = [name for name in self.fields if self.pieces[name].width]
        layout = np.dtype([(name, f"V{self.pieces[name].width}") for name in order])
        rows = np.empty(end - begin, dtype=layout)
        for name in order:
            rows[name] = self.pieces[name].array[index[name]]
        flat = rows.view(np.uint8)
        return bytes(flat[flat != 0].tobytes())


def _slice(block: AdviceBlock, begin: int, end: int) -> AdviceBlock:
    return AdviceBlock(*(None if col is None else col[begin:end] for col in _columns(block)))


def render(tables: AdviceTables, blocks: Iterator[AdviceBlock], fmt: str) -> Iterator[bytes]:
    """The header (CSV) and every block's rows as bytes."""
    renderer = Renderer(tables, fmt)
    head = renderer.header()
    if head:
        yield head
    for block in blocks:
        yield renderer.render(block)
