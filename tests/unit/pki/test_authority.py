"""The controller's CA: init_pki files and certificates, loading, the JWT key (CSRs: test_sign_csr)."""

from __future__ import annotations

import hashlib
import ipaddress
import stat
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.errors import FieldError
from pki import BACKDATE, CertificateAuthority, PkiPaths, fingerprint, init_pki

CsrFactory = Callable[..., tuple[str, Any]]
T = TypeVar("T", bound=x509.ExtensionType)

CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH


def _certs(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def _ext(cert: x509.Certificate, kind: type[T]) -> T:
    return cert.extensions.get_extension_for_class(kind).value


def _server_verifier(
    ca: CertificateAuthority, now: datetime, subject: verification.Subject
) -> verification.ServerVerifier:
    store = verification.Store([ca.root_cert])
    builder = verification.PolicyBuilder().store(store).time(now)
    return builder.build_server_verifier(subject)


# --- init_pki: files ---------------------------------------------------------------------------


def test_init_creates_every_file(pki_paths: PkiPaths) -> None:
    assert pki_paths.exists()
    assert {p.name for p in pki_paths.directory.iterdir()} == {
        "root-ca.pem",
        "root-ca.key",
        "intermediate-ca.pem",
        "intermediate-ca.key",
        "server.pem",
        "server.key",
        "ca-bundle.pem",
    }


def test_key_files_are_private(pki_paths: PkiPaths) -> None:
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in pki_paths.key_files()}

    assert modes == {
        "root-ca.key": 0o600,
        "intermediate-ca.key": 0o600,
        "server.key": 0o600,
    }


def test_server_pem_is_server_then_intermediate(pki_paths: PkiPaths) -> None:
    server, intermediate = _certs(pki_paths.server_cert)

    assert intermediate == _certs(pki_paths.intermediate_cert)[0]
    assert server.issuer == intermediate.subject


def test_ca_bundle_is_root_then_intermediate(pki_paths: PkiPaths) -> None:
    root, intermediate = _certs(pki_paths.ca_bundle)

    assert root == _certs(pki_paths.root_cert)[0]
    assert intermediate == _certs(pki_paths.intermediate_cert)[0]


# --- init_pki: certificates --------------------------------------------------------------------


def test_root_is_a_self_signed_p384_ca_for_ten_years(ca: CertificateAuthority, now: datetime) -> None:
    root = ca.root_cert

    root.verify_directly_issued_by(root)
    key = root.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert key.curve.name == "secp384r1"
    assert _ext(root, x509.BasicConstraints).ca is True
    assert root.not_valid_after_utc == now + timedelta(days=3650)
    assert root.not_valid_before_utc == now - BACKDATE


def test_intermediate_is_a_pathlen_zero_ca_signed_by_root(ca: CertificateAuthority, now: datetime) -> None:
    inter = ca.intermediate_cert

    inter.verify_directly_issued_by(ca.root_cert)
    constraints = _ext(inter, x509.BasicConstraints)
    assert (constraints.ca, constraints.path_length) == (True, 0)
    assert _ext(inter, x509.KeyUsage).key_cert_sign is True
    assert inter.not_valid_after_utc == now + timedelta(days=1825)


def test_server_cert_is_rsa_2048_with_sans_and_cn(ca: CertificateAuthority, now: datetime) -> None:
    server = ca.server_cert

    key = server.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    assert key.key_size == 2048
    sans = _ext(server, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.DNSName) == ["ctrl.example.com", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.5"),
        ipaddress.ip_address("127.0.0.1"),
    ]
    cn = server.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == "ctrl.example.com"  # the first SAN given to init_pki
    assert list(_ext(server, x509.ExtendedKeyUsage)) == [SERVER_AUTH, CLIENT_AUTH]
    assert _ext(server, x509.BasicConstraints).ca is False
    assert server.not_valid_after_utc == now + timedelta(days=730)


@pytest.mark.parametrize(
    "subject",
    [
        x509.DNSName("ctrl.example.com"),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.5")),
    ],
)
def test_server_cert_chains_to_root(
    ca: CertificateAuthority, now: datetime, subject: verification.Subject
) -> None:
    verifier = _server_verifier(ca, now, subject)

    chain = verifier.verify(ca.server_cert, [ca.intermediate_cert])

    assert chain == [ca.server_cert, ca.intermediate_cert, ca.root_cert]


def test_server_cert_does_not_cover_other_names(ca: CertificateAuthority, now: datetime) -> None:
    verifier = _server_verifier(ca, now, x509.DNSName("evil.example.com"))

    with pytest.raises(verification.VerificationError):
        verifier.verify(ca.server_cert, [ca.intermediate_cert])


def test_second_init_changes_nothing(fresh_pki_dir: Path, now: datetime) -> None:
    paths = init_pki(fresh_pki_dir, sans=["a.example.com"], now=now)
    before = {p: p.read_bytes() for p in paths.all_files()}

    again = init_pki(fresh_pki_dir, sans=["b.example.com"], now=now + timedelta(days=9))

    assert again == paths
    assert {p: p.read_bytes() for p in again.all_files()} == before


def test_missing_server_files_are_reissued_by_the_same_cas(fresh_pki_dir: Path, now: datetime) -> None:
    paths = init_pki(fresh_pki_dir, sans=[], now=now)
    root, inter = paths.root_cert.read_bytes(), paths.intermediate_cert.read_bytes()
    old_server = paths.server_cert.read_bytes()
    paths.server_cert.unlink()
    paths.server_key.unlink()

    init_pki(fresh_pki_dir, sans=[], now=now)

    assert (paths.root_cert.read_bytes(), paths.intermediate_cert.read_bytes()) == (
        root,
        inter,
    )
    assert paths.server_cert.read_bytes() != old_server
    loaded = CertificateAuthority.load(paths)
    loaded.server_cert.verify_directly_issued_by(loaded.intermediate_cert)


def test_server_cn_defaults_to_localhost(fresh_pki_dir: Path, now: datetime) -> None:
    paths = init_pki(fresh_pki_dir, sans=[" ", "localhost"], now=now)

    server = _certs(paths.server_cert)[0]
    assert server.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == ("localhost")
    sans = _ext(server, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]


def test_invalid_san_fails_before_writing(fresh_pki_dir: Path, now: datetime) -> None:
    with pytest.raises(FieldError) as info:
        init_pki(fresh_pki_dir, sans=["not a name"], now=now)

    assert info.value.field == "sans"
    assert not fresh_pki_dir.exists()


# --- CertificateAuthority ----------------------------------------------------------------------


def test_pem_accessors(ca: CertificateAuthority, pki_paths: PkiPaths) -> None:
    assert ca.ca_bundle_pem() == pki_paths.ca_bundle.read_text()
    assert x509.load_pem_x509_certificates(ca.chain_pem().encode()) == [
        ca.intermediate_cert,
        ca.root_cert,
    ]
    assert ca.server_chain_pem == pki_paths.server_cert.read_text()
    assert x509.load_pem_x509_certificate(ca.server_cert_pem.encode()) == ca.server_cert
    assert ca.ca_certificates() == [ca.root_cert, ca.intermediate_cert]


def test_load_rejects_a_key_that_does_not_match(ca: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="intermediate key"):
        CertificateAuthority(
            root_cert=ca.root_cert,
            intermediate_cert=ca.intermediate_cert,
            intermediate_key=ca.server_key,
            server_cert=ca.server_cert,
            server_key=ca.server_key,
        )


def test_jwt_kid_is_sha1_hex_of_server_cert(ca: CertificateAuthority) -> None:
    der = ca.server_cert.public_bytes(serialization.Encoding.DER)

    assert ca.jwt_kid() == hashlib.sha1(der).hexdigest() == fingerprint(ca.server_cert)


def test_enrollment_jwt_verifies_with_the_tls_certificate(
    ca: CertificateAuthority,
) -> None:
    token = jwt.encode(
        {"em": "ott", "sub": "id1", "jti": "t"},
        ca.signing_key_for_jwt(),
        algorithm=ca.jwt_algorithm(),
        headers={"kid": ca.jwt_kid()},
    )

    claims = jwt.decode(token, ca.server_cert.public_key(), algorithms=["RS256"])  # type: ignore[arg-type]

    assert claims["sub"] == "id1"
    assert jwt.get_unverified_header(token)["kid"] == ca.jwt_kid()
    assert ca.signing_key_for_jwt() is ca.server_key
