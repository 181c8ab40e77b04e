"""Certificate helpers: parsing, fingerprints, CA checks, CA verification, PKCS#7 cacerts."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs7

from engine.errors import CertificateIsNotCaError, FieldError
from pki import (
    CertificateAuthority,
    certificate_pem,
    common_name,
    fingerprint,
    parse_ca_certificate,
    parse_certificate,
    parse_certificates,
    pkcs7_certs_only_b64,
    verify_ca_verification_cert,
)

CertPair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
CertFactory = Callable[..., CertPair]
TOKEN = "4b1c7f0e-2f59-4f0f-9a53-0c1d6f3c1a77"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"


@pytest.fixture(scope="module")
def third_party_ca(make_cert: CertFactory) -> CertPair:
    """A CA outside the controller's PKI, as registered with ``POST /cas``."""
    return make_cert("Acme Root CA")


# --- parse_certificate -------------------------------------------------------------------------


def test_parse_certificate_returns_the_first_certificate(
    ca: CertificateAuthority,
) -> None:
    cert = parse_certificate(ca.chain_pem())

    assert cert == ca.intermediate_cert


def test_parse_certificates_returns_all_in_order(ca: CertificateAuthority) -> None:
    assert parse_certificates(ca.ca_bundle_pem()) == [
        ca.root_cert,
        ca.intermediate_cert,
    ]


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    ],
)
def test_garbage_is_a_field_error(garbage: str) -> None:
    with pytest.raises(FieldError) as info:
        parse_certificate(garbage)

    assert (info.value.field, info.value.reason) == (
        "certPem",
        "could not parse PEM certificate",
    )


def test_parse_certificate_reports_the_given_field() -> None:
    with pytest.raises(FieldError) as info:
        parse_certificate("nope", field="certificate")

    assert info.value.field == "certificate"


def test_certificate_pem_round_trips(ca: CertificateAuthority) -> None:
    pem = certificate_pem(ca.root_cert)

    assert pem.startswith("-----BEGIN CERTIFICATE-----\n")
    assert parse_certificate(pem) == ca.root_cert


def test_common_name(ca: CertificateAuthority, make_cert: CertFactory) -> None:
    assert common_name(ca.root_cert) == "Trellis Root CA"
    assert common_name(make_cert("x")[0]) == "x"


# --- fingerprint -------------------------------------------------------------------------------


def test_fingerprint_is_lowercase_hex_sha1_of_der(ca: CertificateAuthority) -> None:
    der = ca.server_cert.public_bytes(serialization.Encoding.DER)

    value = fingerprint(ca.server_cert)

    assert re.fullmatch(r"[0-9a-f]{40}", value)
    assert value == hashlib.sha1(der).hexdigest()


def test_fingerprint_is_stable_across_pem_round_trip(ca: CertificateAuthority) -> None:
    reparsed = parse_certificate(certificate_pem(ca.root_cert))

    assert fingerprint(reparsed) == fingerprint(ca.root_cert)
    assert fingerprint(ca.root_cert) != fingerprint(ca.intermediate_cert)


# --- parse_ca_certificate ----------------------------------------------------------------------


def test_ca_certificates_are_accepted(ca: CertificateAuthority, third_party_ca: CertPair) -> None:
    assert parse_ca_certificate(certificate_pem(third_party_ca[0])) == third_party_ca[0]
    assert parse_ca_certificate(certificate_pem(ca.intermediate_cert)) == (ca.intermediate_cert)


def test_leaf_certificate_is_not_a_ca(ca: CertificateAuthority) -> None:
    with pytest.raises(CertificateIsNotCaError):
        parse_ca_certificate(ca.server_cert_pem)


def test_certificate_without_basic_constraints_is_not_a_ca(
    make_cert: CertFactory,
) -> None:
    cert, _ = make_cert("bare", basic_constraints=False)

    with pytest.raises(CertificateIsNotCaError):
        parse_ca_certificate(certificate_pem(cert))


def test_parse_ca_certificate_rejects_garbage_as_field_error() -> None:
    with pytest.raises(FieldError):
        parse_ca_certificate("garbage")


# --- verify_ca_verification_cert ---------------------------------------------------------------


def test_verification_cert_signed_by_ca_with_token_cn_passes(
    third_party_ca: CertPair, make_cert: CertFactory, now: datetime
) -> None:
    cert, _ = make_cert(TOKEN, issuer=third_party_ca, is_ca=False)

    verify_ca_verification_cert(third_party_ca[0], certificate_pem(cert), TOKEN, now=now)


def test_verification_cert_with_other_cn_fails(third_party_ca: CertPair, make_cert: CertFactory) -> None:
    cert, _ = make_cert("someone-else", issuer=third_party_ca, is_ca=False)

    with pytest.raises(FieldError) as info:
        verify_ca_verification_cert(third_party_ca[0], certificate_pem(cert), TOKEN)

    assert info.value.field == "certificate"
    assert "common name" in (info.value.reason or "")


def test_verification_cert_from_another_ca_fails(third_party_ca: CertPair, make_cert: CertFactory) -> None:
    impostor = make_cert("Acme Root CA")  # same name, different key
    cert, _ = make_cert(TOKEN, issuer=impostor, is_ca=False)

    with pytest.raises(FieldError) as info:
        verify_ca_verification_cert(third_party_ca[0], certificate_pem(cert), TOKEN)

    assert info.value.reason == "certificate is not signed by the CA"


def test_self_signed_verification_cert_fails(third_party_ca: CertPair, make_cert: CertFactory) -> None:
    cert, _ = make_cert(TOKEN)

    with pytest.raises(FieldError):
        verify_ca_verification_cert(third_party_ca[0], certificate_pem(cert), TOKEN)


def test_expired_verification_cert_fails_when_now_is_given(
    third_party_ca: CertPair, make_cert: CertFactory, now: datetime
) -> None:
    cert, _ = make_cert(TOKEN, issuer=third_party_ca, is_ca=False, not_after=now - timedelta(hours=1))
    pem = certificate_pem(cert)

    with pytest.raises(FieldError) as info:
        verify_ca_verification_cert(third_party_ca[0], pem, TOKEN, now=now)

    assert "expired" in (info.value.reason or "")


def test_unparsable_verification_cert_fails(third_party_ca: CertPair) -> None:
    with pytest.raises(FieldError) as info:
        verify_ca_verification_cert(third_party_ca[0], "junk", TOKEN)

    assert info.value.reason == "could not parse PEM certificate"


# --- pkcs7_certs_only_b64 ----------------------------------------------------------------------


def test_pkcs7_round_trips(ca: CertificateAuthority) -> None:
    body = pkcs7_certs_only_b64(ca.ca_certificates())

    certs = pkcs7.load_der_pkcs7_certificates(base64.b64decode(body))

    assert certs == [ca.root_cert, ca.intermediate_cert]


def test_pkcs7_body_is_wrapped_at_64_without_trailing_newline(
    ca: CertificateAuthority,
) -> None:
    body = pkcs7_certs_only_b64(ca.ca_certificates())

    lines = body.split("\n")
    assert len(lines) > 1
    assert all(len(line) == 64 for line in lines[:-1])
    assert 0 < len(lines[-1]) <= 64
    assert not body.endswith("\n")
    assert re.fullmatch(r"[A-Za-z0-9+/=\n]+", body)


def test_pkcs7_requires_certificates() -> None:
    with pytest.raises(ValueError, match="at least one certificate"):
        pkcs7_certs_only_b64([])


def test_pkcs7_body_is_read_by_cryptography_and_by_the_openssl_cli(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    """Two independent readers of the cacerts body: what the SDKs get (base64 of DER PKCS#7)."""
    body = pkcs7_certs_only_b64(ca.ca_certificates())
    lines = body.split("\n")
    assert all(len(line) == 64 for line in lines[:-1])
    assert not body.endswith("\n")
    der = base64.b64decode(body)
    (tmp_path / "cacerts.p7b").write_bytes(der)

    parsed = pkcs7.load_der_pkcs7_certificates(der)
    printed = subprocess.run(
        [OPENSSL, "pkcs7", "-inform", "DER", "-in", str(tmp_path / "cacerts.p7b"), "-print_certs"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert parsed == [ca.root_cert, ca.intermediate_cert]
    assert x509.load_pem_x509_certificates(printed.encode()) == [ca.root_cert, ca.intermediate_cert]
    assert "subject=O = Trellis, CN = Trellis Root CA" in printed


def test_pkcs7_body_decodes_with_the_openssl_base64_filter(ca: CertificateAuthority, tmp_path: Path) -> None:
    """The C SDK 1.18 decodes with OpenSSL's base64 BIO, which needs the 64-character lines."""
    body = pkcs7_certs_only_b64(ca.ca_certificates())
    (tmp_path / "cacerts.b64").write_text(body + "\n")

    decoded = subprocess.run(
        [OPENSSL, "base64", "-d", "-in", str(tmp_path / "cacerts.b64")], capture_output=True, check=True
    ).stdout

    assert decoded == base64.b64decode(body)
