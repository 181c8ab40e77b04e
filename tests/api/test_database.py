"""``/database``: data integrity check, fix and results; database snapshots.

Damage is real: rows deleted from the DuckDB file while the controller is stopped, or entities
written straight into the store behind the managers' (and so the policy engine's) back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from controller.settings import Settings
from engine.entities.identities import ApiSessionCertificate, Identity, Mfa
from engine.entities.sessions import Session
from engine.managers.bootstrap import create_default_admin
from engine.managers.integrity import MAX_RESULTS
from engine.policy import IDENTITY
from engine.ports import Put
from engine.testing import FixedClock
from storage.duckdb import DuckDBStore
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

INTERCEPT_TYPE = "g7cIWbcGg"
INTERCEPT = {"protocols": ["tcp"], "addresses": ["a.ziti"], "portRanges": [{"low": 80, "high": 80}]}
RESULTS = "/database/data-integrity-results"
CHECK = "/database/check-data-integrity"
FIX = "/database/fix-data-integrity"
SNAPSHOT = "/database/snapshot"
NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)

pytestmark = pytest.mark.durable  # the subject is the database file: its damage, checks and copies


# -- helpers -------------------------------------------------------------------------------------
class Controller:
    """An app over ``settings`` that the test can stop (closing the database) and start again."""

    def __init__(self, settings: Settings, **collaborators: Any) -> None:
        self.settings = settings
        self.collaborators = collaborators
        self.api = self._open(first=True)

    def _open(self, *, first: bool = False) -> Api:
        app = open_app(self.settings, durable=True, **self.collaborators)
        if first:
            create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        return api

    def stop(self) -> None:
        self.api.ctrl.managers.integrity.join()
        self.api.ctrl.env.store.close()

    def restart(self) -> Api:
        self.stop()
        self.api = self._open()
        return self.api


@pytest.fixture
def controller(settings: Settings) -> Iterator[Controller]:
    ctrl = Controller(settings)
    yield ctrl
    ctrl.stop()


def run(api: Api, path: str) -> dict[str, Any]:
    """Start a check or fix, wait for it, and answer the results' ``data``."""
    started = api.post(path)
    assert started.status_code == 202, started.text
    assert started.json["data"] == {}
    assert api.ctrl.managers.integrity.join(timeout=120)
    result = api.get(RESULTS)
    assert result.status_code == 200, result.text
    data: dict[str, Any] = result.json["data"]
    assert data["inProgress"] is False
    assert data["error"] is None
    return data


def findings(data: dict[str, Any]) -> set[tuple[str, bool]]:
    return {(r["description"], r["fixed"]) for r in data["results"]}


def delete_rows(db: Path, **rows: str) -> None:
    """Delete one row by id from each named table, straight in the (closed) database file."""
    con = duckdb.connect(str(db))
    try:
        for table, id in rows.items():
            con.execute(f"DELETE FROM {table} WHERE id = ?", [id])
    finally:
        con.close()


def session(id: str, *, api_session_id: str, identity_id: str, service_id: str) -> Session:
    return Session(
        id=id,
        created_at=NOW,
        updated_at=NOW,
        token=f"token-{id}",
        api_session_id=api_session_id,
        identity_id=identity_id,
        service_id=service_id,
    )


def certificate(id: str, api_session_id: str) -> ApiSessionCertificate:
    return ApiSessionCertificate(
        id=id,
        created_at=NOW,
        updated_at=NOW,
        api_session_id=api_session_id,
        identity_id="someone",
        subject=f"CN={id}",
        cert_pem="-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        fingerprint=f"fp-{id}",
        valid_from=NOW,
        valid_to=NOW + timedelta(hours=1),
    )


# -- results, one run at a time, admin only --------------------------------------------------------
def test_results_before_any_run_are_empty(api: Api) -> None:
    result = api.get(RESULTS)

    assert result.status_code == 200
    assert result.json["data"] == {
        "endTime": None,
        "error": None,
        "fixingErrors": False,
        "inProgress": False,
        "results": [],
        "startTime": None,
        "tooManyErrors": False,
    }
    assert result.json["meta"]["pagination"] == {"limit": -1, "offset": 0, "totalCount": 0}
    assert result.json["meta"]["filterableFields"] == []


def test_a_consistent_database_checks_clean(api: Api) -> None:
    staff = api.create(
        "/identities", {"name": "alice", "isAdmin": False, "type": "User", "roleAttributes": ["a"]}
    )
    service = api.create("/services", {"name": "echo", "encryptionRequired": True, "roleAttributes": ["s"]})
    router = api.create("/edge-routers", {"name": "er-1", "roleAttributes": ["r"]})
    api.create(
        "/service-policies",
        {
            "name": "dial",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": [f"@{staff}"],
            "serviceRoles": ["#s"],
        },
    )
    api.create(
        "/edge-router-policies",
        {"name": "erp", "semantic": "AllOf", "identityRoles": ["#all"], "edgeRouterRoles": [f"@{router}"]},
    )
    api.create(
        "/service-edge-router-policies",
        {"name": "serp", "semantic": "AllOf", "serviceRoles": [f"@{service}"], "edgeRouterRoles": ["#r"]},
    )

    data = run(api, CHECK)

    assert data["results"] == []
    assert data["fixingErrors"] is False
    assert data["tooManyErrors"] is False
    assert data["startTime"] is not None
    assert data["endTime"] is not None
    assert data["startTime"] <= data["endTime"]


def test_only_one_run_at_a_time(api: Api) -> None:
    # Holding the write lock keeps the started run from reading the store: it stays in progress.
    with api.ctrl.env.store.write_lock():
        first = api.post(CHECK)
        second = api.post(CHECK)
        fix = api.post(FIX)
        during = api.get(RESULTS)

    assert first.status_code == 202
    for refused in (second, fix):
        assert refused.status_code == 429
        assert refused.json["error"]["code"] == "RATE_LIMITED"
    assert during.json["data"]["inProgress"] is True
    assert during.json["data"]["fixingErrors"] is False
    assert during.json["data"]["endTime"] is None
    assert api.ctrl.managers.integrity.join(timeout=120)
    after = api.get(RESULTS).json["data"]
    assert after["inProgress"] is False
    assert after["endTime"] is not None
    assert run(api, FIX)["fixingErrors"] is True  # the next run may start


@pytest.mark.parametrize(
    ("method", "path"), [("POST", CHECK), ("POST", FIX), ("GET", RESULTS), ("POST", SNAPSHOT)]
)
def test_database_operations_are_for_admins_only(api: Api, method: str, path: str) -> None:
    identity = api.create("/identities", {"name": "bob", "isAdmin": False, "type": "User"})
    body = {"identityId": identity, "method": "updb", "username": "bobby", "password": "bob-password-1"}
    api.create("/authenticators", body)
    user = api.login("bobby", "bob-password-1", base=CLIENT)

    for token in (user, ""):
        result = api.request(method, path, token=token)
        assert result.status_code == 401, result.text
        assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert api.ctrl.managers.integrity.results().start_time is None  # nothing was started


# -- damage in the database: dangling references and orphans ----------------------------------------
def build_population(api: Api) -> dict[str, str]:
    """Entities that reference one another, some of which the test then deletes behind our back."""
    ids: dict[str, str] = {}
    ids["doomed"] = api.create(
        "/identities", {"name": "doomed", "isAdmin": False, "type": "User", "enrollment": {"ott": True}}
    )
    ids["keeper"] = api.create("/identities", {"name": "keeper", "isAdmin": False, "type": "User"})
    auth = {"identityId": ids["doomed"], "method": "updb", "username": "doomed", "password": "doomed-pass-1"}
    ids["authenticator"] = api.create("/authenticators", auth)
    enrollments = api.get("/enrollments", params={"filter": f'identity = "{ids["doomed"]}"'}).json["data"]
    ids["enrollment"] = enrollments[0]["id"]
    doomed_token = api.login("doomed", "doomed-pass-1", base=CLIENT)
    ids["api_session"] = api.get("/current-api-session", token=doomed_token).json["data"]["id"]
    ids["doomed_config"] = api.create(
        "/configs", {"name": "doomed-config", "configTypeId": INTERCEPT_TYPE, "data": INTERCEPT}
    )
    ids["doomed_type"] = api.create("/config-types", {"name": "doomed-type"})
    ids["typeless_config"] = api.create(
        "/configs", {"name": "typeless-config", "configTypeId": ids["doomed_type"], "data": {}}
    )
    ids["doomed_service"] = api.create("/services", {"name": "doomed-svc", "encryptionRequired": True})
    ids["kept_service"] = api.create(
        "/services", {"name": "kept-svc", "encryptionRequired": True, "configs": [ids["doomed_config"]]}
    )
    overrides = [{"serviceId": ids["kept_service"], "configId": ids["doomed_config"]}]
    assert api.post(f"/identities/{ids['keeper']}/service-configs", json=overrides).status_code == 200
    patched = api.patch(
        f"/identities/{ids['keeper']}", json={"serviceHostingCosts": {ids["doomed_service"]: 10}}
    )
    assert patched.status_code == 200, patched.text
    ids["router"] = api.create("/transit-routers", {"name": "tr-1"})
    ids["terminator"] = api.create(
        "/terminators",
        {
            "service": ids["doomed_service"],
            "router": ids["router"],
            "binding": "transport",
            "address": "tcp:h:1",
        },
    )
    ids["policy"] = api.create(
        "/service-policies",
        {
            "name": "doomed-policy",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": [f"@{ids['doomed']}", f"@{ids['keeper']}"],
            "serviceRoles": [f"@{ids['doomed_service']}", f"@{ids['kept_service']}"],
        },
    )
    return ids


def expected_damage(ids: dict[str, str]) -> list[str]:
    return [
        f"service policy {ids['policy']} (doomed-policy): identityRoles names identity {ids['doomed']}, "
        "which does not exist",
        f"service policy {ids['policy']} (doomed-policy): serviceRoles names service {ids['doomed_service']}, "
        "which does not exist",
        f"service {ids['kept_service']} (kept-svc): lists config {ids['doomed_config']}, which does not exist",
        f"identity {ids['keeper']} (keeper): its service-config overrides name config {ids['doomed_config']}, "
        "which do not exist",
        f"identity {ids['keeper']} (keeper): its service hosting costs or precedences name service "
        f"{ids['doomed_service']}, which does not exist",
        f"authenticator {ids['authenticator']}: its identity {ids['doomed']} does not exist",
        f"enrollment {ids['enrollment']}: its identity {ids['doomed']} does not exist",
        f"MFA enrollment orphan-mfa: its identity {ids['doomed']} does not exist",
        f"terminator {ids['terminator']}: its service {ids['doomed_service']} does not exist",
        f"API session {ids['api_session']}: its identity {ids['doomed']} does not exist",
        f"session orphan-session: its API session gone-session and service {ids['doomed_service']} do not exist",
        "API session certificate orphan-cert: its API session gone-session does not exist",
    ]


def test_check_reports_damage_and_fix_repairs_it(controller: Controller) -> None:
    ids = build_population(controller.api)
    controller.stop()
    delete_rows(
        controller.settings.db_path,
        identities=ids["doomed"],
        services=ids["doomed_service"],
        configs=ids["doomed_config"],
        config_types=ids["doomed_type"],
    )
    api = controller.restart()
    orphans = [
        session(
            "orphan-session",
            api_session_id="gone-session",
            identity_id=ids["keeper"],
            service_id=ids["doomed_service"],
        ),
        certificate("orphan-cert", "gone-session"),
        Mfa(
            id="orphan-mfa",
            created_at=NOW,
            updated_at=NOW,
            identity_id=ids["doomed"],
            secret="JBSWY3DPEHPK3PXP",
        ),
    ]
    api.ctrl.env.store.commit([Put(entity) for entity in orphans])
    unfixable = (
        f"config {ids['typeless_config']} (typeless-config): its config type {ids['doomed_type']} does not exist "
        "(not fixed: delete the config or recreate its type)"
    )

    checked = run(api, CHECK)
    fixed = run(api, FIX)
    again = run(api, CHECK)

    # the rows deleted behind the controller's back are in the change log but not in their tables
    damage = [
        *expected_damage(ids),
        f"change log: identities {ids['doomed']} is in the change log but missing from its table",
        f"change log: services {ids['doomed_service']} is in the change log but missing from its table",
        f"change log: configs {ids['doomed_config']} is in the change log but missing from its table",
        f"change log: config_types {ids['doomed_type']} is in the change log but missing from its table",
    ]
    assert findings(checked) == {(d, False) for d in [*damage, unfixable]}
    assert fixed["fixingErrors"] is True
    assert findings(fixed) == {(d, True) for d in damage} | {(unfixable, False)}
    assert findings(again) == {(unfixable, False)}
    policy = api.get(f"/service-policies/{ids['policy']}").json["data"]
    assert policy["identityRoles"] == [f"@{ids['keeper']}"]
    assert policy["serviceRoles"] == [f"@{ids['kept_service']}"]
    assert api.get(f"/services/{ids['kept_service']}").json["data"]["configs"] == []
    keeper = api.get(f"/identities/{ids['keeper']}").json["data"]
    assert keeper["serviceHostingCosts"] == {}
    assert api.get(f"/identities/{ids['keeper']}/service-configs").json["data"] == []
    for path in (
        f"/authenticators/{ids['authenticator']}",
        f"/enrollments/{ids['enrollment']}",
        f"/terminators/{ids['terminator']}",
        f"/api-sessions/{ids['api_session']}",
    ):
        assert api.get(path).status_code == 404, path
    store = api.ctrl.env.store
    assert store.get(Session, "orphan-session") is None
    assert store.get(ApiSessionCertificate, "orphan-cert") is None
    assert store.get(Mfa, "orphan-mfa") is None
    assert api.get(f"/configs/{ids['typeless_config']}").status_code == 200  # reported, kept
    db = controller.settings.db_path
    assert [p.name for p in db.parent.iterdir() if p.name.startswith(db.name + "-")], (
        "no snapshot before the fix"
    )


def test_a_policy_engine_out_of_step_with_the_database_is_found_and_rebuilt(api: Api) -> None:
    identity = api.create(
        "/identities", {"name": "carol", "isAdmin": False, "type": "User", "roleAttributes": ["a"]}
    )
    service = api.create("/services", {"name": "svc", "encryptionRequired": True, "roleAttributes": ["s"]})
    api.create(
        "/service-policies",
        {
            "name": "dial-a",
            "type": "Dial",
            "semantic": "AllOf",
            "identityRoles": ["#a"],
            "serviceRoles": ["#s"],
        },
    )
    store = api.ctrl.env.store
    stale = store.get(Identity, identity)
    assert stale is not None
    # The database loses attribute "a"; the engine is put back to "a" behind the store's back, as if
    # it had never heard of the change.
    store.commit([Put(dataclasses.replace(stale, role_attributes=["b"]))])
    access = api.ctrl.managers.access
    with access._lock:
        access._graph.upsert_entity(IDENTITY, identity, ["a"])
    listed_before = [s["id"] for s in api.get(f"/identities/{identity}/services").json["data"]]

    checked = run(api, CHECK)
    fixed = run(api, FIX)
    again = run(api, CHECK)

    policy_id = api.get("/service-policies", params={"filter": 'name = "dial-a"'}).json["data"][0]["id"]
    damage = {
        f"policy engine: identity {identity}: role attributes differ (engine only: a; database only: b)",
        f"policy engine: service policy {policy_id}: selected identities differ (engine only: {identity})",
        f"policy engine: identity {identity}: Dial services differ (engine only: {service})",
    }
    assert listed_before == [service]
    assert findings(checked) == {(d, False) for d in damage}
    assert findings(fixed) == {(d, True) for d in damage}
    assert again["results"] == []
    assert api.get(f"/identities/{identity}/services").json["data"] == []


def test_findings_are_capped_and_all_are_fixed(api: Api) -> None:
    count = MAX_RESULTS + 5
    api.ctrl.env.store.commit([Put(certificate(f"orphan-{i:04d}", "gone")) for i in range(count)])

    checked = run(api, CHECK)
    checked_meta = api.get(RESULTS).json["meta"]
    fixed = run(api, FIX)
    again = run(api, CHECK)

    assert len(checked["results"]) == MAX_RESULTS
    assert checked["tooManyErrors"] is True
    assert checked_meta["pagination"]["totalCount"] == MAX_RESULTS
    assert fixed["tooManyErrors"] is True
    assert all(r["fixed"] for r in fixed["results"])
    assert again["results"] == []
    assert again["tooManyErrors"] is False
    assert api.ctrl.env.store.count(ApiSessionCertificate) == 0


# -- snapshots -------------------------------------------------------------------------------------
def test_a_snapshot_is_a_consistent_copy_next_to_the_database(settings: Settings) -> None:
    clock = FixedClock(datetime.now(UTC).replace(microsecond=0))
    ctrl = Controller(settings, clock=clock)
    try:
        api = ctrl.api
        service = api.create("/services", {"name": "snap-svc", "encryptionRequired": True})
        name = f"{settings.db_path.name}-{clock.now().strftime('%Y%m%d-%H%M%S')}"

        result = api.post(SNAPSHOT)
        too_soon = api.post(SNAPSHOT)
        clock.advance(timedelta(seconds=59))
        still_too_soon = api.post(SNAPSHOT)
        clock.advance(timedelta(seconds=1))
        later = api.post(SNAPSHOT)

        assert result.status_code == 200, result.text
        assert result.json["data"] == {"path": str((settings.home / name).absolute())}
        for refused in (too_soon, still_too_soon):
            assert refused.status_code == 429
            assert refused.json["error"]["code"] == "RATE_LIMITED"
        assert later.status_code == 200
        snapshots = sorted(
            p.name for p in settings.home.iterdir() if p.name.startswith(settings.db_path.name + "-")
        )
        assert snapshots == [name, f"{settings.db_path.name}-{clock.now().strftime('%Y%m%d-%H%M%S')}"]
        assert (settings.home / name).stat().st_mode & 0o077 == 0
    finally:
        ctrl.stop()
    copy = DuckDBStore(settings.home / name)
    try:
        from engine.entities.services import Service

        found = copy.get(Service, service)
        assert found is not None
        assert found.name == "snap-svc"
    finally:
        copy.close()


def test_the_change_log_out_of_step_with_the_tables_is_found_and_logged_again(api: Api) -> None:
    identity = api.create("/identities", {"name": "dora", "isAdmin": False, "type": "User"})
    service = api.create("/services", {"name": "svc-log", "encryptionRequired": True})
    store = api.ctrl.env.store
    assert isinstance(store, DuckDBStore)
    assert run(api, CHECK)["results"] == []
    # a table changed behind the change log's back (an operator's hand edit): the log's newest
    # entry of the identity no longer matches, and the service's row is gone
    store.flush()
    store._db.run(
        [
            ("UPDATE identities SET doc = json_object('id', id) WHERE id = ?", [identity]),
            ("DELETE FROM services WHERE id = ?", [service]),
        ]
    )

    checked = run(api, CHECK)
    fixed = run(api, FIX)
    again = run(api, CHECK)

    damage = {
        f"change log: identities {identity} differs from its newest change-log entry",
        f"change log: services {service} is in the change log but missing from its table",
    }
    assert {r["description"] for r in checked["results"]} == damage
    assert {(r["description"], r["fixed"]) for r in fixed["results"]} == {(d, True) for d in damage}
    assert again["results"] == []
    # the fix wrote what the controller serves (memory) back to the table, logged again
    assert api.get(f"/identities/{identity}").json["data"]["name"] == "dora"
    assert api.get(f"/services/{service}").status_code == 200
    (names,) = store._db.run([("SELECT doc->>'name' FROM services WHERE id = ?", [service])])
    assert names == [("svc-log",)]
