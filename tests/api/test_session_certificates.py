"""Ephemeral API-session certificates: ``/current-api-session/certificates`` (both APIs)."""

from __future__ import annotations

import hashlib
import ssl
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509

from engine.entities.identities import ApiSessionCertificate
from tests.api.certs import csr_pem, first_pem, new_key, public_key_der, split_pems, tls_chain
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

PATH = "/current-api-session/certificates"


def create(api: Api, csr: str | None, *, token: str | None = None, base: str = CLIENT) -> Any:
    body = {} if csr is None else {"csr": csr}
    return api.post(PATH, json=body, token=token, base=base)


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def stored(api: Api, id: str) -> ApiSessionCertificate | None:
    found: ApiSessionCertificate | None = api.ctrl.env.store.get(ApiSessionCertificate, id)
    return found


@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_create_issues_a_twelve_hour_certificate_from_our_ca(api: Api, authority: Any, base: str) -> None:
    key = new_key()
    result = create(api, csr_pem(key), base=base)
    assert result.status_code == 201, result.text
    data = result.json["data"]
    assert set(data) == {"id", "_links", "certificate", "cas"}
    assert data["_links"] == {"self": {"href": f"./current-api-session/certificates/{data['id']}"}}
    assert data["cas"] == api.ctrl.env.ca.ca_bundle_pem()
    assert len(split_pems(data["certificate"])) == 2  # leaf + our signing CA
    leaf = x509.load_pem_x509_certificate(first_pem(data["certificate"]).encode())
    assert leaf.issuer == authority.intermediate_cert.subject
    leaf.verify_directly_issued_by(authority.intermediate_cert)
    assert public_key_der(first_pem(data["certificate"])) == public_key_der(key)
    lifetime = leaf.not_valid_after_utc - datetime.now(UTC)
    assert timedelta(hours=11, minutes=55) < lifetime <= timedelta(hours=12)
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]


def test_list_read_and_delete(api: Api) -> None:
    created = create(api, csr_pem()).json["data"]
    cert_id = created["id"]
    der = ssl.PEM_cert_to_DER_cert(first_pem(created["certificate"]))

    listed = api.get(PATH, base=CLIENT).json
    assert [c["id"] for c in listed["data"]] == [cert_id]
    assert listed["meta"]["pagination"]["totalCount"] == 1
    detail = api.get(f"{PATH}/{cert_id}", base=CLIENT).json["data"]
    assert detail["fingerprint"] == hashlib.sha1(der, usedforsecurity=False).hexdigest()
    assert first_pem(detail["certificate"]) == first_pem(created["certificate"])
    assert detail["validTo"].endswith("Z")
    assert detail["validFrom"].endswith("Z")
    assert detail["subject"]
    assert detail["_links"]["self"]["href"] == f"./current-api-session/certificates/{cert_id}"

    deleted = api.delete(f"{PATH}/{cert_id}", base=CLIENT)
    assert deleted.status_code == 200
    assert deleted.json["data"] == {}
    gone = api.get(f"{PATH}/{cert_id}", base=CLIENT)
    assert gone.status_code == 404
    assert error(gone)["code"] == "NOT_FOUND"
    assert api.get(PATH, base=CLIENT).json["data"] == []


def test_another_session_can_neither_see_nor_delete_it(api: Api) -> None:
    cert_id = create(api, csr_pem()).json["data"]["id"]
    other = api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)  # same identity, another session
    assert api.get(PATH, token=other, base=CLIENT).json["data"] == []
    read = api.get(f"{PATH}/{cert_id}", token=other, base=CLIENT)
    assert read.status_code == 404
    assert error(read)["code"] == "NOT_FOUND"
    deleted = api.delete(f"{PATH}/{cert_id}", token=other, base=CLIENT)
    assert deleted.status_code == 404
    assert stored(api, cert_id) is not None


def test_they_go_with_the_api_session(api: Api) -> None:
    token = api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)
    ids = [create(api, csr_pem(), token=token).json["data"]["id"] for _ in range(2)]
    kept = create(api, csr_pem()).json["data"]["id"]  # api.token's session stays
    assert api.delete("/current-api-session", token=token, base=CLIENT).status_code == 200
    assert [stored(api, i) for i in ids] == [None, None]
    assert stored(api, kept) is not None


def test_they_go_when_an_admin_deletes_the_session(api: Api) -> None:
    token = api.login(ADMIN_USER, ADMIN_PASSWORD, base=CLIENT)
    cert_id = create(api, csr_pem(), token=token).json["data"]["id"]
    session_id = api.get("/current-api-session", token=token, base=CLIENT).json["data"]["id"]
    assert api.delete(f"/api-sessions/{session_id}").status_code == 200
    assert stored(api, cert_id) is None


def test_they_can_not_be_used_for_cert_login(api: Api) -> None:
    certificate = create(api, csr_pem()).json["data"]["certificate"]
    result = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls_chain(certificate)
    )
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


@pytest.mark.parametrize(
    "csr",
    [
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        "not a csr",
        "",
    ],
)
def test_bad_csr_is_could_not_process_csr(api: Api, csr: str) -> None:
    result = create(api, csr)
    assert result.status_code == 400, result.text
    assert error(result)["code"] == "COULD_NOT_PROCESS_CSR"
    assert api.get(PATH, base=CLIENT).json["data"] == []


def test_missing_csr_is_a_field_error(api: Api) -> None:
    result = create(api, None)
    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "csr"


def test_a_session_is_required(anon: Api) -> None:
    result = create(anon, csr_pem())
    assert result.status_code == 401
    assert error(result)["code"] == "UNAUTHORIZED"
    assert anon.get(PATH, base=CLIENT).status_code == 401


def test_unknown_certificate_is_404(api: Api) -> None:
    assert api.get(f"{PATH}/nope", base=CLIENT).status_code == 404
    assert api.delete(f"{PATH}/nope", base=CLIENT).status_code == 404
