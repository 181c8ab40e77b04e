"""External JWT signers: CRUD, certPem XOR jwksEndpoint, derived certificate fields, references."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.entities.trust import ExternalJwtSigner
from tests.conftest import Api, open_app

JWKS = {
    "name": "idp",
    "issuer": "https://idp.example.com",
    "audience": "ziti",
    "enabled": True,
    "jwksEndpoint": "https://idp.example.com/jwks",
}


def _cert_pem(cn: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.now(UTC).replace(microsecond=0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def signer_pem() -> str:
    return _cert_pem("signer.example.com")


def _get(api: Api, id: str) -> dict[str, Any]:
    result = api.get(f"/external-jwt-signers/{id}")
    assert result.status_code == 200, result.text
    return dict(result.json["data"])


def test_create_with_jwks_endpoint(api: Api) -> None:
    id = api.create("/external-jwt-signers", JWKS)

    data = _get(api, id)

    assert data["name"] == "idp"
    assert data["issuer"] == "https://idp.example.com"
    assert data["audience"] == "ziti"
    assert data["enabled"] is True
    assert data["jwksEndpoint"] == "https://idp.example.com/jwks"
    assert data["certPem"] is None
    assert data["claimsProperty"] == "sub"
    assert data["useExternalId"] is False
    assert data["targetToken"] == "ACCESS"
    assert data["scopes"] == []
    assert data["commonName"] == ""
    assert data["fingerprint"] is None
    assert data["_links"]["self"]["href"] == f"./external-jwt-signers/{id}"


def test_create_with_certificate_derives_its_details(api: Api, signer_pem: str) -> None:
    body = {**JWKS, "jwksEndpoint": None, "certPem": signer_pem, "kid": "k1", "claimsProperty": "email"}

    id = api.create("/external-jwt-signers", body)

    data = _get(api, id)
    cert = x509.load_pem_x509_certificate(signer_pem.encode())
    assert data["certPem"] == signer_pem
    assert data["commonName"] == "signer.example.com"
    assert len(data["fingerprint"]) == 40
    assert data["notAfter"].startswith(cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%S"))
    assert data["notBefore"].endswith("Z")
    assert data["kid"] == "k1"
    assert data["claimsProperty"] == "email"


def test_all_optional_fields(api: Api) -> None:
    body = {
        **JWKS,
        "externalAuthUrl": "https://idp.example.com/auth",
        "useExternalId": True,
        "clientId": "ziti-client",
        "scopes": ["openid", "email"],
        "targetToken": "ID",
        "tags": {"env": "test"},
    }

    data = _get(api, api.create("/external-jwt-signers", body))

    assert data["externalAuthUrl"] == "https://idp.example.com/auth"
    assert data["useExternalId"] is True
    assert data["clientId"] == "ziti-client"
    assert data["scopes"] == ["openid", "email"]
    assert data["targetToken"] == "ID"
    assert data["tags"] == {"env": "test"}


@pytest.mark.parametrize("missing", ["name", "issuer", "audience", "enabled"])
def test_required_fields(api: Api, missing: str) -> None:
    body = {k: v for k, v in JWKS.items() if k != missing}

    result = api.post("/external-jwt-signers", json=body)

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == missing


def test_neither_certificate_nor_jwks_is_refused(api: Api) -> None:
    body = {k: v for k, v in JWKS.items() if k != "jwksEndpoint"}

    result = api.post("/external-jwt-signers", json=body)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "certPem"
    assert result.json["error"]["cause"]["reason"] == "jwksEndpoint or certPem is required"


def test_both_certificate_and_jwks_are_refused(api: Api, signer_pem: str) -> None:
    result = api.post("/external-jwt-signers", json={**JWKS, "certPem": signer_pem})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "jwksEndpoint"
    assert result.json["error"]["cause"]["reason"] == "only one of jwksEndpoint or certPem may be defined"


def test_unparsable_certificate_is_refused(api: Api) -> None:
    result = api.post("/external-jwt-signers", json={**JWKS, "jwksEndpoint": None, "certPem": "garbage"})

    assert result.status_code == 400
    assert result.json["error"]["code"] == "INVALID_CERT_PEM"


def test_invalid_target_token_is_refused(api: Api) -> None:
    result = api.post("/external-jwt-signers", json={**JWKS, "targetToken": "REFRESH"})

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "targetToken"


@pytest.mark.parametrize("field", ["name", "issuer"])
def test_unique_fields(api: Api, field: str) -> None:
    api.create("/external-jwt-signers", JWKS)
    other = {**JWKS, "name": "other", "issuer": "https://other.example.com"}
    other[field] = JWKS[field]

    result = api.post("/external-jwt-signers", json=other)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == field


def test_replace_switches_to_a_certificate(api: Api, signer_pem: str) -> None:
    id = api.create("/external-jwt-signers", {**JWKS, "kid": "k1", "clientId": "c"})

    result = api.put(
        f"/external-jwt-signers/{id}",
        json={
            "name": "idp2",
            "issuer": "https://idp2.example.com",
            "audience": None,
            "enabled": False,
            "certPem": signer_pem,
        },
    )

    assert result.status_code == 200, result.text
    data = _get(api, id)
    assert data["name"] == "idp2"
    assert data["enabled"] is False
    assert data["audience"] is None
    assert data["jwksEndpoint"] is None
    assert data["kid"] is None
    assert data["clientId"] is None
    assert data["commonName"] == "signer.example.com"


def test_patch_changes_sent_fields(api: Api) -> None:
    id = api.create("/external-jwt-signers", JWKS)

    result = api.patch(f"/external-jwt-signers/{id}", json={"enabled": False, "kid": "k2"})

    assert result.status_code == 200
    data = _get(api, id)
    assert data["enabled"] is False
    assert data["kid"] == "k2"
    assert data["name"] == "idp"
    assert data["jwksEndpoint"] == JWKS["jwksEndpoint"]


def test_patch_can_swap_jwks_for_certificate(api: Api, signer_pem: str) -> None:
    id = api.create("/external-jwt-signers", JWKS)

    both = api.patch(f"/external-jwt-signers/{id}", json={"certPem": signer_pem})
    swapped = api.patch(f"/external-jwt-signers/{id}", json={"certPem": signer_pem, "jwksEndpoint": None})

    assert both.status_code == 400
    assert swapped.status_code == 200
    data = _get(api, id)
    assert data["jwksEndpoint"] is None
    assert data["fingerprint"] is not None


def test_delete(api: Api) -> None:
    id = api.create("/external-jwt-signers", JWKS)

    result = api.delete(f"/external-jwt-signers/{id}")

    assert result.status_code == 200
    assert api.get(f"/external-jwt-signers/{id}").status_code == 404


def test_signer_used_by_an_auth_policy_can_not_be_deleted(api: Api) -> None:
    allowed = api.create("/external-jwt-signers", JWKS)
    required = api.create(
        "/external-jwt-signers", {**JWKS, "name": "second", "issuer": "https://second.example.com"}
    )
    api.create(
        "/auth-policies",
        {
            "name": "jwt-only",
            "primary": {"extJwt": {"allowed": True, "allowedSigners": [allowed]}},
            "secondary": {"requireExtJwtSigner": required},
        },
    )

    for id in (allowed, required):
        result = api.delete(f"/external-jwt-signers/{id}")

        assert result.status_code == 409
        assert result.json["error"]["code"] == "CAN_NOT_DELETE_REFERENCED_ENTITY"


def test_unknown_ids_answer_404(api: Api) -> None:
    assert api.get("/external-jwt-signers/nope").status_code == 404
    assert api.put("/external-jwt-signers/nope", json=JWKS).status_code == 404
    assert api.patch("/external-jwt-signers/nope", json={"enabled": True}).status_code == 404
    assert api.delete("/external-jwt-signers/nope").status_code == 404


def test_list_filter(api: Api) -> None:
    id = api.create("/external-jwt-signers", JWKS)
    api.create("/external-jwt-signers", {**JWKS, "name": "other", "issuer": "https://other.example.com"})

    result = api.get("/external-jwt-signers", params={"filter": 'issuer = "https://idp.example.com"'})

    assert [d["id"] for d in result.json["data"]] == [id]


@pytest.mark.durable
def test_signers_survive_a_restart(api: Api, app: Any, settings: Any, signer_pem: str) -> None:
    id = api.create("/external-jwt-signers", {**JWKS, "jwksEndpoint": None, "certPem": signer_pem})
    app.ctrl.env.store.close()

    reopened = open_app(settings, durable=True)
    try:
        signer = reopened.ctrl.env.store.get(ExternalJwtSigner, id)
        assert signer is not None
        assert signer.common_name == "signer.example.com"
        assert signer.not_after is not None
    finally:
        reopened.ctrl.env.store.close()


# -- jwksEndpoint: where the controller may fetch keys from -------------------------------------------
@pytest.mark.parametrize(
    "endpoint",
    [
        "http://127.0.0.1:8080/jwks",
        "http://127.1/jwks",  # what a resolver reads as 127.0.0.1
        "http://2130706433/jwks",
        "http://[::1]/jwks",
        "http://[::ffff:127.0.0.1]/jwks",
        "http://localhost:8080/jwks",
        "https://idp.localhost./jwks",
        "http://0.0.0.0/jwks",
        "http://[::]/jwks",
        "http://224.0.0.251/jwks",
        "http://[ff02::1]/jwks",
        "http://255.255.255.255/jwks",
        "http://[fe80::1]/jwks",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "ftp://idp.example.com/jwks",
    ],
)
def test_an_endpoint_the_controller_must_not_fetch_is_refused(api: Api, endpoint: str) -> None:
    result = api.post("/external-jwt-signers", json={**JWKS, "jwksEndpoint": endpoint})

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "jwksEndpoint"


def test_a_loopback_endpoint_is_refused_when_changed_too(api: Api) -> None:
    id = api.create("/external-jwt-signers", JWKS)
    loopback = {**JWKS, "jwksEndpoint": "http://127.0.0.1:8080/jwks"}

    patched = api.patch(f"/external-jwt-signers/{id}", json={"jwksEndpoint": loopback["jwksEndpoint"]})
    replaced = api.put(f"/external-jwt-signers/{id}", json=loopback)

    for result in (patched, replaced):
        assert result.status_code == 400, result.text
        assert result.json["error"]["cause"]["field"] == "jwksEndpoint"
    assert _get(api, id)["jwksEndpoint"] == JWKS["jwksEndpoint"]


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://10.1.2.3/jwks",
        "http://192.168.0.10:8080/jwks",
        "https://172.16.5.4/jwks",
        "https://100.64.0.1/jwks",
        "https://[fd12:3456::1]/jwks",
        "https://8.8.8.8/jwks",
    ],
)
def test_a_private_network_endpoint_is_accepted(api: Api, endpoint: str) -> None:
    """An identity provider inside the company network is a legitimate one."""
    result = api.post("/external-jwt-signers", json={**JWKS, "jwksEndpoint": endpoint})

    assert result.status_code == 201, result.text


def test_loopback_endpoints_are_accepted_when_the_setting_allows_them(make_api: Any) -> None:
    admin = make_api(jwks_allow_loopback=True)

    loopback = admin.post(
        "/external-jwt-signers", json={**JWKS, "jwksEndpoint": "http://127.0.0.1:8080/jwks"}
    )
    named = admin.post(
        "/external-jwt-signers",
        json={
            **JWKS,
            "name": "named",
            "issuer": "https://named.example.com",
            "jwksEndpoint": "http://localhost/j",
        },
    )
    metadata = admin.post(
        "/external-jwt-signers",
        json={
            **JWKS,
            "name": "md",
            "issuer": "https://md.example.com",
            "jwksEndpoint": "http://169.254.169.254/",
        },
    )

    assert (loopback.status_code, named.status_code) == (201, 201)
    assert metadata.status_code == 400
    assert metadata.json["error"]["cause"]["field"] == "jwksEndpoint"


def test_the_loopback_setting_is_read_from_the_environment() -> None:
    from controller.settings import Settings

    assert Settings.from_env({}).jwks_allow_loopback is False
    assert Settings.from_env({"TRELLIS_JWKS_ALLOW_LOOPBACK": "on"}).jwks_allow_loopback is True
    assert Settings.from_env({"TRELLIS_JWKS_ALLOW_LOOPBACK": "OFF"}).jwks_allow_loopback is False
    with pytest.raises(SystemExit, match="TRELLIS_JWKS_ALLOW_LOOPBACK"):
        Settings.from_env({"TRELLIS_JWKS_ALLOW_LOOPBACK": "yes"})
