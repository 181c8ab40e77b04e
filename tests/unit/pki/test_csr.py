"""CSRs as real clients send them: encodings, the mbedTLS NULL parameter, strict checks, fuzzing."""

from __future__ import annotations

import base64
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import FieldError
from pki import CertificateAuthority, load_csr
from pki.csr import CSR_PARSE_REASON, CSR_SIGNATURE_REASON, MAX_CSR_CHARS, csr_der
from tests.conftest import examples
from tests.unit.pki.conftest import CsrFactory, MbedtlsCsrFactory, der_tlv, pem_csr

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
ED25519_OID = bytes.fromhex("06032b6570")


def _der(pem: str) -> bytes:
    return base64.b64decode("".join(line for line in pem.splitlines() if not line.startswith("-----")))


def _sign(ca: CertificateAuthority, csr: str, **kw: Any) -> x509.Certificate:
    issued = ca.sign_csr(csr, profile="client", common_name="c1", validity=timedelta(days=1), now=NOW, **kw)
    return x509.load_pem_x509_certificate(issued.pem.encode())


def _field_error(ca: CertificateAuthority, csr: str, field: str = "csr") -> FieldError:
    with pytest.raises(FieldError) as info:
        _sign(ca, csr, field=field)
    assert info.value.field == field
    return info.value


def _flip_last_byte(der: bytes) -> bytes:
    return der[:-1] + bytes((der[-1] ^ 0x01,))  # the end of the signature


# --- accepted encodings ------------------------------------------------------------------------


def _encodings(pem: str) -> dict[str, str]:
    der = _der(pem)
    b64 = base64.b64encode(der).decode()
    wrapped = "\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))
    return {
        "pem": pem,
        "pem-crlf": pem.replace("\n", "\r\n"),
        "pem-new-label": pem.replace("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST"),
        "pem-json-escaped": pem.replace("\n", "\\n"),
        "pem-in-text": f"here it is:\n{pem}\nthanks",
        "pem-with-bom": "\ufeff" + pem,
        "base64": b64,
        "base64-wrapped": wrapped + "\n",
        "base64-mime": base64.encodebytes(der).decode().replace("\n", "\r\n"),
        "base64-urlsafe-unpadded": base64.urlsafe_b64encode(der).decode().rstrip("="),
        "base64-of-pem": base64.b64encode(pem.encode()).decode(),
        "est-upload": f"Content-Type: application/pkcs10\nContent-Transfer-Encoding: base64\n\n{wrapped}\n",
        "raw-der": der.decode("latin-1"),
    }


@pytest.mark.parametrize(
    "form",
    sorted(_encodings(pem_csr(b"\x30\x00"))),
)
def test_every_encoding_of_a_csr_is_accepted(
    ca: CertificateAuthority, make_csr: CsrFactory, make_mbedtls_csr: MbedtlsCsrFactory, form: str
) -> None:
    for pem in (make_csr("c")[0], make_mbedtls_csr("c")):
        text = _encodings(pem)[form]

        assert csr_der(text) == _der(pem)
        assert _sign(ca, text).subject.rfc4514_string() == "CN=c1,O=Trellis"


def test_a_pem_of_another_kind_is_not_a_csr(ca: CertificateAuthority) -> None:
    assert _field_error(ca, ca.server_cert_pem).reason == CSR_PARSE_REASON


# --- the OpenZiti C SDK 0.29.3 (mbedTLS) CSR ---------------------------------------------------


def test_cryptography_alone_refuses_the_mbedtls_csr(make_mbedtls_csr: MbedtlsCsrFactory) -> None:
    with pytest.raises(ValueError, match="signature_alg"):
        x509.load_pem_x509_csr(make_mbedtls_csr().encode())


def test_openssl_verifies_the_mbedtls_csr_fixture(
    make_mbedtls_csr: MbedtlsCsrFactory, tmp_path: Path
) -> None:
    path = tmp_path / "sdk.csr"
    path.write_text(make_mbedtls_csr("Xk2pZ9qT1", "https://ctrl.example.com:1280"))

    verify = subprocess.run(
        [OPENSSL, "req", "-in", str(path), "-noout", "-verify"], capture_output=True, text=True
    )
    text = subprocess.run(
        [OPENSSL, "req", "-in", str(path), "-noout", "-text"], capture_output=True, text=True, check=True
    ).stdout

    assert verify.returncode == 0, verify.stderr
    assert "verify OK" in verify.stderr + verify.stdout
    assert "C = US, ST = NY, O = OpenZiti, DC = https://ctrl.example.com:1280, CN = Xk2pZ9qT1" in text
    assert "Signature Algorithm: ecdsa-with-SHA256" in text
    assert "Netscape Cert Type" in text
    assert "Key Usage" in text
    assert "prime256v1" in text


def test_the_mbedtls_csr_is_signed(
    ca: CertificateAuthority, make_mbedtls_csr: MbedtlsCsrFactory, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    cert = _sign(ca, make_mbedtls_csr("Xk2pZ9qT1"))

    assert cert.public_key() == ec_key.public_key()
    assert cert.subject.rfc4514_string() == "CN=c1,O=Trellis"
    cert.verify_directly_issued_by(ca.intermediate_cert)


def test_the_lenient_path_still_checks_the_signature(
    ca: CertificateAuthority, make_mbedtls_csr: MbedtlsCsrFactory
) -> None:
    tampered = pem_csr(_flip_last_byte(_der(make_mbedtls_csr())))

    assert _field_error(ca, tampered).reason == CSR_SIGNATURE_REASON


def test_a_changed_subject_breaks_the_mbedtls_signature(
    ca: CertificateAuthority, make_mbedtls_csr: MbedtlsCsrFactory
) -> None:
    der = _der(make_mbedtls_csr("aaaaaaaa"))
    forged = der.replace(b"aaaaaaaa", b"bbbbbbbb")

    assert _field_error(ca, pem_csr(forged)).reason == CSR_SIGNATURE_REASON


def _ed25519_csr_with_null_key_parameter(key: ed25519.Ed25519PrivateKey, *, tamper: bool = False) -> str:
    """An Ed25519 CSR whose SubjectPublicKeyInfo algorithm carries a NULL (inside the signed info)."""
    spki_null = der_tlv(
        0x30,
        der_tlv(0x30, ED25519_OID + b"\x05\x00")
        + der_tlv(0x03, b"\x00" + key.public_key().public_bytes_raw()),
    )
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ed")]).public_bytes()
    info = der_tlv(0x30, b"\x02\x01\x00" + name + spki_null + b"\xa0\x00")
    signature = key.sign(info)
    if tamper:
        signature = signature[:-1] + bytes((signature[-1] ^ 1,))
    return pem_csr(der_tlv(0x30, info + der_tlv(0x30, ED25519_OID) + der_tlv(0x03, b"\x00" + signature)))


def test_a_null_parameter_inside_the_signed_info_is_tolerated(
    ca: CertificateAuthority, ed25519_key: ed25519.Ed25519PrivateKey
) -> None:
    pem = _ed25519_csr_with_null_key_parameter(ed25519_key)
    with pytest.raises(ValueError, match="SubjectPublicKeyInfo::algorithm"):
        x509.load_pem_x509_csr(pem.encode())

    assert _sign(ca, pem).public_key() == ed25519_key.public_key()


def test_a_rewritten_signed_info_still_needs_a_valid_signature(
    ca: CertificateAuthority, ed25519_key: ed25519.Ed25519PrivateKey
) -> None:
    pem = _ed25519_csr_with_null_key_parameter(ed25519_key, tamper=True)

    assert _field_error(ca, pem).reason == CSR_SIGNATURE_REASON


# --- keys --------------------------------------------------------------------------------------


def test_rsa_4096_csr_as_mrok_sends(
    ca: CertificateAuthority, make_csr: CsrFactory, rsa4096_key: rsa.RSAPrivateKey
) -> None:
    csr, _ = make_csr("mrok", key=rsa4096_key)

    key = _sign(ca, csr).public_key()

    assert isinstance(key, rsa.RSAPublicKey)
    assert key.key_size == 4096


def test_ed25519_csr(
    ca: CertificateAuthority, make_csr: CsrFactory, ed25519_key: ed25519.Ed25519PrivateKey
) -> None:
    csr, _ = make_csr("ed", key=ed25519_key)

    assert _sign(ca, csr).public_key() == ed25519_key.public_key()


@pytest.mark.parametrize(
    ("make_key", "reason"),
    [
        (
            lambda: rsa.generate_private_key(public_exponent=65537, key_size=1024),
            "at least 2048 bits, got 1024",
        ),
        (lambda: ec.generate_private_key(ec.SECP256K1()), "unsupported elliptic curve secp256k1"),
        (ed448.Ed448PrivateKey.generate, "unsupported public key"),
        (lambda: dsa.generate_private_key(key_size=2048), "unsupported public key"),
    ],
)
def test_unsupported_keys_are_field_errors(
    ca: CertificateAuthority, make_csr: CsrFactory, make_key: Any, reason: str
) -> None:
    key = make_key()
    algorithm = None if isinstance(key, ed448.Ed448PrivateKey) else hashes.SHA256()
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "k")]))
        .sign(key, algorithm)
    )

    error = _field_error(ca, request.public_bytes(serialization.Encoding.PEM).decode(), field="certCsr")

    assert reason in (error.reason or "")


# --- rejections --------------------------------------------------------------------------------


def test_bad_signature(ca: CertificateAuthority, make_csr: CsrFactory) -> None:
    tampered = pem_csr(_flip_last_byte(_der(make_csr()[0])))

    assert _field_error(ca, tampered, field="serverCertCsr").reason == CSR_SIGNATURE_REASON


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "hello",
        "   \n",
        "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
        "-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n",
        "-----BEGIN CERTIFICATE REQUEST-----\nMIIB",
        "MIIBWjCB/gIBADBsMQswCQYD",
        "0\x82\x01",
        "\u2603 snowman",
        "A" * (MAX_CSR_CHARS + 1),
    ],
)
def test_garbage_is_a_parse_error(ca: CertificateAuthority, garbage: str) -> None:
    assert _field_error(ca, garbage).reason == CSR_PARSE_REASON


def test_not_text_is_a_parse_error(ca: CertificateAuthority) -> None:
    with pytest.raises(FieldError):
        load_csr(b"-----BEGIN CERTIFICATE REQUEST-----")  # type: ignore[arg-type]


def test_a_null_parameter_on_an_rsa_signature_is_left_to_cryptography(
    make_csr: CsrFactory, rsa_key: rsa.RSAPrivateKey
) -> None:
    """RSA signature algorithms carry a NULL by definition: nothing to rewrite, nothing broken."""
    pem, _ = make_csr("r", key=rsa_key)

    assert load_csr(pem).public_key() == rsa_key.public_key()


# --- fuzzing: only FieldErrors ------------------------------------------------------------------


def _outcome(ca: CertificateAuthority, text: str) -> str:
    try:
        _sign(ca, text)
    except FieldError as exc:
        return "error" if exc.field == "csr" else f"error on {exc.field}"
    return "ok"


def test_every_truncation_is_a_field_error(
    ca: CertificateAuthority, make_csr: CsrFactory, make_mbedtls_csr: MbedtlsCsrFactory
) -> None:
    for pem in (make_csr()[0], make_mbedtls_csr()):
        der = _der(pem)
        for end in range(len(der)):
            assert _outcome(ca, base64.b64encode(der[:end]).decode()) == "error"
            assert _outcome(ca, der[:end].decode("latin-1")) == "error"


@settings(max_examples=examples(300), deadline=None)
@given(position=st.integers(min_value=0), mask=st.integers(min_value=1, max_value=255), mbedtls=st.booleans())
def test_corrupted_csrs_never_raise_anything_but_field_errors(
    ca: CertificateAuthority,
    make_csr: CsrFactory,
    make_mbedtls_csr: MbedtlsCsrFactory,
    position: int,
    mask: int,
    mbedtls: bool,
) -> None:
    der = bytearray(_der(make_mbedtls_csr() if mbedtls else make_csr()[0]))
    der[position % len(der)] ^= mask

    _outcome(ca, pem_csr(bytes(der)))


@settings(max_examples=examples(300), deadline=None)
@given(data=st.binary(max_size=600))
def test_random_bytes_are_field_errors(ca: CertificateAuthority, data: bytes) -> None:
    for text in (pem_csr(data), base64.b64encode(data).decode(), data.decode("latin-1")):
        assert _outcome(ca, text) == "error"


@settings(max_examples=examples(200), deadline=None)
@given(text=st.text(max_size=300))
def test_random_text_is_a_field_error(ca: CertificateAuthority, text: str) -> None:
    assert _outcome(ca, text) == "error"


@settings(max_examples=examples(200), deadline=None)
@given(data=st.binary(min_size=2, max_size=400))
def test_random_sequences_are_field_errors(ca: CertificateAuthority, data: bytes) -> None:
    """Random content in a well-formed outer SEQUENCE reaches the DER rewriter."""
    assert _outcome(ca, pem_csr(der_tlv(0x30, data))) == "error"
