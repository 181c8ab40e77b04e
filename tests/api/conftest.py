"""Fixtures shared by the API tests that work with third-party CAs and module-wide apps."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from tests.api.certs import ThirdPartyCa, admin_api
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, Api, is_durable, open_app


def shared_admin_api(label: str) -> Callable[..., Iterator[Api]]:
    """A module-scoped ``api`` fixture: one logged-in app for the whole module (apps are slow to
    build). Its tests must not depend on one another: each makes entities with unique names, and
    a test about the whole set of some kind uses ``fresh``. In a module: ``api = shared_admin_api("x")``."""

    @pytest.fixture(scope="module", name="api")
    def _api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path) -> Iterator[Api]:
        shared = admin_api(tmp_path_factory.mktemp(label), pki_template)
        yield shared
        shared.app.ctrl.env.store.close()

    return _api


@pytest.fixture
def fresh(app: Any) -> Api:
    """A logged-in app of the test's own."""
    client = Api(app)
    client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
    return client


@pytest.fixture
def acme() -> ThirdPartyCa:
    """A CA of the test's own (a CA certificate can be registered once per controller)."""
    return ThirdPartyCa("Acme Root CA")


@pytest.fixture
def other() -> ThirdPartyCa:
    """A second CA of the test's own."""
    return ThirdPartyCa("Other Root CA")


@pytest.fixture
def make_api(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Callable[..., Api]]:
    """``make_api(**settings)``: a logged-in admin over an app of the test's own whose settings
    differ from the test's by ``settings`` (budgets, limits, timeouts); on a DuckDB file for a
    ``durable`` test."""
    apps: list[Any] = []
    durable = is_durable(request)

    def make(**overrides: Any) -> Api:
        app = open_app(dataclasses.replace(settings, **overrides), durable=durable)
        apps.append(app)
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        admin = Api(app)
        admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
        return admin

    yield make
    for app in apps:
        app.ctrl.env.store.close()
