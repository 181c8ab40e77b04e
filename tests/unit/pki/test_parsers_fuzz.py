"""Hostile input to the pki parsers (issue 8): CSRs, DER, certificates, enrollment JWTs, external
JWTs and JWKS documents. Whatever arrives, each parser either succeeds or fails with its own
controlled error (a FieldError, which the API answers 400, or the documented None / ValueError),
never with another exception. Inputs are size-bounded and runs derandomized, so every run tries
the same examples; there is no timing assertion.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import FieldError
from engine.ports import JwtKeySource, UnverifiedJwt
from pki import CertificateAuthority, JwtSigner, _der
from pki.certs import cert_info, is_ca, parse_certificates, proxied_certificates
from pki.csr import MAX_CSR_CHARS, load_csr, requested_sans
from pki.jwks import JwksVerifier, jwks_keys
from tests.conftest import examples
from tests.unit.pki.conftest import CertFactory, CsrFactory, MbedtlsCsrFactory, pem_csr

FUZZ = settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


# -- building blocks ------------------------------------------------------------------------------
def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def pem_block(label: str, der: bytes) -> str:
    return f"-----BEGIN {label}-----\n{base64.encodebytes(der).decode('ascii')}-----END {label}-----\n"


def nested(depth: int, *, array: bool) -> bytes:
    """JSON nested ``depth`` levels deep (deeper than Python's recursion limit when large)."""
    if array:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with a few bytes flipped, removed or inserted, or cut short."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(("flip", "drop", "insert", "truncate")))
        if action == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif action == "drop":
            del data[at]
        elif action == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[at:]
    return bytes(data)


#: Any JSON value, a few levels deep, with the odd values JSON allows and Python parses
#: (huge integers, floats, empty keys, unicode).
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
claim_values = st.one_of(json_values, st.sampled_from(["ES256", "RS256", "none", "HS256", "EdDSA", ""]))
headers = st.dictionaries(st.sampled_from(["alg", "kid", "typ", "x5c", "jwk", "crit", "b64"]), claim_values)
claims = st.dictionaries(
    st.sampled_from(["exp", "nbf", "iat", "iss", "sub", "aud", "jti", "em"]), claim_values
)


@st.composite
def jws_like(draw: st.DrawFn) -> str:
    """Three dot-separated segments of base64url JSON (or garbage), as a JWS compact token."""
    header = json.dumps(draw(st.one_of(headers, json_values))).encode()
    payload = json.dumps(draw(st.one_of(claims, json_values))).encode()
    signature = draw(st.binary(max_size=80))
    parts = [b64url(header), b64url(payload), b64url(signature)]
    if draw(st.booleans()):
        at = draw(st.integers(0, 2))
        parts[at] = draw(st.text(alphabet="abcXYZ019-_=.+/ \u00e9", max_size=40))
    return ".".join(parts)


@pytest.fixture(scope="module")
def csr_ders(make_csr: CsrFactory, make_mbedtls_csr: MbedtlsCsrFactory, rsa_key: Any) -> list[bytes]:
    """Real CSRs (EC with SANs, RSA, mbedTLS's NULL-parameter encoding) as DER: mutation seeds."""
    pems = [
        make_csr("device", dns=["a.example.test"], ips=["10.0.0.1"])[0],
        make_csr("rsa-device", key=rsa_key)[0],
        make_mbedtls_csr(),
    ]
    return [der_of(pem) for pem in pems]


def der_of(pem: str) -> bytes:
    body = pem.split("-----")[2]
    return base64.b64decode("".join(body.split()))


@pytest.fixture(scope="module")
def cert_ders(make_cert: CertFactory, ca: CertificateAuthority) -> list[bytes]:
    """A third-party CA certificate and our own chain as DER: mutation seeds."""
    root, _ = make_cert("Fuzz Root CA", path_length=1, key_cert_sign=True)
    ours = x509.load_pem_x509_certificates(ca.server_chain_pem.encode())
    return [c.public_bytes(serialization.Encoding.DER) for c in (root, *ours)]


@pytest.fixture(scope="module")
def idp(make_cert: CertFactory) -> tuple[Any, str]:
    """An external identity provider's signing key and certificate (PEM)."""
    cert, key = make_cert("Fuzz IdP")
    return key, cert.public_bytes(serialization.Encoding.PEM).decode()


@pytest.fixture(scope="module")
def signer(ca: CertificateAuthority) -> JwtSigner:
    return JwtSigner.for_authority(ca)


def controlled(call: Callable[[], Any], *allowed: type[BaseException]) -> Any:
    """``call()``'s result, or None when it raised one of ``allowed`` (anything else fails)."""
    try:
        return call()
    except allowed:
        return None


# -- CSRs -------------------------------------------------------------------------------------------
@FUZZ
@given(text=st.text(max_size=2000))
def test_any_text_as_a_csr_is_a_csr_or_a_field_error(text: str) -> None:
    csr = controlled(lambda: load_csr(text, field="csr"), FieldError)

    assert csr is None or isinstance(csr, x509.CertificateSigningRequest)


@FUZZ
@given(data=st.binary(max_size=1500), form=st.sampled_from(("raw", "base64", "pem", "urlsafe")))
def test_any_bytes_as_a_csr_in_any_encoding_is_a_field_error(data: bytes, form: str) -> None:
    text = {
        "raw": data.decode("latin-1"),
        "base64": base64.b64encode(data).decode("ascii"),
        "pem": pem_block("CERTIFICATE REQUEST", data),
        "urlsafe": b64url(data),
    }[form]

    with pytest.raises(FieldError) as raised:
        load_csr(text, field="clientCsr")

    assert raised.value.field == "clientCsr"


@FUZZ
@given(data=st.data())
def test_a_damaged_real_csr_is_refused_or_loads_with_readable_sans(
    data: st.DataObject, csr_ders: list[bytes]
) -> None:
    der = data.draw(mutated(data.draw(st.sampled_from(csr_ders))))

    csr = controlled(lambda: load_csr(pem_csr(der)), FieldError)

    if csr is not None:
        sans = controlled(lambda: requested_sans(csr), FieldError)
        assert sans is None or isinstance(sans, list)


def test_an_oversized_csr_is_refused_without_parsing() -> None:
    with pytest.raises(FieldError):
        load_csr("A" * (MAX_CSR_CHARS + 1))


# -- DER ----------------------------------------------------------------------------------------------
@FUZZ
@given(data=st.binary(max_size=600))
def test_der_reading_of_any_bytes_is_a_value_or_a_der_error(data: bytes) -> None:
    normalised = controlled(lambda: _der.drop_null_parameters(data), _der.DerError)
    element = controlled(lambda: _der.read(data), _der.DerError)

    assert normalised is None or isinstance(normalised, _der.NormalisedCsr)
    if element is not None and element[0].constructed:
        controlled(lambda: _der.read_children(element[0]), _der.DerError)


@FUZZ
@given(data=st.data())
def test_der_reading_of_a_damaged_csr_is_a_value_or_a_der_error(
    data: st.DataObject, csr_ders: list[bytes]
) -> None:
    der = data.draw(mutated(data.draw(st.sampled_from(csr_ders))))

    normalised = controlled(lambda: _der.drop_null_parameters(der), _der.DerError)

    assert normalised is None or isinstance(normalised, _der.NormalisedCsr)


# -- certificates -----------------------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_a_damaged_certificate_is_refused_or_fully_readable(
    data: st.DataObject, cert_ders: list[bytes]
) -> None:
    der = data.draw(mutated(data.draw(st.sampled_from(cert_ders))))

    certs = controlled(lambda: parse_certificates(pem_block("CERTIFICATE", der), "certPem"), FieldError)

    for cert in certs or []:
        info = controlled(partial(cert_info, cert, "certPem"), FieldError)
        assert info is None or info.fingerprint
        controlled(partial(is_ca, cert, "certPem"), FieldError)


@FUZZ
@given(text=st.text(max_size=1500))
def test_any_text_as_a_certificate_is_a_field_error(text: str) -> None:
    with pytest.raises(FieldError):
        parse_certificates(text, "certPem")


@FUZZ
@given(data=st.data())
def test_a_proxied_certificate_header_is_pem_or_a_field_error(
    data: st.DataObject, cert_ders: list[bytes]
) -> None:
    der = data.draw(st.one_of(st.binary(max_size=400), mutated(data.draw(st.sampled_from(cert_ders)))))
    value = data.draw(
        st.sampled_from(
            (
                base64.b64encode(der).decode("ascii"),
                pem_block("CERTIFICATE", der),
                pem_block("CERTIFICATE", der).replace("\n", " ").replace("=", "%3D"),
                der.decode("latin-1"),
            )
        )
    )

    pems = controlled(lambda: proxied_certificates(value, field="header"), FieldError)

    assert pems is None or all(p.startswith("-----BEGIN CERTIFICATE-----") for p in pems)


# -- enrollment JWTs (our own signer) -----------------------------------------------------------------
@FUZZ
@given(token=st.one_of(st.text(max_size=300), jws_like()))
def test_any_enrollment_token_verifies_or_is_a_field_error(token: str, signer: JwtSigner) -> None:
    with pytest.raises(FieldError) as raised:
        signer.verify(token, now=NOW, field="token")

    assert raised.value.field == "token"


@FUZZ
@given(data=st.data())
def test_a_damaged_enrollment_token_is_a_field_error(data: st.DataObject, signer: JwtSigner) -> None:
    token = signer.sign({"em": "ott", "jti": "abc", "exp": int(NOW.timestamp()) + 600})
    damaged = data.draw(mutated(token.encode("ascii"))).decode("latin-1")

    claims = controlled(lambda: signer.verify(damaged, now=NOW), FieldError)

    assert claims is None or damaged == token or claims["jti"] == "abc"


@pytest.mark.parametrize("array", [True, False])
def test_an_enrollment_token_nested_beyond_the_recursion_limit_is_a_field_error(
    signer: JwtSigner, array: bool
) -> None:
    deep = b64url(nested(5000, array=array))

    with pytest.raises(FieldError):
        signer.verify(f"{deep}.{deep}.c2ln", now=NOW)


# -- external JWTs and JWKS documents -------------------------------------------------------------------
@FUZZ
@given(token=st.one_of(st.text(max_size=300), jws_like()))
def test_peeking_at_any_external_token_gives_its_parts_or_none(token: str) -> None:
    verifier = JwksVerifier(fetch=lambda url, timeout: b'{"keys": []}')

    peeked = verifier.peek(token)
    verified = verifier.verify(token, JwtKeySource(jwks_endpoint="https://idp.example.test/jwks"))

    assert peeked is None or isinstance(peeked, UnverifiedJwt)
    assert verified is None


@FUZZ
@given(
    alg=st.sampled_from(["ES256", "ES384", "RS256", "EdDSA", "none", "HS256", ""]),
    payload=st.one_of(claims, json_values),
    signature=st.binary(max_size=140),
)
def test_an_external_token_with_a_known_kid_and_any_signature_does_not_verify(
    alg: str, payload: Any, signature: bytes, idp: tuple[Any, str]
) -> None:
    source = JwtKeySource(cert_pem=idp[1], kid="idp-1")
    header = b64url(json.dumps({"alg": alg, "kid": "idp-1"}).encode())
    token = f"{header}.{b64url(json.dumps(payload).encode())}.{b64url(signature)}"

    assert JwksVerifier().verify(token, source) is None


@FUZZ
@given(data=st.data())
def test_a_damaged_external_token_verifies_unchanged_or_not_at_all(
    data: st.DataObject, idp: tuple[Any, str]
) -> None:
    key, cert_pem = idp
    token = jwt.encode({"sub": "alice", "n": 2**70}, key, algorithm="ES256", headers={"kid": "idp-1"})
    damaged = data.draw(mutated(token.encode("ascii"))).decode("latin-1")

    claims = JwksVerifier().verify(damaged, JwtKeySource(cert_pem=cert_pem, kid="idp-1"))

    assert claims is None or claims == {"sub": "alice", "n": 2**70}


@pytest.mark.parametrize("array", [True, False])
def test_an_external_token_nested_beyond_the_recursion_limit_is_no_token(array: bool) -> None:
    deep = b64url(nested(5000, array=array))
    header = b64url(b'{"alg": "ES256", "kid": "k"}')
    token = f"{header}.{deep}.c2ln"

    assert JwksVerifier().peek(token) is None
    assert JwksVerifier().peek(f"{deep}.{deep}.c2ln") is None


jwk_entries = st.dictionaries(
    st.sampled_from(["kid", "kty", "crv", "x", "y", "n", "e", "alg", "use", "x5c", "d"]),
    st.one_of(
        json_values,
        st.sampled_from(["EC", "RSA", "OKP", "oct", "P-256", "Ed25519", "AQAB", "AAAA"]),
        st.lists(st.text(alphabet="ABCabc012+/=", max_size=40), max_size=2),
    ),
)


@FUZZ
@given(
    document=st.one_of(
        st.binary(max_size=300),
        st.builds(lambda keys: json.dumps({"keys": keys}).encode(), st.lists(jwk_entries, max_size=3)),
        json_values.map(lambda v: json.dumps(v).encode()),
    )
)
def test_any_jwks_document_gives_its_usable_keys_or_a_value_error(document: bytes) -> None:
    keys = controlled(lambda: jwks_keys(document), ValueError)

    assert keys is None or all(isinstance(kid, str) for kid in keys)


@pytest.mark.parametrize("array", [True, False])
def test_a_jwks_document_nested_beyond_the_recursion_limit_is_a_value_error(array: bool) -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        jwks_keys(nested(5000, array=array))
