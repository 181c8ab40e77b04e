"""The exact access difference between two policy graphs (docs/analysis.md §3).

Access is two relations: (identity, service, Dial|Bind), granted when some service policy of that
type selects both, and (identity, edge router), granted when some edge router policy selects both
(policy advice's counts; posture and online status are not part of it). :func:`access_diff`
compares a graph ``before`` with a graph ``after`` (a fork of it with changes applied), given what
was touched between them, without enumerating every pair and with bitsets throughout.

**Which pairs can change.** A pair (identity, service) is linked through a policy; the links of a
policy whose definition did not change differ only at entities that were touched. So a changed
pair either involves a touched identity (a *row*), or a touched service, or a service some touched
policy selects before or after (a *column*). For each column the identities granted it before and
after are two bitsets (the union of the member bitsets of the policies selecting it, memoised by
policy set), compared with one XOR, touched identities masked out; for each row, the services
granted to it likewise. Only the differences are turned into ids. The same goes for (identity,
edge router) through edge router policies.

**Slots.** Both graphs number entities by slot, and a fork keeps every slot, so a bitset of one is
a bitset of the other, except at the slots of entities created or deleted between them (touched,
by definition): those are compared by id.

**Without a fork.** A batch that changes only policies (the common what-if, and most guarded
writes) needs no fork of the graph: :func:`compare_changes` reads ``after`` through
:class:`PolicyOverlay`, the graph with the changed policies' member bitsets recomputed from its own
attribute index and everything else read through.

The result names every added and removed pair (sorted), and summarises them per policy (what the
policy's own links gained and lost, and how many of the access changes it accounts for) and per
identity. A diff larger than the caller's ``limit`` is :class:`DiffTooLargeError` before any pair
is listed. With ``listed`` (the API's 10,000), only the start of each list is named and the exact
lengths are counted (``AccessDiff.totals``): the changed identities are found as numpy slot arrays
over all the compared columns at once and sorted by id, and only the identities listed, and those
holding each pair list's first entries, are turned into ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Protocol

import numpy as np

from engine.errors import FieldError
from engine.managers.access import ENTITY_KINDS as ENTITY_NAMES
from engine.managers.access import POLICY_KINDS as POLICY_NAMES
from engine.managers.access import _policy_row, apply_changes
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
)
from engine.policy.bitset import from_ascending, select, slots
from engine.policy.model import POLICY_FIELDS, normalize_type
from engine.policy.selector import Selector, Semantic, normalize_semantic, parse_roles
from engine.ports import Change, Delete, Put

__all__ = [
    "MAX_DIFF_PAIRS",
    "OVERLAY_POLICIES",
    "AccessDiff",
    "Comparison",
    "DiffTooLargeError",
    "GraphReader",
    "IdentityChange",
    "PolicyChange",
    "PolicyOverlay",
    "Touched",
    "access_diff",
    "compare",
    "compare_changes",
    "touched_by",
]

#: The most access pairs (added and removed, both relations) a what-if or an apply lists: a batch
#: changing more is refused (400) before any pair is listed. 2 million pairs take about 4 s.
MAX_DIFF_PAIRS = 2_000_000
#: No cut: more pairs than any list holds.
MAX_LISTED = 1 << 62
#: A batch changing at most this many policies (and no entity) is compared without forking the
#: graph (:class:`PolicyOverlay`); a larger one forks it.
OVERLAY_POLICIES = 64

#: Identities' links are tested one by one against a set of policies (instead of a union of the
#: policies' member bitsets, each as wide as every identity) when they are at most this many per
#: policy.
NARROW = 1
#: What a batch touched: engine kind (entity or policy kind) -> ids.
Touched = dict[str, set[str]]

ServicePair = tuple[str, str, str]
"""(identity id, service id, ``Dial`` or ``Bind``)."""
RouterPair = tuple[str, str]
"""(identity id, edge router id)."""

TYPES = ("Dial", "Bind")


class DiffTooLargeError(FieldError):
    """The batch would change more access pairs than the limit (400, ``cause.field`` ``items``)."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__(
            "items",
            f"the batch would change {count} access pairs, more than the {limit} a what-if lists: "
            "split it into smaller batches",
            count,
        )
        self.count = count
        self.limit = limit


@dataclass
class PolicyChange:
    """One policy whose definition or members changed, and what that did."""

    kind: str
    id: str
    #: ``created``, ``updated``, ``deleted`` (its own definition) or ``members`` (only the
    #: entities it selects changed).
    change: str
    links_added: int = 0
    links_removed: int = 0
    #: Added (removed) access pairs this policy grants after (granted before).
    access_added: int = 0
    access_removed: int = 0


@dataclass
class IdentityChange:
    """What one identity gains and loses."""

    id: str
    dial_added: list[str] = field(default_factory=list)
    dial_removed: list[str] = field(default_factory=list)
    bind_added: list[str] = field(default_factory=list)
    bind_removed: list[str] = field(default_factory=list)
    routers_added: list[str] = field(default_factory=list)
    routers_removed: list[str] = field(default_factory=list)


@dataclass
class AccessDiff:
    """The answer of :func:`access_diff`; lists sorted."""

    services_added: list[ServicePair] = field(default_factory=list)
    services_removed: list[ServicePair] = field(default_factory=list)
    routers_added: list[RouterPair] = field(default_factory=list)
    routers_removed: list[RouterPair] = field(default_factory=list)
    policies: list[PolicyChange] = field(default_factory=list)
    identities: list[IdentityChange] = field(default_factory=list)
    #: When the lists were cut (:meth:`Comparison.diff` with ``listed``): the exact length of each
    #: whole list, by attribute name (``services_added`` ... ``identities``); empty when whole.
    totals: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (
            self.services_added or self.services_removed or self.routers_added or self.routers_removed
        )

    def total(self, name: str) -> int:
        """The exact length of list ``name`` (``services_added``, ... ``identities``), cut or not."""
        found = self.totals.get(name)
        return len(getattr(self, name)) if found is None else found


def touched_by(changes: Iterable[Change]) -> Touched:
    """The engine kinds and ids a batch of store changes touches (other kinds are left out)."""
    out: Touched = {}
    for change in changes:
        name = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
        entity_id = change.entity.id if isinstance(change, Put) else change.id
        assert isinstance(change, Put | Delete)
        kind = ENTITY_NAMES.get(name, POLICY_NAMES.get(name, (None, None)))[0]
        if kind is not None:
            out.setdefault(kind, set()).add(entity_id)
    return out


# -- reading a graph as bitsets -------------------------------------------------------------------


class Reader(Protocol):
    """The bitset reads a comparison makes of one side (a graph, or a graph with an overlay)."""

    def slot(self, kind: str, entity_id: str) -> int | None: ...
    def ids(self, kind: str) -> Sequence[str | None]: ...
    def everything(self, kind: str) -> int: ...
    def has_policy(self, kind: str, policy_id: str) -> bool: ...
    def policy_slot(self, kind: str, policy_id: str) -> int | None: ...
    def policy_type(self, kind: str, policy_id: str) -> str | None: ...
    def policy_ids(self, kind: str, policies: int) -> list[str]: ...
    def members(self, kind: str, policy_id: str, entity_kind: str) -> int: ...
    def links(self, kind: str, entity_kind: str, entity_id: str, policy_type: str | None = None) -> int: ...
    def union(self, kind: str, entity_kind: str, policies: int) -> int: ...
    def selecting(self, kind: str, entity_kind: str, entities: int) -> int: ...
    def selector_bits(self, entity_kind: str, selector: Selector, semantic: Semantic) -> int: ...


class GraphReader:
    """:class:`Reader` of a :class:`PolicyGraph` (through its public bitset reads), with the
    unions memoised: many services share the set of policies selecting them."""

    def __init__(self, graph: PolicyGraph) -> None:
        self.graph = graph
        self._unions: dict[tuple[str, str, int], int] = {}

    def slot(self, kind: str, entity_id: str) -> int | None:
        return self.graph.entity_slot(kind, entity_id)  # type: ignore[arg-type]

    def ids(self, kind: str) -> Sequence[str | None]:
        return self.graph.entity_slot_ids(kind)  # type: ignore[arg-type]

    def everything(self, kind: str) -> int:
        return self.graph.entity_bits(kind)  # type: ignore[arg-type]

    def has_policy(self, kind: str, policy_id: str) -> bool:
        return self.graph.has_policy(kind, policy_id)  # type: ignore[arg-type]

    def policy_slot(self, kind: str, policy_id: str) -> int | None:
        return self.graph.policy_slot(kind, policy_id)  # type: ignore[arg-type]

    def policy_type(self, kind: str, policy_id: str) -> str | None:
        if not self.graph.has_policy(kind, policy_id):  # type: ignore[arg-type]
            return None
        return self.graph.policy(kind, policy_id).type  # type: ignore[arg-type]

    def policy_ids(self, kind: str, policies: int) -> list[str]:
        return [str(i) for i in select(policies, self.graph.policy_slot_ids(kind))]  # type: ignore[arg-type]

    def members(self, kind: str, policy_id: str, entity_kind: str) -> int:
        return self.graph.policy_member_bits(kind, policy_id, entity_kind)  # type: ignore[arg-type]

    def links(self, kind: str, entity_kind: str, entity_id: str, policy_type: str | None = None) -> int:
        return self.graph.entity_policy_bits(kind, entity_kind, entity_id, policy_type)  # type: ignore[arg-type]

    def union(self, kind: str, entity_kind: str, policies: int) -> int:
        if not policies:
            return 0
        key = (kind, entity_kind, policies)
        found = self._unions.get(key)
        if found is None:
            found = self._unions[key] = self.graph.member_union_bits(kind, entity_kind, policies)  # type: ignore[arg-type]
        return found

    def type_bits(self, policy_type: str) -> int:
        return self.graph.type_bits(policy_type)

    def selecting(self, kind: str, entity_kind: str, entities: int) -> int:
        return self.graph.policy_bits_selecting(kind, entity_kind, entities)  # type: ignore[arg-type]

    def selector_bits(self, entity_kind: str, selector: Selector, semantic: Semantic) -> int:
        return self.graph.selector_bits(entity_kind, selector, semantic)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Definition:
    """A changed policy as the overlay holds it: its slot, type and member bitsets (None when
    deleted)."""

    slot: int
    type: str | None
    members: dict[str, int] | None


class PolicyOverlay(GraphReader):
    """A graph with some policies created, changed or deleted, read without forking it.

    Entities are the graph's; a changed policy keeps its slot (a created one gets a slot past the
    graph's), its member bitsets are recomputed from the graph's attribute index exactly as the
    graph would (:meth:`PolicyGraph.selector_bits`), and every read mixes the unchanged policies'
    answers (the graph's) with the changed ones'. Valid only while the graph does not change.
    """

    def __init__(self, graph: PolicyGraph, changes: Sequence[Change]) -> None:
        super().__init__(graph)
        self.changed: dict[str, dict[str, _Definition]] = {}
        #: per policy kind: the slots of changed policies (created, changed or deleted)
        self.mask: dict[str, int] = {}
        self._ids: dict[str, list[str | None]] = {}
        deleted = {
            (POLICY_NAMES[c.kind.ENTITY][0], c.id)
            for c in changes
            if isinstance(c, Delete) and c.kind.ENTITY in POLICY_NAMES
        }
        puts: dict[tuple[str, str], Any] = {}
        for change in changes:
            if isinstance(change, Put) and change.entity.ENTITY in POLICY_NAMES:
                puts[POLICY_NAMES[change.entity.ENTITY][0], change.entity.id] = change.entity
        for key in sorted(deleted | set(puts)):
            kind, policy_id = key
            ids = self._ids.get(kind)
            if ids is None:
                ids = self._ids[kind] = list(graph.policy_slot_ids(kind))  # type: ignore[arg-type]
            slot = graph.policy_slot(kind, policy_id)  # type: ignore[arg-type]
            if key in deleted:  # apply_changes deletes after it puts
                if slot is None:
                    continue
                definition = _Definition(slot, None, None)
                ids[slot] = None
            else:
                if slot is None:
                    slot = len(ids)
                    ids.append(policy_id)
                row = _policy_row(puts[key])
                semantic = normalize_semantic(row.semantic)
                roles = {
                    IDENTITY: row.identity_roles,
                    SERVICE: row.service_roles,
                    EDGE_ROUTER: row.edge_router_roles,
                    POSTURE_CHECK: row.posture_check_roles,
                }
                members: dict[str, int] = {
                    entity_kind: graph.selector_bits(entity_kind, parse_roles(roles[entity_kind]), semantic)
                    for entity_kind in POLICY_FIELDS[kind]  # type: ignore[index]
                }
                policy_type = normalize_type(row.type) if kind == SERVICE_POLICY and row.type else None
                definition = _Definition(slot, policy_type, members)
            self.changed.setdefault(kind, {})[policy_id] = definition
            self.mask[kind] = self.mask.get(kind, 0) | 1 << slot

    @staticmethod
    def suits(changes: Sequence[Change]) -> bool:
        """Whether a batch changes only policies (posture checks aside), few enough."""
        count = 0
        for change in changes:
            name = change.entity.ENTITY if isinstance(change, Put) else change.kind.ENTITY
            if name in POLICY_NAMES:
                count += 1
            elif name in ENTITY_NAMES and ENTITY_NAMES[name][0] != POSTURE_CHECK:
                return False
        return count <= OVERLAY_POLICIES

    def _definition(self, kind: str, policy_id: str) -> _Definition | None:
        return self.changed.get(kind, {}).get(policy_id)

    def has_policy(self, kind: str, policy_id: str) -> bool:
        found = self._definition(kind, policy_id)
        return super().has_policy(kind, policy_id) if found is None else found.members is not None

    def policy_slot(self, kind: str, policy_id: str) -> int | None:
        found = self._definition(kind, policy_id)
        if found is None:
            return super().policy_slot(kind, policy_id)
        return found.slot if found.members is not None else None

    def policy_type(self, kind: str, policy_id: str) -> str | None:
        found = self._definition(kind, policy_id)
        if found is None:
            return super().policy_type(kind, policy_id)
        return found.type if found.members is not None else None

    def policy_ids(self, kind: str, policies: int) -> list[str]:
        ids = self._ids.get(kind)
        if ids is None:
            return super().policy_ids(kind, policies)
        return [str(i) for i in select(policies, ids)]

    def members(self, kind: str, policy_id: str, entity_kind: str) -> int:
        found = self._definition(kind, policy_id)
        if found is None:
            return super().members(kind, policy_id, entity_kind)
        return 0 if found.members is None else found.members[entity_kind]

    def _live(self, kind: str) -> Iterable[_Definition]:
        return (d for d in self.changed.get(kind, {}).values() if d.members is not None)

    def type_bits(self, policy_type: str) -> int:
        bits = self.graph.type_bits(policy_type) & ~self.mask.get(SERVICE_POLICY, 0)
        for definition in self._live(SERVICE_POLICY):
            if definition.type == policy_type:
                bits |= 1 << definition.slot
        return bits

    def links(self, kind: str, entity_kind: str, entity_id: str, policy_type: str | None = None) -> int:
        mask = self.mask.get(kind, 0)
        bits = super().links(kind, entity_kind, entity_id)
        if mask:
            bits &= ~mask
            entity = self.graph.entity_slot(entity_kind, entity_id)  # type: ignore[arg-type]
            if entity is not None:
                for definition in self._live(kind):
                    assert definition.members is not None
                    if (definition.members[entity_kind] >> entity) & 1:
                        bits |= 1 << definition.slot
        return bits & self.type_bits(policy_type) if policy_type is not None else bits

    def union(self, kind: str, entity_kind: str, policies: int) -> int:
        mask = self.mask.get(kind, 0)
        if not policies & mask:
            return super().union(kind, entity_kind, policies)
        bits = super().union(kind, entity_kind, policies & ~mask)
        for definition in self._live(kind):
            if (policies >> definition.slot) & 1:
                assert definition.members is not None
                bits |= definition.members[entity_kind]
        return bits

    def selecting(self, kind: str, entity_kind: str, entities: int) -> int:
        bits = super().selecting(kind, entity_kind, entities) & ~self.mask.get(kind, 0)
        for definition in self._live(kind):
            assert definition.members is not None
            if definition.members[entity_kind] & entities:
                bits |= 1 << definition.slot
        return bits


# -- the comparison -----------------------------------------------------------------------------------


class _Align:
    """One entity kind in two graphs: which slots mean the same entity in both (*clean*), and the
    comparison of two bitsets over them, by id where the slots differ."""

    def __init__(self, before: Reader, after: Reader, kind: str, touched: Iterable[str]) -> None:
        self.ids_b = before.ids(kind)
        self.ids_a = after.ids(kind)
        dirty_b = dirty_a = 0
        for entity_id in touched:
            old, new = before.slot(kind, entity_id), after.slot(kind, entity_id)
            if old == new:
                continue
            if old is not None:
                dirty_b |= 1 << old
            if new is not None:
                dirty_a |= 1 << new
        self.dirty_b = dirty_b
        self.dirty_a = dirty_a
        self.clean = ~(dirty_b | dirty_a)

    def delta(self, old: int, new: int) -> tuple[int, int]:
        """(added, as ``after`` slots; removed, as ``before`` slots) from ``old`` to ``new``."""
        changed = (old ^ new) & self.clean
        added, removed = new & changed, old & changed
        was, now = old & self.dirty_b, new & self.dirty_a
        if was or now:
            before = {self.ids_b[s]: s for s in slots(was)}
            after = {self.ids_a[s]: s for s in slots(now)}
            for entity_id, slot in after.items():
                if entity_id not in before:
                    added |= 1 << slot
            for entity_id, slot in before.items():
                if entity_id not in after:
                    removed |= 1 << slot
        return added, removed

    def common(self, old: int, new: int) -> int:
        """How many entities are in both ``old`` (before slots) and ``new`` (after slots)."""
        count = (old & new & self.clean).bit_count()
        was, now = old & self.dirty_b, new & self.dirty_a
        if was and now:
            count += len(set(select(was, self.ids_b)) & set(select(now, self.ids_a)))
        return count


@dataclass
class _Relation:
    """The changes of one relation (identity -> service of a type, or identity -> router):
    per column (the other entity) the identities added (after slots) and removed (before slots),
    touched identities masked out; per row (a touched identity) the other entities added and
    removed."""

    columns: dict[str, tuple[int, int]] = field(default_factory=dict)
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(a.bit_count() + r.bit_count() for a, r in (*self.columns.values(), *self.rows.values()))


def _slot_arrays(bitsets: Sequence[int]) -> tuple[Any, Any]:
    """The set bits of each of ``bitsets``, as two aligned numpy arrays: the slots, ascending
    within each bitset, and the index of the bitset each came from. One pass of C loops over the
    bitsets laid side by side: the bytes that are not zero are found, then only those unpacked."""
    width = max((bits.bit_length() for bits in bitsets), default=0)
    if not width:
        return _NONE, _NONE
    size = (width + 7) >> 3
    data = np.frombuffer(b"".join(bits.to_bytes(size, "little") for bits in bitsets), dtype=np.uint8)
    nonzero = np.flatnonzero(data)
    found = np.flatnonzero(np.unpackbits(data[nonzero], bitorder="little"))
    owners, places = np.divmod(nonzero[found >> 3], size)
    return places * 8 + (found & 7), owners


_NONE = np.zeros(0, dtype=np.int64)


@dataclass
class _Listing:
    """One list of a diff (e.g. Dial added) before ids are listed: per column its identities as
    slot arrays (``slots`` and, aligned, the index of the column in ``columns``), and per row (a
    touched identity) the other entities' ids, sorted."""

    columns: list[str]
    slots: Any
    column_of: Any
    ids: Sequence[str | None]
    rows: dict[str, list[str]]
    size: int = 0
    _unique: Any = None
    _unique_ids: list[str] = field(default_factory=list)
    _ranks: Any = None

    @classmethod
    def of(
        cls,
        relation: _Relation,
        columns: list[str],
        index: int,
        ids: Sequence[str | None],
        other_ids: Sequence[str | None],
    ) -> _Listing:
        slots_, column_of = _slot_arrays([relation.columns[column][index] for column in columns])
        rows = {
            row: sorted(str(i) for i in select(pair[index], other_ids))
            for row, pair in relation.rows.items()
            if pair[index]
        }
        size = len(slots_) + sum(len(r) for r in rows.values())
        return cls(columns, slots_, column_of, ids, rows, size)

    def identities(self) -> list[str]:
        """The identities with an entry in this list (ids)."""
        self._unique = np.flatnonzero(np.bincount(self.slots)) if len(self.slots) else _NONE
        ids = self.ids
        self._unique_ids = [str(ids[s]) for s in self._unique.tolist()]
        return [*self._unique_ids, *self.rows]

    def ranks(self, rank: dict[str, int]) -> Any:
        """Per entry of the columns, its identity's rank (``rank``: id -> position among every
        identity changed)."""
        if self._ranks is None:
            of_unique = np.fromiter(
                (rank[i] for i in self._unique_ids), dtype=np.int64, count=len(self._unique_ids)
            )
            self._ranks = of_unique[np.searchsorted(self._unique, self.slots)]
        return self._ranks

    def counts(self, rank: dict[str, int], total: int) -> Any:
        """Per identity rank, how many entries it has in this list."""
        out = np.bincount(self.ranks(rank), minlength=total)
        for row, entries in self.rows.items():
            out[rank[row]] += len(entries)
        return out

    def lists(self, rank: dict[str, int], shown: int) -> dict[int, list[str]]:
        """Per identity rank below ``shown``, its entries in this list, sorted."""
        out: dict[int, list[str]] = {}
        if len(self.slots):
            ranks = self.ranks(rank)
            keep = ranks < shown
            ranks, owners = ranks[keep], self.column_of[keep]
            order = np.lexsort((owners, ranks))
            ranks, owners = ranks[order], owners[order]
            names = np.asarray(self.columns, dtype=object)[owners].tolist()
            if len(ranks):
                starts = np.flatnonzero(np.diff(ranks)) + 1
                bounds = [0, *starts.tolist(), len(ranks)]
                firsts = ranks[[0, *starts.tolist()]].tolist()
                for n, who in enumerate(firsts):
                    out[who] = names[bounds[n] : bounds[n + 1]]
        for row, entries in self.rows.items():
            who = rank[row]
            if who < shown:
                out[who] = entries
        return out


class Comparison:
    """Two graphs (as :class:`Reader` s) and what was touched between them; the access relations'
    changes computed once (:meth:`relation`), then listed (:meth:`diff`) or reused (guardrails)."""

    def __init__(self, before: Reader, after: Reader, touched: Touched) -> None:
        self.before = before
        self.after = after
        self.touched = touched
        self.align = {
            kind: _Align(before, after, kind, touched.get(kind, ()))
            for kind in (IDENTITY, SERVICE, EDGE_ROUTER)
        }
        #: Touched identities: their slots in either graph (excluded from columns).
        self.row_ids = sorted(touched.get(IDENTITY, ()))
        self.row_mask = ~self.slot_bits(self.row_ids)
        self._relations: dict[str | None, _Relation] = {}
        #: (policy kind, identity slots) -> the slots and each one's policy links in ``before``
        self._linked: dict[tuple[str, int], tuple[list[int], list[int]]] = {}

    def policy_slots(self, kind: str) -> int:
        """The slots, in either graph, of the touched policies of ``kind``."""
        bits = 0
        for policy_id in self.touched.get(kind, ()):
            for reader in (self.before, self.after):
                slot = reader.policy_slot(kind, policy_id)
                if slot is not None:
                    bits |= 1 << slot
        return bits

    def slot_bits(self, identity_ids: Iterable[str]) -> int:
        bits = 0
        for identity_id in identity_ids:
            for reader in (self.before, self.after):
                slot = reader.slot(IDENTITY, identity_id)
                if slot is not None:
                    bits |= 1 << slot
        return bits

    # -- grants -----------------------------------------------------------------------------------
    @staticmethod
    def granted_identities(reader: Reader, other: str, other_id: str, policy_type: str | None) -> int:
        """The identities granted ``other_id`` (a service of ``policy_type``, or a router) in
        ``reader``, as its slots (0 when it does not exist)."""
        kind = SERVICE_POLICY if other == SERVICE else EDGE_ROUTER_POLICY
        return reader.union(kind, IDENTITY, reader.links(kind, other, other_id, policy_type))

    @staticmethod
    def granted_to(reader: Reader, identity_id: str, other: str, policy_type: str | None) -> int:
        """The services (of ``policy_type``) or routers granted to an identity in ``reader``."""
        kind = SERVICE_POLICY if other == SERVICE else EDGE_ROUTER_POLICY
        return reader.union(kind, other, reader.links(kind, IDENTITY, identity_id, policy_type))

    # -- the relations ----------------------------------------------------------------------------
    def columns(self, policy_type: str | None) -> set[str]:
        """The services (of a type) or routers (``None``) whose identities may have changed
        outside the touched ones: the touched ones, and the members of the touched policies."""
        other, kind = (SERVICE, SERVICE_POLICY) if policy_type else (EDGE_ROUTER, EDGE_ROUTER_POLICY)
        out = set(self.touched.get(other, ()))
        for policy_id in self.touched.get(kind, ()):
            for reader in (self.before, self.after):
                if reader.has_policy(kind, policy_id) and (
                    policy_type is None or reader.policy_type(kind, policy_id) == policy_type
                ):
                    out.update(
                        str(i) for i in select(reader.members(kind, policy_id, other), reader.ids(other))
                    )
        return out

    def relation(self, policy_type: str | None) -> _Relation:
        """The changes of identity -> service of ``policy_type`` (identity -> router: None)."""
        known = self._relations.get(policy_type)
        if known is not None:
            return known
        other, kind = (SERVICE, SERVICE_POLICY) if policy_type else (EDGE_ROUTER, EDGE_ROUTER_POLICY)
        before, after = self.before, self.after
        out = _Relation()
        mask = self.row_mask
        # A policy not touched has the same slot and, but at touched identities (masked out),
        # the same identities in both graphs: the union of those selecting a column is computed
        # once, and only the touched ones' members are added on each side.
        touched = self.policy_slots(kind)
        moving: list[tuple[str, int, int, int, int]] = []
        everywhere = -1
        for column in self.columns(policy_type):
            was = before.links(kind, other, column, policy_type)
            now = after.links(kind, other, column, policy_type)
            common = was & now & ~touched
            if was == common and now == common:
                continue
            # old = shared | gone, new = shared | came: what changed is gone ^ came outside
            # shared, so shared (the union of many wide bitsets) is read only where they differ
            gone = before.union(kind, IDENTITY, was & ~common)
            came = after.union(kind, IDENTITY, now & ~common)
            moved = (gone ^ came) & mask
            if moved:
                moving.append((column, common, gone, came, moved))
                everywhere &= common
        # the policies granting every such column (broad ones) are united once, not per column
        base = (
            (everywhere, before.union(kind, IDENTITY, everywhere)) if len(moving) > 1 and everywhere else None
        )
        for column, common, gone, came, moved in moving:
            changed = moved & ~self.shared(kind, common, moved, base)
            if changed:
                out.columns[column] = (came & changed, gone & changed)
        align = self.align[other]
        for row in self.row_ids:
            old = self.granted_to(self.before, row, other, policy_type)
            new = self.granted_to(self.after, row, other, policy_type)
            if old != new:
                added, removed = align.delta(old, new)
                if added or removed:
                    out.rows[row] = (added, removed)
        self._relations[policy_type] = out
        return out

    def shared(self, kind: str, policies: int, among: int, base: tuple[int, int] | None = None) -> int:
        """The identities of ``among`` (slots) that untouched ``policies`` select in ``before``:
        the identities' links (read once per comparison: the columns of one edited policy share
        them) against the policies when they are few enough, else the union of the policies'
        member bitsets, each as wide as every identity (``base``: some of the policies and their
        union, known already)."""
        if not policies:
            return 0
        if among.bit_count() > policies.bit_count() * NARROW:
            if base is not None:
                return (base[1] | self.before.union(kind, IDENTITY, policies & ~base[0])) & among
            return self.before.union(kind, IDENTITY, policies) & among
        found = self._linked.get((kind, among))
        if found is None:
            ids = self.before.ids(IDENTITY)
            links = self.before.links
            at = slots(among)
            found = self._linked[kind, among] = (at, [links(kind, IDENTITY, str(ids[s])) for s in at])
        return from_ascending([s for s, linked in zip(*found, strict=True) if linked & policies])

    def count(self) -> int:
        """How many pairs change, both relations, without listing them."""
        return sum(self.relation(t).count() for t in (*TYPES, None))

    # -- the listing ----------------------------------------------------------------------------
    def diff(self, limit: int | None = None, listed: int | None = None) -> AccessDiff:
        """The :class:`AccessDiff` (:class:`DiffTooLargeError` past ``limit`` pairs).

        With ``listed``, each pair list holds only its first ``listed`` pairs and ``identities``
        its first ``listed`` identities (each with every list whole), in the same order as the
        whole answer; ``totals`` gives the exact lengths. Only the identities listed are turned
        into ids then: the rest is counted as bitsets (docs/analysis.md §3).
        """
        if limit is not None:
            count = self.count()
            if count > limit:
                raise DiffTooLargeError(count, limit)
        if listed is not None and listed < 1:
            raise ValueError("listed must be at least 1")
        ids_b, ids_a = self.before.ids(IDENTITY), self.after.ids(IDENTITY)
        # dial added, dial removed, bind added, bind removed, routers added, routers removed
        listings: list[_Listing] = []
        for policy_type in (*TYPES, None):
            other = SERVICE if policy_type else EDGE_ROUTER
            relation = self.relation(policy_type)
            columns = sorted(relation.columns)
            for index, ids, other_ids in (
                (0, ids_a, self.after.ids(other)),
                (1, ids_b, self.before.ids(other)),
            ):
                listings.append(_Listing.of(relation, columns, index, ids, other_ids))
        # every identity with a change, sorted: columns hold untouched identities (same slot and
        # id in both graphs), rows the touched ones (masked out of every column)
        everyone = sorted(set().union(*(listing.identities() for listing in listings)))
        rank = {identity_id: n for n, identity_id in enumerate(everyone)}
        total = len(everyone)
        shown = total if listed is None else min(listed, total)
        # per list, the identities (ranks) whose entries are listed: the identities shown, and
        # those holding the first ``listed`` pairs of the pair list it goes into
        reach = [shown] * len(listings)
        for group in ((0, 2), (1, 3), (4,), (5,)):
            if listed is None:
                needed = total
            else:
                counts = sum(listings[i].counts(rank, total) for i in group)
                needed = min(total, int(np.searchsorted(np.cumsum(counts), listed)) + 1)
            for i in group:
                reach[i] = max(shown, needed)
        by = [listing.lists(rank, limit) for listing, limit in zip(listings, reach, strict=True)]
        dial_added, dial_removed, bind_added, bind_removed, routers_added, routers_removed = by
        diff = AccessDiff()
        cut = MAX_LISTED if listed is None else listed
        for n in range(shown):
            diff.identities.append(
                IdentityChange(
                    everyone[n],
                    dial_added.get(n) or [],
                    dial_removed.get(n) or [],
                    bind_added.get(n) or [],
                    bind_removed.get(n) or [],
                    routers_added.get(n) or [],
                    routers_removed.get(n) or [],
                )
            )
        for target, dial_by, bind_by in (
            (diff.services_added, dial_added, bind_added),
            (diff.services_removed, dial_removed, bind_removed),
        ):
            for n in sorted(dial_by.keys() | bind_by.keys()):
                if len(target) >= cut:
                    break
                identity_id = everyone[n]
                dial, bind = dial_by.get(n), bind_by.get(n)
                if dial and bind:
                    target.extend(
                        (identity_id, s, t)
                        for s, t in sorted([*((s, "Dial") for s in dial), *((s, "Bind") for s in bind)])
                    )
                elif dial:
                    target.extend(zip(repeat(identity_id), dial, repeat("Dial")))
                elif bind:
                    target.extend(zip(repeat(identity_id), bind, repeat("Bind")))
            del target[cut:]
        for reached, routers_by in (
            (diff.routers_added, routers_added),
            (diff.routers_removed, routers_removed),
        ):
            for n in sorted(routers_by):
                if len(reached) >= cut:
                    break
                reached.extend(zip(repeat(everyone[n]), routers_by[n]))
            del reached[cut:]
        if listed is not None:
            diff.totals = {
                "services_added": listings[0].size + listings[2].size,
                "services_removed": listings[1].size + listings[3].size,
                "routers_added": listings[4].size,
                "routers_removed": listings[5].size,
                "identities": len(everyone),
            }
        diff.policies = self._policies()
        return diff

    # -- per policy -------------------------------------------------------------------------------
    def changed_policies(self, kind: str) -> set[str]:
        """The policies of ``kind`` touched, or selecting a touched entity in either graph."""
        out = set(self.touched.get(kind, ()))
        for entity_kind in POLICY_FIELDS[kind]:  # type: ignore[index]
            if entity_kind == POSTURE_CHECK:
                continue
            for entity_id in self.touched.get(entity_kind, ()):
                for reader in (self.before, self.after):
                    out.update(reader.policy_ids(kind, reader.links(kind, entity_kind, entity_id)))
        return out

    def _status(self, kind: str, policy_id: str) -> str:
        if not self.before.has_policy(kind, policy_id):
            return "created"
        if not self.after.has_policy(kind, policy_id):
            return "deleted"
        return "updated" if policy_id in self.touched.get(kind, ()) else "members"

    def _links(self, kind: str, policy_id: str) -> tuple[int, int, dict[str, tuple[int, int]]]:
        """(links added, links removed, per side (before, after) members) of one policy."""
        sides: list[str] = [k for k in POLICY_FIELDS[kind] if k != POSTURE_CHECK]  # type: ignore[index]
        members: dict[str, tuple[int, int]] = {
            k: (self.before.members(kind, policy_id, k), self.after.members(kind, policy_id, k))
            for k in sides
        }
        old = new = common = 1
        for k, (was, now) in members.items():
            old *= was.bit_count()
            new *= now.bit_count()
            common *= self.align[k].common(was, now)
        return new - common, old - common, members

    def _access(
        self, relation: _Relation, members: tuple[int, int], other: str, reader: Reader, added: bool
    ) -> int:
        """How many of ``relation``'s added (removed) pairs a policy with ``members``
        (identities, others; in ``reader``'s slots) links."""
        identities, others = members
        index = 0 if added else 1
        count = 0
        for column, pair in relation.columns.items():
            slot = reader.slot(other, column)
            if slot is not None and (others >> slot) & 1:
                count += (pair[index] & identities).bit_count()
        for row, pair in relation.rows.items():
            slot = reader.slot(IDENTITY, row)
            if slot is not None and (identities >> slot) & 1:
                count += (pair[index] & others).bit_count()
        return count

    def _policies(self) -> list[PolicyChange]:
        out: list[PolicyChange] = []
        for kind in (SERVICE_POLICY, EDGE_ROUTER_POLICY, SERVICE_EDGE_ROUTER_POLICY):
            for policy_id in sorted(self.changed_policies(kind)):
                status = self._status(kind, policy_id)
                links_added, links_removed, members = self._links(kind, policy_id)
                old_type = self.before.policy_type(kind, policy_id)
                new_type = self.after.policy_type(kind, policy_id)
                retyped = kind == SERVICE_POLICY and status == "members" and old_type != new_type
                if status == "members" and not links_added and not links_removed and not retyped:
                    continue
                change = PolicyChange(kind, policy_id, status, links_added, links_removed)
                if kind in (SERVICE_POLICY, EDGE_ROUTER_POLICY):
                    other = SERVICE if kind == SERVICE_POLICY else EDGE_ROUTER
                    if self.after.has_policy(kind, policy_id):
                        relation = self.relation(new_type if kind == SERVICE_POLICY else None)
                        after = (members[IDENTITY][1], members[other][1])
                        change.access_added = self._access(relation, after, other, self.after, True)
                    if self.before.has_policy(kind, policy_id):
                        relation = self.relation(old_type if kind == SERVICE_POLICY else None)
                        before = (members[IDENTITY][0], members[other][0])
                        change.access_removed = self._access(relation, before, other, self.before, False)
                out.append(change)
        return out


# -- entry points ---------------------------------------------------------------------------------


def compare(before: PolicyGraph, after: PolicyGraph, touched: Touched) -> Comparison:
    """The comparison of two graphs, ``after`` a fork of ``before`` with ``touched`` changed."""
    return Comparison(GraphReader(before), GraphReader(after), touched)


def compare_changes(graph: PolicyGraph, changes: Sequence[Change]) -> Comparison:
    """The comparison of ``graph`` with ``graph`` after ``changes`` (store changes, as a commit
    would apply them): through a :class:`PolicyOverlay` when they change only a few policies,
    else on a fork. ``graph`` is not changed; use the answer while it does not change either."""
    touched = touched_by(changes)
    if PolicyOverlay.suits(changes):
        return Comparison(GraphReader(graph), PolicyOverlay(graph, changes), touched)
    after = graph.copy()
    apply_changes(after, changes)
    return compare(graph, after, touched)


def access_diff(
    before: PolicyGraph, after: PolicyGraph, touched: Touched, limit: int | None = None
) -> AccessDiff:
    """Every (identity, service, type) and (identity, router) pair granted in one graph and not
    the other, given what was ``touched`` between them (:func:`touched_by`);
    :class:`DiffTooLargeError` when more than ``limit`` pairs change."""
    return compare(before, after, touched).diff(limit)
