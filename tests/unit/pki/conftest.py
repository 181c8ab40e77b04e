"""Fixtures for the pki tests: one generated PKI per session (key generation is slow) and
builders for CSRs and third-party certificates. Builders set up state and never assert."""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from pki import CertificateAuthority, PkiPaths, init_pki

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CONTROLLER_SANS = ["ctrl.example.com", "10.0.0.5"]

CsrFactory = Callable[..., tuple[str, Any]]
CertFactory = Callable[..., tuple[x509.Certificate, ec.EllipticCurvePrivateKey]]
MbedtlsCsrFactory = Callable[..., str]

ECDSA_WITH_SHA256 = bytes.fromhex("2a8648ce3d040302")  # OID content octets, 1.2.840.10045.4.3.2
NETSCAPE_CERT_TYPE = x509.ObjectIdentifier("2.16.840.1.113730.1.1")
SSL_CLIENT = b"\x03\x02\x07\x80"  # BIT STRING, bit 0 (SSL Client) set


def der_tlv(tag: int, value: bytes) -> bytes:
    """One DER element (written here, independently of pki._der, to build odd encodings)."""
    n = len(value)
    if n < 0x80:
        return bytes((tag, n)) + value
    octets = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(octets))) + octets + value


def pem_csr(der: bytes) -> str:
    body = base64.encodebytes(der).decode("ascii")
    return f"-----BEGIN CERTIFICATE REQUEST-----\n{body}-----END CERTIFICATE REQUEST-----\n"


@pytest.fixture(scope="session")
def now() -> datetime:
    """The fixed clock every pki test uses."""
    return NOW


@pytest.fixture(scope="session")
def pki_paths(tmp_path_factory: pytest.TempPathFactory) -> PkiPaths:
    """A PKI generated once per session under ``<home>/pki``."""
    home = tmp_path_factory.mktemp("home")
    return init_pki(home / "pki", sans=CONTROLLER_SANS, now=NOW)


@pytest.fixture(scope="session")
def ca(pki_paths: PkiPaths) -> CertificateAuthority:
    """The session PKI, loaded."""
    return CertificateAuthority.load(pki_paths)


@pytest.fixture(scope="session")
def ec_key() -> ec.EllipticCurvePrivateKey:
    """A P-256 key for CSRs (as the OpenZiti C SDK makes)."""
    return ec.generate_private_key(ec.SECP256R1())


@pytest.fixture(scope="session")
def rsa_key() -> rsa.RSAPrivateKey:
    """An RSA 2048 key for CSRs."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="session")
def make_csr(ec_key: ec.EllipticCurvePrivateKey) -> CsrFactory:
    """Build a PEM CSR: ``make_csr(cn="x", key=None, dns=[], ips=[])`` -> (pem, key)."""

    def build(
        cn: str = "client-1",
        *,
        key: Any = None,
        dns: list[str] | None = None,
        ips: list[str] | None = None,
    ) -> tuple[str, Any]:
        signer = key if key is not None else ec_key
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )
        builder = x509.CertificateSigningRequestBuilder().subject_name(subject)
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns or []]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        algorithm = None if isinstance(signer, ed25519.Ed25519PrivateKey) else hashes.SHA256()
        csr = builder.sign(signer, algorithm)
        return csr.public_bytes(serialization.Encoding.PEM).decode("ascii"), signer

    return build


@pytest.fixture(scope="session")
def ed25519_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="session")
def rsa4096_key() -> rsa.RSAPrivateKey:
    """An RSA 4096 key, as the ``mrok`` client makes for its CSRs."""
    return rsa.generate_private_key(public_exponent=65537, key_size=4096)


@pytest.fixture(scope="session")
def make_mbedtls_csr(ec_key: ec.EllipticCurvePrivateKey) -> MbedtlsCsrFactory:
    """A PEM CSR as the OpenZiti C SDK 0.29.3 (mbedTLS) writes it: ``make_mbedtls_csr(sub, iss)``.

    Subject ``C=US, ST=NY, O=OpenZiti, DC=<iss>, CN=<sub>``, a P-256 key, keyUsage and Netscape
    cert type "SSL Client" requested, and the signatureAlgorithm ``ecdsa-with-SHA256`` encoded
    with an explicit NULL parameter. The signature covers only the CertificationRequestInfo, so
    re-encoding the algorithm keeps it valid.
    """

    def build(sub: str = "Xk2pZ9qT1", iss: str = "https://127.0.0.1:1280", *, key: Any = None) -> str:
        signer = key if key is not None else ec_key
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                x509.NameAttribute(NameOID.STATE_OR_PROVINCE_NAME, "NY"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "OpenZiti"),
                x509.NameAttribute(NameOID.DOMAIN_COMPONENT, iss),
                x509.NameAttribute(NameOID.COMMON_NAME, sub),
            ]
        )
        usage = x509.KeyUsage(True, False, True, False, False, False, False, False, False)
        csr = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(subject)
            .add_extension(usage, critical=False)
            .add_extension(x509.UnrecognizedExtension(NETSCAPE_CERT_TYPE, SSL_CLIENT), critical=False)
            .sign(signer, hashes.SHA256())
        )
        algorithm = der_tlv(0x30, der_tlv(0x06, ECDSA_WITH_SHA256) + b"\x05\x00")
        signature = der_tlv(0x03, b"\x00" + csr.signature)
        return pem_csr(der_tlv(0x30, csr.tbs_certrequest_bytes + algorithm + signature))

    return build


@pytest.fixture(scope="session")
def make_cert() -> CertFactory:
    """Build an EC P-256 certificate outside our PKI.

    ``make_cert(cn, issuer=None, is_ca=True, basic_constraints=True, not_after=None,
    path_length=None, key_cert_sign=None)`` -> (cert, key); self-signed when ``issuer`` (a
    (cert, key) pair) is None; a keyUsage extension only when ``key_cert_sign`` is not None.
    """

    def build(
        cn: str,
        *,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
        is_ca: bool = True,
        basic_constraints: bool = True,
        not_after: datetime | None = None,
        path_length: int | None = None,
        key_cert_sign: bool | None = None,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        issuer_name, issuer_key = (
            (subject, key)
            if issuer is None
            else (
                issuer[0].subject,
                issuer[1],
            )
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(NOW - timedelta(days=1))
            .not_valid_after(not_after or NOW + timedelta(days=365))
        )
        if basic_constraints:
            constraints = x509.BasicConstraints(ca=is_ca, path_length=path_length if is_ca else None)
            builder = builder.add_extension(constraints, critical=True)
        if key_cert_sign is not None:
            usage = x509.KeyUsage(True, False, False, False, False, key_cert_sign, False, False, False)
            builder = builder.add_extension(usage, critical=True)
        return builder.sign(issuer_key, hashes.SHA256()), key

    return build


@pytest.fixture
def fresh_pki_dir(tmp_path: Path) -> Path:
    """An empty ``<home>/pki`` path (not created yet) for tests that need their own PKI."""
    return tmp_path / "home" / "pki"
