"""Two controllers on one PostgreSQL database, as two apps in one test process (each opens its own
store, as each ``trellis serve`` worker does): a login on one is a session on the other at once,
an entity created on one is found on the other at once, a name is taken once whichever takes it,
and the sessions a policy change ends are ended once, by the controller that changed it. Last,
``trellis serve`` with two workers, as an operator runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import ipaddress
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509

from controller.cli import controller_remove, init
from controller.compose import CONTROLLER_ID_FILE
from controller.settings import SettingError, Settings
from engine.entities.sessions import Session
from pki.authority import PkiPaths
from pki.passwords import Argon2idPasswordHasher
from tests.api.session_helpers import dial, world
from tests.api.test_postgres_store import start
from tests.api.test_posture import domain, guarded, respond
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api, new_home, open_app

pytestmark = [pytest.mark.durable, pytest.mark.seconds(25)]

DEADLINE_SECONDS = 30.0


@pytest.fixture
def pair(settings: Settings, postgres_url: str) -> Iterator[tuple[Api, Api]]:
    pg = dataclasses.replace(settings, database_url=postgres_url)
    first = start(pg, first=True)
    second = start(pg)
    yield first, second
    for api in (first, second):
        api.ctrl.env.store.close()


def test_a_login_on_one_is_a_session_on_the_other_at_once(pair: tuple[Api, Api]) -> None:
    first, second = pair
    for _ in range(20):
        token = Api(first.app).login(ADMIN_USER, ADMIN_PASSWORD)
        got = second.get("/current-api-session", token=token)
        assert got.status_code == 200, got.text
    assert second.get("/current-api-session", token="no-such-token").status_code == 401


def test_an_entity_created_on_one_is_found_on_the_other_at_once(pair: tuple[Api, Api]) -> None:
    first, second = pair
    for i in range(20):
        created = first.create("/services", {"name": f"svc-{i}", "encryptionRequired": True})
        got = second.get(f"/services/{created}")
        assert got.status_code == 200, got.text
        assert got.json["data"]["name"] == f"svc-{i}"
    assert second.get("/services/no-such-id").status_code == 404


def test_a_name_is_taken_once_whichever_controller_takes_it(pair: tuple[Api, Api]) -> None:
    rounds = 50
    statuses: list[list[int]] = [[0] * rounds, [0] * rounds]
    barrier = threading.Barrier(2)

    def create(n: int) -> None:
        api = pair[n]
        for r in range(rounds):
            barrier.wait()
            body = {"name": f"same-{r}", "isAdmin": False, "type": "Default"}
            statuses[n][r] = api.post("/identities", json=body).status_code

    threads = [threading.Thread(target=create, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    for r in range(rounds):
        assert sorted((statuses[0][r], statuses[1][r])) == [201, 400], r  # 400: a duplicate name, as OpenZiti
    for api in pair:
        names = [i["name"] for i in api.get("/identities", params={"limit": 500}).json["data"]]
        assert sorted(n for n in names if n.startswith("same-")) == sorted(f"same-{r}" for r in range(rounds))


def test_sessions_a_policy_change_ends_are_ended_once(pair: tuple[Api, Api]) -> None:
    first, second = pair
    made = world(first)
    session = dial(first, made.user.token, made.service)
    assert session.status_code == 201, session.text
    session_id = session.json["data"]["id"]
    assert second.get(f"/sessions/{session_id}").status_code == 200
    assert second.delete(f"/service-policies/{made.dial_policy}").status_code == 200
    deadline = time.monotonic() + DEADLINE_SECONDS
    while first.ctrl.env.store.get(Session, session_id) is not None:
        assert time.monotonic() < deadline, "the ended session did not reach the first controller"
        time.sleep(0.01)
    time.sleep(0.2)  # room for a wrong second delete, had the first controller made one
    first.ctrl.env.store.catch_up()
    log = first.ctrl.env.store.change_log()  # type: ignore[attr-defined]
    deletes = [row for row in log if row[2] == "sessions" and row[3] == session_id and row[4] == "delete"]
    assert len(deletes) == 1
    assert first.ctrl.env.store.change_log_problems() == []


def connections_by_process(port: int, pids: list[int], state: str = "01") -> dict[int, int]:
    """How many TCP sockets on local ``port`` in ``state`` (01 established, 0A listening) each of
    ``pids`` holds (from /proc)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                    inodes.add(fields[9])
    counts = dict.fromkeys(pids, 0)
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    counts[pid] += 1
    return counts


@pytest.mark.e2e
@pytest.mark.slow
def test_serve_with_two_workers_answers_alike_on_every_connection(tmp_path: Path, postgres_url: str) -> None:
    """``trellis serve`` with ``TRELLIS_WORKERS=2``: both workers start, one runs the control
    listener; a login and writes on one connection, reads on many fresh ones (landing on either
    worker) that all find what was written."""
    from tests.e2e.server import Server, children

    env = {"TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": "2"}
    with Server(tmp_path / "home", env=env) as server:
        server.init()
        server.start()
        token = server.login()
        created: list[str] = []
        for i in range(10):
            body = {"name": f"two-workers-{i}", "isAdmin": False, "type": "Default"}
            made = server.expect(server.call("POST", f"{MGMT}/identities", token, json=body), 201, "create")
            created.append(made["data"]["id"])
            for _ in range(4):
                with server.session() as fresh:
                    got = fresh.get(
                        f"{server.url}{MGMT}/identities/{made['data']['id']}",
                        headers={"zt-session": token},
                        timeout=10,
                    )
                    server.expect(got, 200, "read on a fresh connection")
                    assert got.json()["data"]["name"] == f"two-workers-{i}"
        for _ in range(10):
            with server.session() as fresh:
                fresh_token = fresh.post(
                    f"{server.url}{MGMT}/authenticate",
                    params={"method": "password"},
                    json={"username": "admin", "password": server.password},
                    timeout=10,
                ).headers["zt-session"]
            with server.session() as other:
                listed = other.get(
                    f"{server.url}{MGMT}/identities",
                    params={"filter": 'name contains "two-workers-"', "limit": 100},
                    headers={"zt-session": fresh_token},
                    timeout=10,
                )
                body: dict[str, Any] = server.expect(listed, 200, "list on a fresh connection")
                assert sorted(i["id"] for i in body["data"]) == sorted(created)
        # kept-alive connections are spread over the workers: each listens on a socket of its
        # own (the master on none), the kernel spreading new connections over them; with one
        # shared socket, a busy worker took them all (wrk's 16) and the other idled
        workers = [pid for pid, command in children(server.pid) if " serve" in command]
        assert len(workers) == 2, workers
        listening = connections_by_process(server.port, [server.pid, *workers], state="0A")
        assert listening == {server.pid: 0, workers[0]: 1, workers[1]: 1}, listening
        before = connections_by_process(server.port, workers)
        held = [server.session() for _ in range(16)]
        try:
            for session in held:
                server.expect(session.get(f"{server.url}/version", timeout=10), 200, "version")
            after = connections_by_process(server.port, workers)
        finally:
            for session in held:
                session.close()
        spread = {pid: after[pid] - before[pid] for pid in workers}
        assert sum(spread.values()) == 16, (before, after)
        assert all(n > 0 for n in spread.values()), spread  # all 16 on one: p = 2^-15
        server.stop()
        log = server.log.read_text()
    assert log.count("Booting worker") == 2, log[-4000:]
    assert log.count("opened the PostgreSQL database") == 2, log[-4000:]
    assert log.count("edge routers connect to") == 1, log[-4000:]
    assert log.count("another worker serves the control listener") == 1, log[-4000:]


def test_the_router_connected_to_one_worker_is_online_on_every_connection(
    tmp_path: Path, postgres_url: str
) -> None:
    """``trellis serve`` with two workers and its embedded router: the router's control
    connection is held by the worker that leads, and the other worker shares it (the fleet
    board): ``isOnline`` is true on every fresh connection, whichever worker answers it."""
    from tests.e2e.server import Server

    env = {"TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_WORKERS": "2", "TRELLIS_ROUTER": "on"}
    with Server(tmp_path / "home", env=env) as server:
        server.init()
        server.start()
        token = server.login()

        def online_on_fresh_connections(count: int) -> bool:
            for _ in range(count):
                with server.session() as fresh:
                    got = fresh.get(
                        f"{server.url}{MGMT}/edge-routers",
                        params={"filter": 'name="trellis-router"'},
                        headers={"zt-session": token},
                        timeout=10,
                    )
                    [router] = server.expect(got, 200, "edge routers on a fresh connection")["data"]
                    if not router["isOnline"] or router["syncStatus"] != "SYNC_DONE":
                        return False
            return True

        deadline = time.monotonic() + DEADLINE_SECONDS
        while not online_on_fresh_connections(20):
            assert time.monotonic() < deadline, f"not online on every worker\n{server.log_tail()}"
            time.sleep(0.2)
        server.stop()
        log = server.log.read_text()
    assert log.count("Booting worker") == 2, log[-4000:]


def test_two_controllers_list_each_other_and_routers_enroll_to_both(
    settings: Settings, postgres_url: str, tmp_path: Path, pki_template: Path
) -> None:
    """Two controllers (two homes, as two hosts have) on one database: each lists both in
    ``/controllers`` (this one first; the client API without the management addresses and the
    control address), and a router's enrollment JWT names both control listeners (``ctrls``)."""
    a = dataclasses.replace(settings, database_url=postgres_url, ctrl_bind="127.0.0.1:16262")
    b_home = new_home(tmp_path / "b", pki_template)
    (b_home / CONTROLLER_ID_FILE).write_text("ctrl-b\n")  # what `trellis init` of a joining home keeps
    b = dataclasses.replace(
        a, home=b_home, bind="127.0.0.2:1280", advertise="127.0.0.2:1280", ctrl_bind="127.0.0.2:16262"
    )
    first = start(a, first=True)
    second = start(b)
    for api in (first, second):
        api.app.join_network()  # as `trellis serve` does in each process
    try:
        a_id = first.ctrl.controller_id
        assert a_id == first.ctrl.instance_id  # the first controller keeps the network's id
        assert second.ctrl.controller_id == "ctrl-b"

        def listed(api: Api, base: str) -> list[dict[str, Any]]:
            got = api.get("/controllers", base=base)
            assert got.status_code == 200, got.text
            data: list[dict[str, Any]] = got.json["data"]
            return data

        deadline = time.monotonic() + DEADLINE_SECONDS
        while not all(
            len(got) == 2 and all(c["isOnline"] for c in got)
            for got in (listed(first, MGMT), listed(second, CLIENT))
        ):
            assert time.monotonic() < deadline, (listed(first, MGMT), listed(second, CLIENT))
            time.sleep(0.05)

        on_a = listed(first, MGMT)
        assert [c["id"] for c in on_a] == [a_id, "ctrl-b"]
        assert [c["ctrlAddress"] for c in on_a] == ["tls:127.0.0.1:16262", "tls:127.0.0.2:16262"]
        assert on_a[1]["apiAddresses"]["edge-management"] == [
            {"url": "https://127.0.0.2:1280/edge/management/v1", "version": "v1"}
        ]
        assert all(c["isOnline"] for c in on_a)
        on_b = listed(second, CLIENT)
        assert [c["id"] for c in on_b] == ["ctrl-b", a_id]
        assert all(c["ctrlAddress"] is None and set(c["apiAddresses"]) == {"edge-client"} for c in on_b)
        filtered = second.get(
            "/controllers", base=MGMT, params={"filter": 'ctrlAddress contains "127.0.0.1"'}
        )
        assert [c["id"] for c in filtered.json["data"]] == [a_id]

        router_id = first.create("/edge-routers", {"name": "er-both", "isTunnelerEnabled": False})
        jwt_text = first.get(f"/edge-routers/{router_id}").json["data"]["enrollmentJwt"]
        claims = jwt.decode(jwt_text, options={"verify_signature": False})
        assert claims["ctrls"] == ["tls:127.0.0.1:16262", "tls:127.0.0.2:16262"]
    finally:
        for api in (first, second):
            api.ctrl.env.store.close()

    again = start(a)  # the other controller is away: listed offline, and still named to routers
    try:
        listed = again.get("/controllers", base=MGMT).json["data"]
        assert [(c["id"], c["isOnline"]) for c in listed] == [(a_id, True), ("ctrl-b", False)]
        assert listed[1]["ctrlAddress"] == "tls:127.0.0.2:16262"
        router_id = again.create("/edge-routers", {"name": "er-later", "isTunnelerEnabled": False})
        jwt_text = again.get(f"/edge-routers/{router_id}").json["data"]["enrollmentJwt"]
        claims = jwt.decode(jwt_text, options={"verify_signature": False})
        assert claims["ctrls"] == ["tls:127.0.0.1:16262", "tls:127.0.0.2:16262"]
    finally:
        again.ctrl.env.store.close()

    # `trellis controller remove` forgets it (refused for the home's own controller)
    with pytest.raises(SettingError, match="this home's own controller"):
        controller_remove(a, a_id, out=io.StringIO())
    printed = io.StringIO()
    controller_remove(a, "ctrl-b", out=printed)
    assert "removed controller ctrl-b (tls:127.0.0.2:16262)" in printed.getvalue()
    with pytest.raises(SettingError, match="no controller 'ctrl-b'"):
        controller_remove(a, "ctrl-b", out=io.StringIO())
    last = start(a)
    try:
        assert [c["id"] for c in last.get("/controllers", base=MGMT).json["data"]] == [a_id]
    finally:
        last.ctrl.env.store.close()


def test_an_online_controller_is_not_removed(
    settings: Settings, postgres_url: str, tmp_path: Path, pki_template: Path
) -> None:
    a = dataclasses.replace(settings, database_url=postgres_url, ctrl_bind="127.0.0.1:16262")
    b_home = new_home(tmp_path / "b", pki_template)
    (b_home / CONTROLLER_ID_FILE).write_text("ctrl-b\n")
    b = dataclasses.replace(a, home=b_home, advertise="127.0.0.2:1280", ctrl_bind="127.0.0.2:16262")
    first = start(a, first=True)
    second = start(b)
    try:
        second.app.join_network()
        with pytest.raises(SettingError, match="controller ctrl-b is online: stop it first"):
            controller_remove(a, "ctrl-b", out=io.StringIO())
    finally:
        for api in (first, second):
            api.ctrl.env.store.close()


def test_a_controller_joins_the_network_with_its_ca_and_its_own_router(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``trellis init`` of a second home on the same database, given the network's CA (its
    ``pki/`` copied without the server certificate and key): the home gets a server
    certificate of its own from that CA, an id of its own among the network's controllers, and an
    embedded router of its own (the first controller's is left alone)."""
    monkeypatch.setenv("TRELLIS_ADMIN_PASSWORD", ADMIN_PASSWORD)
    base = Settings(database_url=postgres_url, db_writer="thread", router=True)
    a = dataclasses.replace(base, home=tmp_path / "a", bind="127.0.0.1:1280", ctrl_bind="127.0.0.1:16262")
    b = dataclasses.replace(
        base, home=tmp_path / "b", bind="127.0.0.2:1280", ctrl_bind="127.0.0.2:16262", sans=("127.0.0.2",)
    )
    assert init(a, out=io.StringIO())
    a_paths, b_paths = PkiPaths.in_directory(a.pki_dir), PkiPaths.in_directory(b.pki_dir)
    b.pki_dir.mkdir(parents=True)
    for path in a_paths.all_files():
        if path not in (a_paths.server_cert, a_paths.server_key):
            shutil.copy2(path, b.pki_dir / path.name)

    printed = io.StringIO()
    assert init(b, out=printed)

    a_id = (a.home / CONTROLLER_ID_FILE).read_text().strip()
    b_id = (b.home / CONTROLLER_ID_FILE).read_text().strip()
    assert a_id
    assert b_id
    assert a_id != b_id
    assert b_paths.ca_bundle.read_bytes() == a_paths.ca_bundle.read_bytes()
    assert b_paths.server_cert.read_bytes() != a_paths.server_cert.read_bytes()
    server = x509.load_pem_x509_certificate(b_paths.server_cert.read_bytes())
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.2") in sans.get_values_for_type(x509.IPAddress)
    assert f"created edge router 'trellis-router-{b_id}'" in printed.getvalue()
    assert init(b, out=io.StringIO()) is False  # idempotent: the same id, nothing new
    assert (b.home / CONTROLLER_ID_FILE).read_text().strip() == b_id

    api = Api(open_app(dataclasses.replace(a, router=False), durable=True, hasher=Argon2idPasswordHasher()))
    api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)  # the admin init made, with the real hash
    try:
        names = sorted(r["name"] for r in api.get("/edge-routers").json["data"])
        assert names == ["trellis-router", f"trellis-router-{b_id}"]
        assert api.ctrl.controller_id == a_id
    finally:
        api.ctrl.env.store.close()


def test_a_posture_response_to_one_controller_counts_on_the_other(pair: tuple[Api, Api]) -> None:
    """Posture data is kept in memory, yet an SDK's response may reach one process and its session
    request another: the request is answered with the response counted (the refusing process
    reads the latest first), and the other process holds the data soon after in any case."""
    first, second = pair
    g = guarded(first)
    with_token = user_token_on(second, g.user)
    assert dial(second, with_token, g.service).status_code == 409  # nothing reported yet

    answer = respond(first, g.user.token, domain(g.check, "DOMAIN1"))
    assert answer.status_code == 201, answer.text
    dialed = dial(second, with_token, g.service)

    assert dialed.status_code == 201, dialed.text
    identity = g.user.id
    deadline = time.monotonic() + DEADLINE_SECONDS
    while second.get(f"/identities/{identity}/posture-data").json["data"]["domain"] is None:
        assert time.monotonic() < deadline, "the posture data never reached the second controller"
        time.sleep(0.05)
    assert second.get(f"/identities/{identity}/posture-data").json["data"]["domain"]["domain"] == "DOMAIN1"

    respond(first, g.user.token, domain(g.check, "other"))  # now it fails: on the second too
    deadline = time.monotonic() + DEADLINE_SECONDS
    while dial(second, with_token, g.service).status_code != 409:
        assert time.monotonic() < deadline, "the failing posture never reached the second controller"
        time.sleep(0.05)


def user_token_on(api: Api, person: Any) -> str:
    """The person's API session token, usable on ``api`` (the same database: the same token)."""
    token: str = person.token
    assert api.get("/current-api-session", token=token, base=CLIENT).status_code == 200
    return token


def test_writes_on_a_shared_database_never_run_on_the_event_loop(pair: tuple[Api, Api]) -> None:
    """A write may wait for the write token another process holds: the pool runs it, never the
    server's event loop; reads still may run there."""
    app = pair[0].app
    assert not app.runs_on_loop("POST", CLIENT + "/sessions")
    assert app.runs_on_loop("GET", CLIENT + "/services")


def test_trellis_workers_defaults_to_the_cores_on_postgresql_and_is_one_on_duckdb() -> None:
    import os

    from controller.settings import SettingError

    url = "postgresql://trellis@db.example/trellis"
    assert Settings.from_env({}, command="serve").serving_workers == 1
    assert Settings.from_env({"TRELLIS_DATABASE_URL": url}, command="serve").serving_workers == (
        os.cpu_count() or 1
    )
    chosen = {"TRELLIS_DATABASE_URL": url, "TRELLIS_WORKERS": "3"}
    assert Settings.from_env(chosen, command="serve").serving_workers == 3
    assert Settings.from_env({"TRELLIS_WORKERS": "1"}, command="serve").serving_workers == 1
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"TRELLIS_WORKERS": "2"}, command="serve")
    assert "TRELLIS_WORKERS must be 1 with DuckDB" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_attacker_gets_no_more_guesses_from_two_controllers_than_from_one(pair: tuple[Api, Api]) -> None:
    """An auth policy's ``maxAttempts`` counts the guesses sent to every controller of the
    database (storage/postgres/attempts.py), not each controller's own."""
    from tests.api.test_brute_force import PASSWORD, authenticate, person, policy

    first, second = pair
    identity, username, _ = person(first, policy(first, maxAttempts=3, lockoutDurationMinutes=0))
    guesses = [
        authenticate(api, username, f"wrong-password-{n}") for n, api in enumerate((first, second, first))
    ]

    assert [g.status_code for g in guesses] == [401, 401, 401]
    for api in pair:  # locked out for good on both, the right password too
        assert authenticate(api, username, PASSWORD).status_code == 401
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not api.get(f"/identities/{identity}").json["data"]["disabled"]:
            assert time.monotonic() < deadline, "the lockout did not reach this controller"
            time.sleep(0.01)


def test_a_password_made_on_one_controller_logs_in_on_the_other_at_once(pair: tuple[Api, Api]) -> None:
    """An unknown username makes a process catch up once before it answers 401: a user made on
    one controller (and a wrong guess counted against it) logs in on the other at once."""
    from tests.api.test_brute_force import PASSWORD, authenticate, person

    first, second = pair
    for _ in range(10):
        _, username, _ = person(first)
        assert authenticate(second, username, PASSWORD).status_code == 200
    assert authenticate(second, "nobody-by-this-name", PASSWORD).status_code == 401


def test_a_session_used_only_on_one_controller_is_not_ended_as_idle_by_the_other(
    settings: Settings, postgres_url: str
) -> None:
    """Activity is kept in each process's memory and written to the session only now and then;
    the controller that purges (or gets a request for a session it thinks idle) first asks what
    the others shared (storage/postgres/activity.py)."""
    from datetime import UTC, datetime, timedelta

    from engine.managers.bootstrap import create_default_admin
    from engine.testing import FixedClock
    from tests.conftest import open_app

    clock = FixedClock(datetime.now(UTC))
    pg = dataclasses.replace(settings, database_url=postgres_url, session_timeout=timedelta(minutes=30))
    purger, server = (open_app(pg, durable=True, clock=clock) for _ in range(2))
    try:
        create_default_admin(purger.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        token = Api(purger).login(ADMIN_USER, ADMIN_PASSWORD)
        on_server = Api(server)
        for _ in range(3):  # used on the other controller only, every 20 minutes
            clock.advance(minutes=20)
            assert on_server.get("/current-api-session", token=token).status_code == 200
        server.ctrl.env.activity.share()  # what its thread does every few seconds

        assert purger.ctrl.api_sessions.purge_expired(clock.advance(minutes=5)) == 0
        assert Api(purger).get("/current-api-session", token=token).status_code == 200
        clock.advance(minutes=31)  # now idle everywhere
        assert purger.ctrl.api_sessions.purge_expired(clock.now()) == 1
        assert on_server.get("/current-api-session", token=token).status_code == 401
    finally:
        for app in (purger, server):
            app.ctrl.env.store.close()
