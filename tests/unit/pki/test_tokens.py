"""JwtSigner: enrollment JWTs signed with the TLS server key, checked as the SDKs check them."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.x509.oid import NameOID

from engine import ports
from engine.errors import FieldError
from pki import CertificateAuthority, JwtSigner, jws_algorithm

EXP = int(datetime(2026, 3, 1, 15, 0, tzinfo=UTC).timestamp())
CLAIMS = {
    "em": "ott",
    "iss": "https://ctrl.example.com:1280",
    "sub": "Xk2pZ9qT1",
    "jti": "0b4f2a59-1c1e-4a8e-9f7e-6d3c2b1a0f9e",
    "exp": EXP,
    "aud": [""],
    "ctrls": [],
}
_HASHES: dict[str, hashes.HashAlgorithm] = {
    "ES256": hashes.SHA256(),
    "ES384": hashes.SHA384(),
    "ES512": hashes.SHA512(),
}


def _segments(token: str) -> list[dict[str, Any]]:
    header, payload, _ = token.split(".")
    return [json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))) for part in (header, payload)]


def _self_signed(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "server")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(datetime(2026, 1, 1, tzinfo=UTC))
        .not_valid_after(datetime(2027, 1, 1, tzinfo=UTC))
        .sign(key, hashes.SHA256())
    )


@pytest.fixture(scope="module")
def signer(ca: CertificateAuthority) -> JwtSigner:
    return JwtSigner.for_authority(ca)


def test_the_signer_is_a_token_signer(signer: JwtSigner) -> None:
    port: ports.TokenSigner = signer

    assert port.sign(CLAIMS).count(".") == 2


def test_header_alg_kid_typ(signer: JwtSigner, ca: CertificateAuthority) -> None:
    header, _ = _segments(signer.sign(CLAIMS))

    der = ca.server_cert.public_bytes(serialization.Encoding.DER)
    assert header == {"alg": "RS256", "kid": hashlib.sha1(der).hexdigest(), "typ": "JWT"}
    assert header == signer.headers()
    assert signer.kid == ca.jwt_kid()


def test_claims_are_as_given_and_nothing_else(signer: JwtSigner) -> None:
    _, payload = _segments(signer.sign(CLAIMS))

    assert payload == CLAIMS  # no iat, no nbf added


def test_signature_verifies_with_the_tls_certificate_public_key(
    signer: JwtSigner, ca: CertificateAuthority
) -> None:
    """What the SDKs do: verify with the public key of the TLS leaf received from ``iss``."""
    token = signer.sign(CLAIMS)
    tls_leaf = x509.load_pem_x509_certificates(ca.server_chain_pem.encode())[0]
    public_key = tls_leaf.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)

    claims = jwt.decode(
        token, public_key, algorithms=["RS256"], options={"verify_exp": False, "verify_aud": False}
    )

    assert claims == CLAIMS


def test_another_key_does_not_verify(signer: JwtSigner, rsa_key: rsa.RSAPrivateKey) -> None:
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(
            signer.sign(CLAIMS), rsa_key.public_key(), algorithms=["RS256"], options={"verify_exp": False}
        )


def test_verify_round_trips(signer: JwtSigner) -> None:
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    assert signer.verify(signer.sign(CLAIMS), now=now) == CLAIMS
    assert signer.verify(signer.sign(CLAIMS)) == CLAIMS  # no clock, no exp check


def test_verify_checks_exp_against_the_given_now(signer: JwtSigner) -> None:
    with pytest.raises(FieldError) as info:
        signer.verify(signer.sign(CLAIMS), now=datetime(2026, 3, 1, 15, 0, 1, tzinfo=UTC))

    assert (info.value.field, info.value.reason) == ("jwt", "invalid token: expired")


@pytest.mark.parametrize("exp", ["soon", True, None])
def test_verify_refuses_a_bad_exp(signer: JwtSigner, exp: object) -> None:
    with pytest.raises(FieldError):
        signer.verify(signer.sign(CLAIMS | {"exp": exp}), now=datetime(2026, 3, 1, tzinfo=UTC))


def test_verify_refuses_a_token_of_another_signer(signer: JwtSigner, rsa_key: rsa.RSAPrivateKey) -> None:
    other = JwtSigner(rsa_key, _self_signed(rsa_key))

    with pytest.raises(FieldError) as info:
        signer.verify(other.sign(CLAIMS), field="token")

    assert info.value.field == "token"


def test_verify_refuses_a_foreign_kid(signer: JwtSigner, ca: CertificateAuthority) -> None:
    token = jwt.encode(CLAIMS, ca.signing_key_for_jwt(), algorithm="RS256", headers={"kid": "0" * 40})

    with pytest.raises(FieldError) as info:
        signer.verify(token)

    assert info.value.reason == "invalid token: unknown kid"


@pytest.mark.parametrize("token", ["", "a.b.c", "not a token", "eyJhbGciOiJub25lIn0.e30."])
def test_verify_refuses_garbage(signer: JwtSigner, token: str) -> None:
    with pytest.raises(FieldError):
        signer.verify(token)


@pytest.mark.parametrize(
    ("curve", "alg"),
    [(ec.SECP256R1(), "ES256"), (ec.SECP384R1(), "ES384"), (ec.SECP521R1(), "ES512")],
)
def test_ec_keys_sign_standard_jws(curve: ec.EllipticCurve, alg: str) -> None:
    key = ec.generate_private_key(curve)
    ec_signer = JwtSigner(key, _self_signed(key))

    token = ec_signer.sign(CLAIMS)

    assert _segments(token)[0]["alg"] == alg
    raw_signature = base64.urlsafe_b64decode(token.split(".")[2] + "==")
    assert len(raw_signature) == 2 * ((curve.key_size + 7) // 8)  # raw r||s, not DER
    assert (
        jwt.decode(
            token, key.public_key(), algorithms=[alg], options={"verify_exp": False, "verify_aud": False}
        )
        == CLAIMS
    )
    assert ec_signer.verify(token) == CLAIMS


def test_unsupported_keys_and_mismatches_are_refused(
    ca: CertificateAuthority, rsa_key: rsa.RSAPrivateKey
) -> None:
    with pytest.raises(ValueError, match="does not match"):
        JwtSigner(rsa_key, ca.server_cert)
    with pytest.raises(ValueError, match="no JWS algorithm"):
        jws_algorithm(ec.generate_private_key(ec.SECP256K1()))


def test_ca_jwt_algorithm_is_the_signers(signer: JwtSigner, ca: CertificateAuthority) -> None:
    assert ca.jwt_algorithm() == signer.algorithm == "RS256"
    assert signer.certificate == ca.server_cert


# -- the public JWK and detached nonce signatures -----------------------------------------------------
def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_the_jwk_is_the_public_tls_key_with_its_chain(signer: JwtSigner, ca: CertificateAuthority) -> None:
    [jwk] = signer.public_jwks()

    chain = x509.load_pem_x509_certificates(ca.server_chain_pem.encode())
    der = chain[0].public_bytes(serialization.Encoding.DER)
    assert set(jwk) == {"kty", "n", "e", "kid", "use", "alg", "x5c", "x5t", "x5t#S256"}  # nothing private
    assert (jwk["kty"], jwk["kid"], jwk["use"], jwk["alg"]) == ("RSA", signer.kid, "sig", "RS256")
    assert [base64.b64decode(c) for c in jwk["x5c"]] == [
        c.public_bytes(serialization.Encoding.DER) for c in chain
    ]
    assert _b64url_decode(jwk["x5t"]) == hashlib.sha1(der).digest()
    assert _b64url_decode(jwk["x5t#S256"]) == hashlib.sha256(der).digest()
    assert "=" not in jwk["n"] + jwk["e"]  # base64url without padding
    published, server = jwt.PyJWK(jwk).key, ca.server_cert.public_key()
    assert isinstance(published, rsa.RSAPublicKey)
    assert isinstance(server, rsa.RSAPublicKey)
    assert published.public_numbers() == server.public_numbers()


def test_the_jwk_verifies_the_signers_tokens(signer: JwtSigner) -> None:
    key = jwt.PyJWK(signer.public_jwks()[0])

    claims = jwt.decode(
        signer.sign(CLAIMS),
        key.key,
        algorithms=[key.algorithm_name],
        options={"verify_exp": False, "verify_aud": False},
    )

    assert claims == CLAIMS


def test_public_jwks_are_copies(signer: JwtSigner) -> None:
    signer.public_jwks()[0]["kid"] = "changed"

    assert signer.public_jwks()[0]["kid"] == signer.kid


def test_sign_detached_is_a_pkcs1_signature_of_the_payload(
    signer: JwtSigner, ca: CertificateAuthority
) -> None:
    signed = signer.sign_detached(b"nonce", signer.kid)

    assert signed is not None
    alg, signature = signed
    assert alg == "RS256"
    assert "=" not in signature
    public_key = ca.server_cert.public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    public_key.verify(_b64url_decode(signature), b"nonce", padding.PKCS1v15(), hashes.SHA256())
    with pytest.raises(InvalidSignature):
        public_key.verify(_b64url_decode(signature), b"other", padding.PKCS1v15(), hashes.SHA256())


def test_sign_detached_refuses_a_foreign_kid(signer: JwtSigner) -> None:
    assert signer.sign_detached(b"nonce", "0" * 40) is None
    assert signer.sign_detached(b"nonce", signer.kid.upper()) is None


@pytest.mark.parametrize(
    ("curve", "crv", "alg"),
    [
        (ec.SECP256R1(), "P-256", "ES256"),
        (ec.SECP384R1(), "P-384", "ES384"),
        (ec.SECP521R1(), "P-521", "ES512"),
    ],
)
def test_ec_keys_publish_their_point_and_sign_raw_r_s(curve: ec.EllipticCurve, crv: str, alg: str) -> None:
    key = ec.generate_private_key(curve)
    ec_signer = JwtSigner(key, _self_signed(key))
    size = (curve.key_size + 7) // 8

    [jwk] = ec_signer.public_jwks()
    signed = ec_signer.sign_detached(b"nonce", ec_signer.kid)

    assert (jwk["kty"], jwk["crv"], jwk["alg"]) == ("EC", crv, alg)
    assert len(_b64url_decode(jwk["x"])) == len(_b64url_decode(jwk["y"])) == size
    assert "d" not in jwk
    assert signed is not None
    assert signed[0] == alg
    raw = _b64url_decode(signed[1])
    assert len(raw) == 2 * size  # JWS raw r||s, not DER
    published = jwt.PyJWK(jwk)
    assert published.Algorithm.verify(b"nonce", published.key, raw)
    assert not published.Algorithm.verify(b"other", published.key, raw)
    r, s = int.from_bytes(raw[:size], "big"), int.from_bytes(raw[size:], "big")
    key.public_key().verify(encode_dss_signature(r, s), b"nonce", ec.ECDSA(_HASHES[alg]))


def test_a_signer_without_a_chain_publishes_its_certificate_alone(rsa_key: rsa.RSAPrivateKey) -> None:
    certificate = _self_signed(rsa_key)

    [jwk] = JwtSigner(rsa_key, certificate).public_jwks()

    assert jwk["x5c"] == [base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()]
