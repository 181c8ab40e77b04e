"""Posture: the data identities report, checks evaluated against it, and what it gates.

:class:`PostureManager` is OpenZiti's posture cache and posture response manager in one
(``model/posture_response_model.go``, ``posture_response_manager.go``): posture data is kept in
memory per identity (and per API session for MFA and endpoint state), never stored, and dropped
when its identity or API session goes. Its answers follow docs/policy.md §6:

- :meth:`PostureManager.evaluate` is the gating rule for session creation: OR over the service
  policies of the requested type linking identity and service, AND over each policy's checks; a
  policy without checks passes; no posture check in the system means no evaluation at all. A
  refusal is remembered (the last :data:`MAX_FAILURES` per identity) for
  ``/identities/{id}/failed-service-requests``.
- :meth:`PostureManager.service_queries` is the client service view's ``postureQueries``.
- :meth:`PostureManager.respond` takes posture responses; listeners (the session manager) hear
  which identity's data changed.

What is kept, and why it stays bounded (issue 18: invented ids and paths grew a worker by 114 MB).
OpenZiti keys the data as kept here and never drops any of it, so an identity could grow its
entry without end by sending process reports under ever new check ids and paths. Here:

- OS, domain and MAC are one slot each per identity, replaced by each report whatever its id (as
  OpenZiti); endpoint state is one slot per live API session (its ``id`` is not kept: the C SDK
  sends ``"0"``); MFA comes from the API session, never from a client.
- Process reports are kept by check id (read by PROCESS checks) and by path (read by
  PROCESS_MULTI checks), as OpenZiti, but only the reports some posture check of the identity
  reads stay without limit: a report whose check id names a PROCESS or PROCESS_MULTI check of
  one of the identity's service policies, or whose path one of those checks names. Others (a
  check not (yet / any more) assigned, an invented id or path) are kept only as the
  :data:`MAX_UNREAD_PROCESS_REPORTS` most recent ones, so ``posture-data`` still shows what a
  client reported and a check assigned a moment after its report still finds it. Real SDKs only
  answer the posture queries of their services, which their checks read, so they lose nothing.
  An identity's process data is thus bounded by the checks the administrators assigned to it
  plus that small pool.
- Field lengths and list sizes are limited on the way in (``api/schemas/posture.py``), so each
  slot and report is bounded too; data goes with its identity (deleted) and its API session
  (endpoint state, SDK info), as in OpenZiti. Identity data is kept across API sessions, as in
  OpenZiti: an SDK that logs in again need not send unchanged data again.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from engine.entities.identities import ApiSession, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.services import Service
from engine.errors import NotFoundError
from engine.managers._base import Env
from engine.managers.access import AccessManager, Grant
from engine.managers.posture._core import (
    DOMAIN,
    ENDPOINT_STATE,
    MAC,
    MAX_FAILURES,
    MAX_UNREAD_PROCESS_REPORTS,
    MFA,
    MFA_PROMPT_GRACE,
    NO_TIMEOUT,
    OS,
    PROCESS,
    PROCESS_MULTI,
    CheckFailure,
    Evaluator,
    FailedServiceRequest,
    PolicyFailure,
    PolicyPosture,
    PostureData,
    PostureQuery,
    PostureResponse,
    PostureResult,
    ProcessData,
    ProcessRef,
    ServiceTimeout,
    SessionPostureData,
    dummy_policy_id,
)
from engine.managers.posture.domain import DomainEvaluator
from engine.managers.posture.mac import MacEvaluator, clean_hex
from engine.managers.posture.mfa import MfaEvaluator
from engine.managers.posture.os import OsEvaluator
from engine.managers.posture.process import ProcessEvaluator, ProcessMultiEvaluator
from engine.managers.posture.sharing import export_data, import_data
from engine.ports import Change, Delete, PostureState

__all__ = [
    "FailedServiceRequest",
    "PolicyPosture",
    "PostureData",
    "PostureManager",
    "PostureQuery",
    "PostureResponse",
    "PostureResult",
    "ServiceTimeout",
]

EVALUATORS: dict[str, Evaluator] = {
    OS: OsEvaluator(),
    PROCESS: ProcessEvaluator(),
    PROCESS_MULTI: ProcessMultiEvaluator(),
    DOMAIN: DomainEvaluator(),
    MAC: MacEvaluator(),
    MFA: MfaEvaluator(),
}

Listener = Callable[[str], None]

log = logging.getLogger(__name__)


class PostureManager:
    def __init__(self, env: Env, access: AccessManager) -> None:
        self.env = env
        self.access = access
        self._data: dict[str, PostureData] = {}
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        # the other processes of a shared store: what they are told, and what they tell
        self._board = env.posture_board
        #: Per identity, the state last published here or taken in from another process.
        self._shared: dict[str, PostureState] = {}
        self._board.attach(self._absorb)

    # -- wiring ----------------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(identity_id)`` after that identity's posture data changed."""
        self._listeners.append(listener)

    def changed_at(self, identity_id: str) -> datetime | None:
        """The latest time the identity's posture data says it was updated (its responses'
        times, kept with the data and shared with it): the same in every process holding the
        same data. None when it has none."""
        with self._lock:
            data = self._data.get(identity_id)
            if data is None:
                return None
            times = [data.os.last_updated_at, data.domain.last_updated_at, data.mac.last_updated_at]
            times += [p.last_updated_at for p in data.processes.values()]
            times += [p.last_updated_at for p in data.process_paths.values()]
            for session in data.api_sessions.values():
                times += [session.passed_mfa_at, session.woken_at, session.unlocked_at]
        return max((at for at in times if at is not None), default=None)

    def on_commit(self, changes: list[Change]) -> None:
        """Forget the posture of deleted identities and deleted API sessions (an Env listener)."""
        with self._lock:
            for change in changes:
                if not isinstance(change, Delete):
                    continue
                if change.kind is Identity:
                    self._data.pop(change.id, None)
                    self._shared.pop(change.id, None)
                    if not self.env.store.replaying:  # the process that deleted it says so
                        self._board.forget(change.id)
                elif change.kind is ApiSession:
                    for data in self._data.values():
                        data.api_sessions.pop(change.id, None)

    # -- posture responses -----------------------------------------------------------------------
    def respond(
        self, identity_id: str, api_session_id: str, responses: Sequence[PostureResponse]
    ) -> list[ServiceTimeout]:
        """Record posture responses; the services whose MFA timers a wake or unlock shortened."""
        now = self.env.clock.now()
        woken = any(r.type_id == ENDPOINT_STATE and r.woken for r in responses)
        unlocked = any(r.type_id == ENDPOINT_STATE and r.unlocked for r in responses)
        # what the identity's checks read, asked before taking the lock (the graph has its own)
        read = self._process_reads(identity_id) if any(r.type_id == PROCESS for r in responses) else None
        with self._lock:
            data = self._data.setdefault(identity_id, PostureData())
            for response in responses:
                _apply(data, api_session_id, response, now)
            if read is not None:
                _forget_unread(data.processes, read[0])
                _forget_unread(data.process_paths, read[1])
            shared = export_data(data) if self._board.shares else None  # only if anyone reads it
            if shared is not None:
                self._shared[identity_id] = shared
        if shared is not None:
            self._board.publish(identity_id, shared)
        timeouts: list[ServiceTimeout] = []
        if woken or unlocked:
            passed_at = self._passed_mfa_at(api_session_id)
            if passed_at is not None:
                timeouts = self._shortened_timers(identity_id, now - passed_at, woken, unlocked)
        for listener in list(self._listeners):
            listener(identity_id)
        return timeouts

    def _absorb(self, states: Mapping[str, PostureState]) -> None:
        """What other processes published (identity id -> state): it replaces this process's
        data of each identity (the refused requests it remembers stay); listeners hear of each."""
        taken: list[str] = []
        for identity_id, state in states.items():
            try:
                data = import_data(state)
            except (KeyError, TypeError, ValueError) as ex:
                log.warning("posture: data another process published cannot be read: %s", ex)
                continue
            if self.env.store.get(Identity, identity_id) is None:
                continue  # deleted meanwhile: its data goes with it
            with self._lock:
                held = self._data.get(identity_id)
                if held is not None:
                    data.failures = held.failures
                self._data[identity_id] = data
                self._shared[identity_id] = state
            taken.append(identity_id)
        for identity_id in taken:
            for listener in list(self._listeners):
                listener(identity_id)

    def _refresh(self, identity_id: str) -> bool:
        """Take the identity's data as last published by any process; whether it differed."""
        state = self._board.latest(identity_id)
        if state is None:
            return False
        with self._lock:
            if self._shared.get(identity_id) == state:
                return False
        self._absorb({identity_id: state})
        return True

    def _process_reads(self, identity_id: str) -> tuple[set[str], set[str]]:
        """The check ids and process paths the identity's PROCESS / PROCESS_MULTI checks read:
        the checks of the service policies that select the identity."""
        ids: set[str] = set()
        paths: set[str] = set()
        if not self.access.has_posture_checks():
            return ids, paths
        try:
            policies = self.access.policies_of(Identity, identity_id, ServicePolicy)
        except NotFoundError:  # deleted meanwhile: its data goes with it
            return ids, paths
        seen: set[str] = set()
        for policy in policies:
            if not policy.posture_check_roles:
                continue
            try:
                checks = self.access.members_of(ServicePolicy, policy.id, PostureCheck)
            except NotFoundError:
                continue
            for check in checks:
                if check.id in seen or check.type_id not in (PROCESS, PROCESS_MULTI):
                    continue
                seen.add(check.id)
                ids.add(check.id)
                details = check.details
                wanted = [details.get("process") or {}] if check.type_id == PROCESS else []
                wanted += list(details.get("processes") or [])
                paths.update(str(p["path"]) for p in wanted if isinstance(p, dict) and p.get("path"))
        return ids, paths

    def _shortened_timers(
        self, identity_id: str, since_mfa: timedelta, woken: bool, unlocked: bool
    ) -> list[ServiceTimeout]:
        """OpenZiti's ``GetEndpointStateChangeAffectedServices``, kept to the identity's services."""
        grace = int(MFA_PROMPT_GRACE.total_seconds())
        mine = {p.id for p in self.access.policies_of(Identity, identity_id, ServicePolicy)}
        services: dict[str, ServiceTimeout] = {}
        for check in self.env.store.all(PostureCheck):
            if check.type_id != MFA:
                continue
            details = check.details
            prompted = (details.get("promptOnWake") and woken) or (details.get("promptOnUnlock") and unlocked)
            timeout = EVALUATORS[MFA].timeout(check)
            if not prompted or (timeout != NO_TIMEOUT and timeout - int(since_mfa.total_seconds()) <= grace):
                continue
            for policy in self.access.policies_of(PostureCheck, check.id, ServicePolicy):
                if policy.id not in mine:
                    continue
                for service in self.access.members_of(ServicePolicy, policy.id, Service):
                    known = services.get(service.id)
                    if known is None or timeout < known.timeout:
                        services[service.id] = ServiceTimeout(service.id, service.name, MFA, timeout, grace)
        return [services[k] for k in sorted(services)]

    # -- evaluation ------------------------------------------------------------------------------
    def service_queries(self, identity_id: str, api_session_id: str, service_id: str) -> list[PolicyPosture]:
        """The client service view's ``postureQueries`` for one service (§6)."""
        grants = self.access.grants(identity_id, [service_id])
        return self.service_queries_for(identity_id, api_session_id)(grants)[service_id]

    def service_queries_for(
        self, identity_id: str, api_session_id: str
    ) -> Callable[[Mapping[str, Grant]], dict[str, list[PolicyPosture]]]:
        """:meth:`service_queries` of a request's services, from their grants
        (:meth:`AccessManager.grants`): the time, the posture data and each check's query are
        taken once per request, and each call holds the lock once for all its services."""
        if not self.access.has_posture_checks():

            def dummies(grants: Mapping[str, Grant]) -> dict[str, list[PolicyPosture]]:
                return {
                    service_id: [PolicyPosture(dummy_policy_id(p), p, True) for p in grant.permissions]
                    for service_id, grant in grants.items()
                }

            return dummies
        now = self.env.clock.now()
        with self._lock:
            data = self._view(identity_id, api_session_id)
        passing: dict[str, bool] = {}
        asked: dict[str, PostureQuery] = {}

        def query(check: PostureCheck) -> PostureQuery:
            found = asked.get(check.id)
            if found is None:
                found = asked[check.id] = self._query(check, api_session_id, data, now, passing)
            return found

        #: policy id -> its posture: a policy's checks, and so its answer, are the same for every
        #: service it grants (a page of services shares a few policies)
        made: dict[str, PolicyPosture] = {}

        def policy(policy_id: str, policy_type: str, check_ids: tuple[str, ...]) -> PolicyPosture:
            found = made.get(policy_id)
            if found is None:
                checked = tuple(query(check) for check in self._checks(check_ids))
                found = made[policy_id] = PolicyPosture(
                    policy_id, policy_type, all(q.is_passing for q in checked), checked
                )
            return found

        def queries(grants: Mapping[str, Grant]) -> dict[str, list[PolicyPosture]]:
            out: dict[str, list[PolicyPosture]] = {}
            with self._lock:
                for service_id, grant in grants.items():
                    row = []
                    for p, (t, checks) in grant.posture.items():
                        found = made.get(p)
                        row.append(found if found is not None else policy(p, t, checks))
                    out[service_id] = row
            return out

        return queries

    def evaluate(
        self,
        identity_id: str,
        api_session_id: str,
        service_id: str,
        session_type: str,
        *,
        record_failure: bool = False,
        refresh: bool = False,
    ) -> PostureResult:
        """Whether the API session may open a ``session_type`` session to the service (§6).

        With ``record_failure`` a refusal is kept for ``failed-service-requests`` (a session
        request; re-checks of existing sessions are not). A session request, and with ``refresh``
        any other first decision (a router's Dial), is refused only after the identity's data as
        other processes of a shared store last published it was taken in: a posture response
        sent to one of them a moment before counts.
        """
        policies = self.access.posture_checks_for(identity_id, service_id, session_type)
        if not policies or not any(policies.values()) or not self.access.has_posture_checks():
            # nothing to check: no granting policy names a posture check (a policy without
            # checks passes), or no posture check exists at all
            return PostureResult(True, tuple(sorted(policies)))
        result = self._evaluate(identity_id, api_session_id, service_id, session_type, policies)
        if not result.passed and (record_failure or refresh) and self._refresh(identity_id):
            # responses sent to another process of a shared store a moment ago count too
            result = self._evaluate(identity_id, api_session_id, service_id, session_type, policies)
        if result.passed or not record_failure:
            return result
        service = self.env.store.get(Service, service_id)
        self._remember(
            identity_id,
            FailedServiceRequest(
                when=self.env.clock.now(),
                api_session_id=api_session_id,
                service_id=service_id,
                service_name=service.name if service else "",
                session_type=session_type,
                policy_failures=result.failures,
            ),
        )
        return result

    def _evaluate(
        self,
        identity_id: str,
        api_session_id: str,
        service_id: str,
        session_type: str,
        policies: Mapping[str, Sequence[str]],
    ) -> PostureResult:
        """One evaluation of ``policies`` (policy id -> its check ids) on the data held now."""
        now = self.env.clock.now()
        with self._lock:
            data = self._view(identity_id, api_session_id)
            results: dict[str, CheckFailure | None] = {}
            passing: list[str] = []
            failures: list[PolicyFailure] = []
            for policy_id, check_ids in policies.items():
                failed = []
                for check in self._checks(check_ids):
                    if check.id not in results:
                        results[check.id] = _failure(check, api_session_id, data, now)
                    failure = results[check.id]
                    if failure is not None:
                        failed.append(failure)
                if failed:
                    policy = self.env.store.get(ServicePolicy, policy_id)
                    failures.append(PolicyFailure(policy_id, policy.name if policy else "", tuple(failed)))
                else:
                    passing.append(policy_id)
            if passing:
                return PostureResult(True, tuple(passing))
        return PostureResult(False, (), tuple(failures))

    # -- management views ------------------------------------------------------------------------
    def posture_data(self, identity_id: str) -> PostureData:
        """A copy of an identity's posture data, with an entry for each of its API sessions."""
        self._require_identity(identity_id)
        sessions = self.env.store.find_by(ApiSession, "identity_id", identity_id)
        with self._lock:
            data = copy.deepcopy(self._data.get(identity_id) or PostureData())
        identity = self.env.store.get(Identity, identity_id)
        for session in sessions:
            entry = data.api_sessions.setdefault(session.id, SessionPostureData())
            entry.passed_mfa_at = session.mfa_completed_at
            if entry.sdk_info is None and identity is not None and identity.sdk_info:
                entry.sdk_info = dict(identity.sdk_info)
        live = {s.id for s in sessions}
        data.api_sessions = {k: v for k, v in data.api_sessions.items() if k in live}
        data.failures = []
        return data

    def identities_with_data(self) -> set[str]:
        """The identities this process holds posture data for (reported, or failures kept)."""
        with self._lock:
            return set(self._data)

    def failed_requests(self, identity_id: str) -> list[FailedServiceRequest]:
        """The identity's recent session requests refused for posture, oldest first."""
        self._require_identity(identity_id)
        with self._lock:
            data = self._data.get(identity_id)
            return list(data.failures) if data else []

    # -- helpers ---------------------------------------------------------------------------------
    def _require_identity(self, identity_id: str) -> None:
        if self.env.store.get(Identity, identity_id) is None:
            raise NotFoundError()

    def _passed_mfa_at(self, api_session_id: str) -> datetime | None:
        session = self.env.store.get(ApiSession, api_session_id)
        return session.mfa_completed_at if session is not None else None

    def _view(self, identity_id: str, api_session_id: str) -> PostureData:
        """The identity's data (call under the lock) with the API session's MFA state current."""
        data = self._data.setdefault(identity_id, PostureData())
        entry = data.api_sessions.setdefault(api_session_id, SessionPostureData())
        entry.passed_mfa_at = self._passed_mfa_at(api_session_id)
        if entry.sdk_info is None:
            identity = self.env.store.get(Identity, identity_id)
            if identity is not None and identity.sdk_info:
                entry.sdk_info = dict(identity.sdk_info)
        return data

    def _checks(self, ids: Iterable[str]) -> list[PostureCheck]:
        return [c for c in (self.env.store.get(PostureCheck, i) for i in ids) if c is not None]

    def _query(
        self,
        check: PostureCheck,
        api_session_id: str,
        data: PostureData,
        now: datetime,
        passing: dict[str, bool],
    ) -> PostureQuery:
        evaluator = EVALUATORS.get(check.type_id)
        if evaluator is None:
            return _query_of(check, False, NO_TIMEOUT, NO_TIMEOUT, check.updated_at, None)
        if check.id not in passing:
            passing[check.id] = evaluator.passes(check, api_session_id, data, now)
        timeout = evaluator.timeout(check)
        remaining = evaluator.timeout_remaining(check, api_session_id, data, now)
        changed = evaluator.last_updated_at(check, api_session_id, data)
        updated = changed if changed is not None and changed > check.updated_at else check.updated_at
        timeout_at = None
        if timeout != NO_TIMEOUT and remaining > 0:
            timeout_at = now + timedelta(seconds=remaining)
        return _query_of(check, passing[check.id], timeout, remaining, updated, timeout_at)

    def _remember(self, identity_id: str, failure: FailedServiceRequest) -> None:
        data = self._data.setdefault(identity_id, PostureData())
        data.failures.append(failure)
        del data.failures[:-MAX_FAILURES]


def _query_of(
    check: PostureCheck,
    is_passing: bool,
    timeout: int,
    remaining: int,
    updated_at: datetime,
    timeout_at: datetime | None,
) -> PostureQuery:
    details = check.details
    process = processes = None
    prompt_on_wake = prompt_on_unlock = None
    if check.type_id == PROCESS and details.get("process"):
        process = ProcessRef(details["process"].get("osType"), details["process"].get("path"))
    elif check.type_id == PROCESS_MULTI:
        processes = tuple(ProcessRef(p.get("osType"), p.get("path")) for p in details.get("processes") or [])
    elif check.type_id == MFA:
        prompt_on_wake = bool(details.get("promptOnWake"))
        prompt_on_unlock = bool(details.get("promptOnUnlock"))
    return PostureQuery(
        id=check.id,
        name=check.name,
        query_type=check.type_id,
        is_passing=is_passing,
        timeout=timeout,
        timeout_remaining=remaining,
        created_at=check.created_at,
        updated_at=updated_at,
        tags=dict(check.tags or {}),
        process=process,
        processes=processes,
        prompt_on_wake=prompt_on_wake,
        prompt_on_unlock=prompt_on_unlock,
        timeout_at=timeout_at,
    )


def _failure(
    check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
) -> CheckFailure | None:
    """None when ``check`` passes; what failed otherwise."""
    evaluator = EVALUATORS.get(check.type_id)
    if evaluator is not None and evaluator.passes(check, api_session_id, data, now):
        return None
    values = evaluator.failure(check, api_session_id, data, now) if evaluator is not None else {}
    return CheckFailure(check.id, check.name, check.type_id, values)


def _apply(data: PostureData, api_session_id: str, response: PostureResponse, now: datetime) -> None:
    """Fold one response into the identity's data (OpenZiti's ``PostureResponse*.Apply``)."""
    kind = response.type_id
    if kind == OS:
        data.os = dataclasses.replace(
            data.os,
            type=response.os_type,
            version=response.os_version,
            build=response.os_build,
            check_id=response.check_id,
            last_updated_at=now,
            timed_out=False,
        )
    elif kind == DOMAIN:
        data.domain = dataclasses.replace(
            data.domain,
            name=response.domain,
            check_id=response.check_id,
            last_updated_at=now,
            timed_out=False,
        )
    elif kind == MAC:
        data.mac = dataclasses.replace(
            data.mac,
            addresses=[clean_hex(a) for a in response.mac_addresses],
            check_id=response.check_id,
            last_updated_at=now,
            timed_out=False,
        )
    elif kind == PROCESS:
        report = ProcessData(
            check_id=response.check_id,
            path=response.path,
            is_running=response.is_running,
            binary_hash=clean_hex(response.hash),
            signer_fingerprints=[clean_hex(f) for f in response.signer_fingerprints],
            last_updated_at=now,
        )
        # re-inserted, not updated in place: each map stays in order of last report
        data.processes.pop(response.check_id, None)
        data.processes[response.check_id] = report
        if report.path:
            data.process_paths.pop(report.path, None)
            data.process_paths[report.path] = report
    elif kind == ENDPOINT_STATE:
        entry = data.api_sessions.setdefault(api_session_id, SessionPostureData())
        if response.woken:
            entry.woken_at = now
        if response.unlocked:
            entry.unlocked_at = now


def _forget_unread(reports: dict[str, ProcessData], read: set[str]) -> None:
    """Keep every report under a key in ``read``, and the :data:`MAX_UNREAD_PROCESS_REPORTS`
    latest of the others (``reports`` is in order of last report)."""
    unread = [key for key in reports if key not in read]
    for key in unread[: max(0, len(unread) - MAX_UNREAD_PROCESS_REPORTS)]:
        del reports[key]
