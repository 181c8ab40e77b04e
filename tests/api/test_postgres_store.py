"""The controller on PostgreSQL (``TRELLIS_DATABASE_URL``): the app opens the database itself, keeps
what the API wrote across a restart, checks and fixes the change log there, and refuses a URL it
cannot use in one line that never shows the password. Last, ``trellis init`` and ``trellis serve``
on an empty database, as an operator runs them.

The server is the tests' own (tests/postgres.py, one per test process); each test has a new
database.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.compose import open_store
from controller.settings import SettingError, Settings
from engine.managers.bootstrap import create_default_admin
from storage.postgres import PostgresStore
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, open_app

RESULTS = "/database/data-integrity-results"
CHECK = "/database/check-data-integrity"
FIX = "/database/fix-data-integrity"

pytestmark = [pytest.mark.durable, pytest.mark.seconds(30)]  # the subject is where the data is kept


@pytest.fixture
def pg_settings(settings: Settings, postgres_url: str) -> Settings:
    """The test's settings with ``TRELLIS_DATABASE_URL`` naming a new, empty database."""
    return dataclasses.replace(settings, database_url=postgres_url)


def start(settings: Settings, *, first: bool = False) -> Api:
    """An app over ``settings`` that opens its store itself (as ``trellis serve``'s worker does),
    with the admin logged in (created first on a new database)."""
    app = open_app(settings, durable=True)
    if first:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    api = Api(app)
    api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
    return api


@pytest.fixture
def pg_api(pg_settings: Settings) -> Iterator[Api]:
    api = start(pg_settings, first=True)
    yield api
    api.ctrl.managers.integrity.join()
    api.ctrl.env.store.close()


def run(api: Api, path: str) -> dict[str, Any]:
    """Start a check or fix, wait for it, and answer the results' ``data``."""
    assert api.post(path).status_code == 202
    assert api.ctrl.managers.integrity.join(timeout=120)
    result = api.get(RESULTS)
    assert result.status_code == 200, result.text
    data: dict[str, Any] = result.json["data"]
    assert data["error"] is None
    return data


def test_what_the_api_wrote_is_there_after_a_restart(pg_settings: Settings) -> None:
    api = start(pg_settings, first=True)
    store = api.ctrl.env.store
    assert isinstance(store, PostgresStore)  # opened from TRELLIS_DATABASE_URL
    assert not (pg_settings.home / "trellis.duckdb").exists()
    identity = api.create(
        "/identities", {"name": "laptop", "isAdmin": False, "type": "Default", "roleAttributes": ["staff"]}
    )
    service = api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["s"]})
    policy = api.create(
        "/service-policies",
        {
            "name": "dial",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#s"],
        },
    )
    assert api.delete(f"/services/{service}").status_code == 200
    instance = api.ctrl.instance_id
    token = api.token
    store.close()

    again = start(pg_settings)
    try:
        got = again.get(f"/identities/{identity}")
        assert got.status_code == 200, got.text
        assert (got.json["data"]["name"], got.json["data"]["roleAttributes"]) == ("laptop", ["staff"])
        assert again.get(f"/service-policies/{policy}").json["data"]["name"] == "dial"
        assert again.get(f"/services/{service}").status_code == 404
        assert again.ctrl.instance_id == instance
        assert again.get("/identities", token=token).status_code == 200  # API sessions are kept too
        assert again.ctrl.env.store.change_log_problems() == []
    finally:
        again.ctrl.env.store.close()


def test_an_app_given_a_postgres_store_serves_from_it(settings: Settings, postgres_url: str) -> None:
    app = open_app(settings, store=PostgresStore(postgres_url))
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        api.create("/identities", {"name": "given", "isAdmin": False, "type": "Default"})
    finally:
        app.ctrl.env.store.close()
    reopened = PostgresStore(postgres_url)
    try:
        assert sorted(i.name for i in reopened.all(_identity_kind())) == ["Default Admin", "given"]
    finally:
        reopened.close()


def _identity_kind() -> Any:
    from engine.entities.identities import Identity

    return Identity


def test_the_change_log_out_of_step_with_the_tables_is_found_and_fixed(
    pg_api: Api, postgres_server: Any, postgres_url: str
) -> None:
    identity = pg_api.create("/identities", {"name": "dora", "isAdmin": False, "type": "User"})
    service = pg_api.create("/services", {"name": "svc-log", "encryptionRequired": True})
    assert run(pg_api, CHECK)["results"] == []
    # tables changed behind the change log's back (an operator's hand edit in psql)
    postgres_server.execute(
        postgres_url, "UPDATE identities SET doc = json_build_object('id', id) WHERE id = %s", [identity]
    )
    postgres_server.execute(postgres_url, "DELETE FROM services WHERE id = %s", [service])

    checked = run(pg_api, CHECK)
    fixed = run(pg_api, FIX)  # no snapshot first (there is no file to copy): the fix goes on
    again = run(pg_api, CHECK)

    damage = {
        f"change log: identities {identity} differs from its newest change-log entry",
        f"change log: services {service} is in the change log but missing from its table",
    }
    assert {r["description"] for r in checked["results"]} == damage
    assert {(r["description"], r["fixed"]) for r in fixed["results"]} == {(d, True) for d in damage}
    assert again["results"] == []
    assert postgres_server.execute(
        postgres_url, "SELECT doc->>'name' FROM services WHERE id = %s", [service]
    ) == [("svc-log",)]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "postgresql://alice:s3cret%zz@db.example.test/trellis",
            "TRELLIS_DATABASE_URL: libpq cannot parse it: give a postgresql:// URL or key=value pairs",
        ),
        (
            "postgresql://alice:s3cret@/trellis?host=/nonexistent-trellis-socket-dir&connect_timeout=2",
            "TRELLIS_DATABASE_URL: cannot open the PostgreSQL database user=alice password=*** connect_timeout=2 "
            "dbname=trellis host=/nonexistent-trellis-socket-dir: ",
        ),
    ],
)
def test_a_database_url_that_cannot_be_used_stops_in_one_line_without_the_password(
    settings: Settings, url: str, message: str
) -> None:
    with pytest.raises(SettingError) as refused:
        open_store(dataclasses.replace(settings, database_url=url))
    text = str(refused.value)
    assert text.startswith(message)
    assert "\n" not in text
    assert "s3cret" not in text


def test_the_setting_refuses_another_scheme_without_repeating_the_value() -> None:
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"TRELLIS_DATABASE_URL": "mysql://alice:s3cret@db/trellis"}, command="serve")
    assert str(refused.value) == (
        "TRELLIS_DATABASE_URL must be a postgresql:// URL or libpq key=value pairs, not a mysql:// URL"
    )
    with pytest.raises(SettingError) as refused:
        Settings.from_env({"TRELLIS_DATABASE_URL": "s3cret"}, command="init")
    assert "s3cret" not in str(refused.value)
    url = "postgres://alice:s3cret@db/trellis"
    settings = Settings.from_env({"TRELLIS_DATABASE_URL": url}, command="serve")
    assert settings.database_url == url
    assert "s3cret" not in repr(settings)
    assert Settings.from_env({}, command="serve").database_url == ""


# -- the commands ---------------------------------------------------------------------------------


def test_serve_wants_the_pki_in_the_home_but_no_duckdb_file(settings: Settings, tmp_path: Path) -> None:
    from controller.cli import check_serve_home

    pg = dataclasses.replace(settings, database_url="postgresql://trellis@db.example.test/trellis")
    check_serve_home(pg)  # the home of the tests: the PKI alone
    with pytest.raises(SettingError, match=r"is not initialised \(no trellis.duckdb\)"):
        check_serve_home(settings)  # the same home, with the data in DuckDB
    empty = dataclasses.replace(pg, home=tmp_path / "empty")
    empty.home.mkdir()
    with pytest.raises(SettingError, match=r"is not initialised \(no pki/\): run `trellis init` first"):
        check_serve_home(empty)
    with pytest.raises(SettingError, match="does not exist: run `trellis init` first"):
        check_serve_home(dataclasses.replace(pg, home=tmp_path / "missing"))


def test_restore_refuses_with_the_data_in_postgresql(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli import main

    snapshot = tmp_path / "trellis.duckdb-20260304-050607"
    snapshot.write_bytes(b"")
    monkeypatch.setenv("TRELLIS_HOME", str(home))
    monkeypatch.setenv("TRELLIS_DATABASE_URL", "postgresql://trellis:s3cret@db.example.test/trellis")
    assert main(["restore", str(snapshot)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trellis: restore puts back a snapshot of the DuckDB database;")
    assert "pg_restore" in err
    assert "s3cret" not in err


def test_serve_stops_in_one_line_when_the_database_cannot_be_reached(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from controller.cli import main

    monkeypatch.setenv("TRELLIS_HOME", str(home))
    monkeypatch.setenv(
        "TRELLIS_DATABASE_URL",
        "postgresql://trellis:s3cret@/trellis?host=/nonexistent-trellis-socket-dir&connect_timeout=2",
    )
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trellis: TRELLIS_DATABASE_URL: cannot open the PostgreSQL database user=trellis ")
    assert err.count("\n") == 1
    assert "s3cret" not in err
    assert not (home / "serve.lock").exists()  # refused before it took the home


@pytest.mark.e2e
@pytest.mark.slow
def test_init_and_serve_on_an_empty_database(tmp_path: Path, postgres_url: str) -> None:
    """As an operator: ``trellis init`` with ``TRELLIS_DATABASE_URL`` makes the PKI in the home and
    the admin in the database; ``trellis serve`` serves it; a restart keeps what was written."""
    from tests.e2e.server import MGMT, Server

    with Server(tmp_path / "home", env={"TRELLIS_DATABASE_URL": postgres_url}) as server:
        made = server.init()
        assert "created admin 'admin' with the password from TRELLIS_ADMIN_PASSWORD" in made.stdout
        assert sorted(p.name for p in server.home.iterdir()) == ["controller.id", "pki"]  # no trellis.duckdb
        server.start()
        token = server.login()
        body = {"name": "on-postgres", "isAdmin": False, "type": "Default", "roleAttributes": ["pg"]}
        created = server.expect(server.call("POST", f"{MGMT}/identities", token, json=body), 201, "create")
        identity = created["data"]["id"]
        server.stop()

        assert "is already initialised" in server.init().stdout
        server.start()
        token = server.login()
        got = server.expect(
            server.call("GET", f"{MGMT}/identities/{identity}", token), 200, "after a restart"
        )
        assert got["data"]["roleAttributes"] == ["pg"]
        server.stop()
        log = server.log.read_text()
        assert ", database user=postgres dbname=trellis_test_" in log


def test_a_snapshot_is_refused_with_a_409_naming_pg_dump(pg_api: Api) -> None:
    refused = pg_api.post("/database/snapshot")

    assert refused.status_code == 409, refused.text
    assert refused.json["error"]["code"] == "SNAPSHOT_NOT_SUPPORTED"
    assert "pg_dump" in refused.json["error"]["cause"]["message"]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_database_the_worker_cannot_open_stops_serve_with_one_line_and_no_retries(
    tmp_path: Path, postgres_server: Any, postgres_url: str
) -> None:
    """serve's check passes (reachable, a known schema) but the worker cannot load the data (its
    log_head row is gone): one ``trellis:`` line, exit status 1, no traceback, no second worker."""
    from tests.e2e.test_cli import serve_env, trellis

    home = tmp_path / "home"
    env = {"TRELLIS_DATABASE_URL": postgres_url, "TRELLIS_ADMIN_PASSWORD": "an-admin-password-1"}
    made = trellis("init", env={"TRELLIS_HOME": str(home), **env})
    env["TRELLIS_WORKERS"] = "1"  # each of several workers would say it once
    assert made.returncode == 0, made.stderr
    postgres_server.execute(postgres_url, "DELETE FROM log_head")

    done = trellis("serve", env=serve_env(home, **env))

    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("trellis: ")]
    assert len(ours) == 1, done.stderr
    assert ours[0].startswith(f"trellis: cannot start on {home}: "), done.stderr
    assert "log_head" in ours[0], ours
    assert done.stderr.count("Booting worker") == 1, done.stderr
