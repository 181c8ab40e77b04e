"""Password guesses on many connections at once against ``trellis serve`` (issue 18): under
``maxAttempts: 3``, 32 wrong passwords sent in parallel, then the right one, get no API session
and leave the identity locked; a locked identity answers the right password as a wrong one.

Real threads, each on its own TLS connection, against a real server with its real (argon2id)
password hash: the window in which concurrent checks overlap is the one an attacker would use.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.server import CLIENT, MGMT, Server, new_session, running

pytestmark = pytest.mark.e2e

PASSWORD = "right-password-1"
GUESSES = 32


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("brute") / "home")


@pytest.fixture(scope="module")
def admin(server: Server) -> str:
    return server.login()


def locked_person(server: Server, admin: str) -> tuple[str, str]:
    """(identity id, username) of a new identity under ``maxAttempts: 3``, locked until enabled."""
    policy = server.call(
        "POST",
        f"{MGMT}/auth-policies",
        admin,
        json={
            "name": f"p-{uuid.uuid4().hex[:8]}",
            "primary": {"updb": {"maxAttempts": 3, "lockoutDurationMinutes": 0}},
            "secondary": {},
        },
    )
    policy_id = server.expect(policy, 201, "auth policy")["data"]["id"]
    username = f"person-{uuid.uuid4().hex[:8]}"
    created = server.call(
        "POST",
        f"{MGMT}/identities",
        admin,
        json={"name": username, "isAdmin": False, "type": "User", "authPolicyId": policy_id},
    )
    identity = server.expect(created, 201, "identity")["data"]["id"]
    authenticator = server.call(
        "POST",
        f"{MGMT}/authenticators",
        admin,
        json={"identityId": identity, "method": "updb", "username": username, "password": PASSWORD},
    )
    server.expect(authenticator, 201, "authenticator")
    return identity, username


def login(http: requests.Session, server: Server, username: str, password: str) -> requests.Response:
    return http.post(
        f"{server.url}{CLIENT}/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
        timeout=60,
    )


def refusal(response: requests.Response) -> tuple[int, dict[str, Any]]:
    body = dict(response.json()["error"])
    body.pop("requestId", None)
    return response.status_code, body


def test_parallel_wrong_passwords_then_the_right_one_get_no_session(server: Server, admin: str) -> None:
    identity, username = locked_person(server, admin)
    sessions = [new_session(server.ca) for _ in range(GUESSES)]
    for http in sessions:  # connect first, so that the guesses themselves go out together
        http.get(f"{server.url}/version", timeout=30)
    start = threading.Barrier(GUESSES)
    statuses: list[int] = []
    tokens: list[str] = []

    def guess(http: requests.Session, n: int) -> None:
        start.wait()
        response = login(http, server, username, f"wrong-password-{n}")
        statuses.append(response.status_code)
        if response.status_code == 200:
            tokens.append(response.json()["data"]["token"])

    threads = [threading.Thread(target=guess, args=(http, n)) for n, http in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    right = login(sessions[0], server, username, PASSWORD)

    assert tokens == []
    assert statuses == [401] * GUESSES, server.log_tail()
    assert refusal(right) == (401, refusal(login(sessions[1], server, username, "wrong-again"))[1])
    assert refusal(right)[1]["code"] == "INVALID_AUTH"
    data = server.expect(server.call("GET", f"{MGMT}/identities/{identity}", admin), 200, "identity")["data"]
    assert (data["disabled"], data.get("disabledUntil")) == (True, None)  # null: left out
    for http in sessions:
        http.close()


def test_the_right_password_among_parallel_guesses_of_a_locked_identity_is_refused(
    server: Server, admin: str
) -> None:
    _, username = locked_person(server, admin)
    http = new_session(server.ca)
    for _ in range(3):
        login(http, server, username, "wrong-password")
    sessions = [new_session(server.ca) for _ in range(8)]
    start = threading.Barrier(len(sessions))
    answers: list[tuple[int, dict[str, Any]]] = []

    def guess(client: requests.Session, n: int) -> None:
        start.wait()
        answers.append(refusal(login(client, server, username, PASSWORD if n % 2 else "wrong-password")))

    threads = [threading.Thread(target=guess, args=(client, n)) for n, client in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({(status, body["code"], body["message"]) for status, body in answers}) == 1
    assert answers[0][0] == 401
    for client in [http, *sessions]:
        client.close()


def test_an_unknown_username_answers_as_a_wrong_password(server: Server, tmp_path: Path) -> None:
    http = new_session(server.ca)

    unknown = login(http, server, f"nobody-{uuid.uuid4().hex[:8]}", PASSWORD)
    wrong = login(http, server, "admin", "not-the-admin-password")

    assert refusal(unknown) == refusal(wrong)
    http.close()
