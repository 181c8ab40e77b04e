"""Posture: what identities report, how checks read it, and the values the rest of Trellis sees.

OpenZiti keeps posture data in memory only (``model/posture_response_model.go`` ``PostureCache``):
per identity one OS, one domain, one MAC list and one entry per process check, plus per API
session its MFA state, its endpoint state (woken / unlocked times) and its SDK info, and the last
:data:`MAX_FAILURES` session requests refused for posture. :class:`PostureData` is that record.

Each check type has a module (:mod:`.os`, :mod:`.process`, :mod:`.domain`, :mod:`.mac`,
:mod:`.mfa`) with an :class:`Evaluator`: whether a check passes for an API session, its timeout,
the time left, when its data last changed, and what the client is told when it fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from engine.entities.posture import PostureCheck

#: ``timeout`` / ``timeoutRemaining`` of a check that never times out.
NO_TIMEOUT = -1
#: How many refused session requests are kept per identity (OpenZiti's ``MaxPostureFailures``).
MAX_FAILURES = 100
#: How many process reports no posture check of the identity reads are kept per identity, in each
#: of :attr:`PostureData.processes` (by check id) and :attr:`PostureData.process_paths` (by path):
#: the most recently reported ones. Reports a check reads are always kept (see
#: :mod:`engine.managers.posture`).
MAX_UNREAD_PROCESS_REPORTS = 16
#: promptOnWake / promptOnUnlock: how long after the event MFA must be passed again.
MFA_PROMPT_GRACE = timedelta(minutes=5)


# -- what the client service view shows (docs/policy.md §6) ----------------------------------
@dataclass(frozen=True)
class ProcessRef:
    """A process a check looks for, as a posture query names it."""

    os_type: str | None
    path: str | None


@dataclass(frozen=True)
class PostureQuery:
    """One posture check of a policy, evaluated for one API session (``postureQuery``)."""

    id: str
    name: str
    query_type: str
    is_passing: bool
    timeout: int
    timeout_remaining: int
    created_at: datetime
    #: The check's ``updatedAt``, or when the data it reads last changed if that is later.
    updated_at: datetime
    tags: dict[str, Any] = field(default_factory=dict)
    process: ProcessRef | None = None
    processes: tuple[ProcessRef, ...] | None = None
    prompt_on_wake: bool | None = None
    prompt_on_unlock: bool | None = None
    timeout_at: datetime | None = None


@dataclass(frozen=True)
class PolicyPosture:
    """One service policy linking an identity and a service, with its posture (``postureQueries``)."""

    policy_id: str
    policy_type: str
    is_passing: bool
    queries: tuple[PostureQuery, ...] = ()


def dummy_policy_id(policy_type: str) -> str:
    """The id OpenZiti shows for a permission when no posture check exists at all."""
    return f"dummy {policy_type.lower()} policy: no posture checks defined"


# -- the data identities report ---------------------------------------------------------------
@dataclass
class OsData:
    type: str = ""
    version: str = ""
    build: str = ""
    check_id: str = ""
    last_updated_at: datetime | None = None
    timed_out: bool = False


@dataclass
class DomainData:
    name: str = ""
    check_id: str = ""
    last_updated_at: datetime | None = None
    timed_out: bool = False


@dataclass
class MacData:
    addresses: list[str] = field(default_factory=list)
    check_id: str = ""
    last_updated_at: datetime | None = None
    timed_out: bool = False


@dataclass
class ProcessData:
    check_id: str
    path: str = ""
    is_running: bool = False
    binary_hash: str = ""
    signer_fingerprints: list[str] = field(default_factory=list)
    last_updated_at: datetime | None = None
    timed_out: bool = False


@dataclass
class SessionPostureData:
    """What belongs to one API session: MFA, endpoint state and the SDK it runs."""

    passed_mfa_at: datetime | None = None
    woken_at: datetime | None = None
    unlocked_at: datetime | None = None
    sdk_info: dict[str, Any] | None = None


@dataclass(frozen=True)
class CheckFailure:
    """One failing check, as recorded for failed service requests."""

    check_id: str
    check_name: str
    check_type: str
    #: ``actualValue`` / ``expectedValue`` (and MFA's ``criteria``, PROCESS_MULTI's ``semantic``),
    #: in wire form; timestamps stay ``datetime`` until rendered.
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyFailure:
    policy_id: str
    policy_name: str
    checks: tuple[CheckFailure, ...]


@dataclass(frozen=True)
class FailedServiceRequest:
    """A session request refused for posture (``failedServiceRequest``)."""

    when: datetime
    api_session_id: str
    service_id: str
    service_name: str
    session_type: str
    policy_failures: tuple[PolicyFailure, ...]


@dataclass
class PostureData:
    """Everything known about one identity's posture."""

    os: OsData = field(default_factory=OsData)
    domain: DomainData = field(default_factory=DomainData)
    mac: MacData = field(default_factory=MacData)
    #: Process reports by posture check id (OpenZiti's ``Processes``).
    processes: dict[str, ProcessData] = field(default_factory=dict)
    #: The latest report per process path (OpenZiti's ``ProcessPathMap``, read by PROCESS_MULTI).
    process_paths: dict[str, ProcessData] = field(default_factory=dict)
    api_sessions: dict[str, SessionPostureData] = field(default_factory=dict)
    failures: list[FailedServiceRequest] = field(default_factory=list)

    def session(self, api_session_id: str) -> SessionPostureData | None:
        return self.api_sessions.get(api_session_id)


# -- what a check type implements --------------------------------------------------------------
class Evaluator(Protocol):
    """One posture check type's rules (docs/policy.md §6)."""

    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        """Whether ``check`` passes for the API session."""
        ...

    def timeout(self, check: PostureCheck) -> int:
        """Seconds a pass lasts, or :data:`NO_TIMEOUT`."""
        ...

    def timeout_remaining(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> int:
        """Seconds left before the check starts failing, or :data:`NO_TIMEOUT`."""
        ...

    def last_updated_at(self, check: PostureCheck, api_session_id: str, data: PostureData) -> datetime | None:
        """When the data this check reads last changed, if the type tracks it."""
        ...

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        """What was expected and what was reported, for a failed service request."""
        ...


class NoTimeout:
    """The timeout rules of every check type but MFA: none."""

    def timeout(self, check: PostureCheck) -> int:
        return NO_TIMEOUT

    def timeout_remaining(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> int:
        return NO_TIMEOUT

    def last_updated_at(self, check: PostureCheck, api_session_id: str, data: PostureData) -> datetime | None:
        return None


# -- what clients send (posture responses) ------------------------------------------------------
OS, PROCESS, PROCESS_MULTI, DOMAIN, MAC, MFA = "OS", "PROCESS", "PROCESS_MULTI", "DOMAIN", "MAC", "MFA"
ENDPOINT_STATE = "ENDPOINT_STATE"
#: The response types a client may send (the spec's ``postureResponseCreate`` subtypes).
RESPONSE_TYPES = (DOMAIN, ENDPOINT_STATE, MAC, OS, PROCESS)


@dataclass(frozen=True)
class PostureResponse:
    """One posture response: ``check_id`` names the posture check it answers."""

    check_id: str
    type_id: str
    domain: str = ""
    mac_addresses: tuple[str, ...] = ()
    os_type: str = ""
    os_version: str = ""
    os_build: str = ""
    path: str = ""
    is_running: bool = False
    hash: str = ""
    signer_fingerprints: tuple[str, ...] = ()
    woken: bool = False
    unlocked: bool = False


@dataclass(frozen=True)
class ServiceTimeout:
    """A service whose MFA posture timer a wake or unlock event shortened (``postureResponseService``)."""

    id: str
    name: str
    query_type: str
    timeout: int
    timeout_remaining: int


@dataclass(frozen=True)
class PostureResult:
    """A session request's posture verdict (§6 gating rule)."""

    passed: bool
    #: The policies of the requested type whose checks all pass (recorded on the session).
    passing_policy_ids: tuple[str, ...] = ()
    #: On failure: per failing policy, its failing checks.
    failures: tuple[PolicyFailure, ...] = ()
