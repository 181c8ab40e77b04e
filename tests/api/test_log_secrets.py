"""No secret reaches a log line (issue 19, part 5): every credential the API takes or hands out goes
through the app with every logger captured at DEBUG, formatted as ``trellis serve`` formats lines,
and none of them is found anywhere in what was logged.

The secrets: passwords (right, wrong, for a username that names nobody, set by an administrator,
set by an ``updb`` enrollment, changed by their owner), API-session tokens (``zt-session``, valid
and not), MFA secrets, TOTP codes (right and wrong), recovery codes, TOTP tokens, enrollment tokens
and their JWTs (used, used again, malformed), and external JWTs (accepted and refused). The access
line (written by the server, not the app) has its own test in tests/e2e/test_logging.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from engine.testing import FixedClock
from pki.totp import totp_code
from tests.api.certs import csr_pem, new_key, unique
from tests.api.jwt_helpers import make_cert_signer, open_admin_api
from tests.api.logcapture import Captured, capture
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def api(tmp_path: Path, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin = open_admin_api(tmp_path, pki_template, clock)
    yield admin
    admin.app.ctrl.env.store.close()


class Secrets:
    """Every secret value the test sent or was given (only long enough values: a short one could
    turn up by chance in an id or a time stamp)."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def add(self, what: str, value: str) -> str:
        assert len(value) >= 6, (what, value)
        self.values[f"{what} #{len(self.values)}"] = value
        if value.count(".") == 2:  # a JWT: its signature alone is a secret too (its header is not)
            self.values[f"{what} #{len(self.values)} (signature)"] = value.rsplit(".", 1)[1]
        return value

    def found_in(self, logs: Captured) -> list[str]:
        text = logs.text
        return [what for what, value in self.values.items() if value in text]


def authenticate(api: Api, username: str, password: str, base: str = CLIENT) -> Any:
    return api.client.simulate_post(
        base + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )


def drive_passwords_and_sessions(api: Api, secrets: Secrets) -> None:
    assert (
        authenticate(api, ADMIN_USER, secrets.add("admin password", ADMIN_PASSWORD), MGMT).status_code == 200
    )
    assert (
        authenticate(api, ADMIN_USER, secrets.add("wrong password", "Wrong-Horse-Battery-9")).status_code
        == 401
    )
    nobody = authenticate(api, unique("nobody"), secrets.add("password of nobody", "Nobody-Pass-77"))
    assert nobody.status_code == 401
    username = unique("pat")
    identity = api.create("/identities", {"name": username, "isAdmin": False, "type": "User"})
    first = secrets.add("password set by an admin", "Initial-Pass-123")
    authenticator = api.create(
        "/authenticators", {"identityId": identity, "method": "updb", "username": username, "password": first}
    )
    login = authenticate(api, username, first)
    assert login.status_code == 200
    token = secrets.add("session token", login.json["data"]["token"])
    assert api.get("/current-identity", token=token, base=CLIENT).status_code == 200
    forged = secrets.add("forged session token", "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b")
    assert api.get("/current-identity", token=forged, base=CLIENT).status_code == 401
    changed = api.patch(
        f"/current-identity/authenticators/{authenticator}",
        token=token,
        base=CLIENT,
        json={"password": secrets.add("new password", "Changed-Pass-456"), "currentPassword": first},
    )
    assert changed.status_code == 200, changed.text
    refused = api.patch(
        f"/current-identity/authenticators/{authenticator}",
        token=token,
        base=CLIENT,
        json={
            "password": "Another-Pass-789",
            "currentPassword": secrets.add("wrong current", "Not-Current-1"),
        },
    )
    assert refused.status_code == 401
    assert api.delete("/current-api-session", token=token, base=CLIENT).status_code == 200


def drive_mfa(api: Api, clock: FixedClock, secrets: Secrets) -> None:
    username = unique("mia")
    password = secrets.add("mfa user's password", "Mfa-User-Pass-1")
    identity = api.create("/identities", {"name": username, "isAdmin": False, "type": "User"})
    api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": password},
    )
    token = secrets.add("session token", authenticate(api, username, password).json["data"]["token"])
    assert api.post("/current-identity/mfa", token=token, base=CLIENT).status_code == 201
    detail = api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]
    secret = secrets.add("mfa secret", parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0])
    recovery = [secrets.add("recovery code", code) for code in detail["recoveryCodes"]]

    def code() -> str:
        clock.advance(timedelta(seconds=30))  # a step of its own: each is accepted once
        return secrets.add("totp code", totp_code(secret, clock.now()))

    wrong = api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": recovery[5]})
    assert wrong.status_code == 401  # a recovery code does not verify an enrollment
    assert (
        api.post("/current-identity/mfa/verify", token=token, base=CLIENT, json={"code": code()}).status_code
        == 200
    )
    issued = api.post("/current-api-session/totp-token", token=token, base=CLIENT, json={"code": code()})
    assert issued.status_code == 200, issued.text
    secrets.add("totp token", issued.json["data"]["token"])
    second = secrets.add("session token", authenticate(api, username, password).json["data"]["token"])
    bad = api.post(
        "/authenticate/mfa", token=second, base=CLIENT, json={"code": secrets.add("wrong code", "918273")}
    )
    assert bad.status_code == 401
    assert (
        api.post("/authenticate/mfa", token=second, base=CLIENT, json={"code": recovery[0]}).status_code
        == 200
    )
    shown = api.get(
        "/current-identity/mfa/recovery-codes",
        token=second,
        base=CLIENT,
        headers={"mfa-validation-code": code()},
    )
    assert shown.status_code == 200, shown.text
    regenerated = api.post(
        "/current-identity/mfa/recovery-codes", token=second, base=CLIENT, json={"code": code()}
    )
    assert regenerated.status_code == 200, regenerated.text
    for fresh in api.get(
        "/current-identity/mfa/recovery-codes",
        token=second,
        base=CLIENT,
        headers={"mfa-validation-code": code()},
    ).json["data"]["recoveryCodes"]:
        secrets.add("regenerated recovery code", fresh)
    removed = api.request(
        "DELETE", "/current-identity/mfa", token=second, base=CLIENT, headers={"mfa-validation-code": code()}
    )
    assert removed.status_code == 200, removed.text


def drive_enrollments(api: Api, secrets: Secrets) -> None:
    device = api.create(
        "/identities",
        {"name": unique("device"), "type": "User", "isAdmin": False, "enrollment": {"ott": True}},
    )
    ott = api.get(f"/identities/{device}").json["data"]["enrollment"]["ott"]
    token = secrets.add("ott token", ott["token"])
    secrets.add("ott jwt", ott["jwt"])
    csr = csr_pem(new_key())
    pem = {"Content-Type": "text/plain"}
    enrolled = api.client.simulate_post(
        CLIENT + "/enroll", params={"method": "ott", "token": token}, body=csr, headers=pem
    )
    assert enrolled.status_code == 200, enrolled.text
    again = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr})
    assert again.status_code == 404
    unknown = secrets.add("unknown enrollment token", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
    assert (
        api.client.simulate_post(
            CLIENT + "/enroll", params={"token": unknown}, body=csr, headers=pem
        ).status_code
        == 404
    )
    malformed = secrets.add("malformed token", "not-a-uuid-but-a-secret-nonetheless")
    assert (
        api.client.simulate_post(
            CLIENT + "/enroll", params={"token": malformed}, body=csr, headers=pem
        ).status_code
        == 400
    )

    username = unique("ursula")
    policy = api.create(
        "/auth-policies",
        {"name": unique("policy"), "primary": {"updb": {"minPasswordLength": 12}}, "secondary": {}},
    )
    person = api.create(
        "/identities",
        {
            "name": username,
            "type": "User",
            "isAdmin": False,
            "enrollment": {"updb": username},
            "authPolicyId": policy,
        },
    )
    updb = api.get(f"/identities/{person}").json["data"]["enrollment"]["updb"]
    updb_token = secrets.add("updb token", updb["token"])
    secrets.add("updb jwt", updb["jwt"])
    weak = api.client.simulate_post(
        CLIENT + "/enroll/updb",
        params={"token": updb_token},
        json={"password": secrets.add("too short", "Short-pw-1")},
    )
    assert weak.status_code == 400
    strong = secrets.add("enrolled password", "Correct-Horse-42")
    done = api.client.simulate_post(
        CLIENT + "/enroll/updb", params={"token": updb_token}, json={"password": strong}
    )
    assert done.status_code == 200, done.text
    assert authenticate(api, username, strong).status_code == 200


def drive_external_jwts(api: Api, clock: FixedClock, secrets: Secrets) -> None:
    signer = make_cert_signer(api, clock)
    person = api.create("/identities", {"name": unique("ext"), "type": "User", "isAdmin": False})

    def ext_login(token: str) -> Any:
        return api.client.simulate_post(
            CLIENT + "/authenticate",
            params={"method": "ext-jwt"},
            headers={"Authorization": f"Bearer {token}"},
            json={},
        )

    accepted = ext_login(secrets.add("external jwt", signer.token(person)))
    assert accepted.status_code == 200, accepted.text
    secrets.add("session token", accepted.json["data"]["token"])
    nobody = ext_login(secrets.add("external jwt of nobody", signer.token("no-such-identity")))
    assert nobody.status_code == 401
    expired = signer.token(person, exp=int((clock.now() - timedelta(hours=1)).timestamp()))
    assert ext_login(secrets.add("expired external jwt", expired)).status_code == 401
    other = make_cert_signer(api, clock)
    forged = signer.token(person, key=other.key)  # signed with a key that is not the signer's
    assert ext_login(secrets.add("forged external jwt", forged)).status_code == 401


def test_no_secret_is_logged_even_at_debug(api: Api, clock: FixedClock) -> None:
    secrets = Secrets()
    with capture() as logs:
        drive_passwords_and_sessions(api, secrets)
        drive_mfa(api, clock, secrets)
        drive_enrollments(api, secrets)
        drive_external_jwts(api, clock, secrets)

    # the drive was logged (so the search below searched something) ...
    events = {r.get("event") for r in logs.records()}
    assert {
        "login.succeeded",
        "login.failed",
        "mfa.enrolled",
        "mfa.failed",
        "mfa.login_completed",
        "mfa.removed",
        "enrollment.succeeded",
        "enrollment.failed",
        "admin.write",
    } <= events
    # ... and no secret is in it
    assert secrets.found_in(logs) == [], logs.text


def test_no_secret_is_logged_in_json_either(api: Api, clock: FixedClock) -> None:
    secrets = Secrets()
    with capture(json=True) as logs:
        drive_passwords_and_sessions(api, secrets)
        drive_external_jwts(api, clock, secrets)

    assert len(logs.lines) > 10
    assert secrets.found_in(logs) == []
