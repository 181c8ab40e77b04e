"""Shared fixtures: a generated PKI (once per session) and apps over it.

An API test's app runs on the in-memory store (:class:`TestMemoryStore`) with the session's
certificate authority: building one costs milliseconds. A test whose subject is storage or
persistence (a restart, a snapshot, the integrity check over the database file, the journal, a
failed commit) is marked ``durable``: its ``app`` runs on a DuckDB file in its home, as
``trellis serve`` does, and the apps it opens itself take ``open_app(settings, durable=True)``.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from hypothesis import settings as hypothesis_settings

from controller.app import create_app
from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.ports import Change, Put
from engine.testing import CheapHasher
from pki import CertificateAuthority, PkiPaths
from storage.codec import encode
from storage.memory import MemoryStore
from tests.schedule import DEFAULT_SECONDS, arrange

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-password-1"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests spread over the head of each test process's share, so the processes of
    ``make test`` start them at once and end together (:mod:`tests.schedule`). A test marked
    ``seconds(n)`` takes about n seconds; a module marked so (``pytestmark``) takes n in all, its
    tests together; a ``slow`` test without either is taken for 10 s."""

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    in_module: dict[str, int] = {}
    for item in items:
        in_module[module(item)] = in_module.get(module(item), 0) + 1

    def estimate(item: pytest.Item) -> float | None:
        own = next((m for m in item.iter_markers("seconds") if m in item.own_markers), None)
        if own is not None:
            return float(own.args[0])
        marked = item.get_closest_marker("seconds")
        if marked is not None:
            return float(marked.args[0]) / in_module[module(item)]
        return DEFAULT_SECONDS if item.get_closest_marker("slow") is not None else None

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = arrange(items, workers, estimate, module)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The one-line summaries long tests record (``record_property("summary", ...)``: what the
    fuzz and the soak did), whichever process ran them."""
    lines = [
        str(value)
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        for name, value in getattr(report, "user_properties", ())
        if name == "summary"
    ]
    if lines:
        terminalreporter.write_sep("-", "summaries")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the imports and the collection made (some 100k objects that live as long as the
    run) out of the collector's sight: every full collection would scan them again, and the
    thousands of apps the tests make trigger many (a fifth of the API tests' time went there)."""
    gc.collect()
    gc.freeze()


#: The share of each property test's examples to run: 1 in ``make test``, less in ``make
#: test-fast`` (the edit loop), where the same properties run on fewer inputs.
EXAMPLES_SCALE = float(os.environ.get("TRELLIS_EXAMPLES_SCALE", "1") or "1")


# No hypothesis test has a time limit per example: a busy 2-core machine took 389 ms for an example
# that takes 22 (hypothesis's default deadline is 200 ms). Those that set one keep theirs.
hypothesis_settings.register_profile("trellis", deadline=None)
hypothesis_settings.load_profile("trellis")


def examples(count: int) -> int:
    """``count`` examples for a hypothesis test, scaled by ``TRELLIS_EXAMPLES_SCALE`` (at least 10)."""
    return max(10, round(count * EXAMPLES_SCALE)) if EXAMPLES_SCALE < 1 else count


@pytest.fixture(scope="session")
def pki_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PKI generated once (key generation is slow) and linked into each test's home."""
    from pki.authority import init_pki

    directory = tmp_path_factory.mktemp("pki-template") / "pki"
    init_pki(directory, sans=["ctrl.example.test"], now=datetime.now(UTC))
    return directory


@pytest.fixture(scope="session")
def authority(pki_template: Path) -> Any:
    """The session PKI loaded as the controller's certificate authority (real keys): the one
    every app of the tests signs with."""
    return _authority(pki_template.resolve())


@pytest.fixture(scope="session")
def signer(authority: Any) -> Any:
    """The enrollment-JWT signer of the session PKI."""
    from pki import JwtSigner

    return JwtSigner.for_authority(authority)


def is_durable(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting test (or its module or class) is marked ``durable``."""
    return request.node.get_closest_marker("durable") is not None


def new_home(directory: Path, pki_template: Path) -> Path:
    """``directory`` made a ``TRELLIS_HOME`` whose ``pki`` is a link to the session PKI (nothing
    writes to a PKI once made; its certificate authority is loaded once, see :func:`open_app`)."""
    directory.mkdir()
    os.symlink(pki_template, directory / "pki", target_is_directory=True)
    return directory


@pytest.fixture
def home(tmp_path: Path, pki_template: Path) -> Path:
    """The test's ``TRELLIS_HOME``: the session PKI and nothing else yet."""
    return new_home(tmp_path / "home", pki_template)


@pytest.fixture
def settings(home: Path) -> Settings:
    # A durable test's DuckDB file is written by its committer thread (a writer process each would
    # cost a start-up each). The writer process, trellis serve's default, is what the e2e tests
    # serve, and tests/unit/storage/test_duckdb_store.py runs every store test with both.
    return Settings(home=home, bind="127.0.0.1:1280", db_writer="thread")


class Api:
    """A TestClient with helpers for the two API bases and a logged-in admin."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ctrl = app.ctrl
        self.client = falcon.testing.TestClient(app)
        self.token: str | None = None

    def headers(self, token: str | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
        out = dict(extra or {})
        use = token if token is not None else self.token
        if use:
            out["zt-session"] = use
        return out

    def request(
        self, method: str, path: str, *, token: str | None = None, base: str = MGMT, **kwargs: Any
    ) -> falcon.testing.Result:
        headers = self.headers(token, kwargs.pop("headers", None))
        return self.client.simulate_request(method, base + path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("POST", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("PUT", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("PATCH", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.request("DELETE", path, **kwargs)

    def login(self, username: str, password: str, *, base: str = MGMT) -> str:
        result = self.client.simulate_post(
            base + "/authenticate",
            params={"method": "password"},
            json={"username": username, "password": password},
        )
        assert result.status_code == 200, result.text
        return str(result.json["data"]["token"])

    def create(self, path: str, body: dict[str, Any]) -> str:
        """POST and return the new id (asserts 201)."""
        result = self.post(path, json=body)
        assert result.status_code == 201, result.text
        return str(result.json["data"]["id"])


class TestMemoryStore(MemoryStore):
    """The in-memory store as the durable one runs it: batches committed by a committer thread
    (writers wait for theirs), and a value the database could not store refused at staging, on
    the writer's thread (``storage.codec.encode``: a 400 naming the field), as ``DuckDBStore``
    refuses it. Nothing is kept: restarts, snapshots and the change log are ``durable`` tests'."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self) -> None:
        super().__init__(background=True)

    def _prepare(self, changes: Sequence[Change]) -> None:
        for change in changes:
            if isinstance(change, Put):
                encode(change.entity)


@functools.cache
def _authority(pki_dir: Path) -> CertificateAuthority:
    """The PKI in ``pki_dir`` (resolved: every linked home shares the session's), loaded once."""
    return CertificateAuthority.load(PkiPaths.in_directory(pki_dir))


def open_app(settings: Settings, *, durable: bool = False, **collaborators: Any) -> Any:
    """An app over ``settings`` with the cheap test hasher (scrypt belongs to the hasher's and
    login's own tests); ``collaborators`` override or add ``create_app`` keyword arguments.

    The app runs on a new :class:`TestMemoryStore` unless ``durable``: then on the DuckDB file
    of ``settings`` (opened again by the next durable app over the same settings: a restart), as
    ``trellis serve`` runs it. Either way the PKI of ``settings.pki_dir`` is loaded once per
    session (the homes made here all link to the session's)."""
    collaborators.setdefault("hasher", CheapHasher())
    if "ca" not in collaborators:
        collaborators["ca"] = _authority(settings.pki_dir.resolve())
    if not durable and "store" not in collaborators:
        collaborators["store"] = TestMemoryStore()
    return create_app(settings, **collaborators)


@pytest.fixture
def app(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Any]:
    """An app with the default admin; on a DuckDB file for a ``durable`` test."""
    application = open_app(settings, durable=is_durable(request))
    create_default_admin(application.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    yield application
    application.ctrl.env.store.close()


@pytest.fixture
def api(app: Any) -> Api:
    """The app with the default admin logged in (``api.token``)."""
    client = Api(app)
    client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
    return client


@pytest.fixture
def anon(app: Any) -> Api:
    """The app with nobody logged in."""
    return Api(app)


# -- PostgreSQL (storage/postgres): a throwaway server per test process ---------------------------


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A PostgreSQL server of this test process's own (:mod:`tests.postgres`: under pytest-xdist,
    one per worker), stopped and removed at the end of the session; the tests that use it are
    skipped where PostgreSQL is not installed."""
    from tests.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb and postgres from pg_config --bindir, "
            "/usr/lib/postgresql/*/bin or PATH): the PostgreSQL store's tests need them"
        )
    server = PostgresServer(bindir)
    try:
        server.start()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def postgres_url(postgres_server: Any) -> str:
    """A new, empty database on the session's PostgreSQL server: its URL."""
    return str(postgres_server.new_database())
