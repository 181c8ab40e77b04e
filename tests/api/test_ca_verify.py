"""CA management around enrollment: ``POST /cas/{id}/verify`` (in OpenZiti's order of checks),
``GET /cas/{id}/jwt``, and what deleting a CA takes with it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import falcon.testing
import jwt
import pytest

from tests.api.certs import ThirdPartyCa, csr_pem, key_pem, new_key, tls, unique, verified_ca
from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, Api

ALGORITHMS = ["RS256", "ES256", "ES384", "ES512"]


api = shared_admin_api("ca-verify")


def new_ca(api: Api, ca: ThirdPartyCa, name: str = "acme", **flags: Any) -> tuple[str, str]:
    """An unverified CA (``name`` made unique): (id, verification token)."""
    body = {
        "name": unique(name),
        "certPem": ca.pem,
        "isAuthEnabled": True,
        "isAutoCaEnrollmentEnabled": True,
        "isOttCaEnrollmentEnabled": True,
        "identityRoles": [],
        **flags,
    }
    ca_id = api.create("/cas", body)
    return ca_id, str(api.get(f"/cas/{ca_id}").json["data"]["verificationToken"])


def verify(
    api: Api, ca_id: str, body: str | bytes, content_type: str = "text/plain"
) -> falcon.testing.Result:
    return api.post(f"/cas/{ca_id}/verify", body=body, headers={"Content-Type": content_type})


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def is_verified(api: Api, ca_id: str) -> bool:
    return bool(api.get(f"/cas/{ca_id}").json["data"]["isVerified"])


# -- verify -----------------------------------------------------------------------------------------
def test_verify(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, token = new_ca(api, acme)
    assert is_verified(api, ca_id) is False

    result = verify(api, ca_id, acme.verification_cert(token))

    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    assert is_verified(api, ca_id) is True


def test_verify_with_any_content_type(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, token = new_ca(api, acme)

    result = verify(api, ca_id, acme.verification_cert(token), content_type="application/x-pem-file")

    assert result.status_code == 200, result.text


def test_already_verified_is_checked_before_the_body(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, token = new_ca(api, acme)
    assert verify(api, ca_id, acme.verification_cert(token)).status_code == 200

    for body in (acme.verification_cert(token), "", "garbage"):
        result = verify(api, ca_id, body)
        assert result.status_code == 409
        assert error(result)["code"] == "CA_ALREADY_VERIFIED"


def test_unknown_ca(api: Api, acme: ThirdPartyCa) -> None:
    result = verify(api, "nope", acme.verification_cert("whatever"))

    assert result.status_code == 404
    assert error(result)["code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("", "COULD_NOT_PARSE_BODY"),
        ("   \n", "COULD_NOT_PARSE_BODY"),
        ("not a pem at all", "COULD_NOT_PARSE_BODY"),
        (b"\x00\xff\xfe binary", "COULD_NOT_PARSE_BODY"),
        ("csr", "EXPECTED_PEM_CERTIFICATE"),
        ("key", "EXPECTED_PEM_CERTIFICATE"),
        ("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "COULD_NOT_PARSE_DER_BLOCK"),
        ("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n", "COULD_NOT_PARSE_DER_BLOCK"),
        ("wrong-cn", "INVALID_COMMON_NAME"),
        ("other-ca", "CERTIFICATE_FAILED_VALIDATION"),
        ("expired", "CERTIFICATE_FAILED_VALIDATION"),
        ("self-signed", "CERTIFICATE_FAILED_VALIDATION"),
    ],
)
def test_verify_failures(
    api: Api, acme: ThirdPartyCa, other: ThirdPartyCa, body: str | bytes, code: str
) -> None:
    ca_id, token = new_ca(api, acme)
    now = datetime.now(UTC)
    proofs = {
        "csr": lambda: csr_pem(cn=token),
        "key": lambda: key_pem(new_key()),
        "wrong-cn": lambda: acme.verification_cert("not-the-token"),
        "other-ca": lambda: other.verification_cert(token),
        "expired": lambda: acme.issue(
            token, not_before=now - timedelta(days=9), not_after=now - timedelta(days=1)
        )[0],
        "self-signed": lambda: ThirdPartyCa(token).pem,
    }
    if isinstance(body, str) and body in proofs:
        body = proofs[body]()

    result = verify(api, ca_id, body)

    assert result.status_code == 400, result.text
    assert error(result)["code"] == code
    assert is_verified(api, ca_id) is False


def test_verify_needs_an_admin(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, token = new_ca(api, acme)

    result = api.post(
        f"/cas/{ca_id}/verify",
        token="",
        body=acme.verification_cert(token),
        headers={"Content-Type": "text/plain"},
    )

    assert result.status_code == 401
    assert is_verified(api, ca_id) is False


def test_verified_flag_can_not_be_set_by_an_update(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, _ = new_ca(api, acme)

    result = api.patch(f"/cas/{ca_id}", json={"isVerified": True})

    assert result.status_code == 200
    assert is_verified(api, ca_id) is False


# -- jwt --------------------------------------------------------------------------------------------
def test_jwt(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, _ = new_ca(api, acme)

    result = api.get(f"/cas/{ca_id}/jwt")

    assert result.status_code == 200
    assert result.headers["content-type"] == "application/jwt"
    claims = jwt.decode(
        result.text,
        api.ctrl.pki.server_cert.public_key(),
        algorithms=ALGORITHMS,
        options={"verify_aud": False},
    )
    assert claims["em"] == "ca"
    assert claims["sub"] == ca_id
    assert claims["jti"] == ca_id
    assert claims["aud"] == ["openziti-enroller"]
    assert claims["iss"].startswith("https://")
    assert claims["iss"].endswith("/")
    assert "exp" not in claims


def test_jwt_unknown_ca_and_non_admin(api: Api, acme: ThirdPartyCa) -> None:
    ca_id, _ = new_ca(api, acme)

    assert api.get("/cas/nope/jwt").status_code == 404
    assert api.get(f"/cas/{ca_id}/jwt", token="").status_code == 401


# -- delete -----------------------------------------------------------------------------------------
def cert_login(api: Api, cert: str) -> falcon.testing.Result:
    return api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(cert)
    )


def test_delete_takes_its_authenticators_enrollments_and_sessions(
    fresh: Api, acme: ThirdPartyCa, other: ThirdPartyCa
) -> None:
    api = fresh
    ca_id = verified_ca(api, acme, isAutoCaEnrollmentEnabled=True, isOttCaEnrollmentEnabled=True)
    other_id = verified_ca(api, other, name="other", isAutoCaEnrollmentEnabled=True)
    # An identity from auto-enrollment, one from ottca, one pending ottca, one from the other CA.
    auto_cert = acme.issue("auto")[0]
    assert api.client.simulate_post(CLIENT + "/enroll/ca", extras=tls(auto_cert)).status_code == 200
    ottca_cert = acme.issue("ottca")[0]
    ottca_id = api.create(
        "/identities", {"name": "via-ottca", "type": "User", "isAdmin": False, "enrollment": {"ottca": ca_id}}
    )
    token = api.get(f"/identities/{ottca_id}").json["data"]["enrollment"]["ottca"]["token"]
    ottca = api.client.simulate_post(CLIENT + "/enroll/ottca", json={"token": token}, extras=tls(ottca_cert))
    assert ottca.status_code == 200, ottca.text
    pending_id = api.create(
        "/identities", {"name": "pending", "type": "User", "isAdmin": False, "enrollment": {"ottca": ca_id}}
    )
    other_cert = other.issue("elsewhere")[0]
    assert api.client.simulate_post(CLIENT + "/enroll/ca", extras=tls(other_cert)).status_code == 200
    sessions = {}
    for name, cert in (("auto", auto_cert), ("ottca", ottca_cert), ("other", other_cert)):
        login = cert_login(api, cert)
        assert login.status_code == 200, login.text
        sessions[name] = login.json["data"]["token"]

    result = api.delete(f"/cas/{ca_id}")

    assert result.status_code == 200, result.text
    assert api.get(f"/cas/{ca_id}").status_code == 404
    assert api.get(f"/identities/{ottca_id}").json["data"]["authenticators"] == {}
    assert api.get(f"/identities/{pending_id}").json["data"]["enrollment"] == {}
    remaining = api.get("/authenticators", params={"filter": 'method = "cert"'}).json["data"]
    assert [a["certPem"].strip() for a in remaining] == [other_cert.strip()]
    for name in ("auto", "ottca"):
        assert api.get("/current-api-session", base=CLIENT, token=sessions[name]).status_code == 401, name
    assert api.get("/current-api-session", base=CLIENT, token=sessions["other"]).status_code == 200
    for cert in (auto_cert, ottca_cert):
        refused = cert_login(api, cert)
        assert refused.status_code == 401
        assert error(refused)["code"] == "INVALID_AUTH"
    assert cert_login(api, other_cert).status_code == 200
    assert other_id


def test_delete_ends_external_id_logins(fresh: Api, acme: ThirdPartyCa) -> None:
    api = fresh
    claim = {
        "location": "SAN_URI",
        "matcher": "SCHEME",
        "matcherCriteria": "spiffe",
        "parser": "NONE",
        "parserCriteria": "",
        "index": 0,
    }
    ca_id = verified_ca(api, acme, isAutoCaEnrollmentEnabled=True, externalIdClaim=claim)
    cert = acme.issue("claimed", uris=("spiffe://example.org/7",))[0]
    assert api.client.simulate_post(CLIENT + "/enroll/ca", extras=tls(cert)).status_code == 200
    login = cert_login(api, cert)
    assert login.status_code == 200, login.text

    assert api.delete(f"/cas/{ca_id}").status_code == 200

    assert cert_login(api, cert).status_code == 401
