"""``GET /analysis/v1/access-changes`` (docs/analysis.md §15): each access-relevant write's added
and removed pairs with its revision and actor, read from any revision kept, as JSON pages and as
Server-Sent Events; 410 past the retention, 429 past the waiting streams, 400 and 401."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

A = "/analysis/v1"
SSE = {"Accept": "text/event-stream"}


def revision(api: Api) -> int:
    return int(api.request("GET", "/revision", base=A).json["data"]["revision"])


def page(api: Api, since: int | str, **params: Any) -> Any:
    result = api.request("GET", "/access-changes", base=A, params={"since": str(since), **params})
    assert result.status_code == 200, result.text
    return result.json


def changes_after(api: Api, since: int | str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The records after ``since`` once there are ``count`` of them (they are recorded off the
    commit path: waited for, with a generous deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        parts = page(api, since)["data"]
        if len(parts) >= count or time.monotonic() > deadline:
            return list(parts)
        time.sleep(0.02)


def events(text: str) -> list[dict[str, str]]:
    """The SSE events of an answer (comments and ``retry`` left out)."""
    out = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "event" in fields:
            out.append(fields)
    return out


@pytest.fixture
def net(api: Api) -> dict[str, str]:
    """alice (#staff), web (#web), r1 (#edge); no policy yet."""
    return {
        "alice": api.create(
            "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
        ),
        "web": api.create(
            "/services", {"name": "web", "encryptionRequired": True, "roleAttributes": ["web"]}
        ),
        "r1": api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]}),
    }


def dial_policy(api: Api, name: str = "staff-web") -> str:
    return api.create(
        "/service-policies",
        {
            "name": name,
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#web"],
        },
    )


def test_a_write_appears_with_its_pairs_revision_and_actor(api: Api, net: dict[str, str]) -> None:
    start = revision(api)
    policy = dial_policy(api)
    (part,) = changes_after(api, start)
    assert part["revision"] > start
    assert part["complete"]
    assert part["total"] == 1
    assert part["services"] == {
        "added": [{"identityId": net["alice"], "serviceId": net["web"], "type": "Dial"}],
        "removed": [],
    }
    (write,) = part["writes"]
    assert write["actor"]["identityName"] == "Default Admin"
    assert write["actor"]["apiSessionId"]
    assert write["actor"]["request"] == "POST /edge/management/v1/service-policies"
    assert write["changes"] == [{"kind": "service-policies", "id": policy, "op": "put"}]
    assert part["cursor"] == str(part["revision"])


def test_since_a_revision_answers_exactly_the_later_records(api: Api, net: dict[str, str]) -> None:
    start = revision(api)
    policy = dial_policy(api)
    (first,) = changes_after(api, start)
    api.create(
        "/edge-router-policies",
        {
            "name": "staff-edge",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "edgeRouterRoles": ["#edge"],
        },
    )
    api.delete(f"/service-policies/{policy}")
    records = changes_after(api, start, count=3)
    assert [r["revision"] for r in records] == sorted({r["revision"] for r in records})
    assert records[0] == first
    later = changes_after(api, first["revision"], count=2)
    assert later == records[1:]
    assert later[0]["routers"]["added"] == [{"identityId": net["alice"], "edgeRouterId": net["r1"]}]
    assert later[1]["services"]["removed"] == [
        {"identityId": net["alice"], "serviceId": net["web"], "type": "Dial"}
    ]
    assert page(api, records[-1]["revision"])["data"] == []
    body = page(api, start, limit=1)
    assert [p["revision"] for p in body["data"]] == [first["revision"]]
    assert body["meta"]["next"] == str(first["revision"])


def test_a_write_of_many_pairs_is_paged_within_its_record(api: Api) -> None:
    for i in range(5):
        api.create(
            "/identities", {"name": f"p{i}", "type": "User", "isAdmin": False, "roleAttributes": ["many"]}
        )
    api.create("/services", {"name": "s-many", "encryptionRequired": True, "roleAttributes": ["many"]})
    start = revision(api)
    api.create(
        "/service-policies",
        {
            "name": "many",
            "type": "Bind",
            "semantic": "AnyOf",
            "identityRoles": ["#many"],
            "serviceRoles": ["#many"],
        },
    )
    changes_after(api, start)
    seen: list[dict[str, Any]] = []
    cursor = str(start)
    for _ in range(10):
        body = page(api, cursor, limit=2)
        if not body["data"]:
            break
        seen += [pair for p in body["data"] for pair in p["services"]["added"]]
        cursor = body["meta"]["next"]
    assert len(seen) == 5
    assert len({p["identityId"] for p in seen}) == 5
    assert "." not in cursor


def test_a_revision_no_longer_kept_is_410(api: Api, net: dict[str, str]) -> None:
    start = revision(api)
    dial_policy(api)
    (first,) = changes_after(api, start)
    dial_policy(api, "again")  # grants nothing new: no record
    api.patch(f"/identities/{net['alice']}", json={"roleAttributes": []})
    changes_after(api, start, count=2)
    now = api.ctrl.env.clock.now()
    assert api.ctrl.env.store.access_change_log().trim(now + timedelta(days=1)) >= 1
    result = api.request("GET", "/access-changes", base=A, params={"since": str(start)})
    assert result.status_code == 410, result.text
    error = result.json["error"]
    assert error["code"] == "ACCESS_CHANGES_EXPIRED"
    assert error["cause"]["oldestRevision"] > start
    assert page(api, error["cause"]["oldestRevision"])["data"]
    assert error["cause"]["oldestRevision"] == first["revision"]  # the kept record's ``prev``


def test_bad_cursors_are_400_and_strangers_401(api: Api, anon: Api) -> None:
    for since in ("abc", "1.x", str(revision(api) + 1000)):
        result = api.request("GET", "/access-changes", base=A, params={"since": since})
        assert result.status_code == 400, since
        assert result.json["error"]["cause"]["field"] == "since"
    result = api.request("GET", "/access-changes", base=A, params={"limit": "0"})
    assert result.status_code == 400
    assert anon.request("GET", "/access-changes", base=A).status_code == 401


def test_server_sent_events_frame_each_record_with_its_cursor(api: Api, net: dict[str, str]) -> None:
    start = revision(api)
    dial_policy(api)
    changes_after(api, start)
    result = api.request(
        "GET", "/access-changes", base=A, headers=SSE, params={"since": str(start), "wait": "1"}
    )
    assert result.status_code == 200
    assert result.headers["content-type"].startswith("text/event-stream")
    assert result.text.startswith("retry: 1000\n\n")
    (event,) = events(result.text)
    assert event["event"] == "access-change"
    data = json.loads(event["data"])
    assert event["id"] == data["cursor"] == str(data["revision"])
    # resumed with Last-Event-ID: nothing after it, so the answer ends with a heartbeat
    again = api.request(
        "GET", "/access-changes", base=A, headers={**SSE, "Last-Event-ID": event["id"]}, params={"wait": "0"}
    )
    assert events(again.text) == []
    assert again.text.endswith(": heartbeat\n\n")


def test_a_waiting_stream_answers_the_next_write(api: Api, net: dict[str, str]) -> None:
    start = revision(api)
    answers: list[Any] = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            api.request(
                "GET", "/access-changes", base=A, headers=SSE, params={"since": str(start), "wait": "15"}
            )
        )
    )
    waiter.start()
    time.sleep(0.2)
    dial_policy(api)
    waiter.join(30)
    (event,) = events(answers[0].text)
    assert int(event["id"]) > start


def test_streams_past_the_cap_are_429(make_api: Any) -> None:
    api = make_api(access_changes_streams=2)
    start = revision(api)
    answers: list[Any] = []

    def wait() -> None:
        answers.append(
            api.request(
                "GET", "/access-changes", base=A, headers=SSE, params={"since": str(start), "wait": "15"}
            )
        )

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    refused = api.request("GET", "/access-changes", base=A, headers=SSE, params={"wait": "0"})
    assert refused.status_code == 429
    assert refused.json["error"]["code"] == "SERVER_TOO_MANY_REQUESTS"
    api.create("/services", {"name": "s", "encryptionRequired": True, "roleAttributes": ["x"]})
    api.create("/identities", {"name": "i", "type": "User", "isAdmin": False, "roleAttributes": ["x"]})
    api.create(
        "/service-policies",
        {"name": "x", "type": "Dial", "semantic": "AnyOf", "identityRoles": ["#x"], "serviceRoles": ["#x"]},
    )
    for waiter in waiters:
        waiter.join(30)
    assert [a.status_code for a in answers] == [200, 200]
    assert api.request("GET", "/access-changes", base=A, headers=SSE, params={"wait": "0"}).status_code == 200


def test_the_swagger_document_describes_the_stream(api: Api) -> None:
    spec = api.request("GET", "/swagger.json", base=A).json
    operation = spec["paths"]["/access-changes"]["get"]
    assert operation["produces"] == ["application/json", "text/event-stream"]
    assert {"400", "401", "404", "410", "429"} <= set(operation["responses"])
    assert {p["name"] for p in operation["parameters"]} >= {"since", "limit", "wait", "Last-Event-ID"}


@pytest.mark.durable
def test_the_stream_is_kept_across_a_restart(api: Api, settings: Any) -> None:
    start = revision(api)
    api.create("/identities", {"name": "k", "type": "User", "isAdmin": False, "roleAttributes": ["k"]})
    api.create("/services", {"name": "k", "encryptionRequired": True, "roleAttributes": ["k"]})
    api.create(
        "/service-policies",
        {"name": "k", "type": "Dial", "semantic": "AnyOf", "identityRoles": ["#k"], "serviceRoles": ["#k"]},
    )
    before = changes_after(api, start)
    assert len(before) == 1
    api.app.ctrl.env.store.close()
    app = open_app(settings, durable=True)
    try:
        again = Api(app)
        again.token = again.login(ADMIN_USER, ADMIN_PASSWORD)
        assert changes_after(again, start) == before
    finally:
        app.ctrl.env.store.close()


def test_an_open_answer_ends_when_asked_while_records_keep_coming(
    api: Api, net: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open answer (``duration`` > 0) reading record after record with no quiet moment still
    ends when the server stops (and when its duration is up), instead of once the records do."""
    from api import analysis_stream
    from engine.analysis import analysis_for
    from engine.analysis.stream import Cursor

    start = revision(api)
    policy = dial_policy(api)
    api.delete(f"/service-policies/{policy}")
    assert len(changes_after(api, start, 2)) == 2
    stream = analysis_stream.stream_for(analysis_for(api.ctrl.managers), timedelta(days=7))
    monkeypatch.setattr(analysis_stream, "EVENT_PAIRS", 1)  # one record a read
    stopping = threading.Event()
    stopping.set()
    frames = list(analysis_stream._events(stream, Cursor(start), 1.0, 300.0, stopping))
    assert len(events(b"".join(frames).decode())) == 1
    frames = list(analysis_stream._events(stream, Cursor(start), 1.0, 1e-9, None))
    assert len(events(b"".join(frames).decode())) == 1
