"""Password hashes move to argon2id (issue 24): a scrypt hash, as databases made before hold them,
is replaced at the identity's next successful password login.

Real hashers on both sides: the database is first written by an app with the scrypt hasher (as the
older controller wrote it), then served by an app as ``trellis serve`` builds it (the composition
root's default hasher), and what the store holds is read back from the DuckDB file itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from controller.settings import Settings
from engine.entities.identities import Authenticator
from engine.managers.bootstrap import create_default_admin
from pki.passwords import Argon2idPasswordHasher, ScryptPasswordHasher
from tests.api.certs import unique
from tests.api.logcapture import capture
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

pytestmark = pytest.mark.durable  # the subject is what the database file holds

PASSWORD = "good-password-1"
#: The default hasher's hashes: argon2id with OpenZiti's parameters.
ARGON2ID = re.compile(r"^\$argon2id\$v=19\$m=3072,t=1,p=4\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$")


class Controller:
    """An app on the DuckDB file of ``settings`` that the test stops and starts again, each time
    with the hasher it is given (None: the composition root's default)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.app: Any = None

    def start(self, hasher: Any = None) -> Api:
        first = self.app is None
        self.app = open_app(self.settings, durable=True, hasher=hasher)
        if first:
            create_default_admin(self.app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        admin = Api(self.app)
        admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
        return admin

    def stop(self) -> None:
        if self.app is not None:
            self.app.ctrl.env.store.close()

    def stored_hash(self, authenticator_id: str) -> str:
        """The hash the (stopped) controller's DuckDB file holds for the authenticator."""
        con = duckdb.connect(str(self.settings.db_path), read_only=True)
        try:
            row = con.execute(
                "SELECT doc->>'password_hash' FROM authenticators WHERE id = ?", [authenticator_id]
            ).fetchone()
        finally:
            con.close()
        assert row is not None
        return str(row[0])


@pytest.fixture
def controller(settings: Settings) -> Iterator[Controller]:
    ctrl = Controller(settings)
    yield ctrl
    ctrl.stop()


def person(api: Api) -> tuple[str, str]:
    """(username, updb authenticator id) of a new identity with password :data:`PASSWORD`."""
    username = unique("person")
    identity = api.create("/identities", {"name": username, "isAdmin": False, "type": "User"})
    authenticator = api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": PASSWORD},
    )
    return username, authenticator


def authenticate(api: Api, username: str, password: str) -> Any:
    return api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )


def in_memory(api: Api, authenticator_id: str) -> Authenticator:
    found = api.ctrl.env.store.get(Authenticator, authenticator_id)
    assert found is not None
    return found


def test_a_scrypt_hash_becomes_argon2id_at_the_next_successful_login(controller: Controller) -> None:
    older = controller.start(ScryptPasswordHasher())
    username, authenticator = person(older)
    controller.stop()
    scrypt_hash = controller.stored_hash(authenticator)
    assert scrypt_hash.startswith("scrypt$16384$8$1$")

    api = controller.start()  # as trellis serve builds it
    refused = authenticate(api, username, "wrong-password")
    assert refused.status_code == 401
    assert in_memory(api, authenticator).password_hash == scrypt_hash  # a wrong password changes nothing
    before = in_memory(api, authenticator)
    with capture() as logs:
        first = authenticate(api, username, PASSWORD)

    assert first.status_code == 200, first.text
    token = first.json["data"]["token"]
    upgraded = in_memory(api, authenticator)
    assert ARGON2ID.match(upgraded.password_hash or "")
    assert upgraded.updated_at == before.updated_at  # not a password change
    [rehashed] = logs.events("password.rehashed")
    assert (rehashed["level"], rehashed["authenticator_id"], rehashed["was"]) == (
        "info",
        authenticator,
        "scrypt",
    )
    assert PASSWORD not in logs.text
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 200
    controller.stop()
    stored = controller.stored_hash(authenticator)
    assert stored == upgraded.password_hash

    again = controller.start()
    assert authenticate(again, username, "wrong-password").status_code == 401
    later = authenticate(again, username, PASSWORD)
    assert later.status_code == 200, later.text
    assert again.get("/current-identity", token=later.json["data"]["token"], base=CLIENT).status_code == 200
    assert in_memory(again, authenticator).password_hash == stored  # an argon2id hash stays as it is


def test_the_default_hasher_stores_argon2id_and_logs_in_without_rehashing(controller: Controller) -> None:
    api = controller.start()
    username, authenticator = person(api)
    made = in_memory(api, authenticator).password_hash

    with capture() as logs:
        assert authenticate(api, username, PASSWORD).status_code == 200

    assert ARGON2ID.match(made or "")
    assert in_memory(api, authenticator).password_hash == made
    assert logs.events("password.rehashed") == []


class Recording(Argon2idPasswordHasher):
    """The real argon2id hasher, noting which stored encodings it was asked to verify against."""

    def __init__(self) -> None:
        super().__init__()
        self.verified: list[str] = []

    def verify(self, password: str, encoded: str) -> bool:
        self.verified.append(encoded)
        return super().verify(password, encoded)


def test_an_unknown_username_costs_an_argon2id_verification_as_a_known_one_does(
    controller: Controller,
) -> None:
    hasher = Recording()
    api = controller.start(hasher)
    username, _ = person(api)
    hasher.verified.clear()

    assert authenticate(api, unique("nobody"), PASSWORD).status_code == 401
    assert authenticate(api, username, "wrong-password").status_code == 401

    unknown, known = hasher.verified
    assert ARGON2ID.match(unknown)
    assert ARGON2ID.match(known)
    assert not hasher.needs_rehash(unknown)


def test_a_password_changed_after_the_upgrade_is_argon2id_and_the_old_one_is_refused(
    controller: Controller,
) -> None:
    older = controller.start(ScryptPasswordHasher())
    username, authenticator = person(older)
    controller.stop()
    api = controller.start()
    token = api.login(username, PASSWORD, base=CLIENT)

    changed = api.patch(
        f"/current-identity/authenticators/{authenticator}",
        token=token,
        base=CLIENT,
        json={"password": "Brand-New-Pass-1", "currentPassword": PASSWORD},
    )

    assert changed.status_code == 200, changed.text
    assert ARGON2ID.match(in_memory(api, authenticator).password_hash or "")
    assert authenticate(api, username, PASSWORD).status_code == 401
    assert authenticate(api, username, "Brand-New-Pass-1").status_code == 200
