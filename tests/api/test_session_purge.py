"""Expired API sessions are purged with their Dial/Bind sessions and ephemeral certificates:
``ApiSessionManager.purge_expired(now)`` on a fixed clock, and the maintenance ticker that
``trellis serve`` runs (test apps run none unless started)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from api.limits import RateLimiter
from controller.serve import TrellisServer
from controller.settings import Settings
from engine.entities.identities import ApiSession, ApiSessionCertificate, Authenticator, Identity
from engine.entities.sessions import Session
from engine.managers.api_sessions import PURGE_BATCH
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import csr_pem
from tests.api.session_helpers import World, dial, world
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def api(settings: Settings, clock: FixedClock) -> Iterator[Api]:
    """A logged-in admin over an app of the test's own on a fixed clock (30-minute sessions)."""
    app = open_app(dataclasses.replace(settings, purge_interval=0.01), clock=clock)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    admin = Api(app)
    admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
    yield admin
    app.maintenance.stop()
    app.ctrl.env.store.close()


@dataclasses.dataclass
class Owned:
    """A user's API session and what belongs to it."""

    api_session: str
    session: str
    certificate: str


def used(api: Api, w: World) -> Owned:
    """The user of ``w`` dials its service and takes an ephemeral certificate."""
    session = dial(api, w.user.token, w.service).json["data"]
    certificate = api.post(
        "/current-api-session/certificates", json={"csr": csr_pem()}, token=w.user.token, base=CLIENT
    ).json["data"]["id"]
    return Owned(session["apiSessionId"], session["id"], certificate)


def present(api: Api, owned: Owned) -> tuple[bool, bool, bool]:
    store = api.ctrl.env.store
    return (
        store.get(ApiSession, owned.api_session) is not None,
        store.get(Session, owned.session) is not None,
        store.get(ApiSessionCertificate, owned.certificate) is not None,
    )


def test_purge_deletes_expired_api_sessions_with_their_sessions_and_certificates(
    api: Api, clock: FixedClock
) -> None:
    owned = used(api, world(api))
    clock.advance(minutes=20)
    assert api.get("/services").status_code == 200  # the admin's session is in use
    clock.advance(minutes=11)  # the user's: idle 31 minutes

    purged = api.ctrl.api_sessions.purge_expired(clock.now())

    assert purged == 1
    assert present(api, owned) == (False, False, False)
    assert api.get("/current-api-session").status_code == 200


def test_purge_keeps_sessions_that_have_not_expired(api: Api, clock: FixedClock) -> None:
    owned = used(api, world(api))
    clock.advance(minutes=29)

    purged = api.ctrl.api_sessions.purge_expired(clock.now())

    assert purged == 0
    assert present(api, owned) == (True, True, True)
    assert api.get("/api-sessions").json["meta"]["pagination"]["totalCount"] == 2


def test_purge_goes_through_more_than_one_batch(api: Api, clock: FixedClock) -> None:
    env = api.ctrl.env
    assert api.token is not None
    mine = api.ctrl.api_sessions.resolve(api.token)
    assert mine is not None
    admin = env.store.get(Identity, mine.identity_id)
    authenticator = env.store.get(Authenticator, mine.authenticator_id)
    assert admin is not None
    assert authenticator is not None
    for _ in range(PURGE_BATCH + 10):
        api.ctrl.api_sessions.start(admin, authenticator, ip_address="192.0.2.1", config_types=[])
    clock.advance(minutes=31)

    purged = api.ctrl.api_sessions.purge_expired(clock.now())

    assert purged == PURGE_BATCH + 11  # the fixture's login too
    assert env.store.count(ApiSession) == 0


def test_an_expired_session_is_refused_before_and_after_the_purge(api: Api, clock: FixedClock) -> None:
    w = world(api)
    clock.advance(minutes=31)
    api.ctrl.api_sessions.purge_expired(clock.now())

    result = api.get("/current-api-session", token=w.user.token, base=CLIENT)

    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"


# -- the ticker ------------------------------------------------------------------------------------
def test_a_test_app_runs_no_ticker(api: Api) -> None:
    assert api.app.maintenance.running is False
    assert api.app.maintenance.runs == 0


def test_the_ticker_purges_expired_sessions(api: Api, clock: FixedClock) -> None:
    owned = used(api, world(api))
    clock.advance(minutes=31)
    maintenance = api.app.maintenance

    maintenance.start()
    ran = maintenance.wait_for_runs(1, timeout=30)
    maintenance.stop()

    assert ran
    assert maintenance.running is False
    assert present(api, owned) == (False, False, False)
    assert api.ctrl.env.store.count(ApiSession) == 0


def test_the_ticker_forgets_idle_clients_budgets(api: Api) -> None:
    now = [1000.0]
    limiter = api.app.limits.writes = RateLimiter(60, 1, lambda: now[0])
    limiter.take("client")
    now[0] += 5  # its budget is whole again
    maintenance = api.app.maintenance

    maintenance.start()
    ran = maintenance.wait_for_runs(1, timeout=30)
    maintenance.stop()

    assert (ran, len(limiter)) == (True, 0)


def test_serving_starts_the_ticker_and_stopping_the_worker_stops_it(settings: Settings) -> None:
    server = TrellisServer(dataclasses.replace(settings, purge_interval=3600))

    app: Any = server.load()
    started = app.maintenance.running
    server.cfg.worker_exit(None, None)

    assert started is True
    assert app.maintenance.running is False


def test_the_purge_interval_comes_from_the_environment() -> None:
    assert Settings.from_env({}).purge_interval == 60.0
    assert Settings.from_env({"TRELLIS_PURGE_INTERVAL_SECONDS": "5"}).purge_interval == 5.0
    with pytest.raises(SystemExit, match="TRELLIS_PURGE_INTERVAL_SECONDS"):
        Settings.from_env({"TRELLIS_PURGE_INTERVAL_SECONDS": "0"})
