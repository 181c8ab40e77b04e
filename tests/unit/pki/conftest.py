"""Fixtures for the pki tests: one generated PKI per session (key generation is slow) and
builders for CSRs and third-party certificates. Builders set up state and never assert."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from pki import CertificateAuthority, PkiPaths, init_pki

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CONTROLLER_SANS = ["ctrl.example.com", "10.0.0.5"]

CsrFactory = Callable[..., tuple[str, Any]]
CertFactory = Callable[..., tuple[x509.Certificate, ec.EllipticCurvePrivateKey]]


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
        csr = builder.sign(signer, hashes.SHA256())
        return csr.public_bytes(serialization.Encoding.PEM).decode("ascii"), signer

    return build


@pytest.fixture(scope="session")
def make_cert() -> CertFactory:
    """Build an EC P-256 certificate outside our PKI.

    ``make_cert(cn, issuer=None, is_ca=True, basic_constraints=True, not_after=None)`` ->
    (cert, key); self-signed when ``issuer`` (a (cert, key) pair) is None.
    """

    def build(
        cn: str,
        *,
        issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None = None,
        is_ca: bool = True,
        basic_constraints: bool = True,
        not_after: datetime | None = None,
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
            builder = builder.add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        return builder.sign(issuer_key, hashes.SHA256()), key

    return build


@pytest.fixture
def fresh_pki_dir(tmp_path: Path) -> Path:
    """An empty ``<home>/pki`` path (not created yet) for tests that need their own PKI."""
    return tmp_path / "home" / "pki"
