"""External JWT signatures: certificate keys, cached JWKS documents, refetch limits, algorithms."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from engine.ports import JwtKeySource
from pki.jwks import JwksVerifier, jwks_keys

URL = "https://idp.example.test/jwks"


def self_signed(key: Any) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "idp")])
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )


def jwk(key: Any, kid: str) -> dict[str, Any]:
    return {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": kid}


class FakeEndpoint:
    """A JWKS endpoint in memory: counts fetches; ``now`` is what the verifier's clock reads."""

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.fetches = 0
        self.now = 0.0
        self.fail = False

    def fetch(self, url: str, timeout: float) -> bytes:
        assert (url, timeout) == (URL, 2.0)
        self.fetches += 1
        if self.fail:
            raise OSError("connection refused")
        return json.dumps({"keys": self.keys}).encode()

    def verifier(self, min_refetch: float = 1.0) -> JwksVerifier:
        return JwksVerifier(
            timeout=2.0, min_refetch=min_refetch, fetch=self.fetch, monotonic=lambda: self.now
        )


@pytest.fixture
def endpoint() -> FakeEndpoint:
    return FakeEndpoint()


@pytest.fixture
def ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def token(key: Any, kid: str | None, alg: str = "ES256", **claims: Any) -> str:
    headers = {"kid": kid} if kid is not None else {}
    return jwt.encode({"sub": "someone", **claims}, key, algorithm=alg, headers=headers)


SOURCE = JwtKeySource(jwks_endpoint=URL)


def test_peek_reads_header_and_claims_unverified(ec_key: Any) -> None:
    peeked = JwksVerifier().peek(token(ec_key, "k1", iss="https://idp"))

    assert peeked is not None
    assert peeked.kid == "k1"
    assert peeked.claims["iss"] == "https://idp"


@pytest.mark.parametrize("text", ["", "not-a-jwt", "a.b.c"])
def test_peek_refuses_what_is_no_jws(text: str) -> None:
    assert JwksVerifier().peek(text) is None


def test_a_jwks_key_verifies_and_the_document_is_cached(endpoint: FakeEndpoint, ec_key: Any) -> None:
    endpoint.keys = [jwk(ec_key, "k1")]
    verifier = endpoint.verifier()

    first = verifier.verify(token(ec_key, "k1"), SOURCE)
    second = verifier.verify(token(ec_key, "k1"), SOURCE)

    assert first is not None
    assert first["sub"] == "someone"
    assert second is not None
    assert endpoint.fetches == 1


def test_an_unknown_kid_refetches_once_the_interval_has_passed(endpoint: FakeEndpoint, ec_key: Any) -> None:
    endpoint.keys = [jwk(ec_key, "k1")]
    verifier = endpoint.verifier(min_refetch=1.0)
    assert verifier.verify(token(ec_key, "k1"), SOURCE) is not None
    rotated = ec.generate_private_key(ec.SECP256R1())
    endpoint.keys = [jwk(rotated, "k2")]

    too_soon = verifier.verify(token(rotated, "k2"), SOURCE)
    endpoint.now = 1.5
    later = verifier.verify(token(rotated, "k2"), SOURCE)

    assert too_soon is None
    assert later is not None
    assert endpoint.fetches == 2


def test_an_unreachable_endpoint_verifies_nothing(endpoint: FakeEndpoint, ec_key: Any) -> None:
    endpoint.fail = True

    assert endpoint.verifier().verify(token(ec_key, "k1"), SOURCE) is None


def test_a_token_signed_by_another_key_is_refused(endpoint: FakeEndpoint, ec_key: Any) -> None:
    endpoint.keys = [jwk(ec_key, "k1")]
    other = ec.generate_private_key(ec.SECP256R1())

    assert endpoint.verifier().verify(token(other, "k1"), SOURCE) is None


def test_a_token_without_a_kid_is_refused(endpoint: FakeEndpoint, ec_key: Any) -> None:
    endpoint.keys = [jwk(ec_key, "k1")]

    assert endpoint.verifier().verify(token(ec_key, None), SOURCE) is None
    assert endpoint.fetches == 0


def test_x5c_keys_are_the_first_certificates(endpoint: FakeEndpoint) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    der = self_signed(key).public_bytes(serialization.Encoding.DER)
    endpoint.keys = [{"kty": "RSA", "kid": "x", "x5c": [base64.b64encode(der).decode()]}]

    assert endpoint.verifier().verify(token(key, "x", alg="RS256"), SOURCE) is not None


def test_a_certificate_signer_verifies_its_kid(ec_key: Any) -> None:
    pem = self_signed(ec_key).public_bytes(serialization.Encoding.PEM).decode()
    source = JwtKeySource(cert_pem=pem, kid="cert-kid")

    assert JwksVerifier().verify(token(ec_key, "cert-kid"), source) is not None
    assert JwksVerifier().verify(token(ec_key, "other"), source) is None


def test_a_certificate_signer_without_a_kid_uses_the_fingerprint(ec_key: Any) -> None:
    cert = self_signed(ec_key)
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    fingerprint = cert.fingerprint(hashes.SHA1()).hex()

    assert JwksVerifier().verify(token(ec_key, fingerprint), JwtKeySource(cert_pem=pem)) is not None


def test_claims_are_not_checked_here(ec_key: Any) -> None:
    pem = self_signed(ec_key).public_bytes(serialization.Encoding.PEM).decode()
    expired = token(ec_key, "k", exp=1, aud="elsewhere")

    claims = JwksVerifier().verify(expired, JwtKeySource(cert_pem=pem, kid="k"))

    assert claims is not None
    assert claims["exp"] == 1


def test_an_algorithm_that_does_not_fit_the_key_is_refused(endpoint: FakeEndpoint) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    endpoint.keys = [json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(rsa_key.public_key())) | {"kid": "r"}]
    hs = jwt.encode({"sub": "x"}, "secret-key-of-at-least-32-bytes!", algorithm="HS256", headers={"kid": "r"})

    assert endpoint.verifier().verify(hs, SOURCE) is None


def test_jwks_documents_skip_unusable_keys() -> None:
    good = ed25519.Ed25519PrivateKey.generate()
    good_jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(good.public_key())) | {"kid": "ed"}
    document = json.dumps({"keys": [{"kid": "bad", "kty": "nope"}, {"kty": "EC"}, "junk", good_jwk]}).encode()

    assert list(jwks_keys(document)) == ["ed"]
