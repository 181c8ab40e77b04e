"""``ottca`` (one-time token + a certificate from the enrollment's third-party CA) and ``updb``
(one-time token -> username/password) enrollment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import falcon.testing
import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import ThirdPartyCa, sha1_fingerprint, tls, unique, verified_ca
from tests.api.conftest import shared_admin_api
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

api = shared_admin_api("enroll-ottca-updb")


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def identity_with(api: Api, name: str, method: str, value: Any) -> tuple[str, str]:
    """A new identity (``name`` made unique) created with ``enrollment: {method: value}``: (id, token)."""
    identity_id = api.create(
        "/identities", {"name": unique(name), "type": "User", "isAdmin": False, "enrollment": {method: value}}
    )
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"][method]["token"]
    return identity_id, str(token)


def identity(api: Api, identity_id: str) -> dict[str, Any]:
    return dict(api.get(f"/identities/{identity_id}").json["data"])


# == ottca =========================================================================================
def ottca_ca(api: Api, ca: ThirdPartyCa, *, verify: bool = True, **flags: Any) -> str:
    """A CA allowing OTT CA enrollment (and cert login), verified unless ``verify`` is False."""
    flags = {"isOttCaEnrollmentEnabled": True, **flags}
    if verify:
        return verified_ca(api, ca, name=unique("acme"), **flags)
    body = {
        "name": unique("unverified"),
        "certPem": ca.pem,
        "isAuthEnabled": True,
        "isAutoCaEnrollmentEnabled": False,
        "identityRoles": [],
        **flags,
    }
    return api.create("/cas", body)


def enroll_ottca(
    api: Api, token: str, chain: tuple[str, ...], *, typed: bool = False, body: str = "ignored"
) -> falcon.testing.Result:
    extras = tls(*chain) if chain else {}
    if typed:
        return api.client.simulate_post(CLIENT + "/enroll/ottca", json={"token": token}, extras=extras)
    return api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "ottca", "token": token},
        headers={"Content-Type": "text/plain"},
        body=body,
        extras=extras,
    )


@pytest.mark.parametrize(
    ("typed", "body"), [(False, "ignored"), (False, ""), (True, "")], ids=["legacy", "legacy-empty", "typed"]
)
def test_ottca_enrolls_with_the_cas_certificate(api: Api, acme: ThirdPartyCa, typed: bool, body: str) -> None:
    ca_id = ottca_ca(api, acme)
    identity_id, token = identity_with(api, "device", "ottca", ca_id)
    cert, _ = acme.issue("device-1")

    result = enroll_ottca(api, token, (cert,), typed=typed, body=body)

    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    data = identity(api, identity_id)
    assert data["authenticators"]["cert"]["fingerprint"] == sha1_fingerprint(cert)
    assert data["enrollment"] == {}
    login = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(cert)
    )
    assert login.status_code == 200, login.text
    assert login.json["data"]["identity"]["id"] == identity_id


def test_ottca_json_body_and_no_method(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    identity_id, token = identity_with(api, "device", "ottca", ca_id)
    cert, _ = acme.issue("device-1")

    result = api.client.simulate_post(CLIENT + "/enroll", params={"token": token}, json={}, extras=tls(cert))

    assert result.status_code == 200, result.text
    assert identity(api, identity_id)["authenticators"]["cert"]["fingerprint"] == sha1_fingerprint(cert)


@pytest.mark.parametrize("typed", [False, True], ids=["legacy", "typed"])
def test_ottca_without_a_client_certificate(api: Api, acme: ThirdPartyCa, typed: bool) -> None:
    ca_id = ottca_ca(api, acme)
    identity_id, token = identity_with(api, "device", "ottca", ca_id)

    result = enroll_ottca(api, token, (), typed=typed)

    assert result.status_code == 400
    assert error(result)["code"] == "CERTIFICATE_FAILED_VALIDATION"
    assert identity(api, identity_id)["enrollment"]["ottca"]["token"] == token


def test_ottca_with_another_cas_certificate(api: Api, acme: ThirdPartyCa, other: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    verified_ca(api, other, name=unique("other"), isOttCaEnrollmentEnabled=True)
    _, token = identity_with(api, "device", "ottca", ca_id)
    cert, _ = other.issue("device-1")

    result = enroll_ottca(api, token, (cert,))

    assert result.status_code == 400
    assert error(result)["code"] == "CERTIFICATE_FAILED_VALIDATION"


def test_ottca_with_a_certificate_from_our_own_ca(api: Api, acme: ThirdPartyCa) -> None:
    from tests.api.certs import enroll_ott

    ca_id = ottca_ca(api, acme)
    _, token = identity_with(api, "device", "ottca", ca_id)
    ours = enroll_ott(api, unique("network-device"))

    result = enroll_ottca(api, token, (ours.leaf,))

    assert result.status_code == 400
    assert error(result)["code"] == "CERTIFICATE_FAILED_VALIDATION"


def test_ottca_with_an_expired_certificate(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    identity_id, token = identity_with(api, "device", "ottca", ca_id)
    now = datetime.now(UTC)
    cert, _ = acme.issue("old", not_before=now - timedelta(days=30), not_after=now - timedelta(days=1))

    result = enroll_ottca(api, token, (cert,))

    assert result.status_code == 400
    assert error(result)["code"] == "CERTIFICATE_FAILED_VALIDATION"
    assert identity(api, identity_id)["authenticators"] == {}


@pytest.mark.parametrize(
    ("verify", "flags"),
    [(False, {}), (True, {"isOttCaEnrollmentEnabled": False})],
    ids=["unverified", "ottca-disabled"],
)
def test_ottca_ca_not_valid(api: Api, acme: ThirdPartyCa, verify: bool, flags: dict[str, Any]) -> None:
    ca_id = ottca_ca(api, acme, verify=verify, **flags)
    _, token = identity_with(api, "device", "ottca", ca_id)
    cert, _ = acme.issue("device-1")

    result = enroll_ottca(api, token, (cert,))

    assert result.status_code == 400
    assert error(result)["code"] == "ENROLLMENT_CA_NOT_VALID"


def test_ottca_ca_disabled_after_the_enrollment_was_made(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    _, token = identity_with(api, "device", "ottca", ca_id)
    assert api.patch(f"/cas/{ca_id}", json={"isOttCaEnrollmentEnabled": False}).status_code == 200

    result = enroll_ottca(api, token, (acme.issue("device-1")[0],))

    assert result.status_code == 400
    assert error(result)["code"] == "ENROLLMENT_CA_NOT_VALID"


def test_ottca_certificate_already_in_use(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    _, first = identity_with(api, "first", "ottca", ca_id)
    second_id, second = identity_with(api, "second", "ottca", ca_id)
    cert, _ = acme.issue("shared")
    assert enroll_ottca(api, first, (cert,)).status_code == 200

    result = enroll_ottca(api, second, (cert,))

    assert result.status_code == 409
    assert error(result)["code"] == "CERT_IN_USE"
    assert identity(api, second_id)["enrollment"]["ottca"]["token"] == second


def test_ottca_token_works_once(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    _, token = identity_with(api, "device", "ottca", ca_id)
    assert enroll_ottca(api, token, (acme.issue("one")[0],)).status_code == 200

    result = enroll_ottca(api, token, (acme.issue("two")[0],))

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


def test_ottca_token_with_method_ott(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = ottca_ca(api, acme)
    _, token = identity_with(api, "device", "ottca", ca_id)

    legacy = api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "ott", "token": token},
        body="x",
        headers={"Content-Type": "text/plain"},
    )
    typed = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": "x"})

    for result in (legacy, typed):
        assert result.status_code == 400
        assert error(result)["code"] == "INVALID_ENROLL_METHOD"


# == updb ==========================================================================================
STRONG = "Correct-Horse-42"


def enroll_updb(
    api: Api, token: str | None, body: dict[str, Any], *, route: str = "typed"
) -> falcon.testing.Result:
    params = {"token": token} if token is not None else {}
    if route == "typed":
        return api.client.simulate_post(CLIENT + "/enroll/updb", params=params, json=body)
    if route == "generic":
        return api.client.simulate_post(CLIENT + "/enroll", params={**params, "method": "updb"}, json=body)
    return api.client.simulate_post(CLIENT + "/enroll", params=params, json=body)  # no method


@pytest.mark.parametrize("route", ["typed", "generic", "no-method"])
def test_updb_sets_the_password(api: Api, route: str) -> None:
    username = unique("ursula")
    identity_id, token = identity_with(api, "ursula", "updb", username)

    result = enroll_updb(api, token, {"password": STRONG, "username": "ignored-name"}, route=route)

    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    data = identity(api, identity_id)
    assert data["authenticators"]["updb"]["username"] == username
    assert data["enrollment"] == {}
    session = api.login(username, STRONG, base=CLIENT)
    me = api.get("/current-identity", base=CLIENT, token=session)
    assert me.json["data"]["id"] == identity_id


def test_updb_token_works_once(api: Api) -> None:
    _, token = identity_with(api, "ursula", "updb", unique("ursula"))
    assert enroll_updb(api, token, {"password": STRONG}).status_code == 200

    for route in ("typed", "generic", "no-method"):
        result = enroll_updb(api, token, {"password": "Another-Pass-1"}, route=route)

        # seed document 1: 404 for the updb enrollment (OpenZiti answers 400), with OpenZiti's code
        assert result.status_code == 404, result.text
        assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize("token", [None, "nope"])
def test_updb_missing_or_malformed_token(api: Api, token: str | None) -> None:
    result = enroll_updb(api, token, {"password": STRONG})

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize("route", ["typed", "generic", "no-method"])
def test_updb_unknown_token_is_404(api: Api, route: str) -> None:
    result = enroll_updb(api, "7d3f2a4e-0000-4000-8000-000000000000", {"password": STRONG}, route=route)

    assert result.status_code == 404, result.text
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize("route", ["typed", "generic"])
def test_updb_for_a_pem_only_client_is_406_before_the_token_is_spent(api: Api, route: str) -> None:
    """updb answers JSON only; a client that takes only PEM is refused before anything happens."""
    identity_id, token = identity_with(api, "ursula", "updb", unique("ursula"))
    path, params = (
        (CLIENT + "/enroll/updb", {"token": token})
        if route == "typed"
        else (CLIENT + "/enroll", {"token": token, "method": "updb"})
    )

    refused = api.client.simulate_post(
        path, params=params, json={"password": STRONG}, headers={"Accept": "application/x-pem-file"}
    )

    assert refused.status_code == 406, refused.text
    assert error(refused)["code"] == "COULD_NOT_VALIDATE"
    assert error(refused)["cause"]["field"] == "Accept"
    assert identity(api, identity_id)["enrollment"]["updb"]["token"] == token
    assert enroll_updb(api, token, {"password": STRONG}, route=route).status_code == 200


def test_updb_expired_token(settings: Settings) -> None:
    clock = FixedClock(datetime.now(UTC))
    app = open_app(settings, clock=clock)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        identity_id, token = identity_with(api, "ursula", "updb", unique("ursula"))
        clock.advance(app.ctrl.managers.enrollment_settings.identity_duration + timedelta(seconds=1))

        typed = enroll_updb(api, token, {"password": STRONG})
        generic = enroll_updb(api, token, {"password": STRONG}, route="generic")

        for result in (typed, generic):
            assert result.status_code == 400
            assert error(result)["code"] == "ENROLLMENT_EXPIRED"
        assert identity_id
    finally:
        app.ctrl.env.store.close()


@pytest.mark.parametrize("route", ["typed", "generic", "legacy"])
def test_updb_without_a_password(api: Api, route: str) -> None:
    _, token = identity_with(api, "ursula", "updb", unique("ursula"))
    if route == "legacy":
        result = api.client.simulate_post(
            CLIENT + "/enroll",
            params={"method": "updb", "token": token},
            body="password",
            headers={"Content-Type": "text/plain"},
        )
    else:
        result = enroll_updb(api, token, {"username": "whoever"}, route=route)

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "password"


@pytest.fixture
def strict_identity(api: Api) -> tuple[str, str]:
    """An identity with a updb enrollment under a strict password policy: (identity id, token)."""
    policy_id = api.create(
        "/auth-policies",
        {
            "name": unique("strict-passwords"),
            "primary": {
                "cert": {"allowed": True, "allowExpiredCerts": False},
                "extJwt": {"allowed": False, "allowedSigners": []},
                "updb": {
                    "allowed": True,
                    "minPasswordLength": 12,
                    "requireMixedCase": True,
                    "requireNumberChar": True,
                    "requireSpecialChar": True,
                    "maxAttempts": 5,
                    "lockoutDurationMinutes": 0,
                },
            },
            "secondary": {"requireTotp": False, "requireExtJwtSigner": None},
        },
    )
    identity_id = api.create(
        "/identities",
        {
            "name": unique("strict"),
            "type": "User",
            "isAdmin": False,
            "authPolicyId": policy_id,
            "enrollment": {"updb": unique("strict-login")},
        },
    )
    data = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["updb"]
    return identity_id, str(data["token"])


WEAK = {
    "too-short-for-the-api": "Ab1!",
    "too-short-for-the-policy": "Ab1!efgh",
    "no-upper-case": "abcdefgh123!",
    "no-lower-case": "ABCDEFGH123!",
    "no-number": "Abcdefghijk!",
    "no-special": "Abcdefghijk1",
    "too-long": "Ab1!" * 26,
}


@pytest.mark.parametrize("route", ["typed", "generic"])
@pytest.mark.parametrize("weakness", list(WEAK))
def test_updb_password_rules(api: Api, strict_identity: tuple[str, str], weakness: str, route: str) -> None:
    identity_id, token = strict_identity
    password = WEAK[weakness]

    result = enroll_updb(api, token, {"password": password}, route=route)

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "password"
    assert password not in result.text
    assert password.encode() not in result.content
    assert identity(api, identity_id)["enrollment"]["updb"]["token"] == token


def test_updb_strong_password_under_the_policy(api: Api, strict_identity: tuple[str, str]) -> None:
    identity_id, token = strict_identity

    result = enroll_updb(api, token, {"password": "Tr0ub4dor&3-x"})

    assert result.status_code == 200, result.text
    username = identity(api, identity_id)["authenticators"]["updb"]["username"]
    assert api.login(username, "Tr0ub4dor&3-x", base=CLIENT)


def test_updb_password_of_the_wrong_type_is_not_echoed(api: Api) -> None:
    _, token = identity_with(api, "ursula", "updb", unique("ursula"))

    result = enroll_updb(api, token, {"password": 123456789})

    assert result.status_code == 400
    assert error(result)["cause"]["field"] == "password"
    assert "123456789" not in result.text


def test_updb_username_taken_by_another_authenticator(api: Api) -> None:
    taken = unique("taken")
    other = api.create("/identities", {"name": unique("other"), "type": "User", "isAdmin": False})
    api.create(
        "/authenticators", {"identityId": other, "method": "updb", "username": taken, "password": STRONG}
    )
    _, token = identity_with(api, "ursula", "updb", taken)

    result = enroll_updb(api, token, {"password": STRONG})

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "username"


def test_updb_enrollments_from_the_enrollments_api(api: Api) -> None:
    username = unique("late")
    identity_id = api.create("/identities", {"name": username, "type": "User", "isAdmin": False})
    expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    enrollment_id = api.create(
        "/enrollments",
        {"method": "updb", "identityId": identity_id, "expiresAt": expires, "username": username},
    )
    token = api.get(f"/enrollments/{enrollment_id}").json["data"]["token"]

    result = enroll_updb(api, token, {"password": STRONG})

    assert result.status_code == 200, result.text
    assert api.get(f"/enrollments/{enrollment_id}").status_code == 404
    assert api.login(username, STRONG)
