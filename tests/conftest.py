"""Shared fixtures: a generated PKI (once per session), an app on a temporary DuckDB file."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import falcon.testing
import pytest

from api.app import create_app
from api.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import CheapHasher

ADMIN_USER = "admin"
ADMIN_PASSWORD = "admin-password-1"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"


@pytest.fixture(scope="session")
def pki_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PKI generated once (key generation is slow) and copied into each test's home."""
    from pki.authority import init_pki

    directory = tmp_path_factory.mktemp("pki-template") / "pki"
    init_pki(directory, sans=["ctrl.example.test"], now=datetime.now(UTC))
    return directory


@pytest.fixture(scope="session")
def authority(pki_template: Path) -> Any:
    """The session PKI loaded as the controller's certificate authority (real keys)."""
    from pki import CertificateAuthority, PkiPaths

    return CertificateAuthority.load(PkiPaths.in_directory(pki_template))


@pytest.fixture(scope="session")
def signer(authority: Any) -> Any:
    """The enrollment-JWT signer of the session PKI."""
    from pki import JwtSigner

    return JwtSigner.for_authority(authority)


@pytest.fixture
def home(tmp_path: Path, pki_template: Path) -> Path:
    target = tmp_path / "home"
    target.mkdir()
    shutil.copytree(pki_template, target / "pki")
    return target


@pytest.fixture
def settings(home: Path) -> Settings:
    # The committer writes in its own thread here (hundreds of apps are made; a writer process each
    # would cost a start-up each). The writer process, trellis serve's default, is what the e2e
    # tests serve, and tests/unit/storage/test_duckdb_store.py runs every store test with both.
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


def open_app(settings: Settings, **collaborators: Any) -> Any:
    """An app over ``settings`` with the cheap test hasher (scrypt belongs to the hasher's and
    login's own tests); ``collaborators`` override or add ``create_app`` keyword arguments."""
    collaborators.setdefault("hasher", CheapHasher())
    return create_app(settings, **collaborators)


@pytest.fixture
def app(settings: Settings) -> Iterator[Any]:
    application = open_app(settings)
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
