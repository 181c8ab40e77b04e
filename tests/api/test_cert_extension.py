"""Certificate extension: ``request-extend`` (admin), ``extend`` over mutual TLS, ``extend-verify``.

OpenZiti's ``ExtendCertForIdentity``/``VerifyExtendCertForIdentity``: the new certificate logs in
only after it is verified, and from then on the old one is refused.
"""

from __future__ import annotations

import hashlib
import ssl
from typing import Any

import pytest
from cryptography import x509

from tests.api.certs import (
    NetworkCert,
    ThirdPartyCa,
    csr_pem,
    enroll_ott,
    first_pem,
    new_key,
    public_key_der,
    split_pems,
    tls_chain,
    verified_ca,
)
from tests.conftest import CLIENT, MGMT, Api

EXTEND_HEADER = "ziti-authenticator-extend-requested"


def cert_login(api: Api, chain: str) -> Any:
    return api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls_chain(chain)
    )


def login_token(api: Api, chain: str) -> str:
    result = cert_login(api, chain)
    assert result.status_code == 200, result.text
    return str(result.json["data"]["token"])


def cert_authenticator(api: Api, identity_id: str) -> dict[str, Any]:
    listed = api.get(
        "/authenticators", params={"filter": f'identityId = "{identity_id}" and method = "cert"'}
    )
    return dict(listed.json["data"][0])


def extend(
    api: Api,
    token: str,
    authenticator_id: str,
    csr: str | None,
    *,
    chain: str | None = None,
    base: str = CLIENT,
) -> Any:
    body = {} if csr is None else {"clientCertCsr": csr}
    return api.post(
        f"/current-identity/authenticators/{authenticator_id}/extend",
        token=token,
        base=base,
        json=body,
        extras=tls_chain(chain) if chain else {},
    )


def extend_verify(api: Api, token: str, authenticator_id: str, cert: str, *, base: str = CLIENT) -> Any:
    return api.post(
        f"/current-identity/authenticators/{authenticator_id}/extend-verify",
        token=token,
        base=base,
        json={"clientCert": cert},
    )


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def sha1(pem: str) -> str:
    return hashlib.sha1(ssl.PEM_cert_to_DER_cert(first_pem(pem)), usedforsecurity=False).hexdigest()


@pytest.fixture
def device(api: Api) -> NetworkCert:
    return enroll_ott(api, "device")


@pytest.fixture
def device_auth(api: Api, device: NetworkCert) -> str:
    return str(cert_authenticator(api, device.identity_id)["id"])


# -- the full roll ---------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_extend_then_verify_replaces_the_certificate(
    api: Api, device: NetworkCert, device_auth: str, authority: Any, base: str
) -> None:
    token = login_token(api, device.chain)
    new_key_ = new_key()

    extended = extend(api, token, device_auth, csr_pem(new_key_), chain=device.chain, base=base)
    assert extended.status_code == 200, extended.text
    data = extended.json["data"]
    assert set(data) == {"clientCert", "ca"}
    assert data["ca"] == api.ctrl.env.ca.ca_bundle_pem()
    new_chain = data["clientCert"]
    assert len(split_pems(new_chain)) == 2  # leaf + our signing CA
    new_leaf = x509.load_pem_x509_certificate(first_pem(new_chain).encode())
    assert new_leaf.issuer == authority.intermediate_cert.subject
    assert public_key_der(first_pem(new_chain)) == public_key_der(new_key_)

    assert cert_login(api, device.chain).status_code == 200  # the old one still works
    refused = cert_login(api, new_chain)  # the new one waits for extend-verify
    assert refused.status_code == 401
    assert error(refused)["code"] == "INVALID_AUTH"
    assert api.get(f"/authenticators/{device_auth}").json["data"]["fingerprint"] == sha1(device.chain)

    verified = extend_verify(api, token, device_auth, new_chain, base=base)
    assert verified.status_code == 200, verified.text
    assert verified.json["data"] == {}

    assert cert_login(api, new_chain).status_code == 200
    old = cert_login(api, device.chain)
    assert old.status_code == 401
    assert error(old)["code"] == "INVALID_AUTH"
    detail = api.get(f"/authenticators/{device_auth}").json["data"]
    assert detail["fingerprint"] == sha1(new_chain)
    assert detail["certPem"] == first_pem(new_chain)
    assert detail.get("lastExtendRolledKeys", False) is True
    assert detail["isIssuedByNetwork"] is True


def test_extending_with_the_same_key_does_not_roll_keys(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    new_chain = extend(api, token, device_auth, csr_pem(device.key), chain=device.chain).json["data"][
        "clientCert"
    ]
    assert extend_verify(api, token, device_auth, new_chain).status_code == 200
    assert api.get(f"/authenticators/{device_auth}").json["data"].get("lastExtendRolledKeys", False) is False
    assert cert_login(api, new_chain).status_code == 200


def test_a_second_extend_replaces_the_pending_certificate(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    first = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    second = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    stale = extend_verify(api, token, device_auth, first)
    assert stale.status_code == 400
    assert error(stale)["code"] == "INVALID_CLIENT_CERT"
    assert extend_verify(api, token, device_auth, second).status_code == 200


def test_the_extended_certificate_can_be_extended_again(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    second = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    assert extend_verify(api, token, device_auth, second).status_code == 200
    token2 = login_token(api, second)
    refused = extend(api, token2, device_auth, csr_pem(), chain=device.chain)  # the retired cert
    assert refused.status_code == 401
    third = extend(api, token2, device_auth, csr_pem(), chain=second)
    assert third.status_code == 200
    assert extend_verify(api, token2, device_auth, third.json["data"]["clientCert"]).status_code == 200


# -- extend refusals -------------------------------------------------------------------------------
def test_extend_without_the_current_certificate_is_401(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    result = extend(api, token, device_auth, csr_pem())
    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_extend_with_another_certificate_of_our_ca_is_401(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    other = enroll_ott(api, "other-device")
    token = login_token(api, device.chain)
    result = extend(api, token, device_auth, csr_pem(), chain=other.chain)
    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_extend_needs_a_session(api: Api, device: NetworkCert, device_auth: str) -> None:
    result = api.client.simulate_post(
        CLIENT + f"/current-identity/authenticators/{device_auth}/extend",
        json={"clientCertCsr": csr_pem()},
        extras=tls_chain(device.chain),
    )
    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_someone_elses_authenticator_is_401(api: Api, device: NetworkCert, device_auth: str) -> None:
    other = enroll_ott(api, "intruder")
    token = login_token(api, other.chain)
    extended = extend(api, token, device_auth, csr_pem(), chain=other.chain)
    assert extended.status_code == 401
    assert error(extended)["code"] == "UNAUTHORIZED"
    extended_with_theirs = extend(api, token, device_auth, csr_pem(), chain=device.chain)
    assert extended_with_theirs.status_code == 401
    verified = extend_verify(api, token, device_auth, other.chain)
    assert verified.status_code == 401
    assert error(verified)["code"] == "UNAUTHORIZED"


def test_unknown_authenticator_is_404(api: Api, device: NetworkCert) -> None:
    token = login_token(api, device.chain)
    assert extend(api, token, "nope", csr_pem(), chain=device.chain).status_code == 404
    assert extend_verify(api, token, "nope", device.chain).status_code == 404


def test_third_party_certificates_can_not_be_extended(api: Api) -> None:
    acme = ThirdPartyCa("Extend Test CA")
    verified_ca(api, acme)
    leaf, _ = acme.issue("partner")
    identity_id = api.create("/identities", {"name": "partner", "type": "User", "isAdmin": False})
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": leaf}
    )
    token = login_token(api, leaf)
    result = extend(api, token, authenticator_id, csr_pem(), chain=leaf)
    assert result.status_code == 409
    assert error(result)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"


def test_updb_authenticators_can_not_be_extended(api: Api, device: NetworkCert) -> None:
    identity_id = api.create("/identities", {"name": "pw-user", "type": "User", "isAdmin": False})
    authenticator_id = api.create(
        "/authenticators",
        {"identityId": identity_id, "method": "updb", "username": "pw-user", "password": "pw-user-secret"},
    )
    token = api.login("pw-user", "pw-user-secret", base=CLIENT)
    extended = extend(api, token, authenticator_id, csr_pem(), chain=device.chain)
    assert extended.status_code == 409
    assert error(extended)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"
    verified = extend_verify(api, token, authenticator_id, device.chain)
    assert verified.status_code == 409
    assert error(verified)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"


def test_bad_csr_is_could_not_process_csr(api: Api, device: NetworkCert, device_auth: str) -> None:
    token = login_token(api, device.chain)
    result = extend(
        api,
        token,
        device_auth,
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        chain=device.chain,
    )
    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_PROCESS_CSR"
    assert cert_authenticator(api, device.identity_id)["fingerprint"] == sha1(device.chain)


def test_missing_csr_is_a_field_error(api: Api, device: NetworkCert, device_auth: str) -> None:
    token = login_token(api, device.chain)
    result = extend(api, token, device_auth, None, chain=device.chain)
    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "clientCertCsr"


# -- extend-verify refusals ------------------------------------------------------------------------
def test_verify_with_nothing_pending_is_409(api: Api, device: NetworkCert, device_auth: str) -> None:
    token = login_token(api, device.chain)
    result = extend_verify(api, token, device_auth, device.chain)
    assert result.status_code == 409
    assert error(result)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"


@pytest.mark.parametrize("which", ["current", "garbage"])
def test_verify_with_another_certificate_is_invalid_client_cert(
    api: Api, device: NetworkCert, device_auth: str, which: str
) -> None:
    token = login_token(api, device.chain)
    new_chain = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    wrong = device.chain if which == "current" else "not a certificate"
    result = extend_verify(api, token, device_auth, wrong)
    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_CLIENT_CERT"
    assert cert_login(api, device.chain).status_code == 200
    assert cert_login(api, new_chain).status_code == 401
    assert extend_verify(api, token, device_auth, new_chain).status_code == 200


def test_verify_accepts_the_leaf_alone_without_mutual_tls(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    new_chain = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    assert extend_verify(api, token, device_auth, first_pem(new_chain)).status_code == 200
    assert cert_login(api, new_chain).status_code == 200


# -- request-extend (admin) ------------------------------------------------------------------------
def test_request_extend_flags_the_authenticator_and_the_next_login(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    result = api.post(f"/authenticators/{device_auth}/request-extend", json={"rollKeys": True})
    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    detail = api.get(f"/authenticators/{device_auth}").json["data"]
    assert detail.get("isExtendRequested", False) is True
    assert detail.get("isKeyRollRequested", False) is True
    requested_at = detail.get("extendRequestedAt")
    assert requested_at is not None
    assert requested_at.endswith("Z")

    login = cert_login(api, device.chain)
    assert login.status_code == 200
    assert login.headers[EXTEND_HEADER] == "true"
    assert login.json["data"]["isCertExtendRequested"] is True
    assert login.json["data"]["isCertKeyRollRequested"] is True
    token = login.json["data"]["token"]
    current = api.get("/current-api-session", token=token, base=CLIENT).json["data"]
    assert current["isCertExtendRequested"] is True

    new_chain = extend(api, token, device_auth, csr_pem(), chain=device.chain).json["data"]["clientCert"]
    assert extend_verify(api, token, device_auth, new_chain).status_code == 200
    after = api.get(f"/authenticators/{device_auth}").json["data"]
    assert after.get("isExtendRequested", False) is False
    assert after.get("isKeyRollRequested", False) is False
    assert after.get("extendRequestedAt") == requested_at  # OpenZiti leaves it as it was
    relogin = cert_login(api, new_chain)
    assert EXTEND_HEADER not in relogin.headers
    assert "isCertExtendRequested" not in relogin.json["data"]  # false: left out, as Go's omitempty


def test_request_extend_without_roll_keys(api: Api, device: NetworkCert, device_auth: str) -> None:
    assert api.post(f"/authenticators/{device_auth}/request-extend", json={}).status_code == 200
    detail = api.get(f"/authenticators/{device_auth}").json["data"]
    assert detail.get("isExtendRequested", False) is True
    assert detail.get("isKeyRollRequested", False) is False
    login = cert_login(api, device.chain)
    assert login.headers[EXTEND_HEADER] == "true"
    assert "isCertKeyRollRequested" not in login.json["data"]


def test_request_extend_on_updb_is_401(api: Api) -> None:
    updb_id = api.get("/current-identity/authenticators").json["data"][0]["id"]
    result = api.post(f"/authenticators/{updb_id}/request-extend", json={"rollKeys": True})
    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"


def test_request_extend_unknown_is_404_and_non_admins_are_refused(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    assert api.post("/authenticators/nope/request-extend", json={}).status_code == 404
    token = login_token(api, device.chain)
    refused = api.post(f"/authenticators/{device_auth}/request-extend", json={}, token=token)
    assert refused.status_code == 401
    assert error(refused)["code"] == "UNAUTHORIZED"


# -- the caller's own authenticators ---------------------------------------------------------------
def test_current_identity_lists_only_its_own_authenticators(
    api: Api, device: NetworkCert, device_auth: str
) -> None:
    token = login_token(api, device.chain)
    for base in (CLIENT, MGMT):
        mine = api.get("/current-identity/authenticators", token=token, base=base).json
        assert [a["id"] for a in mine["data"]] == [device_auth]
        assert mine["meta"]["pagination"]["totalCount"] == 1
    admin_own = api.get("/current-identity/authenticators").json["data"]
    assert [a["method"] for a in admin_own] == ["updb"]
    one = api.get(f"/current-identity/authenticators/{device_auth}", token=token, base=CLIENT)
    assert one.status_code == 200
    assert one.json["data"]["fingerprint"] == sha1(device.chain)
    others = api.get(f"/current-identity/authenticators/{admin_own[0]['id']}", token=token, base=CLIENT)
    assert others.status_code == 404
    assert error(others)["code"] == "NOT_FOUND"
