"""Trusting the network before enrolling: ``GET /network-jwts``, ``GET /enroll/jwks`` and
``POST /enroll/challenge``, checked with real keys the way a device would check them."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import falcon.testing
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, MGMT, Api

api = shared_admin_api("enroll-trust")

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
NONCE = "6f1c2d3e-4a5b-4c6d-8e7f-901a2b3c4d5e"


def _get(api: Api, path: str) -> falcon.testing.Result:
    """A GET without any session (these operations need none)."""
    return api.client.simulate_get(path)


def _challenge(api: Api, body: Any) -> falcon.testing.Result:
    return api.client.simulate_post(CLIENT + "/enroll/challenge", json=body)


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _segments(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    header, payload, _ = token.split(".")
    return json.loads(_b64url_decode(header)), json.loads(_b64url_decode(payload))


def _tls_leaf(api: Api) -> x509.Certificate:
    """The certificate the client API listener presents (what a device connects to)."""
    return x509.load_pem_x509_certificates(api.ctrl.pki.server_chain_pem.encode())[0]


def _network_jwt(api: Api) -> str:
    return str(_get(api, CLIENT + "/network-jwts").json["data"][0]["token"])


def _jwks(api: Api) -> dict[str, Any]:
    return dict(_get(api, CLIENT + "/enroll/jwks").json)


def _jwk_for(api: Api, kid: str) -> jwt.PyJWK:
    keys = jwt.PyJWKSet.from_dict(_jwks(api))
    return keys[kid]


# -- GET /network-jwts ----------------------------------------------------------------------------
def test_network_jwts_lists_the_default_token_without_a_session(api: Api) -> None:
    result = _get(api, CLIENT + "/network-jwts")

    assert result.status_code == 200
    assert [entry["name"] for entry in result.json["data"]] == ["default"]
    assert set(result.json["data"][0]) == {"name", "token"}
    assert result.json["meta"]["apiVersion"] == "0.0.1"


def test_network_jwt_claims_are_openzitis(api: Api) -> None:
    header, claims = _segments(_network_jwt(api))

    issuer = f"https://{api.ctrl.settings.advertised_address}/"
    assert claims["iss"] == claims["sub"] == issuer  # with the trailing slash
    assert claims["aud"] == ["openziti-enroller"]
    assert claims["em"] == "network"
    assert claims["ctrls"] is None
    assert UUID.match(claims["jti"])
    assert set(claims) == {"iss", "sub", "aud", "jti", "em", "ctrls"}  # no exp, no iat
    der = _tls_leaf(api).public_bytes(serialization.Encoding.DER)
    assert header == {"alg": "RS256", "kid": hashlib.sha1(der).hexdigest(), "typ": "JWT"}


def test_network_jwt_verifies_against_the_enrollment_jwks_key(api: Api) -> None:
    token = _network_jwt(api)
    header, _ = _segments(token)

    key = _jwk_for(api, header["kid"])
    claims = jwt.decode(token, key.key, algorithms=[key.algorithm_name], audience="openziti-enroller")

    assert claims["em"] == "network"


def test_network_jwt_verifies_with_the_tls_certificate_as_sdks_check_it(api: Api) -> None:
    public_key = _tls_leaf(api).public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)

    claims = jwt.decode(_network_jwt(api), public_key, algorithms=["RS256"], audience="openziti-enroller")

    assert claims["iss"].startswith("https://")


def test_the_network_jwt_is_signed_once_and_served_on_both_apis_and_unprefixed(api: Api) -> None:
    tokens = {
        str(_get(api, path).json["data"][0]["token"])
        for path in (
            CLIENT + "/network-jwts",
            CLIENT + "/network-jwts",
            MGMT + "/network-jwts",
            "/network-jwts",
        )
    }

    assert len(tokens) == 1


def test_a_session_is_not_needed_nor_in_the_way(api: Api) -> None:
    result = api.client.simulate_get(MGMT + "/network-jwts", headers={"zt-session": str(api.token)})

    assert result.status_code == 200
    assert result.json["data"][0]["token"] == _network_jwt(api)


# -- GET /enroll/jwks -----------------------------------------------------------------------------
def test_jwks_is_the_bare_jwks_document_of_the_tls_server_key(api: Api) -> None:
    result = _get(api, CLIENT + "/enroll/jwks")

    assert result.status_code == 200
    assert set(result.json) == {"keys"}  # the spec's ``jwks``, not a {data, meta} envelope
    [key] = result.json["keys"]
    leaf = _tls_leaf(api)
    der = leaf.public_bytes(serialization.Encoding.DER)
    assert key["kid"] == hashlib.sha1(der).hexdigest()
    assert (key["kty"], key["alg"], key["use"]) == ("RSA", "RS256", "sig")
    public = leaf.public_key()
    assert isinstance(public, rsa.RSAPublicKey)
    numbers = public.public_numbers()
    assert int.from_bytes(_b64url_decode(key["n"]), "big") == numbers.n
    assert int.from_bytes(_b64url_decode(key["e"]), "big") == numbers.e
    assert not {"d", "p", "q", "dp", "dq", "qi"} & set(key)  # public only
    chain = x509.load_pem_x509_certificates(api.ctrl.pki.server_chain_pem.encode())
    assert [base64.b64decode(c) for c in key["x5c"]] == [
        c.public_bytes(serialization.Encoding.DER) for c in chain
    ]
    assert _b64url_decode(key["x5t"]) == hashlib.sha1(der).digest()
    assert _b64url_decode(key["x5t#S256"]) == hashlib.sha256(der).digest()


def test_jwks_is_unprefixed_too_but_not_on_the_management_api(api: Api) -> None:
    assert _get(api, "/enroll/jwks").json == _jwks(api)

    result = _get(api, MGMT + "/enroll/jwks")

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"


# -- POST /enroll/challenge -----------------------------------------------------------------------
def test_challenge_signs_the_nonce_with_the_key_named_by_kid(api: Api) -> None:
    kid = _jwks(api)["keys"][0]["kid"]

    result = _challenge(api, {"nonce": NONCE, "keyId": kid})

    assert result.status_code == 200
    body = result.json
    assert set(body) == {"signature", "algorithm", "kid", "caPool"}  # bare ``nonceSignature``
    assert (body["kid"], body["algorithm"]) == (kid, "RS256")
    assert body["caPool"] == api.ctrl.pki.ca_bundle_pem()
    key = _jwk_for(api, kid)
    assert key.Algorithm.verify(NONCE.encode(), key.key, _b64url_decode(body["signature"]))


def test_challenge_signature_verifies_with_the_tls_certificate_key(api: Api) -> None:
    kid = _jwks(api)["keys"][0]["kid"]
    signature = _b64url_decode(_challenge(api, {"nonce": NONCE, "keyId": kid}).json["signature"])
    public_key = _tls_leaf(api).public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)

    public_key.verify(signature, NONCE.encode(), padding.PKCS1v15(), hashes.SHA256())  # raises if not


def test_challenge_ca_pool_validates_the_tls_certificate(api: Api) -> None:
    kid = _jwks(api)["keys"][0]["kid"]
    pool = x509.load_pem_x509_certificates(
        _challenge(api, {"nonce": NONCE, "keyId": kid}).json["caPool"].encode()
    )
    leaf = _tls_leaf(api)

    issuers = [ca for ca in pool if ca.subject == leaf.issuer]

    assert len(issuers) == 1
    leaf.verify_directly_issued_by(issuers[0])  # raises if not


def test_a_signature_is_for_its_own_nonce_only(api: Api) -> None:
    kid = _jwks(api)["keys"][0]["kid"]
    other = NONCE.replace("6f1c", "7f1c")
    signature = _b64url_decode(_challenge(api, {"nonce": other, "keyId": kid}).json["signature"])

    key = _jwk_for(api, kid)

    assert key.Algorithm.verify(other.encode(), key.key, signature)
    assert not key.Algorithm.verify(NONCE.encode(), key.key, signature)


def test_an_upper_case_nonce_is_a_uuid_and_is_signed_as_sent(api: Api) -> None:
    kid = _jwks(api)["keys"][0]["kid"]
    nonce = NONCE.upper()

    result = _challenge(api, {"nonce": nonce, "keyId": kid})

    assert result.status_code == 200
    key = _jwk_for(api, kid)
    assert key.Algorithm.verify(nonce.encode(), key.key, _b64url_decode(result.json["signature"]))


def test_an_unknown_key_id_is_refused(api: Api) -> None:
    result = _challenge(api, {"nonce": NONCE, "keyId": "0" * 40})

    assert result.status_code == 400
    error = result.json["error"]
    assert error["code"] == "COULD_NOT_VALIDATE"
    assert error["cause"]["field"] == "keyId"
    assert error["cause"]["value"] == "0" * 40


@pytest.mark.parametrize("nonce", ["not-a-uuid", "", "6f1c2d3e-4a5b-4c6d-8e7f-901a2b3c4d5", NONCE + "0"])
def test_a_nonce_that_is_not_a_uuid_is_refused(api: Api, nonce: str) -> None:
    kid = _jwks(api)["keys"][0]["kid"]

    result = _challenge(api, {"nonce": nonce, "keyId": kid})

    assert result.status_code == 400
    error = result.json["error"]
    assert error["code"] == "COULD_NOT_VALIDATE"
    assert error["cause"]["field"] == "nonce"
    assert error["cause"]["reason"] == f'nonce in body must be of type uuid: "{nonce}"'


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"keyId": "k"}, "nonce"),
        ({"nonce": NONCE}, "keyId"),
        ({"nonce": NONCE, "keyId": 7}, "keyId"),
        ({"nonce": 7, "keyId": "k"}, "nonce"),
    ],
)
def test_missing_or_mistyped_fields_are_refused(api: Api, body: dict[str, Any], field: str) -> None:
    result = _challenge(api, body)

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == field


def test_an_empty_body_is_refused(api: Api) -> None:
    result = api.client.simulate_post(CLIENT + "/enroll/challenge", body=b"", content_type="application/json")

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_PARSE_BODY"


def test_the_challenge_is_not_on_the_management_api(api: Api) -> None:
    result = api.client.simulate_post(MGMT + "/enroll/challenge", json={"nonce": NONCE, "keyId": "k"})

    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"
