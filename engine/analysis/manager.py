"""The analysis use cases: explain, what-if, apply-if-unchanged (docs/analysis.md).

**Revisions.** Every answer carries the store's revision it was computed at (``last_seq``, read
under the write lock with the published state and a fork of the policy graph, so the three agree).

**What-if.** The proposed writes (:class:`Operation`, built by the API from OpenZiti's request
bodies) are run by the real managers against an :class:`~engine.analysis.sandbox.Overlay` of the
published state; the changes they make are applied to a fork of the graph
(:meth:`PolicyGraph.copy`, as the access manager applies a committed batch) and the two graphs are
compared (:func:`~engine.analysis.diff.access_diff`). Nothing is written.

**Apply.** Under the store's write lock, the order every management write follows (read, check,
stage): if an access-relevant batch was applied since the revision (:class:`AccessHistory`), the
answer is :class:`StaleRevisionError` with the access diff since then; if one is staged but not
yet published (a writer waiting for its batch to become durable), the apply waits for it and
checks again; otherwise the writes run as for a what-if, over the staged state, and everything
they changed is committed with one ``Store.commit``: one batch, durable and published whole or
not at all, on every store. Two appliers of the same revision: the second finds the first's
batch (published, or staged) and gets 409.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.analysis.diff import MAX_DIFF_PAIRS, AccessDiff, DiffTooLargeError, compare, compare_changes
from engine.analysis.explain import (
    PostureVerdict,
    RouterExplanation,
    ServiceExplanation,
    explain_router,
    explain_service,
)
from engine.analysis.guardrails import (
    GuardrailChecker,
    GuardrailManager,
    GuardrailViolationManager,
    Rule,
    Verdict,
    new_violations,
)
from engine.analysis.history import AccessHistory, RevisionTooOldError
from engine.analysis.sandbox import Overlay, sandboxed
from engine.entities import Entity
from engine.entities.guardrails import Guardrail
from engine.entities.identities import Identity
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.errors import ControllerError, FieldError, NotFoundError
from engine.managers.access import ENTITY_KINDS as ENTITY_NAMES
from engine.managers.access import POLICY_KINDS as POLICY_NAMES
from engine.managers.posture import EVALUATORS, PostureData
from engine.managers.registry import Managers
from engine.policy import EDGE_ROUTER, IDENTITY, SERVICE, PolicyGraph
from engine.ports import Change, Store, StoreView

__all__ = [
    "CLASSES",
    "MAX_BATCH_ITEMS",
    "AnalysisManager",
    "Applied",
    "Created",
    "Operation",
    "StaleRevisionError",
    "WhatIf",
    "analysis_for",
    "at_item",
]

#: The most writes one what-if or apply takes (more: 400).
MAX_BATCH_ITEMS = 10_000
#: How long an apply waits for batches staged before it to be published before giving up.
STAGED_WAIT_SECONDS = 5.0

#: Managers' attribute names (on :class:`Managers`) of the kinds a batch may write.
KINDS = (
    "identities",
    "services",
    "edge_routers",
    "posture_checks",
    "service_policies",
    "edge_router_policies",
    "service_edge_router_policies",
)

#: engine kind -> entity class, for names in messages.
CLASSES: dict[str, type[Entity]] = dict((*ENTITY_NAMES.values(), *POLICY_NAMES.values()))


@dataclass(frozen=True)
class Operation:
    """One proposed write: ``run`` performs it with the manager of ``kind`` it is given (a
    sandboxed copy) and answers the id of what it created (None for an update or a delete)."""

    kind: str
    action: str
    id: str | None
    run: Callable[[Any], str | None]


@dataclass(frozen=True)
class Created:
    """An entity a batch item created: its index, kind and (new) id."""

    index: int
    kind: str
    id: str
    name: str


@dataclass(frozen=True)
class WhatIf:
    """The answer of :meth:`AnalysisManager.what_if`."""

    revision: int
    diff: AccessDiff
    created: tuple[Created, ...]
    changes: int
    #: The violations the batch would add to guardrails (it would be refused by those in
    #: ``enforce`` mode).
    guardrails: tuple[Verdict, ...] = ()


@dataclass(frozen=True)
class Applied:
    """The answer of :meth:`AnalysisManager.apply`."""

    revision: int
    applied_revision: int
    diff: AccessDiff
    created: tuple[Created, ...]
    changes: int


@dataclass
class StaleRevisionError(Exception):
    """Access-relevant changes were applied since the revision (409)."""

    revision: int
    current: int
    reason: str
    #: The access diff from the revision to now (None when it cannot be known).
    diff: AccessDiff | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.reason


def at_item(error: ControllerError, index: int) -> ControllerError:
    """``error`` as raised by batch item ``index``: its ``cause.field`` prefixed ``items[index]``."""
    prefix = f"items[{index}]"
    error.field = f"{prefix}.{error.field}" if error.field else prefix
    return error


def _staged_access_changes(store: Store) -> bool:
    """Whether a writer staged a change of an access-relevant kind that is not published yet
    (call under the write lock: the store's reads then see staged changes, ``view()`` does not)."""
    published = store.view()
    for _, cls in (*ENTITY_NAMES.values(), *POLICY_NAMES.values()):
        staged = store.all(cls)
        current = published.all(cls)
        if len(staged) != len(current) or any(a is not b for a, b in zip(staged, current, strict=True)):
            return True
    return False


class AnalysisManager:
    """Explain, what-if and apply over the live controller (see the module docstring)."""

    def __init__(self, managers: Managers) -> None:
        self.managers = managers
        self.env = managers.env
        self.store: Store = managers.env.store
        self.access = managers.access
        self.history = AccessHistory(lambda: self.store.last_seq)
        self.access.observe(self.history)
        self.guardrails = GuardrailManager(self.env)
        self.violations = GuardrailViolationManager(self.env)
        self.checker = GuardrailChecker(
            self.store, self.access, managers.fleet.is_online, self.env.clock, self.env.ids
        )
        self.env.checks.append(self.checker)

    # -- revisions ----------------------------------------------------------------------------
    def revision(self) -> int:
        """The revision the controller is at (the last published change's number)."""
        return self.store.last_seq

    def _consistent(self) -> tuple[int, StoreView, PolicyGraph]:
        with self.store.write_lock():
            return self.store.last_seq, self.store.view(), self.access.snapshot()

    # -- names --------------------------------------------------------------------------------
    def _namer(self, view: StoreView) -> Callable[[str, str], str]:
        def name(kind: str, entity_id: str) -> str:
            cls = CLASSES.get(kind)
            entity = view.get(cls, entity_id) if cls is not None else None
            found = getattr(entity, "name", None)
            return f"{found}" if found else entity_id

        return name

    # -- explain ------------------------------------------------------------------------------
    # Explanations read the live graph under its lock (AccessManager.reading): no fork. What they
    # need of other managers (posture data) is read first, the graph's lock being the innermost.
    def explain_service(
        self, identity_id: str, service_id: str, policy_type: str
    ) -> tuple[int, ServiceExplanation]:
        """(revision, explanation) for an identity, a service and ``Dial`` or ``Bind``."""
        if policy_type.lower() not in ("dial", "bind"):
            raise FieldError("type", "must be Dial or Bind", policy_type)
        view = self.store.view()
        identity = view.get(Identity, identity_id)
        if identity is None or view.get(Service, service_id) is None:
            raise NotFoundError()
        now = self.env.clock.now()
        data = self.managers.posture.posture_data(identity_id)
        with self.access.reading() as (graph, revision):
            if not (graph.has_entity(IDENTITY, identity_id) and graph.has_entity(SERVICE, service_id)):
                raise NotFoundError()
            answer = explain_service(
                graph,
                identity_id,
                service_id,
                policy_type,
                online=self.managers.fleet.is_online,
                posture=lambda ids: self.posture_verdicts(identity_id, ids, view, now, data),
                identity_disabled=identity.is_disabled_at(now),
                names=self._namer(view),
            )
        return revision, answer

    def explain_router(self, identity_id: str, router_id: str) -> tuple[int, RouterExplanation]:
        """(revision, explanation) for an identity and an edge router."""
        view = self.store.view()
        identity = view.get(Identity, identity_id)
        if identity is None or view.get(EdgeRouter, router_id) is None:
            raise NotFoundError()
        now = self.env.clock.now()
        online = self.managers.fleet.is_online(router_id)
        with self.access.reading() as (graph, revision):
            if not (graph.has_entity(IDENTITY, identity_id) and graph.has_entity(EDGE_ROUTER, router_id)):
                raise NotFoundError()
            answer = explain_router(
                graph,
                identity_id,
                router_id,
                online=online,
                identity_disabled=identity.is_disabled_at(now),
                names=self._namer(view),
            )
        return revision, answer

    def posture_verdicts(
        self,
        identity_id: str,
        check_ids: Sequence[str],
        view: StoreView,
        now: datetime,
        data: PostureData | None = None,
    ) -> Mapping[str, PostureVerdict]:
        """Each check against the identity's current posture data (the posture manager's
        evaluators; ``data`` when read already); a check passes when it passes for one of the
        identity's API sessions (MFA and endpoint state are per session), or with no session at
        all for the others."""
        if data is None:
            data = self.managers.posture.posture_data(identity_id)
        sessions = sorted(data.api_sessions) or [""]
        out: dict[str, PostureVerdict] = {}
        for check_id in check_ids:
            check = view.get(PostureCheck, check_id)
            if check is None:
                continue
            evaluator = EVALUATORS.get(check.type_id)
            if evaluator is None:
                out[check_id] = PostureVerdict(
                    check_id, False, f"{check.type_id}: not a check type Trellis evaluates"
                )
                continue
            if any(evaluator.passes(check, s, data, now) for s in sessions):
                out[check_id] = PostureVerdict(check_id, True)
                continue
            values = evaluator.failure(check, sessions[0], data, now)
            out[check_id] = PostureVerdict(
                check_id, False, _describe(check.type_id, values, sessions == [""])
            )
        return out

    # -- what-if and apply ----------------------------------------------------------------------
    def _run(
        self, operations: Sequence[Operation], base: StoreView, revision: int
    ) -> tuple[list[Change], list[Created]]:
        if len(operations) > MAX_BATCH_ITEMS:
            raise FieldError("items", f"at most {MAX_BATCH_ITEMS} items", len(operations))
        overlay = Overlay(base, revision)
        created: list[Created] = []
        with sandboxed(self.env, overlay) as bind:
            managers = {kind: bind(getattr(self.managers, kind)) for kind in KINDS}
            for index, operation in enumerate(operations):
                manager = managers.get(operation.kind)
                if manager is None:
                    raise at_item(FieldError("kind", "not a kind a batch may write", operation.kind), index)
                try:
                    new_id = operation.run(manager)
                except ControllerError as ex:
                    raise at_item(ex, index) from None
                if new_id is not None:
                    entity = overlay.get(manager.kind, new_id)
                    created.append(
                        Created(index, operation.kind, new_id, str(getattr(entity, "name", "") or ""))
                    )
        return overlay.final(), created

    def what_if(self, operations: Sequence[Operation], listed: int | None = None) -> WhatIf:
        """The access diff the writes would make, at the current revision, and the violations
        they would add to guardrails; nothing is written. More than :data:`MAX_DIFF_PAIRS`
        changed pairs: :class:`DiffTooLargeError` (400). With ``listed``, the diff's lists hold
        their first ``listed`` entries and its ``totals`` the exact counts (``Comparison.diff``)."""
        with self.store.write_lock():
            revision, view = self.store.last_seq, self.store.view()
        changes, created = self._run(operations, view, revision)
        rules = [Rule.of(g) for g in view.all(Guardrail)]
        online = self.managers.fleet.is_online
        # The live graph, held still, is the graph at the revision unless a batch landed since
        # (then a fork taken back to it); the writes are compared on it without forking it when
        # they change only policies (engine/analysis/diff.py).
        with self.access.reading() as (live, _):
            try:
                graph = self.history.rewind(live, revision) if self.history.changed_since(revision) else live
            except RevisionTooOldError:
                graph = None
            if graph is not None:
                comparison = compare_changes(graph, changes)
                diff = comparison.diff(MAX_DIFF_PAIRS, listed)
                verdicts = new_violations(graph, [], changes, rules, online, comparison) if rules else []
        if graph is None:  # the history moved past the revision meanwhile: as of a fresh fork
            revision, view, graph = self._consistent()
            changes, created = self._run(operations, view, revision)
            comparison = compare_changes(graph, changes)
            diff = comparison.diff(MAX_DIFF_PAIRS, listed)
            verdicts = new_violations(graph, [], changes, rules, online, comparison) if rules else []
        return WhatIf(revision, diff, tuple(created), len(changes), tuple(verdicts))

    def apply(self, operations: Sequence[Operation], revision: int, listed: int | None = None) -> Applied:
        """Commit the writes as one batch if nothing access-relevant changed since ``revision``
        (:class:`StaleRevisionError` otherwise); see the module docstring. ``listed``: as for
        :meth:`what_if`, for this answer's diff and a 409's."""
        if len(operations) > MAX_BATCH_ITEMS:
            raise FieldError("items", f"at most {MAX_BATCH_ITEMS} items", len(operations))
        deadline = time.monotonic() + STAGED_WAIT_SECONDS
        while True:
            with self.store.write_lock():
                current = self.store.last_seq
                if revision > current:
                    raise FieldError("revision", f"is ahead of the controller's revision {current}", revision)
                self._check_unchanged(revision, current, listed)
                if not _staged_access_changes(self.store):
                    changes, created = self._run(operations, self.store, current)
                    with self.access.reading() as (graph, _):
                        diff = compare_changes(graph, changes).diff(MAX_DIFF_PAIRS, listed)
                    # every check of a write sees the batch whole, as in Env.commit: the guardrails
                    # (409 when enforced) and the access-change stream's note of who made it
                    extra: list[Change] = []
                    for check in list(self.env.checks) if changes else ():
                        extra += check(changes)
                    if changes:
                        self.store.commit([*changes, *extra])
                    break
            # a writer's batch is staged but not published: once it is, it is in the history
            if time.monotonic() > deadline:
                raise StaleRevisionError(
                    revision, current, "writes made since the revision are still being committed; try again"
                )
            time.sleep(0.005)
        return Applied(revision, self.store.last_seq, diff, tuple(created), len(changes))

    def _check_unchanged(self, revision: int, current: int, listed: int | None = None) -> None:
        """Under the write lock: :class:`StaleRevisionError` with the diff since ``revision`` when
        an access-relevant batch was applied after it."""
        try:
            if not self.history.changed_since(revision):
                return
            with self.access.reading() as (graph, _):
                past = self.history.rewind(graph, revision)
                try:
                    diff: AccessDiff | None = compare(past, graph, self.history.touched_since(revision)).diff(
                        MAX_DIFF_PAIRS, listed
                    )
                except DiffTooLargeError:
                    diff = None  # too large to list: the 409 says so without it
        except RevisionTooOldError as ex:
            raise StaleRevisionError(
                revision,
                current,
                f"revision {revision} is older than this controller's history (from revision {ex.floor}): "
                "ask for a what-if again",
            ) from None
        raise StaleRevisionError(
            revision, current, f"access-relevant changes were applied since revision {revision}", diff
        )


def _describe(type_id: str, values: Mapping[str, Any], no_session: bool) -> str:
    """What a failing check's ``failure`` values say, in words."""
    parts = []
    if "expectedValue" in values:
        parts.append(f"expected {_text(values['expectedValue'])}")
    if "actualValue" in values:
        actual = values["actualValue"]
        parts.append(f"reported {_text(actual)}" if actual not in (None, "", []) else "nothing reported")
    for key, value in values.items():
        if key not in ("expectedValue", "actualValue"):
            parts.append(f"{key} {_text(value)}")
    if no_session and type_id == "MFA":
        parts.append("the identity has no API session")
    detail = ", ".join(parts)
    return f"{type_id.lower()}" + (f" ({detail})" if detail else "")


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


_ANALYSES: weakref.WeakKeyDictionary[Any, AnalysisManager] = weakref.WeakKeyDictionary()
_ANALYSES_LOCK = threading.Lock()


def analysis_for(managers: Managers) -> AnalysisManager:
    """The controller's one :class:`AnalysisManager` (made on first use: its guardrail check is
    then on every write of ``managers``)."""
    with _ANALYSES_LOCK:
        found = _ANALYSES.get(managers.access)
        if found is None:
            found = _ANALYSES[managers.access] = AnalysisManager(managers)
        return found
