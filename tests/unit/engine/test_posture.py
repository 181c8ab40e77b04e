"""Posture: each check type's rules, the gating rule and the posture queries (docs/policy.md §6),
over the in-memory store with a fixed clock."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.json_schemas import JsonSchemaChecker
from api.schemas.posture import render_posture_queries
from engine.entities.identities import ApiSession, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.services import Service
from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.posture import PostureManager, PostureResponse
from engine.managers.posture._core import (
    MAX_FAILURES,
    MAX_UNREAD_PROCESS_REPORTS,
    PostureData,
    ProcessData,
    SessionPostureData,
)
from engine.managers.posture.domain import DomainEvaluator
from engine.managers.posture.mac import MacEvaluator
from engine.managers.posture.mfa import MfaEvaluator
from engine.managers.posture.os import OsEvaluator, parse_range, parse_version
from engine.managers.posture.process import ProcessEvaluator, ProcessMultiEvaluator
from engine.ports import UnitOfWork
from engine.testing import CheapHasher, CountingIds, FixedClock
from storage.memory import MemoryStore

START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SESSION = "api-session-1"


def check(type_id: str, id: str = "check-1", **details: Any) -> PostureCheck:
    return PostureCheck(
        id=id, created_at=START, updated_at=START, name=f"{type_id}-check", type_id=type_id, details=details
    )


# == OS ============================================================================================
@pytest.mark.parametrize(
    ("version_range", "version", "expected"),
    [
        ("10.0.19041", "10.0.19041", True),
        ("10.0.19041", "10.0.19042", False),
        (">=10.0.0", "10.0.19041", True),
        (">=10.0.0", "6.1.7601", False),
        (">1.0.0 <2.0.0", "1.5.0", True),
        (">1.0.0 <2.0.0", "2.0.0", False),
        ("<1.0.0 || >=3.0.0", "3.1.0", True),
        ("<1.0.0 || >=3.0.0", "2.0.0", False),
        ("!=1.2.3", "1.2.4", True),
        ("1.x", "1.9.0", True),
        ("1.x", "2.0.0", False),
        ("1.2.x", "1.2.7", True),
        (">=1.x", "0.9.0", False),
        ("<=1.x", "1.99.0", True),
        (">=1.0.0", "1.0.0-beta", False),
    ],
)
def test_os_version_ranges(version_range: str, version: str, expected: bool) -> None:
    predicate = parse_range(version_range)
    parsed = parse_version(version)

    assert predicate is not None
    assert parsed is not None
    assert predicate(parsed) is expected


@pytest.mark.parametrize("text", ["", "10", "10.0", "abc", ">=", "1.2.3 ||"])
def test_unparseable_os_version_ranges(text: str) -> None:
    assert parse_range(text) is None


def _os_data(os_type: str, version: str) -> PostureData:
    data = PostureData()
    data.os.type, data.os.version = os_type, version
    return data


@pytest.mark.parametrize(
    ("systems", "os_type", "version", "expected"),
    [
        ([{"type": "Windows", "versions": []}], "windows", "anything", True),
        ([{"type": "Windows", "versions": [">=10.0.0"]}], "Windows", "10.0.19041", True),
        ([{"type": "Windows", "versions": [">=10.0.0"]}], "Windows", "10.0", False),
        ([{"type": "Windows", "versions": [">=10.0.0"]}], "Linux", "10.0.0", False),
        ([{"type": "Linux", "versions": ["not a range"]}], "Linux", "1.0.0", True),
        ([], "Linux", "5.4.0", False),
    ],
)
def test_os_check(systems: list[dict[str, Any]], os_type: str, version: str, expected: bool) -> None:
    assert (
        OsEvaluator().passes(
            check("OS", operatingSystems=systems), SESSION, _os_data(os_type, version), START
        )
        is expected
    )


def test_os_check_without_data_fails() -> None:
    assert not OsEvaluator().passes(
        check("OS", operatingSystems=[{"type": "Linux", "versions": []}]), SESSION, PostureData(), START
    )


# == DOMAIN and MAC ================================================================================
@pytest.mark.parametrize(("reported", "expected"), [("CORP.example", True), ("other", False), ("", False)])
def test_domain_check(reported: str, expected: bool) -> None:
    data = PostureData()
    data.domain.name = reported

    assert (
        DomainEvaluator().passes(check("DOMAIN", domains=["corp.example"]), SESSION, data, START) is expected
    )


@pytest.mark.parametrize(
    ("reported", "expected"),
    [(["0a1b2c3d4e5f", "ffffffffffff"], True), (["000000000000"], False), ([], False)],
)
def test_mac_check(reported: list[str], expected: bool) -> None:
    data = PostureData()
    data.mac.addresses = reported

    assert (
        MacEvaluator().passes(check("MAC", macAddresses=["0a1b2c3d4e5f"]), SESSION, data, START) is expected
    )


# == PROCESS and PROCESS_MULTI =====================================================================
def _process_data(check_id: str, **fields: Any) -> PostureData:
    data = PostureData()
    report = ProcessData(check_id=check_id, **fields)
    data.processes[check_id] = report
    data.process_paths[report.path] = report
    return data


@pytest.mark.parametrize(
    ("wanted", "report", "expected"),
    [
        ({}, {"is_running": True}, True),
        ({}, {"is_running": False}, False),
        ({"hashes": ["aa", "bb"]}, {"is_running": True, "binary_hash": "BB"}, True),
        ({"hashes": ["aa"]}, {"is_running": True, "binary_hash": "cc"}, False),
        ({"signerFingerprint": "f1"}, {"is_running": True, "signer_fingerprints": ["F0", "F1"]}, True),
        ({"signerFingerprint": "f1"}, {"is_running": True, "signer_fingerprints": ["f0"]}, False),
    ],
)
def test_process_check(wanted: dict[str, Any], report: dict[str, Any], expected: bool) -> None:
    rule = check("PROCESS", process={"osType": "Linux", "path": "/bin/agent", **wanted})
    data = _process_data("check-1", path="/bin/agent", **report)

    assert ProcessEvaluator().passes(rule, SESSION, data, START) is expected


def test_process_check_reads_the_report_for_its_own_id() -> None:
    rule = check("PROCESS", process={"osType": "Linux", "path": "/bin/agent"})

    assert not ProcessEvaluator().passes(
        rule, SESSION, _process_data("another-check", path="/bin/agent", is_running=True), START
    )


@pytest.mark.parametrize(("semantic", "expected"), [("AllOf", False), ("AnyOf", True)])
def test_process_multi_applies_its_semantic(semantic: str, expected: bool) -> None:
    rule = check(
        "PROCESS_MULTI",
        semantic=semantic,
        processes=[
            {"osType": "Linux", "path": "/bin/a", "hashes": ["aa"]},
            {"osType": "Linux", "path": "/bin/b", "signerFingerprints": ["f1"]},
        ],
    )
    data = _process_data("x", path="/bin/a", is_running=True, binary_hash="aa")
    data.process_paths["/bin/b"] = ProcessData(
        check_id="y", path="/bin/b", is_running=True, signer_fingerprints=["f2"]
    )

    assert ProcessMultiEvaluator().passes(rule, SESSION, data, START) is expected


def test_process_multi_all_of_passes_when_every_process_does() -> None:
    rule = check(
        "PROCESS_MULTI",
        semantic="AllOf",
        processes=[{"osType": "Linux", "path": "/bin/a"}, {"osType": "Linux", "path": "/bin/b"}],
    )
    data = _process_data("x", path="/bin/a", is_running=True)
    data.process_paths["/bin/b"] = ProcessData(check_id="y", path="/bin/b", is_running=True)

    assert ProcessMultiEvaluator().passes(rule, SESSION, data, START)


# == MFA ===========================================================================================
def _mfa_data(passed: datetime | None, **state: datetime | None) -> PostureData:
    data = PostureData()
    data.api_sessions[SESSION] = SessionPostureData(passed_mfa_at=passed, **state)  # type: ignore[arg-type]
    return data


def test_mfa_needs_a_passed_mfa_on_this_api_session() -> None:
    rule = check("MFA", timeoutSeconds=-1)
    data = _mfa_data(START)

    assert MfaEvaluator().passes(rule, SESSION, data, START)
    assert not MfaEvaluator().passes(rule, "another-session", data, START)
    assert not MfaEvaluator().passes(rule, SESSION, _mfa_data(None), START)


def test_mfa_times_out() -> None:
    rule = check("MFA", timeoutSeconds=600)
    data = _mfa_data(START)
    mfa = MfaEvaluator()

    assert mfa.passes(rule, SESSION, data, START + timedelta(seconds=600))
    assert mfa.timeout_remaining(rule, SESSION, data, START + timedelta(seconds=100)) == 500
    assert not mfa.passes(rule, SESSION, data, START + timedelta(seconds=601))
    assert mfa.timeout_remaining(rule, SESSION, data, START + timedelta(seconds=601)) == 0
    assert mfa.timeout(rule) == 600


def test_mfa_without_timeout() -> None:
    rule = check("MFA", timeoutSeconds=-1)

    assert MfaEvaluator().timeout_remaining(rule, SESSION, _mfa_data(START), START + timedelta(days=9)) == -1
    assert MfaEvaluator().timeout(rule) == -1


def test_a_wake_after_mfa_leaves_five_minutes() -> None:
    rule = check("MFA", timeoutSeconds=3600, promptOnWake=True)
    woken = START + timedelta(minutes=10)
    data = _mfa_data(START, woken_at=woken)
    mfa = MfaEvaluator()

    assert mfa.passes(rule, SESSION, data, woken + timedelta(minutes=4))
    assert mfa.timeout_remaining(rule, SESSION, data, woken + timedelta(minutes=1)) == 240
    assert mfa.last_updated_at(rule, SESSION, data) == woken
    assert not mfa.passes(rule, SESSION, data, woken + timedelta(minutes=6))


def test_a_wake_before_mfa_or_without_prompt_changes_nothing() -> None:
    mfa = MfaEvaluator()
    later = START + timedelta(hours=1)

    assert mfa.passes(
        check("MFA", promptOnWake=True),
        SESSION,
        _mfa_data(START, woken_at=START - timedelta(minutes=1)),
        later,
    )
    assert mfa.passes(check("MFA", promptOnWake=False), SESSION, _mfa_data(START, woken_at=START), later)


def test_an_unlock_after_mfa_fails_after_the_grace_period() -> None:
    rule = check("MFA", promptOnUnlock=True)
    data = _mfa_data(START, unlocked_at=START + timedelta(minutes=1))

    assert not MfaEvaluator().passes(rule, SESSION, data, START + timedelta(minutes=7))


def test_legacy_endpoints_may_ignore_the_timeout() -> None:
    rule = check("MFA", timeoutSeconds=60, ignoreLegacyEndpoints=True)
    legacy = _mfa_data(START)
    current = _mfa_data(START)
    current.api_sessions[SESSION].sdk_info = {"type": "ziti-sdk-c", "version": "0.29.3"}
    later = START + timedelta(seconds=30)

    assert MfaEvaluator().timeout_remaining(rule, SESSION, legacy, later) == -1
    assert MfaEvaluator().timeout_remaining(rule, SESSION, current, later) == 30


# == the manager ===================================================================================
@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def env(clock: FixedClock, authority: Any, signer: Any) -> Env:
    return Env(
        store=MemoryStore(),
        clock=clock,
        ids=CountingIds(),
        hasher=CheapHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=signer,
    )


@pytest.fixture
def access(env: Env) -> AccessManager:
    manager = AccessManager(env.store)
    env.listeners.append(manager.on_commit)
    return manager


@pytest.fixture
def posture(env: Env, access: AccessManager) -> PostureManager:
    manager = PostureManager(env, access)
    env.listeners.append(manager.on_commit)
    return manager


def put(env: Env, *entities: Any) -> None:
    uow = UnitOfWork(env.store)
    for entity in entities:
        uow.put(entity)
    env.commit(uow)


def policy(id: str, policy_type: str, checks: list[str]) -> ServicePolicy:
    return ServicePolicy(
        id=id,
        created_at=START,
        updated_at=START,
        name=id,
        type=policy_type,
        identity_roles=["@me"],
        service_roles=["@svc"],
        posture_check_roles=[f"@{c}" for c in checks],
    )


@pytest.fixture
def world(env: Env) -> None:
    put(
        env,
        Identity(id="me", created_at=START, updated_at=START, name="me"),
        Service(id="svc", created_at=START, updated_at=START, name="svc"),
        ApiSession(
            id=SESSION,
            created_at=START,
            updated_at=START,
            token_hash="x",
            identity_id="me",
            authenticator_id="a",
            last_activity_at=START,
        ),
    )


def domain_check(id: str, domain: str) -> PostureCheck:
    return dataclasses.replace(check("DOMAIN", id=id, domains=[domain]), name=id)


def answer_domain(posture: PostureManager, domain: str) -> None:
    posture.respond("me", SESSION, [PostureResponse("any", "DOMAIN", domain=domain)])


@pytest.mark.usefixtures("world")
def test_without_posture_checks_everything_passes_and_queries_are_dummies(
    env: Env, posture: PostureManager
) -> None:
    put(env, policy("dial", "Dial", []), policy("bind", "Bind", []))

    queries = posture.service_queries("me", SESSION, "svc")

    assert posture.evaluate("me", SESSION, "svc", "Dial").passed
    assert render_posture_queries(queries) == [
        {
            "isPassing": True,
            "policyId": "dummy bind policy: no posture checks defined",
            "policyType": "Bind",
            "postureQueries": [],
        },
        {
            "isPassing": True,
            "policyId": "dummy dial policy: no posture checks defined",
            "policyType": "Dial",
            "postureQueries": [],
        },
    ]


@pytest.mark.usefixtures("world")
def test_posture_is_or_over_policies_and_and_within_one(env: Env, posture: PostureManager) -> None:
    put(env, domain_check("corp", "corp"), domain_check("lab", "lab"))
    put(env, policy("both", "Dial", ["corp", "lab"]), policy("corp-only", "Dial", ["corp"]))

    before = posture.evaluate("me", SESSION, "svc", "Dial")
    answer_domain(posture, "corp")
    after = posture.evaluate("me", SESSION, "svc", "Dial")

    assert not before.passed
    assert sorted(f.policy_id for f in before.failures) == ["both", "corp-only"]
    assert after.passed
    assert after.passing_policy_ids == ("corp-only",)


@pytest.mark.usefixtures("world")
def test_a_policy_without_checks_passes(env: Env, posture: PostureManager) -> None:
    put(env, domain_check("corp", "corp"))
    put(env, policy("strict", "Dial", ["corp"]), policy("open", "Dial", []))

    assert posture.evaluate("me", SESSION, "svc", "Dial").passing_policy_ids == ("open",)


@pytest.mark.usefixtures("world")
def test_only_policies_of_the_requested_type_count(env: Env, posture: PostureManager) -> None:
    put(env, domain_check("corp", "corp"))
    put(env, policy("strict-dial", "Dial", ["corp"]), policy("open-bind", "Bind", []))

    assert not posture.evaluate("me", SESSION, "svc", "Dial").passed
    assert posture.evaluate("me", SESSION, "svc", "Bind").passed


@pytest.mark.usefixtures("world")
def test_refusals_are_remembered_only_when_asked_and_bounded(
    env: Env, posture: PostureManager, clock: FixedClock
) -> None:
    put(env, domain_check("corp", "corp"))
    put(env, policy("strict", "Dial", ["corp"]))

    posture.evaluate("me", SESSION, "svc", "Dial")
    assert posture.failed_requests("me") == []
    for _ in range(MAX_FAILURES + 5):
        clock.advance(seconds=1)
        posture.evaluate("me", SESSION, "svc", "Dial", record_failure=True)

    failures = posture.failed_requests("me")
    assert len(failures) == MAX_FAILURES
    assert failures[-1].when == clock.now()
    assert failures[0].service_name == "svc"
    [policy_failure] = failures[0].policy_failures
    [failed] = policy_failure.checks
    assert (policy_failure.policy_name, failed.check_id, failed.check_type) == ("strict", "corp", "DOMAIN")
    assert failed.values == {"actualValue": "", "expectedValue": ["corp"]}


@pytest.mark.usefixtures("world")
def test_posture_queries_per_policy(env: Env, posture: PostureManager) -> None:
    put(
        env,
        domain_check("corp", "corp"),
        check("PROCESS", id="agent", process={"osType": "Linux", "path": "/bin/agent"}),
    )
    put(env, policy("dial", "Dial", ["corp", "agent"]), policy("bind", "Bind", []))
    answer_domain(posture, "corp")

    rendered = render_posture_queries(posture.service_queries("me", SESSION, "svc"))

    assert [(p["policyId"], p["policyType"], p["isPassing"]) for p in rendered] == [
        ("bind", "Bind", True),
        ("dial", "Dial", False),
    ]
    assert rendered[0]["postureQueries"] == []
    queries = {q["id"]: q for q in rendered[1]["postureQueries"]}
    assert queries["corp"]["isPassing"] is True
    assert queries["corp"]["queryType"] == "DOMAIN"
    assert (queries["corp"]["timeout"], queries["corp"]["timeoutRemaining"]) == (-1, -1)
    assert queries["agent"]["isPassing"] is False
    assert queries["agent"]["process"] == {"osType": "Linux", "path": "/bin/agent"}
    assert queries["agent"]["_links"]["self"]["href"] == "./posture-checks/agent"


@pytest.mark.usefixtures("world")
def test_mfa_queries_follow_the_api_sessions_mfa(
    env: Env, posture: PostureManager, clock: FixedClock
) -> None:
    put(env, check("MFA", id="mfa", timeoutSeconds=600, promptOnWake=True, promptOnUnlock=False))
    put(env, policy("dial", "Dial", ["mfa"]))
    session = env.store.get(ApiSession, SESSION)
    assert session is not None

    before = posture.service_queries("me", SESSION, "svc")[0].queries[0]
    put(env, dataclasses.replace(session, is_mfa_complete=True, mfa_completed_at=START))
    clock.advance(seconds=100)
    after = posture.service_queries("me", SESSION, "svc")[0].queries[0]

    assert (before.is_passing, before.timeout_remaining) == (False, 0)
    assert (after.is_passing, after.timeout, after.timeout_remaining) == (True, 600, 500)
    assert after.timeout_at == START + timedelta(seconds=600)
    assert (after.prompt_on_wake, after.prompt_on_unlock) == (True, False)


@pytest.mark.usefixtures("world")
def test_a_wake_shortens_mfa_timers_of_the_identitys_services(
    env: Env, posture: PostureManager, clock: FixedClock
) -> None:
    put(env, check("MFA", id="mfa", timeoutSeconds=-1, promptOnWake=True))
    put(env, policy("dial", "Dial", ["mfa"]))
    session = env.store.get(ApiSession, SESSION)
    assert session is not None
    put(env, dataclasses.replace(session, mfa_completed_at=START))
    clock.advance(minutes=30)

    quiet = posture.respond("me", SESSION, [PostureResponse("s", "ENDPOINT_STATE")])
    woken = posture.respond("me", SESSION, [PostureResponse("s", "ENDPOINT_STATE", woken=True)])

    assert quiet == []
    assert [(t.id, t.query_type, t.timeout, t.timeout_remaining) for t in woken] == [("svc", "MFA", -1, 300)]
    assert posture.posture_data("me").api_sessions[SESSION].woken_at == clock.now()


@pytest.mark.usefixtures("world")
def test_posture_data_goes_with_its_api_session_and_identity(env: Env, posture: PostureManager) -> None:
    posture.respond(
        "me",
        SESSION,
        [
            PostureResponse("s", "ENDPOINT_STATE", unlocked=True),
            PostureResponse("m", "MAC", mac_addresses=("AA:BB:CC:DD:EE:FF",)),
        ],
    )
    assert posture.posture_data("me").mac.addresses == ["aabbccddeeff"]

    uow = UnitOfWork(env.store)
    uow.delete(ApiSession, SESSION)
    env.commit(uow)
    assert SESSION not in posture.posture_data("me").api_sessions

    uow = UnitOfWork(env.store)
    uow.delete(Identity, "me")
    env.commit(uow)
    put(env, Identity(id="me", created_at=START, updated_at=START, name="me"))
    assert posture.posture_data("me").mac.addresses == []


# == bounded process data (issue 18) ===============================================================
def process_report(check_id: str, path: str) -> PostureResponse:
    return PostureResponse(check_id, "PROCESS", path=path, is_running=True)


@pytest.mark.usefixtures("world")
def test_process_reports_no_check_reads_keep_only_the_latest_few(env: Env, posture: PostureManager) -> None:
    put(env, check("PROCESS", id="agent", process={"osType": "Linux", "path": "/bin/agent"}))
    put(
        env,
        check(
            "PROCESS_MULTI",
            id="multi",
            semantic="AnyOf",
            processes=[{"osType": "Linux", "path": "/bin/a"}, {"osType": "Linux", "path": "/bin/b"}],
        ),
    )
    put(env, policy("dial", "Dial", ["agent", "multi"]))
    posture.respond(
        "me",
        SESSION,
        [process_report("agent", "/bin/agent"), process_report("multi", "/bin/a")],
    )

    for n in range(3):
        posture.respond(
            "me", SESSION, [process_report(f"junk-{n}-{i}", f"/junk/{n}/{i}") for i in range(500)]
        )

    data = posture.posture_data("me")
    assert {"agent", "multi"} <= set(data.processes)
    assert {"/bin/agent", "/bin/a"} <= set(data.process_paths)
    assert len(data.processes) == 2 + MAX_UNREAD_PROCESS_REPORTS
    assert len(data.process_paths) == 2 + MAX_UNREAD_PROCESS_REPORTS
    assert list(data.processes)[-1] == "junk-2-499"
    assert posture.evaluate("me", SESSION, "svc", "Dial").passed


@pytest.mark.usefixtures("world")
def test_a_report_whose_check_is_unassigned_joins_the_unread_ones(env: Env, posture: PostureManager) -> None:
    put(env, check("PROCESS", id="agent", process={"osType": "Linux", "path": "/bin/agent"}))
    put(env, policy("dial", "Dial", ["agent"]))
    posture.respond("me", SESSION, [process_report("agent", "/bin/agent")])
    put(env, policy("dial", "Dial", []))

    posture.respond(
        "me", SESSION, [process_report(f"junk-{i}", f"/junk/{i}") for i in range(MAX_UNREAD_PROCESS_REPORTS)]
    )

    data = posture.posture_data("me")
    assert "agent" not in data.processes
    assert "/bin/agent" not in data.process_paths
    assert len(data.processes) == MAX_UNREAD_PROCESS_REPORTS


@pytest.mark.usefixtures("world")
def test_grants_are_kept_across_batches_that_leave_the_graph_and_follow_those_that_change_it(
    env: Env, access: AccessManager
) -> None:
    """:meth:`AccessManager.grants` keeps answers while batches touch no entity or policy the
    graph holds (an API session, say) and answers anew after one that does."""
    assert access.grants("me", ["svc"])["svc"].permissions == ()
    put(env, policy("dial", "Dial", []))
    assert access.grants("me", ["svc"])["svc"].permissions == ("Dial",)
    session = env.store.get(ApiSession, SESSION)
    assert session is not None
    put(env, dataclasses.replace(session, last_activity_at=START + timedelta(seconds=1)))
    kept = access.grants("me", ["svc"])["svc"]
    assert kept.permissions == ("Dial",)
    put(env, policy("bind", "Bind", []))
    assert access.grants("me", ["svc"])["svc"].permissions == ("Bind", "Dial")
    uow = UnitOfWork(env.store)
    uow.delete(ServicePolicy, "dial")
    env.commit(uow)
    assert access.grants("me", ["svc"])["svc"].permissions == ("Bind",)
    put(env, dataclasses.replace(env.store.get(Identity, "me"), name="renamed"))  # type: ignore[type-var]
    assert access.grants("me", ["svc"])["svc"].permissions == ("Bind",)
