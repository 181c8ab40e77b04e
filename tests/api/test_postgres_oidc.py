"""OIDC tokens across the controllers of a network (two homes, each with its own server key, on
one PostgreSQL database): as OpenZiti's controllers, each accepts the tokens every other signed,
found by the token's ``kid`` among the controllers' records, and publishes their keys beside its
own. A client that fails over to another controller keeps its access token and refreshes there.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import jwt
import pytest

from controller.compose import CONTROLLER_ID_FILE
from controller.settings import Settings
from engine.entities.controllers import ControllerMember
from pki.authority import init_pki
from tests.api.test_oidc import Flow, _resigned, bearer, claims_of, refresh
from tests.api.test_postgres_store import start
from tests.conftest import Api

pytestmark = [pytest.mark.durable, pytest.mark.seconds(8)]

DEADLINE_SECONDS = 30.0


def _joining_home(directory: Path, pki_template: Path) -> Path:
    """A home as `trellis init` makes one for a controller joining the network: the network's CA
    copied, a server certificate of its own (another key, another ``kid``), an id of its own."""
    directory.mkdir()
    (directory / "pki").mkdir(mode=0o700)
    for name in ("root-ca.pem", "root-ca.key", "intermediate-ca.pem", "intermediate-ca.key", "ca-bundle.pem"):
        shutil.copy2(pki_template / name, directory / "pki" / name)
    init_pki(directory / "pki", sans=["127.0.0.2"], now=datetime.now(UTC))
    (directory / CONTROLLER_ID_FILE).write_text("ctrl-b\n")
    return directory


@pytest.fixture
def network(
    settings: Settings, postgres_url: str, tmp_path: Path, pki_template: Path
) -> Iterator[tuple[Api, Api]]:
    a = dataclasses.replace(settings, database_url=postgres_url, ctrl_bind="127.0.0.1:16263")
    b = dataclasses.replace(
        a,
        home=_joining_home(tmp_path / "b", pki_template),
        bind="127.0.0.2:1280",
        advertise="127.0.0.2:1280",
        ctrl_bind="127.0.0.2:16263",
    )
    first = start(a, first=True)
    second = start(b)
    for api in (first, second):
        api.app.join_network()  # as `trellis serve` does in each process
    # each store follows the other's writes through the change log: wait until both records are
    # in both (a token of a controller not yet known here is refused, as it should be)
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not all(len(api.ctrl.env.store.all(ControllerMember)) == 2 for api in (first, second)):
        assert time.monotonic() < deadline, "the controllers' records did not reach both stores"
        time.sleep(0.05)
    yield first, second
    for api in (first, second):
        api.ctrl.env.store.close()


def _kid(api: Api) -> str:
    return str(api.ctrl.env.tokens.kid)


def test_each_controller_publishes_every_controllers_key(network: tuple[Api, Api]) -> None:
    first, second = network
    assert _kid(first) != _kid(second)
    for api, other in ((first, second), (second, first)):
        got = api.client.simulate_get("/oidc/keys")
        assert got.status_code == 200, got.text
        kids = [key["kid"] for key in got.json["keys"]]
        assert kids == [_kid(api), _kid(other)]  # its own first
        published = got.json["keys"][1]
        assert published["use"] == "sig"
        assert published["alg"] == other.ctrl.env.tokens.algorithm
        # the published key verifies what the other controller signs
        key = jwt.PyJWK(published).key
        token = other.ctrl.env.tokens.sign({"sub": "x"})
        assert jwt.decode(token, key, algorithms=[published["alg"]])["sub"] == "x"


def test_a_token_of_one_controller_works_on_the_other_and_refreshes_there(network: tuple[Api, Api]) -> None:
    first, second = network
    tokens = Flow(first).tokens()
    access = tokens["access_token"]
    assert jwt.get_unverified_header(access)["kid"] == _kid(first)
    assert claims_of(access)["iss"] == "https://127.0.0.1:1280/oidc"

    for api in (first, second):
        got = bearer(api, "/current-api-session", access)
        assert got.status_code == 200, got.text
        assert got.json["data"]["id"] == claims_of(access)["z_asid"]
    got = second.client.simulate_get("/oidc/userinfo", headers={"Authorization": f"Bearer {access}"})
    assert got.status_code == 200, got.text

    # the client fails over: it refreshes at the other controller, which signs the new tokens
    renewed = refresh(second, tokens["refresh_token"])
    assert renewed.status_code == 200, renewed.text
    new_access = renewed.json["access_token"]
    assert jwt.get_unverified_header(new_access)["kid"] == _kid(second)
    assert claims_of(new_access)["iss"] == "https://127.0.0.2:1280/oidc"
    assert claims_of(new_access)["z_asid"] == claims_of(access)["z_asid"]
    assert bearer(first, "/current-api-session", new_access).status_code == 200
    # the rotation is the network's: the first refresh token is spent on either controller
    assert refresh(first, tokens["refresh_token"]).status_code == 400
    assert refresh(first, renewed.json["refresh_token"]).status_code == 200


def test_a_token_no_controller_of_the_network_signed_is_refused(network: tuple[Api, Api]) -> None:
    first, second = network
    access = Flow(first).tokens()["access_token"]
    forged = _resigned(access)  # another key under the first controller's kid
    unknown = jwt.encode(
        claims_of(access),
        first.ctrl.env.tokens._key,  # the right key under a kid no controller has
        algorithm=first.ctrl.env.tokens.algorithm,
        headers={"kid": "0" * 40},
    )
    for token in (forged, unknown):
        for api in (first, second):
            assert bearer(api, "/current-api-session", token).status_code == 401
