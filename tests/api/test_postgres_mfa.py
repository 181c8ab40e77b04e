"""MFA across two processes on one PostgreSQL database (two apps in one test process, each with its
own store, as two ``trellis serve`` workers): an enrollment made and verified through one is
there at once on the other, so a client whose next request goes to the other worker reads its
own write (before the fix, the other answered 404, "not enrolled", until its follower caught up:
tests/e2e/test_cluster_security.py met it)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlparse

import pytest

from controller.settings import Settings
from pki.totp import totp_code
from tests.api.test_brute_force import PASSWORD, person
from tests.api.test_postgres_store import start
from tests.conftest import CLIENT, Api

pytestmark = pytest.mark.durable


@pytest.fixture
def pair(settings: Settings, postgres_url: str) -> Iterator[tuple[Api, Api]]:
    pg = dataclasses.replace(settings, database_url=postgres_url)
    first = start(pg, first=True)
    second = start(pg)
    yield first, second
    for api in (first, second):
        api.ctrl.env.store.close()


def test_an_mfa_enrollment_verified_on_one_is_there_at_once_on_the_other(pair: tuple[Api, Api]) -> None:
    first, second = pair
    for _ in range(10):
        _, username, _ = person(first)
        token = first.login(username, PASSWORD, base=CLIENT)
        assert first.request("POST", "/current-identity/mfa", token=token, base=CLIENT).status_code == 201
        on_second = second.request("GET", "/current-identity/mfa", token=token, base=CLIENT)
        assert on_second.status_code == 200, on_second.text  # made on the first
        assert on_second.json["data"]["isVerified"] is False
        detail = first.request("GET", "/current-identity/mfa", token=token, base=CLIENT).json["data"]
        secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
        code = totp_code(secret, datetime.now(UTC))
        verified = first.request(
            "POST", "/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": code}
        )
        assert verified.status_code == 200, verified.text

        detail = second.request("GET", "/current-identity/mfa", token=token, base=CLIENT)
        assert detail.status_code == 200, detail.text
        assert detail.json["data"]["isVerified"] is True  # verified on the first
        # a wrong code is checked as one (401), not refused as if no MFA were enrolled (404)
        wrong = "000000" if code != "000000" else "111111"
        checked = second.request(
            "POST", "/current-api-session/totp-token", token=token, base=CLIENT, json={"code": wrong}
        )
        assert checked.status_code == 401, checked.text
        assert checked.json["error"]["code"] == "MFA_INVALID_TOKEN"
