"""The access-change stream against a real ``trellis serve`` (docs/analysis.md §15): an SSE client
reads an event, disconnects, writes happen meanwhile, it reconnects with ``Last-Event-ID`` and
gets every later change exactly once; ``trellis watch-access`` prints the same. One server for the
module."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.server import MGMT, ROOT, TRELLIS, Server, running

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(30)]

A = "/analysis/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("analysis-stream") / "home")


def sse(server: Server, token: str, last_id: str, *, first_only: bool = False) -> list[dict[str, Any]]:
    """One bounded SSE answer's events (``id`` and the JSON ``data``); ``first_only``: the
    connection is closed once the first event is read, as a client that goes away."""
    headers = {"Accept": "text/event-stream", "Last-Event-ID": last_id}
    params = {"wait": "10", "duration": "0"}
    answer = server.call("GET", A + "/access-changes", token, headers, params=params, stream=True, timeout=30)
    assert answer.status_code == 200, answer.text
    out: list[dict[str, Any]] = []
    fields: dict[str, str] = {}
    try:
        for line in answer.iter_lines(decode_unicode=True):
            if line:
                if not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    fields[name] = value
                continue
            if "data" in fields:
                out.append({"id": fields["id"], "data": json.loads(fields["data"])})
                if first_only:
                    break
            fields = {}
    finally:
        answer.close()
    return out


def test_a_client_resumes_with_last_event_id_with_no_gap_and_no_duplicate(server: Server) -> None:
    token = server.login()

    def create(path: str, body: dict[str, Any]) -> str:
        return str(server.expect(server.call("POST", MGMT + path, token, json=body), 201, path)["data"]["id"])

    start = str(
        server.expect(server.call("GET", A + "/revision", token), 200, "revision")["data"]["revision"]
    )
    alice = create(
        "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["s"]}
    )
    web = create("/services", {"name": "web", "encryptionRequired": True, "roleAttributes": ["w"]})
    router = create("/edge-routers", {"name": "r1", "roleAttributes": ["e"]})

    def policy(name: str, kind: str) -> None:
        create("/service-policies", {"name": name, "type": kind, "semantic": "AnyOf",
                                     "identityRoles": ["#s"], "serviceRoles": ["#w"]})  # fmt: skip

    policy("dial", "Dial")
    policy("bind", "Bind")
    (first,) = sse(server, token, start, first_only=True)  # then the client goes away
    assert first["data"]["services"]["added"] == [{"identityId": alice, "serviceId": web, "type": "Dial"}]
    create("/edge-router-policies", {"name": "edge", "semantic": "AnyOf", "identityRoles": ["#s"],
                                     "edgeRouterRoles": ["#e"]})  # fmt: skip
    server.expect(
        server.call("PATCH", f"{MGMT}/identities/{alice}", token, json={"roleAttributes": []}), 200, "patch"
    )

    events = [first]
    deadline = time.monotonic() + 60
    while sum(len(e["data"]["services"]["removed"]) for e in events) < 2 and time.monotonic() < deadline:
        events += sse(server, token, events[-1]["id"])
    ids = [int(e["id"]) for e in events]
    assert ids == sorted(set(ids)), ids  # no duplicate, in order
    added = [
        (p["identityId"], p["serviceId"], p["type"]) for e in events for p in e["data"]["services"]["added"]
    ]
    removed = [
        (p["identityId"], p["serviceId"], p["type"]) for e in events for p in e["data"]["services"]["removed"]
    ]
    routers = [(p["identityId"], p["edgeRouterId"]) for e in events for p in e["data"]["routers"]["added"]]
    assert added == [(alice, web, "Dial"), (alice, web, "Bind")]
    assert sorted(removed) == [(alice, web, "Bind"), (alice, web, "Dial")]
    assert routers == [(alice, router)]
    assert {e["data"]["writes"][0]["actor"]["identityName"] for e in events} == {"Default Admin"}

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update(
        TRELLIS_HOME=str(server.home),
        TRELLIS_BIND=server.env["TRELLIS_BIND"],
        TRELLIS_ADMIN_PASSWORD=server.password,
    )
    shown = subprocess.run(
        [*TRELLIS, "watch-access", "--since", start, "--once"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith(f"+ Dial {alice} -> service {web} (revision {ids[0]}, by Default Admin)")
    assert len(lines) == 6


def test_one_open_answer_carries_each_change_as_it_is_made(server: Server) -> None:
    """A streamed answer stays open: a heartbeat while nothing changes, then each write's event on
    the same connection while it goes on, before the answer ends."""
    token = server.login()
    start = str(
        server.expect(server.call("GET", A + "/revision", token), 200, "revision")["data"]["revision"]
    )
    headers = {"Accept": "text/event-stream", "Last-Event-ID": start}
    answer = server.call(
        "GET", A + "/access-changes", token, headers, params={"wait": "1"}, stream=True, timeout=30
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["transfer-encoding"] == "chunked"
    lines = answer.iter_lines(decode_unicode=True)

    def next_event() -> tuple[int, dict[str, Any]]:
        """The next event's data, and how many heartbeats came before it."""
        beats, fields = 0, {}
        for line in lines:
            if line == ": heartbeat":
                beats += 1
            elif line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
            elif not line and "data" in fields:
                return beats, json.loads(fields["data"])
        raise AssertionError("the answer ended")

    def create(path: str, body: dict[str, Any]) -> str:
        return str(server.expect(server.call("POST", MGMT + path, token, json=body), 201, path)["data"]["id"])

    try:
        bob = create(
            "/identities", {"name": "bob", "type": "User", "isAdmin": False, "roleAttributes": ["o"]}
        )
        mail = create("/services", {"name": "mail", "encryptionRequired": True, "roleAttributes": ["m"]})
        # nothing changes access: a heartbeat comes (read here, not waited for with a sleep, so a
        # busy machine's late heartbeat cannot come after the event)
        waited = 0
        for line in lines:
            if line == ": heartbeat":
                waited = 1
                break
        create("/service-policies", {"name": "mail-dial", "type": "Dial", "semantic": "AnyOf",
                                     "identityRoles": ["#o"], "serviceRoles": ["#m"]})  # fmt: skip
        beats, first = next_event()
        assert beats + waited >= 1
        assert first["services"]["added"] == [{"identityId": bob, "serviceId": mail, "type": "Dial"}]
        server.expect(
            server.call("PATCH", f"{MGMT}/identities/{bob}", token, json={"roleAttributes": []}), 200, "patch"
        )
        _, second = next_event()  # the same answer, still open
        assert second["services"]["removed"] == [{"identityId": bob, "serviceId": mail, "type": "Dial"}]
        assert second["revision"] > first["revision"]
    finally:
        answer.close()


def test_an_export_is_streamed_in_chunks_and_sent_whole_to_an_http_1_0_client(server: Server) -> None:
    """The serving worker streams a body the app gives as it comes (chunked), and gives an
    HTTP/1.0 client, which cannot take chunks, the same body whole with its length."""
    token = server.login()
    body = {"view": "access_pairs"}
    streamed = server.call("POST", A + "/export", token, json=body)
    assert streamed.status_code == 200, streamed.text
    assert streamed.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in streamed.headers
    assert streamed.content.startswith(b"PAR1")
    assert streamed.content.endswith(b"PAR1")

    payload = json.dumps(body).encode()
    with server.tls(timeout=30) as conn:
        conn.sendall(
            b"POST " + A.encode() + b"/export HTTP/1.0\r\nHost: x\r\nzt-session: " + token.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload
        )  # fmt: skip
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head, _, whole = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), head
    lowered = head.lower()
    assert b"transfer-encoding" not in lowered
    assert f"content-length: {len(whole)}".encode() in lowered
    assert whole.startswith(b"PAR1")
    assert whole.endswith(b"PAR1")
