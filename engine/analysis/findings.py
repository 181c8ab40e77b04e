"""Findings: what is wrong or suspicious in the policy, with a lifecycle (docs/analysis.md §6).

:func:`evaluate` computes every finding of a policy graph on its bitsets:

================================  =================================================================
``dangling-role``                 a policy's ``#attr`` that no entity of that side's kind carries
``empty-policy``                  a policy one of whose sides (identities, services, routers)
                                  selects nothing
``redundant-policy``              another policy of the same kind (and type) grants a superset of
                                  its pairs, with no more posture checks (of two equal ones, the
                                  one with the greater id is named)
``service-without-router-policy`` no service edge router policy selects the service
``identity-without-router-policy`` no edge router policy selects the identity
``no-common-router``              identities a service policy lets use the service share no edge
                                  router with it (per service)
``no-online-common-router``       they share routers, none online (per service)
``posture-blocks-all``            a service policy's posture checks fail for every identity it
                                  grants (on their current posture data)
``unused-grant``                  no Dial/Bind session was created through a service policy for
                                  N days (it is older than that)
================================  =================================================================

Each finding has a stable id (a hash of its kind and subject). :class:`FindingsManager` keeps
their lifecycle: a finding is ``ACTIVE`` while it is found, ``ARCHIVED`` when found but archived
(by an administrator or an archive rule: rules apply to findings already there and to later
ones), ``RESOLVED`` once it is no longer found. The first-seen time, resolution and an
administrator's status are stored (:class:`~engine.entities.findings.FindingRecord`), as are the
rules. Findings are evaluated again after every access-relevant write (debounced: within a
fraction of a second, and at once when read after one), when routers come and go, and when
posture data changes, while someone follows them: a process re-evaluates in the background
only for :attr:`FindingsManager.INTEREST_SECONDS` after it last answered a read of findings
(at tier L an evaluation takes seconds of CPU, which a controller nobody asks about findings
should not spend on every write); otherwise the next read evaluates first.

**Session history.** Trellis keeps no history of session creation: a Dial/Bind session is
deleted with its API session, and the change log is trimmed. So the manager records, per service
policy, when a session it granted was last created (from the sessions it sees committed, and
those in the store at start), and keeps that in a store setting (``analysis.grant-usage``),
written at most once a minute.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from engine.analysis.advise import Bits
from engine.entities.findings import ACTIVE, ARCHIVED, RESOLVED, FindingArchiveRule, FindingRecord
from engine.entities.identities import ApiSession, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.services import Service
from engine.entities.sessions import Session
from engine.errors import ControllerError, FieldError, NotFoundError
from engine.managers._base import EntityManager
from engine.managers.access import ENTITY_KINDS, POLICY_KINDS
from engine.managers.posture import PostureData
from engine.policy import (
    EDGE_ROUTER,
    EDGE_ROUTER_POLICY,
    IDENTITY,
    POLICY_FIELDS,
    POSTURE_CHECK,
    SERVICE,
    SERVICE_EDGE_ROUTER_POLICY,
    SERVICE_POLICY,
    PolicyGraph,
    PolicyKind,
)
from engine.policy.bitset import select, slots
from engine.ports import Change, Delete, Put, UnitOfWork
from engine.query import Symbol, SymbolTable, SymbolType, compile_query

if TYPE_CHECKING:
    from engine.analysis.manager import AnalysisManager

__all__ = [
    "FINDING_KINDS",
    "FINDING_SYMBOLS",
    "Finding",
    "FindingArchiveRuleManager",
    "FindingView",
    "FindingsManager",
    "evaluate",
    "finding_id",
]

log = logging.getLogger("trellis.analysis.findings")

#: kind -> severity.
FINDING_KINDS = {
    "dangling-role": "LOW",
    "empty-policy": "MEDIUM",
    "redundant-policy": "LOW",
    "service-without-router-policy": "HIGH",
    "identity-without-router-policy": "MEDIUM",
    "no-common-router": "HIGH",
    "no-online-common-router": "HIGH",
    "posture-blocks-all": "HIGH",
    "unused-grant": "LOW",
}
#: The management API's paths of the kinds findings are about.
PATHS = {
    SERVICE_POLICY: "service-policies",
    EDGE_ROUTER_POLICY: "edge-router-policies",
    SERVICE_EDGE_ROUTER_POLICY: "service-edge-router-policies",
    IDENTITY: "identities",
    SERVICE: "services",
    EDGE_ROUTER: "edge-routers",
    POSTURE_CHECK: "posture-checks",
}
#: How many subjects a finding's details name at most (the counts are exact).
DETAIL_LIMIT = 20
UNUSED_DAYS = 30
USAGE_SETTING = "analysis.grant-usage"
USAGE_PERSIST_SECONDS = 60.0
#: Kinds whose changes can change findings.
RELEVANT = frozenset({*ENTITY_KINDS, *POLICY_KINDS})
#: Kinds whose names the per-service findings' messages carry.
NAMED = frozenset({Identity.ENTITY, Service.ENTITY})

Names = Callable[[str, str], str]


def finding_id(kind: str, subject_type: str, subject_id: str, part: str = "") -> str:
    """The stable id of a finding: a hash of its kind and subject (and the part of the subject,
    e.g. the dangling attribute)."""
    digest = hashlib.sha256(f"{kind}\0{subject_type}\0{subject_id}\0{part}".encode()).hexdigest()
    return "f" + digest[:23]


@dataclass(frozen=True)
class Finding:
    """One finding, as evaluated now."""

    id: str
    kind: str
    subject_type: str
    subject_id: str
    message: str
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return FINDING_KINDS[self.kind]


def _make(kind: str, subject: str, subject_id: str, message: str, part: str = "", **details: Any) -> Finding:
    return Finding(
        finding_id(kind, PATHS[subject], subject_id, part), kind, PATHS[subject], subject_id, message, details
    )


def _ids(kind: str, entity_id: str) -> str:
    return entity_id


class ServiceMemo:
    """What the last evaluation found per service (its common-router findings) and what those
    rested on, so that the next evaluation takes them again for every service whose inputs did
    not change: its granting policies, their identity sides, the edge router policies reaching
    its (online) routers and theirs. Bitsets are immutable ints that a graph's forks share, so an
    unchanged member set is the same object: a changed one is found by identity, never missed.

    Names are not tracked: a process must :meth:`clear` the memo when an identity or a service
    changes (a rename changes a finding's message)."""

    __slots__ = (
        "erp_all",
        "erp_members",
        "grants",
        "identities",
        "lows",
        "online",
        "routed",
        "services",
        "sp_all",
        "sp_members",
    )

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.services: dict[str, tuple[int, int, int, tuple[Finding, ...]]] = {}
        self.sp_members: list[int] = []
        self.erp_members: list[int] = []
        self.sp_all = self.erp_all = self.routed = self.identities = -1
        self.online: bool | None = None
        self.grants: tuple[int, int] = (-1, -1)
        # the lowest set bit of policies' member bitsets, by the bitset's id (with the bitset,
        # which keeps the id from being reused)
        self.lows: dict[int, tuple[int, int]] = {}

    @staticmethod
    def changed_slots(now: list[int], before: list[int]) -> int:
        """Slots whose bitset object differs (or is new)."""
        changed = 0
        for slot, (a, b) in enumerate(zip(now, before, strict=False)):
            if a is not b:
                changed |= 1 << slot
        for slot in range(len(before), len(now)):
            changed |= 1 << slot
        return changed


def evaluate(
    graph: PolicyGraph,
    *,
    names: Names = _ids,
    online: Callable[[str], bool] | None = None,
    posture: Callable[[str, Sequence[str]], Mapping[str, bool]] | None = None,
    posture_plain: Callable[[Sequence[str]], Mapping[str, bool]] | None = None,
    posture_known: set[str] | None = None,
    last_used: Mapping[str, datetime] | None = None,
    created_at: Mapping[str, datetime] | None = None,
    now: datetime | None = None,
    unused_days: int = UNUSED_DAYS,
    memo: ServiceMemo | None = None,
) -> list[Finding]:
    """Every finding of the graph (see the module docstring), sorted by id.

    ``online`` None: online status not known (no ``no-online-common-router``); ``posture`` None:
    posture data not known (no ``posture-blocks-all``); ``posture_plain`` and ``posture_known``
    (both or neither): the verdicts for an identity with no posture data and no API session, and
    the identities that have either (every other one gets the plain verdicts, asked once per set
    of checks, not once per identity); ``last_used`` / ``created_at`` / ``now``
    None: no ``unused-grant``; ``memo``: the per-service findings of the last evaluation with it,
    taken again where nothing they rest on changed (and updated).
    """
    bits = Bits(graph)
    out: list[Finding] = []
    tables = {IDENTITY: bits.identities, SERVICE: bits.services, EDGE_ROUTER: bits.routers}
    tables[POSTURE_CHECK] = bits.sp_posture.table

    def members(kind: str, slot: int, entity_kind: str) -> int:
        return int(bits.sides[kind, entity_kind].member_bits(slot))

    live_policies: dict[PolicyKind, list[tuple[int, str]]] = {}
    for policy_kind in POLICY_FIELDS:
        table = bits.policy_tables[policy_kind]
        live_policies[policy_kind] = [(slot, pid) for slot, pid in enumerate(table.ids) if pid is not None]

    # dangling roles and empty policies
    for kind, policies in live_policies.items():
        records = bits.policy_tables[kind].records
        for slot, policy_id in policies:
            record = records[slot]
            empty: list[str] = []
            for entity_kind in POLICY_FIELDS[kind]:
                attributes = tables[entity_kind].attribute_bits
                for role in set(record.roles.get(entity_kind, ())):
                    if role.startswith("#") and role != "#all" and not attributes.get(role[1:], 0):
                        out.append(
                            _make(
                                "dangling-role",
                                kind,
                                policy_id,
                                f"{_label(kind)} {names(kind, policy_id)} names {role}, which no "
                                f"{_noun(entity_kind)} carries",
                                part=f"{entity_kind}:{role}",
                                role=role,
                                entityType=PATHS[entity_kind],
                            )
                        )
                if entity_kind != POSTURE_CHECK and not members(kind, slot, entity_kind):
                    empty.append(entity_kind)
            if empty:
                sides = " and ".join(f"no {_noun(k)}" for k in empty)
                out.append(
                    _make(
                        "empty-policy",
                        kind,
                        policy_id,
                        f"{_label(kind)} {names(kind, policy_id)} matches nothing: it selects {sides}",
                        emptySides=[PATHS[k] for k in empty],
                    )
                )

    # redundant policies
    lows: dict[int, tuple[int, int]] = {} if memo is None else memo.lows
    seen_lows: dict[int, tuple[int, int]] = {}

    def lowest(chosen: int) -> int:
        """The lowest set bit of a member bitset (of thousands of bits: kept by the bitset's
        identity, which a graph's forks share)."""
        known = lows.get(id(chosen))
        low = known[0] if known is not None and known[1] is chosen else (chosen & -chosen).bit_length() - 1
        seen_lows[id(chosen)] = (low, chosen)
        return low

    for kind, policies in live_policies.items():
        side_a, side_b = (k for k in POLICY_FIELDS[kind] if k != POSTURE_CHECK)
        a_side, b_side = bits.sides[kind, side_a], bits.sides[kind, side_b]
        records = bits.policy_tables[kind].records
        for slot, policy_id in policies:
            a, b = members(kind, slot, side_a), members(kind, slot, side_b)
            if not a or not b:
                continue
            # a superset selects the first and the last member of each side: the policies that
            # select those four (small bitsets) are the only candidates worth comparing whole
            candidates = ~(1 << slot)
            for side, chosen in ((a_side, a), (b_side, b)):
                candidates &= int(side.effective_links(lowest(chosen)))
                candidates &= int(side.effective_links(chosen.bit_length() - 1))
            checks = members(kind, slot, POSTURE_CHECK) if kind == SERVICE_POLICY else 0
            for other in slots(candidates):
                other_id = bits.policy_tables[kind].ids[other]
                if other_id is None:
                    continue
                if kind == SERVICE_POLICY and records[other].type != records[slot].type:
                    continue
                ob = int(b_side.member_bits(other))
                if b & ~ob:
                    continue
                oa = members(kind, other, side_a)
                if a & ~oa:
                    continue
                other_checks = members(kind, other, POSTURE_CHECK) if kind == SERVICE_POLICY else 0
                if other_checks & ~checks:
                    continue
                if oa == a and ob == b and other_checks == checks and other_id > policy_id:
                    continue  # equal: the other one is named
                out.append(
                    _make(
                        "redundant-policy",
                        kind,
                        policy_id,
                        f"{_label(kind)} {names(kind, policy_id)} is redundant: "
                        f"{names(kind, other_id)} grants every pair it grants",
                        supersetPolicyId=other_id,
                    )
                )
                break

    if memo is not None:
        memo.lows = seen_lows

    # entities without router policies
    with_routers = bits.services_with_routers()
    for service_id in select(bits.services.all_bits & ~with_routers, bits.services.ids):
        out.append(
            _make(
                "service-without-router-policy",
                SERVICE,
                service_id,
                f"service {names(SERVICE, service_id)} has no service edge router policy",
            )
        )
    identities_routed = bits.identities_with_routers()
    for identity_id in select(bits.identities.all_bits & ~identities_routed, bits.identities.ids):
        out.append(
            _make(
                "identity-without-router-policy",
                IDENTITY,
                identity_id,
                f"identity {names(IDENTITY, identity_id)} has no edge router policy",
            )
        )

    # granted pairs without a (online) common router, per service
    online_bits = 0
    if online is not None:
        for slot, router_id in enumerate(bits.routers.ids):
            if router_id is not None and online(router_id):
                online_bits |= 1 << slot
    granted_mask = bits.dial | bits.bind
    # Per service: the identities it is granted to that no edge router policy gives one of its
    # routers. Its routers' edge router policies are those of its service edge router policies'
    # routers (each found once); the granted identities are taken away policy by policy, the
    # largest first, until none is left (the common case: every one shares a router).
    granted_of: dict[int, int] = {}
    serp_erps: dict[int, tuple[int, int]] = {}
    router_links = bits.erp_router.effective_links
    serp_routers = bits.serp_router.member_bits
    erp_members = bits.erp_identity.member_bits
    erp_every = bits.erp_identity.all_policies
    erp_sizes: dict[int, int] = {}

    def erps_of(serp: int) -> tuple[int, int]:
        """The edge router policies giving one of ``serp``'s routers, and one of its online ones."""
        known = serp_erps.get(serp)
        if known is None:
            every = live = 0
            for router in slots(int(serp_routers(serp))):
                links = int(router_links(router))
                every |= links
                if (online_bits >> router) & 1:
                    live |= links
            known = serp_erps[serp] = (every, live)
        return known

    def size(erp: int) -> int:
        known = erp_sizes.get(erp)
        if known is None:
            known = erp_sizes[erp] = int(erp_members(erp)).bit_count()
        return known

    def uncovered(identities: int, erps: int) -> int:
        """``identities`` that none of the edge router policies ``erps`` selects."""
        if not identities or not erps:
            return identities
        if erps & erp_every:
            return 0
        for erp in sorted(slots(erps), key=size, reverse=True):
            identities &= ~int(erp_members(erp))
            if not identities:
                break
        return identities

    def service_findings(service_id: str, policy_bits: int, erps: int, erps_live: int) -> None:
        """The common-router findings of one service granted through ``policy_bits``."""
        granted = granted_of.get(policy_bits)
        if granted is None:
            granted = granted_of[policy_bits] = (
                int(bits.sp_identity.union_of_members(policy_bits)) & identities_routed
            )
        if not granted:
            return
        name = names(SERVICE, service_id)
        lacking = uncovered(granted, erps)
        if lacking:
            shown = [names(IDENTITY, i) for i in _first(lacking, bits.identities.ids, DETAIL_LIMIT)]
            out.append(
                _make(
                    "no-common-router",
                    SERVICE,
                    service_id,
                    f"{lacking.bit_count()} identities granted service {name} share no edge router "
                    f"with it (e.g. {', '.join(sorted(shown)[:3])})",
                    identityCount=lacking.bit_count(),
                    identities=sorted(shown),
                )
            )
        if online is not None:
            offline = uncovered(granted & ~lacking, erps_live)
            if offline:
                shown = [names(IDENTITY, i) for i in _first(offline, bits.identities.ids, DETAIL_LIMIT)]
                out.append(
                    _make(
                        "no-online-common-router",
                        SERVICE,
                        service_id,
                        f"{offline.bit_count()} identities granted service {name} share edge routers "
                        f"with it, none online (e.g. {', '.join(sorted(shown)[:3])})",
                        identityCount=offline.bit_count(),
                        identities=sorted(shown),
                    )
                )

    # what the memo's entries rest on, beside each service's own inputs
    sp_members, erp_member_list = bits.sp_identity.members, bits.erp_identity.members
    sp_changed = erp_changed = -1
    kept: dict[str, tuple[int, int, int, tuple[Finding, ...]]] = {}
    if memo is not None:
        if (
            memo.routed == identities_routed
            and memo.identities == bits.identities.all_bits
            and memo.erp_all == erp_every
            and memo.online == (online is not None)
            and memo.grants == (bits.sp_service.all_policies, granted_mask)
        ):
            sp_changed = memo.changed_slots(sp_members, memo.sp_members) | (
                memo.sp_all ^ bits.sp_identity.all_policies
            )
            erp_changed = memo.changed_slots(erp_member_list, memo.erp_members)
        memo.sp_members, memo.erp_members = list(sp_members), list(erp_member_list)
        memo.sp_all, memo.erp_all = bits.sp_identity.all_policies, erp_every
        memo.routed, memo.identities = identities_routed, bits.identities.all_bits
        memo.online = online is not None
        memo.grants = (bits.sp_service.all_policies, granted_mask)
    service_links = bits.sp_service.links

    for service_id in select(with_routers, bits.services.ids):
        policy_bits = bits.service_policies_of(service_id) & granted_mask
        if not policy_bits:
            continue
        erps = erps_live = 0
        for serp in slots(int(bits.serp_service.effective_links(bits.services.slot_of[service_id]))):
            every, live = erps_of(serp)
            erps |= every
            erps_live |= live
        if erps & erp_every and (online is None or erps_live & erp_every):
            continue  # an edge router policy of every identity gives one of its (online) routers
        if memo is not None:
            # the service's own policy links: the graph's bitset, shared (compared by identity)
            links = service_links[bits.services.slot_of[service_id]]
            entry = memo.services.get(service_id)
            if (
                entry is not None
                and sp_changed != -1
                and entry[0] is links
                and entry[1:3] == (erps, erps_live)
                and not policy_bits & sp_changed
                and not erps & erp_changed
            ):
                kept[service_id] = entry
                out.extend(entry[3])
                continue
        before = len(out)
        service_findings(service_id, policy_bits, erps, erps_live)
        if memo is not None:
            kept[service_id] = (links, erps, erps_live, tuple(out[before:]))
    if memo is not None:
        memo.services = kept

    # posture that blocks every identity a policy grants; grants never used
    sp_records = bits.policy_tables[SERVICE_POLICY].records
    known_bits = -1  # every identity is asked
    plain_verdicts: dict[tuple[str, ...], bool] = {}
    if posture_plain is not None and posture_known is not None:
        known_bits = 0
        for identity_id in posture_known:
            slot = bits.identities.slot_of.get(identity_id)
            if slot is not None:
                known_bits |= 1 << slot
    for slot, policy_id in live_policies[SERVICE_POLICY]:
        identity_bits = members(SERVICE_POLICY, slot, IDENTITY)
        if not identity_bits or not members(SERVICE_POLICY, slot, SERVICE):
            continue
        check_ids = bits.checks_of(slot)
        if posture is not None and check_ids:
            blocked = True
            if known_bits != -1 and identity_bits & ~known_bits:
                key = tuple(check_ids)
                passes = plain_verdicts.get(key)
                if passes is None and posture_plain is not None:
                    verdicts = posture_plain(check_ids)
                    passes = plain_verdicts[key] = all(verdicts.get(c, False) for c in check_ids)
                blocked = not passes
            asked = identity_bits & known_bits
            for identity_id in select(asked, bits.identities.ids) if blocked and asked else ():
                verdicts = posture(identity_id, check_ids)
                if all(verdicts.get(c, False) for c in check_ids):
                    blocked = False
                    break
            if blocked:
                out.append(
                    _make(
                        "posture-blocks-all",
                        SERVICE_POLICY,
                        policy_id,
                        f"service policy {names(SERVICE_POLICY, policy_id)} grants {sp_records[slot].type} to "
                        f"{identity_bits.bit_count()} identities, and its posture checks "
                        f"({', '.join(names(POSTURE_CHECK, c) for c in check_ids)}) fail for every one",
                        checks=check_ids,
                    )
                )
        if last_used is not None and created_at is not None and now is not None:
            limit = now - timedelta(days=unused_days)
            made = created_at.get(policy_id)
            used = last_used.get(policy_id)
            if made is not None and made <= limit and (used is None or used <= limit):
                when = "never" if used is None else f"last on {used.date().isoformat()}"
                out.append(
                    _make(
                        "unused-grant",
                        SERVICE_POLICY,
                        policy_id,
                        f"service policy {names(SERVICE_POLICY, policy_id)} granted no {sp_records[slot].type} "
                        f"session in {unused_days} days ({when})",
                        lastUsedAt=None if used is None else used.isoformat(),
                        days=unused_days,
                    )
                )
    out.sort(key=lambda f: f.id)
    return out


def _first(bits: int, values: Sequence[str | None], count: int) -> list[str]:
    """``select(bits, values)[:count]`` without listing every set bit (a service's lacking
    identities may be all 100,000 of tier L's, of which the finding names a few): a window of
    bits at a time, from the lowest set one."""
    out: list[str] = []
    base = 0
    while bits and len(out) < count:
        low = (bits & -bits).bit_length() - 1
        bits >>= low
        base += low
        window = bits & _WINDOW_MASK
        while window and len(out) < count:
            lowest = window & -window
            value = values[base + lowest.bit_length() - 1]
            if value is not None:
                out.append(value)
            window ^= lowest
        bits >>= _WINDOW_BITS
        base += _WINDOW_BITS
    return out


_WINDOW_BITS = 4096
_WINDOW_MASK = (1 << _WINDOW_BITS) - 1


def _label(kind: str) -> str:
    return kind.replace("-", " ")


def _noun(entity_kind: str) -> str:
    return entity_kind.replace("-", " ")


# -- what lists and archive rules filter on --------------------------------------------------------


@dataclass(frozen=True)
class FindingView:
    """A finding as listed: what it says, its record and its status."""

    id: str
    kind: str
    subject_type: str
    subject_id: str
    subject_name: str
    message: str
    details: Mapping[str, Any]
    status: str
    archived_by: str | None
    first_seen_at: datetime
    last_seen_at: datetime | None
    resolved_at: datetime | None

    @property
    def severity(self) -> str:
        return FINDING_KINDS.get(self.kind, "LOW")


def _symbols(with_status: bool) -> SymbolTable:
    symbols = {
        "id": Symbol(SymbolType.STRING, lambda f: f.id),
        "kind": Symbol(SymbolType.STRING, lambda f: f.kind),
        "severity": Symbol(SymbolType.STRING, lambda f: f.severity),
        "subjectType": Symbol(SymbolType.STRING, lambda f: f.subject_type),
        "subjectId": Symbol(SymbolType.STRING, lambda f: f.subject_id),
        "subjectName": Symbol(SymbolType.STRING, lambda f: f.subject_name),
        "message": Symbol(SymbolType.STRING, lambda f: f.message),
        "firstSeenAt": Symbol(SymbolType.DATETIME, lambda f: f.first_seen_at),
    }
    if with_status:
        symbols["status"] = Symbol(SymbolType.STRING, lambda f: f.status)
        symbols["lastSeenAt"] = Symbol(SymbolType.DATETIME, lambda f: f.last_seen_at)
        symbols["resolvedAt"] = Symbol(SymbolType.DATETIME, lambda f: f.resolved_at)
    return SymbolTable(symbols)


#: What ``/findings`` filters and sorts on.
FINDING_SYMBOLS = _symbols(True)
#: What an archive rule's ``filter`` may name (not the status, which rules decide).
RULE_SYMBOLS = _symbols(False)


class FindingArchiveRuleManager(EntityManager[FindingArchiveRule]):
    """Create, update and delete archive rules: a rule names at least one criterion, its filter
    compiles, its kind is a finding kind."""

    kind = FindingArchiveRule

    def validate(self, uow: UnitOfWork, new: FindingArchiveRule, old: FindingArchiveRule | None) -> None:
        if not new.name:
            raise FieldError("name", "is required", new.name)
        if not (new.filter or new.kind or new.subject_id):
            raise FieldError("filter", "a rule needs a filter, a kind or a subjectId", new.filter)
        if new.kind and new.kind not in FINDING_KINDS:
            raise FieldError("kind", f"must be one of {', '.join(FINDING_KINDS)}", new.kind)
        if new.filter:
            try:
                query = compile_query(new.filter, RULE_SYMBOLS)
            except ControllerError as ex:
                raise FieldError(
                    "filter", str(ex.reason or ex.message or "invalid filter"), new.filter
                ) from None
            if query.sort or query.skip is not None or query.limit is not None:
                raise FieldError("filter", "a rule's filter takes no sort, skip or limit", new.filter)


def rule_matches(rule: FindingArchiveRule, finding: FindingView) -> bool:
    """Whether every criterion of the rule holds for the finding."""
    if rule.kind and rule.kind != finding.kind:
        return False
    if rule.subject_id and rule.subject_id != finding.subject_id:
        return False
    if rule.filter:
        try:
            return bool(_compiled(rule.filter).predicate(finding))
        except ControllerError:
            return False
    return True


_COMPILED: dict[str, Any] = {}


def _compiled(text: str) -> Any:
    query = _COMPILED.get(text)
    if query is None:
        if len(_COMPILED) > 1024:
            _COMPILED.clear()
        query = _COMPILED[text] = compile_query(text, RULE_SYMBOLS)
    return query


# -- the lifecycle --------------------------------------------------------------------------------


class FindingsManager:
    """Findings of the live controller and their lifecycle (see the module docstring)."""

    #: Debounce after a change before evaluating again (grown to twice the last evaluation).
    DELAY_SECONDS = 0.2
    #: With posture checks in the system, posture findings are evaluated again this often at most.
    POSTURE_SECONDS = 5.0
    #: How long after a read of findings changes are evaluated in the background (seconds).
    INTEREST_SECONDS = 600.0

    def __init__(self, analysis: AnalysisManager, *, unused_days: int = UNUSED_DAYS) -> None:
        self.analysis = analysis
        self.managers = analysis.managers
        self.env = analysis.env
        self.store = analysis.store
        self.unused_days = unused_days
        self.rules = FindingArchiveRuleManager(self.env)
        self._lock = threading.RLock()
        self.records: dict[str, FindingRecord] = {r.id: r for r in self.store.all(FindingRecord)}
        self.current: dict[str, Finding] = {}
        self.last_seen: dict[str, datetime] = {}
        self._evaluated: object = None
        # the per-service findings of the last evaluation, and whether names changed since
        self._memo = ServiceMemo()
        self._renamed = False
        self._changes = 0
        self._timer: threading.Timer | None = None
        self._delay = self.DELAY_SECONDS
        self._read_at: float | None = None  # monotonic time of the last read of findings
        # the views last built, and what they were built from (records changed, the store's
        # revision): a read with nothing changed since answers them again
        self._version = 0
        self._views: tuple[tuple[int, int], list[FindingView]] | None = None
        self.usage: dict[str, datetime] = {}
        self._usage_persisted = 0.0
        self._usage_dirty = False
        self._load_usage()
        self.env.listeners.append(self.on_commit)
        self.managers.fleet.add_listener(self.changed)
        self.managers.posture.add_listener(lambda _identity: self.changed())

    # -- usage ----------------------------------------------------------------------------------
    def _load_usage(self) -> None:
        raw = self.store.get_setting(USAGE_SETTING)
        if raw:
            try:
                for policy_id, at in json.loads(raw).items():
                    self.usage[str(policy_id)] = datetime.fromisoformat(at)
            except (ValueError, TypeError, AttributeError):
                log.warning("ignoring an unreadable %s setting", USAGE_SETTING)
        for session in self.store.all(Session):
            self._used(session)

    def _used(self, session: Session) -> None:
        for policy_id in session.service_policy_ids:
            known = self.usage.get(policy_id)
            if known is None or known < session.created_at:
                self.usage[policy_id] = session.created_at
                self._usage_dirty = True

    def _persist_usage(self) -> None:
        if not self._usage_dirty or time.monotonic() - self._usage_persisted < USAGE_PERSIST_SECONDS:
            return
        self._usage_dirty = False
        self._usage_persisted = time.monotonic()
        doc = {k: v.isoformat() for k, v in self.usage.items()}
        try:
            self.store.put_setting(USAGE_SETTING, json.dumps(doc))
        except Exception:
            log.exception("could not keep the grant usage")

    # -- change tracking ------------------------------------------------------------------------
    def on_commit(self, changes: list[Change]) -> None:
        """A published batch: note sessions, take finding records (of any process), and
        evaluate again soon when access-relevant kinds changed."""
        relevant = False
        for change in changes:
            if isinstance(change, Put):
                entity = change.entity
                if isinstance(entity, Session):
                    self._used(entity)
                elif isinstance(entity, FindingRecord):
                    self.records[entity.id] = entity
                    self._version += 1
                elif entity.ENTITY in RELEVANT:
                    relevant = True
                    if entity.ENTITY in NAMED:
                        self._renamed = True
            elif isinstance(change, Delete):
                if change.kind is FindingRecord:
                    self.records.pop(change.id, None)
                    self._version += 1
                elif change.kind.ENTITY in RELEVANT:
                    relevant = True
                    if change.kind.ENTITY in NAMED:
                        self._renamed = True
        if relevant:
            self.changed()

    def changed(self) -> None:
        """Something findings depend on changed: evaluate again after a short delay, if findings
        were read lately (else the next read evaluates)."""
        self._changes += 1
        read_at = self._read_at
        if read_at is None or time.monotonic() - read_at > self.INTEREST_SECONDS:
            return
        if self._timer is not None:
            return
        timer = threading.Timer(self._delay, self._run)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _run(self) -> None:
        self._timer = None
        try:
            self.refresh()
        except Exception:  # the store closed, or a bug: never let a timer thread raise
            log.debug("findings evaluation failed", exc_info=True)

    def _key(self) -> object:
        posture = 0
        if self.managers.access.has_posture_checks():
            posture = int(time.monotonic() // self.POSTURE_SECONDS)
        return (self._changes, posture)

    # -- evaluation -----------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Evaluate the findings again if anything they depend on changed since the last time."""
        with self._lock:
            key = self._key()
            if key == self._evaluated and not force:
                return
            started = time.monotonic()
            if self._renamed:
                self._renamed = False
                self._memo.clear()
            _revision, view, graph = self.analysis._consistent()
            now = self.env.clock.now()
            names = self.analysis._namer(view)
            fleet = self.managers.fleet
            created = {p.id: p.created_at for p in view.all(ServicePolicy)}

            def posture(identity_id: str, checks: Sequence[str]) -> Mapping[str, bool]:
                verdicts = self.analysis.posture_verdicts(identity_id, checks, view, now)
                return {c: v.passes for c, v in verdicts.items()}

            def posture_plain(checks: Sequence[str]) -> Mapping[str, bool]:
                verdicts = self.analysis.posture_verdicts("", checks, view, now, data=PostureData())
                return {c: v.passes for c, v in verdicts.items()}

            # posture verdicts differ only for identities with posture data or an API session
            known = self.managers.posture.identities_with_data()
            known.update(s.identity_id for s in view.all(ApiSession))

            found = evaluate(
                graph,
                names=names,
                online=fleet.is_online,
                posture=posture,
                posture_plain=posture_plain,
                posture_known=known,
                last_used=self.usage,
                created_at=created,
                now=now,
                unused_days=self.unused_days,
                memo=self._memo,
            )
            self._evaluated = key
            self._delay = max(self.DELAY_SECONDS, min(5.0, 2 * (time.monotonic() - started)))
            self._absorb({f.id: f for f in found}, now)
            self._persist_usage()

    def _absorb(self, found: dict[str, Finding], now: datetime) -> None:
        changes: list[Change] = []
        for finding_id_, finding in found.items():
            record = self.records.get(finding_id_)
            if record is None:
                record = FindingRecord(
                    id=finding_id_,
                    created_at=now,
                    updated_at=now,
                    kind=finding.kind,
                    subject_type=finding.subject_type,
                    subject_id=finding.subject_id,
                    first_seen_at=now,
                    message=finding.message,
                )
            elif record.resolved_at is not None:
                record = replace(record, resolved_at=None, updated_at=now, message=finding.message)
            else:
                self.last_seen[finding_id_] = now
                continue
            self.records[finding_id_] = record
            self.last_seen[finding_id_] = now
            changes.append(Put(record))
        for finding_id_, record in list(self.records.items()):
            if finding_id_ in found or record.resolved_at is not None:
                continue
            last = self.current.get(finding_id_)
            message = last.message if last is not None else record.message
            record = replace(record, resolved_at=now, updated_at=now, message=message)
            self.records[finding_id_] = record
            changes.append(Put(record))
        self.current = found
        self._version += 1
        if changes:
            try:
                self.store.commit(changes, wait=False)
            except Exception:
                log.exception("could not keep the findings' records")

    # -- reads ----------------------------------------------------------------------------------
    def views(self) -> list[FindingView]:
        """Every finding, found now or resolved, with its status, sorted by kind, then subject
        name, then id."""
        self._read_at = time.monotonic()
        self.refresh()
        with self._lock:
            key = (self._version, self.store.last_seq)  # rules and names change only by writes
            if self._views is not None and self._views[0] == key:
                return list(self._views[1])
            rules = self.store.all(FindingArchiveRule)
            names = self.analysis._namer(self.store.view())
            out = [self._view(record, rules, names) for record in self.records.values()]
            out.sort(key=lambda v: (v.kind, v.subject_name, v.id))
            self._views = (key, out)
        return list(out)

    def view(self, finding_id_: str) -> FindingView:
        self._read_at = time.monotonic()
        self.refresh()
        with self._lock:
            record = self.records.get(finding_id_)
            if record is None:
                raise NotFoundError()
            rules = self.store.all(FindingArchiveRule)
            return self._view(record, rules, self.analysis._namer(self.store.view()))

    def _view(self, record: FindingRecord, rules: Sequence[FindingArchiveRule], names: Names) -> FindingView:
        finding = self.current.get(record.id)
        subject_kind = next((k for k, p in PATHS.items() if p == record.subject_type), "")
        subject_name = names(subject_kind, record.subject_id) if subject_kind else record.subject_id
        present = finding is not None and record.resolved_at is None
        base = FindingView(
            id=record.id,
            kind=record.kind,
            subject_type=record.subject_type,
            subject_id=record.subject_id,
            subject_name=subject_name,
            message=finding.message if finding is not None else record.message,
            details=dict(finding.details) if finding is not None else {},
            status=RESOLVED,
            archived_by=None,
            first_seen_at=record.first_seen_at,
            last_seen_at=self.last_seen.get(record.id) if present else record.resolved_at,
            resolved_at=None if present else record.resolved_at,
        )
        if not present:
            return base
        if record.status_override == ARCHIVED:
            return replace(base, status=ARCHIVED, archived_by="administrator")
        if record.status_override != ACTIVE:
            for rule in rules:
                if rule_matches(rule, base):
                    return replace(base, status=ARCHIVED, archived_by=rule.id)
        return replace(base, status=ACTIVE)

    # -- writes ---------------------------------------------------------------------------------
    def set_status(self, finding_id_: str, status: str) -> FindingView:
        """An administrator archives (``ARCHIVED``) or unarchives (``ACTIVE``) a finding; an
        unarchived finding stays ACTIVE whatever the rules say, until archived again."""
        if status not in (ACTIVE, ARCHIVED):
            raise FieldError("status", "must be ACTIVE or ARCHIVED", status)
        self.refresh()
        with self.store.write_lock():
            with self._lock:
                record = self.records.get(finding_id_)
                if record is None:
                    raise NotFoundError()
                record = replace(record, status_override=status, updated_at=self.env.clock.now())
                self.records[finding_id_] = record
                self._version += 1
            self.store.commit([Put(record)])
        return self.view(finding_id_)
