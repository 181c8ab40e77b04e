"""Issue 18, finding 4: posture data an identity reports stays bounded.

Process reports under check ids and paths no posture check of the identity reads are kept only
as the few latest ones; reports its checks read always stay; over-long fields and lists are
refused with 400 ``COULD_NOT_VALIDATE`` naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.managers.posture._core import MAX_UNREAD_PROCESS_REPORTS
from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.api.policy_helpers import field_error
from tests.api.session_helpers import (
    User,
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
from tests.conftest import Api

api = shared_admin_api("posture-bounds")

#: Responses per bulk request (well inside the 1 MiB body limit).
BATCH = 1000


@dataclasses.dataclass
class Guarded:
    """A user whose Dial policy on a service needs a PROCESS and a PROCESS_MULTI check."""

    user: User
    service: str
    process: str
    multi: str


def guarded(api: Api) -> Guarded:
    role, srole, pcrole = unique("role"), unique("srole"), unique("pcrole")
    person = user(api, role)
    svc = service(api, srole)
    process = posture_check(api, "PROCESS", pcrole, process={"osType": "Linux", "path": "/opt/agent"})
    multi = posture_check(
        api,
        "PROCESS_MULTI",
        pcrole,
        semantic="AllOf",
        processes=[{"osType": "Linux", "path": "/opt/a"}, {"osType": "Linux", "path": "/opt/b"}],
    )
    service_policy(api, "Dial", [f"#{role}"], [f"#{srole}"], [f"#{pcrole}"])
    router = edge_router(api)
    edge_router_policy(api, [f"#{role}"], [f"@{router}"])
    service_edge_router_policy(api, [f"#{srole}"], [f"@{router}"])
    return Guarded(person, svc, process, multi)


def process(check_id: str, path: str, **fields: Any) -> dict[str, Any]:
    return {"id": check_id, "typeId": "PROCESS", "path": path, "isRunning": True, **fields}


def flood(api: Api, token: str, label: str, batches: int = 3) -> None:
    """``batches`` bulk requests of process reports under invented check ids and paths."""
    for batch in range(batches):
        body = [process(f"{label}-{batch}-{n}", f"/junk/{label}/{batch}/{n}") for n in range(BATCH)]
        assert client_post(api, "/posture-response-bulk", token, json=body).status_code == 200


def reported_ids(api: Api, identity_id: str) -> list[str]:
    result = api.get(f"/identities/{identity_id}/posture-data")
    assert result.status_code == 200
    return [p["postureCheckId"] for p in result.json["data"]["processes"]]


def test_invented_process_reports_stay_bounded(api: Api) -> None:
    person = user(api)

    flood(api, person.token, "x")

    ids = reported_ids(api, person.id)
    assert len(ids) == MAX_UNREAD_PROCESS_REPORTS
    # the latest ones are kept
    assert ids == [f"x-2-{n}" for n in range(BATCH - MAX_UNREAD_PROCESS_REPORTS, BATCH)]
    paths = api.app.ctrl.managers.posture.posture_data(person.id).process_paths
    assert len(paths) == MAX_UNREAD_PROCESS_REPORTS


def test_single_invented_reports_stay_bounded_too(api: Api) -> None:
    person = user(api)

    for n in range(MAX_UNREAD_PROCESS_REPORTS + 10):
        answer = client_post(api, "/posture-response", person.token, json=process(f"one-{n}", f"/one/{n}"))
        assert answer.status_code == 201

    assert len(reported_ids(api, person.id)) == MAX_UNREAD_PROCESS_REPORTS


def test_reports_the_identitys_checks_read_survive_a_flood(api: Api) -> None:
    g = guarded(api)
    token = g.user.token
    # as an SDK answers its posture queries: one report per path, under the check naming it
    answer = client_post(
        api,
        "/posture-response-bulk",
        token,
        json=[process(g.process, "/opt/agent"), process(g.multi, "/opt/a"), process(g.multi, "/opt/b")],
    )
    assert answer.status_code == 200
    assert dial(api, token, g.service).status_code == 201

    flood(api, token, "y")

    assert dial(api, token, g.service).status_code == 201, "the checks' reports were dropped"
    ids = reported_ids(api, g.user.id)
    assert {g.process, g.multi} <= set(ids)
    assert len(ids) == 2 + MAX_UNREAD_PROCESS_REPORTS
    paths = api.app.ctrl.managers.posture.posture_data(g.user.id).process_paths
    assert {"/opt/agent", "/opt/a", "/opt/b"} <= set(paths)
    assert len(paths) == 3 + MAX_UNREAD_PROCESS_REPORTS


def test_a_report_sent_before_its_check_is_assigned_is_still_found(api: Api) -> None:
    """A report no check reads yet is kept among the latest few, so a check assigned right after
    finds it (as in OpenZiti, which keeps every report)."""
    role, srole, pcrole = unique("role"), unique("srole"), unique("pcrole")
    person = user(api, role)
    svc = service(api, srole)
    check = posture_check(api, "PROCESS", pcrole, process={"osType": "Linux", "path": "/opt/early"})
    router = edge_router(api)
    edge_router_policy(api, [f"#{role}"], [f"@{router}"])
    service_edge_router_policy(api, [f"#{srole}"], [f"@{router}"])
    client_post(api, "/posture-response", person.token, json=process(check, "/opt/early"))

    service_policy(api, "Dial", [f"#{role}"], [f"#{srole}"], [f"#{pcrole}"])

    assert dial(api, person.token, svc).status_code == 201


def test_endpoint_state_and_other_slots_keep_working_next_to_a_flood(api: Api) -> None:
    person = user(api)
    flood(api, person.token, "z", batches=1)

    answer = client_post(
        api,
        "/posture-response-bulk",
        person.token,
        json=[
            {"id": "0", "typeId": "ENDPOINT_STATE", "woken": True},
            {"id": "os", "typeId": "OS", "type": "Linux", "version": "6.1.0"},
            {
                "id": "mac",
                "typeId": "MAC",
                "macAddresses": [f"02:00:00:00:{n // 256:02x}:{n % 256:02x}" for n in range(1024)],
            },
        ],
    )

    assert answer.status_code == 200, answer.text
    data = api.get(f"/identities/{person.id}/posture-data").json["data"]
    assert data["os"]["version"] == "6.1.0"
    assert len(data["mac"]["addresses"]) == 1024
    [entry] = data["apiSessionPostureData"].values()
    assert entry["endpointState"]["wokenAt"] is not None


# == size limits =====================================================================================
LONG = "a" * 5000


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        (
            {"id": "x", "typeId": "PROCESS", "path": "p" * 4097},
            "path",
            "path in body should be at most 4096 chars long",
        ),
        (
            {"id": "x", "typeId": "PROCESS", "path": "/p", "hash": LONG},
            "hash",
            "hash in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "PROCESS", "path": "/p", "signerFingerprints": ["ab"] * 65},
            "signerFingerprints",
            "signerFingerprints in body should have at most 64 items",
        ),
        (
            {"id": "x", "typeId": "PROCESS", "path": "/p", "signerFingerprints": ["ab", LONG]},
            "signerFingerprints.1",
            "signerFingerprints.1 in body should be at most 256 chars long",
        ),
        (
            {"id": LONG, "typeId": "DOMAIN", "domain": "corp"},
            "id",
            "id in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "DOMAIN", "domain": LONG},
            "domain",
            "domain in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "OS", "type": "Linux", "version": LONG},
            "version",
            "version in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "OS", "type": LONG, "version": "1.0.0"},
            "type",
            "type in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "OS", "type": "Linux", "version": "1.0.0", "build": LONG},
            "build",
            "build in body should be at most 256 chars long",
        ),
        (
            {"id": "x", "typeId": "MAC", "macAddresses": ["aa"] * 1025},
            "macAddresses",
            "macAddresses in body should have at most 1024 items",
        ),
        (
            {"id": "x", "typeId": "MAC", "macAddresses": ["aa", LONG]},
            "macAddresses.1",
            "macAddresses.1 in body should be at most 64 chars long",
        ),
    ],
)
@pytest.mark.parametrize("bulk", [False, True])
def test_oversize_posture_responses_are_refused(
    api: Api, body: dict[str, Any], field: str, reason: str, bulk: bool
) -> None:
    person = user(api)
    before = api.get(f"/identities/{person.id}/posture-data").json["data"]
    good = {"id": "dom", "typeId": "DOMAIN", "domain": "corp"}

    if bulk:
        result = client_post(api, "/posture-response-bulk", person.token, json=[good, body])
    else:
        result = client_post(api, "/posture-response", person.token, json=body)

    cause = field_error(result)
    assert (cause["field"], cause["reason"]) == (field, reason)
    assert "value" not in cause  # the refused value is not echoed back
    after = api.get(f"/identities/{person.id}/posture-data").json["data"]
    assert after["domain"] == before["domain"]  # nothing of a refused request is kept
    assert after["processes"] == before["processes"] == []


def test_values_at_the_limits_are_taken(api: Api) -> None:
    person = user(api)
    body = process(
        "i" * 256,
        "/" + "p" * 4095,
        hash="a" * 256,
        signerFingerprints=["b" * 256] * 64,
    )

    result = client_post(api, "/posture-response", person.token, json=body)

    assert result.status_code == 201, result.text
    [reported] = api.get(f"/identities/{person.id}/posture-data").json["data"]["processes"]
    assert reported["postureCheckId"] == "i" * 256
    assert len(reported["signerFingerprints"]) == 64
