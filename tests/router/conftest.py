"""Fixtures for the router tests: throwaway certificates, made once per test process."""

from __future__ import annotations

import pytest

from tests.router.helpers import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("router-pki"))
