"""Posture over the API: posture responses, posture gating session creation (409
``INVALID_POSTURE``), ``/identities/{id}/posture-data`` and ``failed-service-requests``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from controller.settings import Settings
from engine.entities.identities import ApiSession
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.api.policy_helpers import field_error, put
from tests.api.session_helpers import (
    User,
    client_get,
    client_post,
    dial,
    edge_router,
    edge_router_policy,
    posture_check,
    service,
    service_edge_router_policy,
    service_policy,
    user,
)
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

api = shared_admin_api("posture")


@dataclasses.dataclass
class Guarded:
    """S8 of docs/policy.md §9: one service behind a DOMAIN check on Dial and on Bind."""

    user: User
    service: str
    check: str
    dial_policy: str
    bind_policy: str


def guarded(api: Api, *, check_type: str = "DOMAIN", **check_fields: Any) -> Guarded:
    role, srole, pcrole = unique("role"), unique("srole"), unique("pcrole")
    person = user(api, role)
    svc = service(api, srole)
    fields = check_fields or {"domains": ["domain1"]}
    check = posture_check(api, check_type, pcrole, **fields)
    dial_policy = service_policy(api, "Dial", [f"#{role}"], [f"#{srole}"], [f"#{pcrole}"])
    bind_policy = service_policy(api, "Bind", [f"#{role}"], [f"#{srole}"], [f"#{pcrole}"])
    router = edge_router(api)
    edge_router_policy(api, [f"#{role}"], [f"@{router}"])
    service_edge_router_policy(api, [f"#{srole}"], [f"@{router}"])
    return Guarded(person, svc, check, dial_policy, bind_policy)


def respond(api: Api, token: str, *responses: dict[str, Any], bulk: bool = False) -> Any:
    if bulk:
        return client_post(api, "/posture-response-bulk", token, json=list(responses))
    [response] = responses
    return client_post(api, "/posture-response", token, json=response)


def domain(check_id: str, name: str) -> dict[str, Any]:
    return {"id": check_id, "typeId": "DOMAIN", "domain": name}


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


# == gating ========================================================================================
def test_failing_posture_refuses_the_session_with_the_failing_policies(api: Api) -> None:
    g = guarded(api)

    result = dial(api, g.user.token, g.service)

    assert result.status_code == 409
    body = error(result)
    assert body["code"] == "INVALID_POSTURE"
    assert body["message"] == "Posture response data is missing or wrong"
    assert (
        body["cause"]["message"] == f"Failed to pass posture checks for service policies: [{g.dial_policy}]"
    )
    assert body["cause"]["data"] == {g.dial_policy: [{"id": g.check, "isPassing": False, "typeId": "DOMAIN"}]}


def test_a_passing_posture_response_opens_the_session(api: Api) -> None:
    g = guarded(api)

    answer = respond(api, g.user.token, domain(g.check, "DOMAIN1"))
    dialed = dial(api, g.user.token, g.service)
    bound = dial(api, g.user.token, g.service, "Bind")

    assert answer.status_code == 201
    assert answer.json["data"] == {"services": []}
    assert dialed.status_code == 201, dialed.text
    session = api.get(f"/sessions/{dialed.json['data']['id']}").json["data"]
    assert [p["id"] for p in session["servicePolicies"]] == [g.dial_policy]
    assert bound.status_code == 201, bound.text


def test_the_wrong_domain_still_fails(api: Api) -> None:
    g = guarded(api)
    respond(api, g.user.token, domain(g.check, "domain2"))

    assert dial(api, g.user.token, g.service).status_code == 409


def test_a_check_free_policy_of_the_type_lets_the_session_through(api: Api) -> None:
    g = guarded(api)
    service_policy(api, "Dial", [f"@{g.user.id}"], [f"@{g.service}"])

    dialed = dial(api, g.user.token, g.service)
    bound = dial(api, g.user.token, g.service, "Bind")

    assert dialed.status_code == 201
    assert bound.status_code == 409


def test_posture_is_checked_before_the_edge_routers(api: Api) -> None:
    role, pcrole = unique("role"), unique("pcrole")
    person = user(api, role)
    svc = service(api, role)
    posture_check(api, "DOMAIN", pcrole, domains=["corp"])
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"], [f"#{pcrole}"])

    assert dial(api, person.token, svc).status_code == 409


def test_mfa_posture_follows_the_api_sessions_mfa(api: Api) -> None:
    g = guarded(api, check_type="MFA", timeoutSeconds=-1)
    refused = dial(api, g.user.token, g.service)
    current = client_get(api, "/current-api-session", g.user.token).json["data"]["id"]
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, is_mfa_complete=True, mfa_completed_at=datetime.now(UTC)))

    accepted = dial(api, g.user.token, g.service)

    assert refused.status_code == 409
    assert accepted.status_code == 201, accepted.text


def test_new_posture_data_ends_sessions_that_now_fail(api: Api) -> None:
    g = guarded(api)
    respond(api, g.user.token, domain(g.check, "domain1"))
    created = dial(api, g.user.token, g.service).json["data"]["id"]

    respond(api, g.user.token, domain(g.check, "elsewhere"))

    assert api.get(f"/sessions/{created}").status_code == 404


def test_the_posture_sweep_ends_sessions_whose_mfa_posture_lapsed(api: Api) -> None:
    """OpenZiti's periodic posture sweep: an MFA check's timeout ends a session with time alone."""
    g = guarded(api, check_type="MFA", timeoutSeconds=600)
    current = client_get(api, "/current-api-session", g.user.token).json["data"]["id"]
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, is_mfa_complete=True, mfa_completed_at=datetime.now(UTC)))
    created = dial(api, g.user.token, g.service)
    assert created.status_code == 201, created.text
    path = f"/sessions/{created.json['data']['id']}"

    api.app.maintenance.sweep_posture()
    kept = api.get(path).status_code
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, mfa_completed_at=datetime(2020, 1, 1, tzinfo=UTC)))
    ended = api.app.maintenance.sweep_posture()

    assert kept == 200
    assert ended >= 1
    assert api.get(path).status_code == 404


def test_the_maintenance_ticker_sweeps_posture_on_its_own_cadence(api: Api) -> None:
    from controller.maintenance import Maintenance

    g = guarded(api, check_type="MFA", timeoutSeconds=600)
    current = client_get(api, "/current-api-session", g.user.token).json["data"]["id"]
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, is_mfa_complete=True, mfa_completed_at=datetime.now(UTC)))
    created = dial(api, g.user.token, g.service).json["data"]["id"]
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, mfa_completed_at=datetime(2020, 1, 1, tzinfo=UTC)))
    ctrl = api.app.ctrl
    ticker = Maintenance(
        ctrl.api_sessions,
        ctrl.env.clock,
        api.app.limits,
        3600,
        dial_bind=ctrl.managers.sessions,
        posture_interval=0.01,
    )

    ticker.start()
    try:
        deadline = time.monotonic() + 30
        while api.get(f"/sessions/{created}").status_code != 404 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        ticker.stop()

    assert api.get(f"/sessions/{created}").status_code == 404
    assert ticker.runs == 0  # the hourly purge round never came: only the posture sweep ran


# == posture responses =============================================================================
def test_bulk_responses_answer_200(api: Api) -> None:
    g = guarded(api)

    result = respond(
        api,
        g.user.token,
        domain(g.check, "domain1"),
        {"id": "os-check", "typeId": "OS", "type": "Linux", "version": "5.4.0"},
        bulk=True,
    )

    assert result.status_code == 200
    assert result.json["data"] == {"services": []}
    assert dial(api, g.user.token, g.service).status_code == 201


def test_a_wake_lists_the_services_whose_mfa_timer_it_shortened(api: Api) -> None:
    g = guarded(api, check_type="MFA", timeoutSeconds=-1, promptOnWake=True)
    current = client_get(api, "/current-api-session", g.user.token).json["data"]["id"]
    session = api.app.ctrl.env.store.get(ApiSession, current)
    put(api.app, dataclasses.replace(session, mfa_completed_at=datetime(2020, 1, 1, tzinfo=UTC)))

    result = respond(api, g.user.token, {"id": "state", "typeId": "ENDPOINT_STATE", "woken": True})

    assert result.status_code == 201
    assert result.json["data"]["services"] == [
        {
            "id": g.service,
            "name": api.get(f"/services/{g.service}").json["data"]["name"],
            "postureQueryType": "MFA",
            "timeout": -1,
            "timeoutRemaining": 300,
        }
    ]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({"id": "x", "domain": "corp"}, "typeId", "typeId in body is required"),
        ({"id": "x", "typeId": "MFA"}, "typeId", 'invalid typeId value: "MFA"'),
        ({"id": "x", "typeId": "DOMAIN"}, "domain", "domain in body is required"),
        ({"typeId": "DOMAIN", "domain": "corp"}, "id", "id in body is required"),
        ({"id": "x", "typeId": "OS", "type": "Linux"}, "version", "version in body is required"),
        ({"id": "x", "typeId": "MAC"}, "macAddresses", "macAddresses in body is required"),
    ],
)
def test_invalid_posture_responses(api: Api, body: dict[str, Any], field: str, reason: str) -> None:
    person = user(api)

    cause = field_error(respond(api, person.token, body))

    assert cause["field"] == field
    assert cause["reason"] == reason


def test_the_bulk_form_needs_an_array(api: Api) -> None:
    person = user(api)

    result = client_post(api, "/posture-response-bulk", person.token, json=domain("x", "corp"))

    assert field_error(result)["field"] == "body"


def test_a_posture_response_that_is_not_json(api: Api) -> None:
    person = user(api)

    result = client_post(
        api, "/posture-response", person.token, body="{nope", headers={"content-type": "application/json"}
    )

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_PARSE_BODY"


def test_posture_responses_need_an_api_session(api: Api) -> None:
    result = api.client.simulate_post(CLIENT + "/posture-response", json=domain("x", "corp"))

    assert result.status_code == 401


# == management views ==============================================================================
def test_posture_data_shows_what_the_identity_reported(api: Api) -> None:
    person = user(api)
    respond(
        api,
        person.token,
        {"id": "os", "typeId": "OS", "type": "Windows", "version": "10.0.19041", "build": "1"},
        domain("dom", "corp"),
        {"id": "mac", "typeId": "MAC", "macAddresses": ["AA:BB:CC:DD:EE:FF"]},
        {
            "id": "proc",
            "typeId": "PROCESS",
            "path": "/bin/agent",
            "isRunning": True,
            "hash": "ABCDEF",
            "signerFingerprints": ["F1"],
        },
        {"id": "state", "typeId": "ENDPOINT_STATE", "unlocked": True},
        bulk=True,
    )
    current = client_get(api, "/current-api-session", person.token).json["data"]["id"]

    result = api.get(f"/identities/{person.id}/posture-data")

    assert result.status_code == 200
    data = result.json["data"]
    assert {k: data["os"][k] for k in ("postureCheckId", "type", "version", "build", "timedOut")} == {
        "postureCheckId": "os",
        "type": "Windows",
        "version": "10.0.19041",
        "build": "1",
        "timedOut": False,
    }
    assert data["os"]["lastUpdatedAt"].endswith("Z")
    assert (data["domain"]["domain"], data["domain"]["postureCheckId"]) == ("corp", "dom")
    assert data["mac"]["addresses"] == ["aabbccddeeff"]
    [process] = data["processes"]
    assert (process["postureCheckId"], process["isRunning"], process["binaryHash"]) == (
        "proc",
        True,
        "abcdef",
    )
    assert process["signerFingerprints"] == ["f1"]
    entry = data["apiSessionPostureData"][current]
    assert entry["mfa"] == {
        "apiSessionId": current,
        "passedAt": None,
        "passedMfa": False,
        "passedOnUnlock": False,
        "passedOnWake": False,
    }
    assert entry["endpointState"]["unlockedAt"].endswith("Z")
    assert entry["endpointState"]["wokenAt"] is None


def test_posture_data_of_an_identity_that_reported_nothing(api: Api) -> None:
    person = user(api)

    data = api.get(f"/identities/{person.id}/posture-data").json["data"]

    assert data["os"] == {
        "build": "",
        "lastUpdatedAt": None,
        "postureCheckId": "",
        "timedOut": False,
        "type": "",
        "version": "",
    }
    assert data["processes"] == []
    assert list(data["apiSessionPostureData"]) == [
        client_get(api, "/current-api-session", person.token).json["data"]["id"]
    ]


def test_posture_data_forgets_ended_api_sessions(api: Api) -> None:
    person = user(api)
    respond(api, person.token, {"id": "state", "typeId": "ENDPOINT_STATE", "woken": True})
    api.delete("/current-api-session", token=person.token, base=CLIENT)

    data = api.get(f"/identities/{person.id}/posture-data").json["data"]

    assert data["apiSessionPostureData"] == {}


def test_failed_service_requests_record_refused_sessions(api: Api) -> None:
    g = guarded(api)
    dial(api, g.user.token, g.service)
    current = client_get(api, "/current-api-session", g.user.token).json["data"]["id"]

    result = api.get(f"/identities/{g.user.id}/failed-service-requests")

    assert result.status_code == 200
    [failure] = result.json["data"]
    assert failure["apiSessionId"] == current
    assert failure["serviceId"] == g.service
    assert failure["serviceName"] == api.get(f"/services/{g.service}").json["data"]["name"]
    assert failure["sessionType"] == "Dial"
    assert failure["when"].endswith("Z")
    [policy] = failure["policyFailures"]
    assert policy["policyId"] == g.dial_policy
    assert policy["policyName"] == api.get(f"/service-policies/{g.dial_policy}").json["data"]["name"]
    [check] = policy["checks"]
    assert check["postureCheckId"] == g.check
    assert check["postureCheckType"] == "DOMAIN"
    assert check["postureCheckName"] == api.get(f"/posture-checks/{g.check}").json["data"]["name"]
    assert (check["actualValue"], check["expectedValue"]) == ("", ["domain1"])


def test_failed_service_requests_start_empty(api: Api) -> None:
    person = user(api)

    result = api.get(f"/identities/{person.id}/failed-service-requests")

    assert result.status_code == 200
    assert result.json["data"] == []


@pytest.mark.parametrize("path", ["posture-data", "failed-service-requests"])
def test_posture_views_of_an_unknown_identity(api: Api, path: str) -> None:
    result = api.get(f"/identities/nobody/{path}")

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


@pytest.mark.parametrize("path", ["posture-data", "failed-service-requests"])
def test_posture_views_are_for_admins(api: Api, path: str) -> None:
    person = user(api)

    assert api.get(f"/identities/{person.id}/{path}", token=person.token).status_code == 401


# == service updates ===============================================================================
@pytest.fixture
def clocked(settings: Settings) -> Iterator[tuple[Api, FixedClock]]:
    clock = FixedClock(datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    app = open_app(settings, clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    client = Api(app)
    client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
    yield client, clock
    app.ctrl.env.store.close()


def test_a_posture_response_moves_last_change_at(clocked: tuple[Api, FixedClock]) -> None:
    api, clock = clocked
    g = guarded(api)
    before = client_get(api, "/current-api-session/service-updates", g.user.token).json["data"][
        "lastChangeAt"
    ]
    clock.advance(minutes=1)

    respond(api, g.user.token, domain(g.check, "domain1"))
    after = client_get(api, "/current-api-session/service-updates", g.user.token).json["data"]["lastChangeAt"]

    assert before != after
    assert after == "2026-03-01T09:01:00.000Z"
