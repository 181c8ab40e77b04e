"""Guardrails: named invariants over access, checked on the access delta of every write
(docs/analysis.md §10).

A guardrail (:class:`~engine.entities.guardrails.Guardrail`) defines a set of *violations*, pairs
(identity, service, type) of the policy graph:

- ``deny``: identity in ``identity_roles``, service in ``service_roles``, the identity may
  ``type`` the service;
- ``only``: service in ``service_roles``, the identity may ``type`` it, the identity **not** in
  ``identity_roles``;
- ``keep``: identity in ``identity_roles``, service in ``service_roles``, the identity may
  **not** ``type`` the service;
- ``routers``: identity in ``identity_roles``, service in ``service_roles``, the identity may
  Dial it, and no router common to both is online.

A write **violates** a guardrail when it adds violations: those of the state after it that the
state before it did not have (a violation that already existed blocks nothing). In ``enforce``
mode the write is refused (:class:`GuardrailViolationError`, 409) and nothing is written; in
``report`` mode it goes through and a :class:`~engine.entities.guardrails.GuardrailViolation`
record is committed in the same batch.

**Where.** :class:`GuardrailChecker` is a check of :class:`~engine.managers._base.Env`: every
manager's commit passes it (management writes, enrollment, router changes, ``/analysis/v1/apply``
through the same call), under the store's write lock, before anything is staged.

**How, cheaply.** The graph the check needs is the published one plus what other writers staged
and the committer has not published yet (*pending*: found by remembering the keys of recent
access-relevant writes and comparing the store's staged and published reads of each). Most writes
touch no access-relevant kind, or change nothing the graph holds (a rename, an enrollment): they
cost a few dictionary reads. Otherwise each guardrail is tested for whether the write can touch
it at all (:func:`touches`: the guardrail's role selectors against the touched entities' old and
new attributes, and the touched policies' old and new member bitsets against the guardrail's, by
type); only a guardrail that can be touched costs a fork of the graph and the exact comparison of
the pairs the write could change (:func:`new_violations`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.analysis.diff import (
    Comparison,
    GraphReader,
    PolicyOverlay,
    Reader,
    compare,
    compare_changes,
    touched_by,
)
from engine.entities import Entity
from engine.entities.guardrails import FORMS, MODES, Guardrail, GuardrailViolation
from engine.errors import ControllerError, FieldError
from engine.managers._base import EntityManager
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
from engine.policy.bitset import select, slots
from engine.policy.selector import Selector, Semantic, normalize_semantic, parse_roles
from engine.ports import Change, Delete, Put, Store, UnitOfWork
from engine.roles import check_role_syntax, check_semantic, sort_roles

__all__ = [
    "LISTED_PAIRS",
    "REPORTED_PAIRS",
    "GuardrailChecker",
    "GuardrailManager",
    "GuardrailViolationError",
    "GuardrailViolationManager",
    "Rule",
    "Verdict",
    "new_violations",
    "touches",
    "violations",
]

#: How many offending pairs a 409 or a violation record names (the count is exact).
REPORTED_PAIRS = 100
#: How many of a verdict's pairs are listed at most (its count is exact): a write adding more
#: violations than that (say to a guardrail matching everything) is counted, not listed.
LISTED_PAIRS = 10_000

Pair = tuple[str, str, str]
"""(identity id, service id, ``Dial`` or ``Bind``)."""
Online = Callable[[str], bool]


@dataclass(frozen=True)
class Rule:
    """A guardrail, parsed."""

    id: str
    name: str
    form: str
    mode: str
    type: str
    semantic: Semantic
    identities: Selector
    services: Selector

    @classmethod
    def of(cls, guardrail: Guardrail) -> Rule:
        return cls(
            guardrail.id,
            guardrail.name,
            guardrail.form,
            guardrail.mode,
            "Dial" if guardrail.form == "routers" else guardrail.type,
            normalize_semantic(guardrail.semantic),
            parse_roles(guardrail.identity_roles),
            parse_roles(guardrail.service_roles),
        )

    def has_identity(self, graph: PolicyGraph, identity_id: str) -> bool:
        if not graph.has_entity(IDENTITY, identity_id):
            return False
        return self.identities.matches(
            self.semantic, identity_id, graph.entity_attributes(IDENTITY, identity_id)
        )

    def has_service(self, graph: PolicyGraph, service_id: str) -> bool:
        if not graph.has_entity(SERVICE, service_id):
            return False
        return self.services.matches(self.semantic, service_id, graph.entity_attributes(SERVICE, service_id))

    def violated(self, graph: PolicyGraph, identity_id: str, service_id: str, online: Online) -> bool:
        """Whether (identity, service, :attr:`type`) is a violation in ``graph``."""
        if not (graph.has_entity(IDENTITY, identity_id) and graph.has_entity(SERVICE, service_id)):
            return False
        if not self.has_service(graph, service_id):
            return False
        grants = self.type in graph.permissions(identity_id, service_id)
        if self.form == "only":
            return grants and not self.has_identity(graph, identity_id)
        if not self.has_identity(graph, identity_id):
            return False
        if self.form == "deny":
            return grants
        if self.form == "keep":
            return not grants
        # routers
        return grants and not any(online(r) for r in graph.common_edge_routers(identity_id, service_id))


@dataclass(frozen=True)
class Verdict:
    """The violations a write adds to one guardrail (all of them, sorted)."""

    rule: Rule
    #: The violations, sorted; at most :data:`LISTED_PAIRS` of them.
    pairs: tuple[Pair, ...]
    #: How many violations the write adds (exact; ``len(pairs)`` unless more than listed).
    count: int = -1

    def __post_init__(self) -> None:
        if self.count < 0:
            object.__setattr__(self, "count", len(self.pairs))


class GuardrailViolationError(ControllerError):
    """A write would add violations to guardrails in ``enforce`` mode (409)."""

    code = "GUARDRAIL_VIOLATION"
    default_message = "the write would violate a guardrail"

    def __init__(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts = list(verdicts)
        parts = []
        for verdict in self.verdicts:
            first = ", ".join(f"{i} may {t} {s}" for i, s, t in verdict.pairs[:3])
            more = verdict.count - 3
            parts.append(
                f"guardrail {verdict.rule.name} ({verdict.rule.form}): {first}"
                + (f" and {more} more" if more > 0 else "")
                if verdict.rule.form != "keep"
                else f"guardrail {verdict.rule.name} (keep): "
                + ", ".join(f"{i} may no longer {t} {s}" for i, s, t in verdict.pairs[:3])
                + (f" and {more} more" if more > 0 else "")
            )
        super().__init__("the write would violate " + "; ".join(parts))

    def cause(self) -> dict[str, Any]:
        return {
            "reason": self.message,
            "guardrails": [
                {
                    "id": v.rule.id,
                    "name": v.rule.name,
                    "form": v.rule.form,
                    "count": v.count,
                    "pairs": [
                        {"identityId": i, "serviceId": s, "type": t} for i, s, t in v.pairs[:REPORTED_PAIRS]
                    ],
                }
                for v in self.verdicts
            ],
        }


# -- the write's changes ------------------------------------------------------------------------


def _key(change: Change) -> tuple[str, str]:
    if isinstance(change, Put):
        return change.entity.ENTITY, change.entity.id
    assert isinstance(change, Delete)
    return change.kind.ENTITY, change.id


def _relevant(changes: Iterable[Change]) -> list[Change]:
    """The changes of kinds the policy graph holds (posture checks aside: not part of access)."""
    out = []
    for change in changes:
        name = _key(change)[0]
        if name in POLICY_NAMES or (name in ENTITY_NAMES and ENTITY_NAMES[name][0] != POSTURE_CHECK):
            out.append(change)
    return out


def _effective(graph: PolicyGraph, changes: Sequence[Change], keep: set[tuple[str, str]]) -> list[Change]:
    """``changes`` without those that change nothing the graph holds (keys in ``keep`` stay)."""
    out = []
    for change in changes:
        key = _key(change)
        if key in keep:
            out.append(change)
            continue
        name, entity_id = key
        if name in ENTITY_NAMES:
            kind = ENTITY_NAMES[name][0]
            present = graph.has_entity(kind, entity_id)
            if isinstance(change, Delete):
                if present:
                    out.append(change)
            elif not present or graph.entity_attributes(kind, entity_id) != frozenset(
                getattr(change.entity, "role_attributes", ())
            ):
                out.append(change)
            continue
        pkind = POLICY_NAMES[name][0]
        present = graph.has_policy(pkind, entity_id)
        if isinstance(change, Delete):
            if present:
                out.append(change)
        elif not present or not _same_policy(graph, pkind, change.entity):
            out.append(change)
    return out


def _same_policy(graph: PolicyGraph, kind: str, policy: Entity) -> bool:
    record = graph.policy(kind, policy.id)  # type: ignore[arg-type]
    row = _policy_row(policy)
    roles = {
        IDENTITY: tuple(row.identity_roles),
        SERVICE: tuple(row.service_roles),
        EDGE_ROUTER: tuple(row.edge_router_roles),
        POSTURE_CHECK: tuple(row.posture_check_roles),
    }
    if record.semantic != row.semantic or (kind == SERVICE_POLICY and record.type != row.type):
        return False
    return all(tuple(record.roles.get(k, ())) == v for k, v in roles.items() if k in record.roles)


# -- whether a write can touch a guardrail --------------------------------------------------------


def touches(graph: PolicyGraph, rule: Rule, changes: Sequence[Change]) -> bool:
    """Whether ``changes`` (applied to ``graph``) can change ``rule``'s violations: False only
    when they certainly cannot (see the module docstring)."""
    bits: dict[str, int] = {}

    def rule_bits(entity_kind: str) -> int:
        if entity_kind not in bits:
            selector = rule.identities if entity_kind == IDENTITY else rule.services
            bits[entity_kind] = graph.selector_bits(entity_kind, selector, rule.semantic)  # type: ignore[arg-type]
        return bits[entity_kind]

    for change in changes:
        name, entity_id = _key(change)
        if name in ENTITY_NAMES:
            kind = ENTITY_NAMES[name][0]
            if kind == EDGE_ROUTER:
                if rule.form == "routers":
                    return True
                continue
            versions = []
            if graph.has_entity(kind, entity_id):
                versions.append(graph.entity_attributes(kind, entity_id))
            if isinstance(change, Put):
                versions.append(frozenset(getattr(change.entity, "role_attributes", ())))
            if kind == IDENTITY:
                matches = [rule.identities.matches(rule.semantic, entity_id, a) for a in versions]
                if (rule.form == "only" and not all(matches)) or (rule.form != "only" and any(matches)):
                    return True
            elif kind == SERVICE and any(
                rule.services.matches(rule.semantic, entity_id, a) for a in versions
            ):
                return True
            continue
        pkind = POLICY_NAMES[name][0]
        if pkind != SERVICE_POLICY:
            if rule.form == "routers":
                return True
            continue
        types: set[str | None] = set()
        identity_bits = service_bits = 0
        if graph.has_policy(SERVICE_POLICY, entity_id):
            types.add(graph.policy(SERVICE_POLICY, entity_id).type)
            identity_bits = graph.policy_member_bits(SERVICE_POLICY, entity_id, IDENTITY)
            service_bits = graph.policy_member_bits(SERVICE_POLICY, entity_id, SERVICE)
        if isinstance(change, Put):
            row = _policy_row(change.entity)
            types.add(row.type)
            semantic = normalize_semantic(row.semantic)
            identity_bits |= graph.selector_bits(IDENTITY, parse_roles(row.identity_roles), semantic)
            service_bits |= graph.selector_bits(SERVICE, parse_roles(row.service_roles), semantic)
        if rule.type not in types or not service_bits & rule_bits(SERVICE):
            continue
        if rule.form == "only":
            if identity_bits & ~rule_bits(IDENTITY):
                return True
        elif identity_bits & rule_bits(IDENTITY):
            return True
    return False


# -- the exact comparison, as bitsets ---------------------------------------------------------------


class _Judge:
    """One rule's violations in the two graphs of a :class:`~engine.analysis.diff.Comparison`:
    per service (a *column*) the violating identities, per identity (a *row*) the violating
    services, as bitsets of each graph's slots."""

    def __init__(self, comparison: Comparison, rule: Rule, online: Online) -> None:
        self.comparison = comparison
        self.rule = rule
        self.online = online
        self._bits: dict[tuple[int, str], int] = {}
        self._online: dict[int, int] = {}

    def rule_bits(self, reader: Reader, kind: str) -> int:
        key = (id(reader), kind)
        found = self._bits.get(key)
        if found is None:
            selector = self.rule.identities if kind == IDENTITY else self.rule.services
            found = self._bits[key] = reader.selector_bits(kind, selector, self.rule.semantic)
        return found

    def online_routers(self, reader: Reader) -> int:
        found = self._online.get(id(reader))
        if found is None:
            found = 0
            for slot, router_id in enumerate(reader.ids(EDGE_ROUTER)):
                if router_id is not None and self.online(router_id):
                    found |= 1 << slot
            self._online[id(reader)] = found
        return found

    def column(self, reader: Reader, service_id: str) -> int:
        """The identities violating the rule with ``service_id`` in ``reader``."""
        slot = reader.slot(SERVICE, service_id)
        if slot is None or not (self.rule_bits(reader, SERVICE) >> slot) & 1:
            return 0
        rule, members = self.rule, self.rule_bits(reader, IDENTITY)
        grant = Comparison.granted_identities(reader, SERVICE, service_id, rule.type)
        if rule.form == "deny":
            return members & grant
        if rule.form == "only":
            return grant & ~members
        if rule.form == "keep":
            return members & ~grant
        routers = reader.union(
            SERVICE_EDGE_ROUTER_POLICY,
            EDGE_ROUTER,
            reader.links(SERVICE_EDGE_ROUTER_POLICY, SERVICE, service_id),
        )
        live = routers & self.online_routers(reader)
        served = (
            reader.union(
                EDGE_ROUTER_POLICY, IDENTITY, reader.selecting(EDGE_ROUTER_POLICY, EDGE_ROUTER, live)
            )
            if live
            else 0
        )
        return members & grant & ~served

    def row(self, reader: Reader, identity_id: str) -> int:
        """The services violating the rule with ``identity_id`` in ``reader``."""
        slot = reader.slot(IDENTITY, identity_id)
        if slot is None:
            return 0
        rule, services = self.rule, self.rule_bits(reader, SERVICE)
        member = bool((self.rule_bits(reader, IDENTITY) >> slot) & 1)
        if member == (rule.form == "only"):
            return 0
        grant = Comparison.granted_to(reader, identity_id, SERVICE, rule.type)
        if rule.form in ("deny", "only"):
            return services & grant
        if rule.form == "keep":
            return services & ~grant
        routers = reader.union(
            EDGE_ROUTER_POLICY, EDGE_ROUTER, reader.links(EDGE_ROUTER_POLICY, IDENTITY, identity_id)
        )
        live = routers & self.online_routers(reader)
        served = (
            reader.union(
                SERVICE_EDGE_ROUTER_POLICY,
                SERVICE,
                reader.selecting(SERVICE_EDGE_ROUTER_POLICY, EDGE_ROUTER, live),
            )
            if live
            else 0
        )
        return services & grant & ~served

    def lines(self) -> tuple[set[str], set[str]]:
        """(columns, rows): the services and identities whose violations can differ."""
        comparison, rule = self.comparison, self.rule
        before, after = comparison.before, comparison.after
        touched = comparison.touched
        columns = set(comparison.relation(rule.type).columns) | set(touched.get(SERVICE, ()))
        rows = set(touched.get(IDENTITY, ()))
        if rule.form != "routers":
            return columns, rows
        # whose routers changed: services through service edge router policies ...
        candidates = set(touched.get(SERVICE, ()))
        for policy_id in comparison.changed_policies(SERVICE_EDGE_ROUTER_POLICY):
            for reader in (before, after):
                bits = reader.members(SERVICE_EDGE_ROUTER_POLICY, policy_id, SERVICE)
                candidates.update(str(i) for i in select(bits, reader.ids(SERVICE)))
        align = comparison.align[EDGE_ROUTER]
        for service_id in candidates - columns:
            old, new = (
                r.union(
                    SERVICE_EDGE_ROUTER_POLICY,
                    EDGE_ROUTER,
                    r.links(SERVICE_EDGE_ROUTER_POLICY, SERVICE, service_id),
                )
                for r in (before, after)
            )
            if any(align.delta(old, new)):
                columns.add(service_id)
        # ... and identities through edge router policies (as rows, or every service of the rule
        # as a column when that is fewer)
        reached = comparison.relation(None)
        extra: set[str] = set()
        for added, removed in reached.columns.values():
            extra.update(str(i) for i in select(added, after.ids(IDENTITY)))
            extra.update(str(i) for i in select(removed, before.ids(IDENTITY)))
        extra -= rows
        services = [self.rule_bits(r, SERVICE) for r in (before, after)]
        if len(extra) > sum(bits.bit_count() for bits in services):
            for reader, bits in zip((before, after), services, strict=True):
                columns.update(str(i) for i in select(bits, reader.ids(SERVICE)))
        else:
            rows |= extra
        return columns, rows

    def verdict(self) -> Verdict | None:
        comparison, rule = self.comparison, self.rule
        before, after = comparison.before, comparison.after
        columns, rows = self.lines()
        mask = ~comparison.slot_bits(rows)
        identities, services = after.ids(IDENTITY), after.ids(SERVICE)
        align = comparison.align[SERVICE]
        count = 0
        pairs: list[Pair] = []
        for service_id in sorted(columns):
            new = self.column(after, service_id)
            if not new:
                continue
            added = new & ~self.column(before, service_id) & mask
            if added:
                count += added.bit_count()
                if len(pairs) < LISTED_PAIRS:
                    pairs.extend((str(i), service_id, rule.type) for i in select(added, identities))
        for identity_id in sorted(rows):
            new = self.row(after, identity_id)
            if not new:
                continue
            added = align.delta(self.row(before, identity_id), new)[0]
            if added:
                count += added.bit_count()
                if len(pairs) < LISTED_PAIRS:
                    pairs.extend((identity_id, str(s), rule.type) for s in select(added, services))
        if not count:
            return None
        return Verdict(rule, tuple(sorted(pairs)[:LISTED_PAIRS]), count)


def _merged(first: Sequence[Change], second: Sequence[Change]) -> list[Change]:
    """One change per key: ``first`` applied, then ``second`` (as :func:`apply_changes` applies
    a batch: a delete in a batch wins over its puts)."""
    state: dict[tuple[str, str], Change] = {}
    for batch in (first, second):
        final: dict[tuple[str, str], Change] = {}
        for change in batch:
            key = _key(change)
            if isinstance(change, Delete) or not isinstance(final.get(key), Delete):
                final[key] = change
        state.update(final)
    return list(state.values())


def _comparison(graph: PolicyGraph, pending: Sequence[Change], changes: Sequence[Change]) -> Comparison:
    """The graph with ``pending`` applied against it with ``changes`` applied too; ``graph`` is
    not changed."""
    if not pending:
        return compare_changes(graph, changes)
    touched = touched_by(changes)
    if PolicyOverlay.suits([*pending, *changes]):
        return Comparison(
            PolicyOverlay(graph, pending), PolicyOverlay(graph, _merged(pending, changes)), touched
        )
    before = graph.copy()
    apply_changes(before, pending)
    after = before.copy()
    apply_changes(after, changes)
    return compare(before, after, touched)


def new_violations(
    graph: PolicyGraph,
    pending: Sequence[Change],
    changes: Sequence[Change],
    rules: Sequence[Rule],
    online: Online,
    comparison: Comparison | None = None,
) -> list[Verdict]:
    """The violations ``changes`` add to each of ``rules`` (those it adds any to), where the
    state before them is ``graph`` with ``pending`` applied. ``graph`` is not changed.
    ``comparison``: that of ``graph`` and ``changes`` (no pending), when the caller has it."""
    pending = _relevant(pending)
    changes = _effective(graph, _relevant(changes), {_key(c) for c in pending})
    if not changes:
        return []
    scope = [*pending, *changes]
    touched = [rule for rule in rules if touches(graph, rule, scope)]
    if not touched:
        return []
    if comparison is None or pending:
        comparison = _comparison(graph, pending, changes)
    out = []
    for rule in touched:
        verdict = _Judge(comparison, rule, online).verdict()
        if verdict is not None:
            out.append(verdict)
    return out


def violations(graph: PolicyGraph, rule: Rule, online: Online) -> list[Pair]:
    """Every violation of ``rule`` in ``graph`` (a guardrail's current state), sorted."""
    reader = GraphReader(graph)
    judge = _Judge(Comparison(reader, reader, {}), rule, online)
    identities, services = graph.entity_slot_ids(IDENTITY), graph.entity_slot_ids(SERVICE)
    out: list[Pair] = []
    for slot in slots(judge.rule_bits(reader, SERVICE)):
        service_id = str(services[slot])
        out.extend(
            (str(i), service_id, rule.type) for i in select(judge.column(reader, service_id), identities)
        )
    return sorted(out)


# -- the write hook ---------------------------------------------------------------------------------


class GuardrailChecker:
    """The :class:`~engine.managers._base.Env` check (see the module docstring)."""

    def __init__(self, store: Store, access: Any, online: Online, clock: Any, ids: Any) -> None:
        self.store = store
        self.access = access
        self.online = online
        self.clock = clock
        self.ids = ids
        self._lock = threading.Lock()
        #: Keys (kind name, id) of recent access-relevant writes, with their class: what may be
        #: staged and not yet published.
        self._recent: dict[tuple[str, str], type[Entity]] = {}

    def _pending(self) -> list[Change]:
        """What other writers staged and the committer has not published (under the write lock:
        the store's reads see the staged state, ``view()`` the published one)."""
        published = self.store.view()
        out: list[Change] = []
        with self._lock:
            for key, cls in list(self._recent.items()):
                staged = self.store.get(cls, key[1])
                if staged is published.get(cls, key[1]):
                    del self._recent[key]
                    continue
                out.append(Put(staged) if staged is not None else Delete(cls, key[1]))
        return out

    def _remember(self, changes: Sequence[Change]) -> None:
        with self._lock:
            for change in changes:
                key = _key(change)
                self._recent[key] = type(change.entity) if isinstance(change, Put) else change.kind

    def verdicts(self, changes: Sequence[Change]) -> list[Verdict]:
        """The violations ``changes`` would add, against the staged state (under the write lock)."""
        relevant = _relevant(changes)
        if not relevant:
            return []
        guardrails = self.store.all(Guardrail)
        if not guardrails:
            self._remember(relevant)
            return []
        pending = self._pending()
        rules = [Rule.of(g) for g in guardrails]
        with self.access.reading() as (graph, _):
            found = new_violations(graph, pending, relevant, rules, self.online)
        return found

    def __call__(self, changes: Sequence[Change]) -> list[Change]:
        """Refuse (:class:`GuardrailViolationError`) a write adding violations to an ``enforce``
        guardrail; the records of those it adds to ``report`` ones, to commit with it."""
        found = self.verdicts(changes)
        enforced = [v for v in found if v.rule.mode != "report"]
        if enforced:
            raise GuardrailViolationError(enforced)
        self._remember(_relevant(changes))
        now = self.clock.now()
        return [
            Put(
                GuardrailViolation(
                    id=self.ids.new_id(),
                    created_at=now,
                    updated_at=now,
                    guardrail_id=v.rule.id,
                    guardrail_name=v.rule.name,
                    revision=self.store.last_seq,
                    count=v.count,
                    pairs=[
                        {"identityId": i, "serviceId": s, "type": t} for i, s, t in v.pairs[:REPORTED_PAIRS]
                    ],
                )
            )
            for v in found
        ]


# -- the use cases ---------------------------------------------------------------------------------


class GuardrailManager(EntityManager[Guardrail]):
    """Create, change and delete guardrails (checked as a policy's roles are, docs/policy.md §1.3;
    ``@id`` entries need not exist, as a guardrail may name what is not there yet)."""

    kind = Guardrail

    def validate(self, uow: UnitOfWork, new: Guardrail, old: Guardrail | None) -> None:
        if not new.name:
            raise FieldError("name", "a guardrail needs a name", new.name)
        if new.form not in FORMS:
            raise FieldError("form", f"must be one of {', '.join(FORMS)}", new.form)
        if new.mode not in MODES:
            raise FieldError("mode", f"must be one of {', '.join(MODES)}", new.mode)
        if new.type not in ("Dial", "Bind"):
            raise FieldError("type", "must be Dial or Bind", new.type)
        check_role_syntax("identityRoles", new.identity_roles)
        check_role_syntax("serviceRoles", new.service_roles)
        check_semantic(new.semantic)
        if new.form == "routers" and new.type != "Dial":
            raise FieldError("type", "a routers guardrail is about Dial", new.type)
        if new.form != "routers" and not new.service_roles:
            raise FieldError("serviceRoles", f"a {new.form} guardrail needs the services it is about", [])
        if new.form in ("deny", "keep") and not new.identity_roles:
            raise FieldError("identityRoles", f"a {new.form} guardrail needs the identities it is about", [])

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Guardrail:
        guardrail = super().build(uow, _defaults(fields))
        return _sorted(guardrail)

    def apply(self, uow: UnitOfWork, old: Guardrail, fields: dict[str, Any]) -> Guardrail:
        return _sorted(super().apply(uow, old, fields))


def _defaults(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    if out.get("form") == "routers":
        out.setdefault("identity_roles", ["#all"])
        out.setdefault("service_roles", ["#all"])
    return out


def _sorted(guardrail: Guardrail) -> Guardrail:
    return dataclasses.replace(
        guardrail,
        identity_roles=sort_roles(guardrail.identity_roles),
        service_roles=sort_roles(guardrail.service_roles),
    )


class GuardrailViolationManager(EntityManager[GuardrailViolation]):
    """The violations ``report`` guardrails let through: read and delete."""

    kind = GuardrailViolation
