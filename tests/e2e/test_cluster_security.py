"""Guesses at secrets against ``trellis serve`` with two workers on one PostgreSQL database: an
attacker gets exactly the guesses one process allows, however the connections are shared out.

Each guess goes on a keep-alive TLS connection whose serving worker is known: the test finds the
process holding the server's end of each connection (``/proc/net/tcp`` and ``/proc/<pid>/fd``,
Linux), so that every test sends guesses to both workers for sure, not by chance. What one
process does with parallel guesses is tests/e2e/test_brute_force.py's; two controllers in one test
process, one guess at a time, are in tests/api/test_postgres_cluster.py.

- **Password lockout** (``maxAttempts: 3``): two wrong passwords at once, one on each worker,
  leave the identity enabled (no guess counted twice); the third, on either, locks it for every
  worker (a count of each worker's own would allow four guesses); 32 wrong passwords at once on
  both workers, then the right one, get no API session.
- **MFA code throttle** (``TRELLIS_MFA_FREE_FAILURES=3``): 24 wrong codes at once on both workers:
  exactly 3 are checked (401), every other one waits (429); the right code is then refused on
  both workers.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from pki.totp import totp_code
from tests.e2e.server import CLIENT, HOST, MGMT, Server
from tests.e2e.test_brute_force import PASSWORD, locked_person

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.seconds(30)]

WORKERS = 2
FREE_CODES = 3
#: Generous: two workers and PostgreSQL on a loaded 2-core machine.
DEADLINE_SECONDS = 60.0


@pytest.fixture(scope="module")
def server(postgres_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {
        "TRELLIS_DATABASE_URL": str(postgres_server.new_database()),
        "TRELLIS_WORKERS": str(WORKERS),
        "TRELLIS_MFA_FREE_FAILURES": str(FREE_CODES),
        # the connections are opened first, then used a while later: not closed as idle meanwhile
        "TRELLIS_TIMEOUT_KEEPALIVE_SECONDS": "600",
    }
    with Server(tmp_path_factory.mktemp("cluster-security") / "home", env=env, unset=["TRELLIS_*"]) as made:
        yield made.up()


@pytest.fixture(scope="module")
def admin(server: Server) -> str:
    return server.login()


class Connection:
    """One keep-alive TLS connection to the server, and the worker process that serves it."""

    def __init__(self, server: Server) -> None:
        context = ssl.create_default_context(cafile=server.ca)
        self.http = http.client.HTTPSConnection(HOST, server.port, context=context, timeout=DEADLINE_SECONDS)
        self.http.connect()
        assert self.http.sock is not None
        self.port = int(self.http.sock.getsockname()[1])
        assert self.call("GET", "/version")[0] == 200  # accepted by a worker by now
        self.worker = worker_of(server, self.port)

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, token: str = ""
    ) -> tuple[int, dict[str, Any]]:
        """Status and JSON body, on this connection only (never a new one)."""
        assert self.http.sock is not None, "the server closed the connection"
        headers = {"Accept": "application/json"}
        if token:
            headers["zt-session"] = token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.http.request(method, path, body=data, headers=headers)
        response = self.http.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw else {}

    def close(self) -> None:
        self.http.close()


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def worker_of(server: Server, client_port: int) -> int:
    """The pid of the server's process that holds the server end of the connection from
    ``client_port``."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = (int(address.split(":")[1], 16) for address in fields[1:3])
        if local == server.port and remote == client_port:
            inodes.add(f"socket:[{fields[9]}]")
    for pid in descendants(server.pid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                continue
    raise AssertionError(f"no process of the server holds the connection from port {client_port}")


@pytest.fixture
def connections(server: Server) -> Iterator[dict[int, list[Connection]]]:
    """At least 16 connections per worker, by the worker serving them."""
    made: list[Connection] = []
    by_worker: dict[int, list[Connection]] = {}
    try:
        while len(by_worker) < WORKERS or min(len(c) for c in by_worker.values()) < 16:
            assert len(made) < 400, f"the connections do not reach {WORKERS} workers: {by_worker}"
            connection = Connection(server)
            made.append(connection)
            by_worker.setdefault(connection.worker, []).append(connection)
        assert len(by_worker) == WORKERS, sorted(by_worker)
        yield by_worker
    finally:
        for connection in made:
            connection.close()


def at_once(calls: list[Callable[[], tuple[int, dict[str, Any]]]]) -> list[tuple[int, dict[str, Any]]]:
    """Run ``calls`` on threads released together; their answers, in order."""
    start = threading.Barrier(len(calls))
    answers: list[tuple[int, dict[str, Any]] | None] = [None] * len(calls)

    def run(n: int) -> None:
        start.wait()
        answers[n] = calls[n]()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE_SECONDS * 2)
    assert all(a is not None for a in answers), answers
    return [a for a in answers if a is not None]


def spread(connections: dict[int, list[Connection]], count: int) -> list[Connection]:
    """``count`` connections taken in turn from each worker's."""
    lists = list(connections.values())
    return [lists[n % len(lists)][n // len(lists)] for n in range(count)]


def password(connection: Connection, username: str, secret: str) -> tuple[int, dict[str, Any]]:
    body = {"username": username, "password": secret}
    return connection.call("POST", f"{CLIENT}/authenticate?method=password", body)


def disabled(server: Server, admin: str, identity: str) -> bool:
    answer = server.expect(server.call("GET", f"{MGMT}/identities/{identity}", admin), 200, "identity")
    return bool(answer["data"]["disabled"])


def test_the_lockout_counts_the_guesses_of_both_workers_once(
    server: Server, admin: str, connections: dict[int, list[Connection]]
) -> None:
    identity, username = locked_person(server, admin)  # maxAttempts: 3
    first, second = (spread(connections, 2)[n] for n in (0, 1))
    assert first.worker != second.worker

    guesses = at_once([functools.partial(password, c, username, "wrong-password") for c in (first, second)])
    assert [status for status, _ in guesses] == [401, 401]
    assert not disabled(server, admin, identity), server.log_tail()  # two guesses, counted once each

    assert password(first, username, "wrong-again")[0] == 401  # the third, on one worker
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not disabled(server, admin, identity):
        assert time.monotonic() < deadline, "the third guess did not lock the identity"
        time.sleep(0.1)
    for connection in (first, second):  # locked out on both: the right password is refused
        assert password(connection, username, PASSWORD)[0] == 401


def test_parallel_wrong_passwords_on_both_workers_get_no_session(
    server: Server, admin: str, connections: dict[int, list[Connection]]
) -> None:
    identity, username = locked_person(server, admin)
    chosen = spread(connections, 32)

    guesses = at_once([functools.partial(password, c, username, f"wrong-{n}") for n, c in enumerate(chosen)])
    right = [password(c, username, PASSWORD) for c in (chosen[0], chosen[1])]

    assert [status for status, _ in guesses] == [401] * 32, server.log_tail()
    assert [status for status, _ in right] == [401, 401]
    assert disabled(server, admin, identity)


def test_mfa_codes_sent_to_both_workers_at_once_get_the_free_guesses_only(
    server: Server, admin: str, connections: dict[int, list[Connection]]
) -> None:
    _, username = locked_person(server, admin)
    first = spread(connections, 1)[0]
    status, answer = password(first, username, PASSWORD)
    assert status == 200, answer
    token = str(answer["data"]["token"])
    assert first.call("POST", f"{CLIENT}/current-identity/mfa", {}, token)[0] == 201
    detail = first.call("GET", f"{CLIENT}/current-identity/mfa", token=token)[1]["data"]
    secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
    verified = first.call("POST", f"{CLIENT}/current-identity/mfa/verify", {"code": code(secret)}, token)
    assert verified[0] == 200, verified
    now = datetime.now(UTC)
    near = {totp_code(secret, now + timedelta(seconds=30 * step)) for step in range(-2, 3)}
    wrong = next(f"{n:06d}" for n in range(1_000_000) if f"{n:06d}" not in near)
    chosen = spread(connections, 24)

    totp = functools.partial(Connection.call, method="POST", path=f"{CLIENT}/current-api-session/totp-token")
    answers = at_once([functools.partial(totp, c, body={"code": wrong}, token=token) for c in chosen])
    statuses = sorted(status for status, _ in answers)
    right = [totp(c, body={"code": code(secret)}, token=token) for c in spread(connections, 2)]

    assert statuses == [401] * FREE_CODES + [429] * (24 - FREE_CODES), server.log_tail()
    assert [status for status, _ in right] == [429, 429], right


def code(secret: str) -> str:
    return totp_code(secret, datetime.now(UTC))
