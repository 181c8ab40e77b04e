"""CertificateAuthority.sign_csr: profiles, subject, SANs, validity, the issued chain, caller bugs."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine import ports
from engine.errors import FieldError
from engine.ports import CertProfile
from pki import BACKDATE, CertificateAuthority, fingerprint
from tests.unit.pki.conftest import CsrFactory

T = TypeVar("T", bound=x509.ExtensionType)

CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
YEAR = timedelta(days=365)


def _ext(cert: x509.Certificate, kind: type[T]) -> T:
    return cert.extensions.get_extension_for_class(kind).value


def _sign(
    ca: ports.CertificateAuthority, csr: str, profile: CertProfile = "client", **kw: Any
) -> x509.Certificate:
    """Sign through the port's interface and return the leaf."""
    kw.setdefault("common_name", "identity-1")
    kw.setdefault("validity", YEAR)
    kw.setdefault("now", datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    issued = ca.sign_csr(csr, profile=profile, **kw)
    return x509.load_pem_x509_certificate(issued.pem.encode())


def _has_san(cert: x509.Certificate) -> bool:
    try:
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return False
    return True


# --- profiles ----------------------------------------------------------------------------------


def test_client_profile(ca: CertificateAuthority, make_csr: CsrFactory, now: datetime) -> None:
    csr, key = make_csr("whatever", dns=["ignored.example.com"])

    cert = _sign(ca, csr, "client", common_name="identity-1", now=now)

    cert.verify_directly_issued_by(ca.intermediate_cert)
    assert cert.issuer == ca.intermediate_cert.subject
    assert cert.public_key() == key.public_key()
    assert list(_ext(cert, x509.ExtendedKeyUsage)) == [CLIENT_AUTH]
    assert not _has_san(cert)
    constraints = _ext(cert, x509.BasicConstraints)
    assert (constraints.ca, constraints.path_length) == (False, None)
    usage = _ext(cert, x509.KeyUsage)
    assert (usage.digital_signature, usage.key_encipherment, usage.key_cert_sign) == (True, False, False)
    assert cert.not_valid_before_utc == now - BACKDATE
    assert cert.not_valid_after_utc == now + YEAR


def test_router_profile_is_client_and_server_auth_without_sans(
    ca: CertificateAuthority, make_csr: CsrFactory
) -> None:
    csr, _ = make_csr("router", dns=["router.example.com"], ips=["10.1.1.1"])

    cert = _sign(ca, csr, "router", common_name="router-1")

    assert list(_ext(cert, x509.ExtendedKeyUsage)) == [CLIENT_AUTH, SERVER_AUTH]
    assert not _has_san(cert)
    assert cert.subject.rfc4514_string() == "CN=router-1,O=Trellis"


def test_server_profile_takes_the_sans_the_csr_requests(
    ca: CertificateAuthority, make_csr: CsrFactory, rsa_key: rsa.RSAPrivateKey, now: datetime
) -> None:
    csr, _ = make_csr(
        "r", key=rsa_key, dns=["router.example.com", "edge.example.com"], ips=["10.1.1.1", "::1"]
    )

    cert = _sign(ca, csr, "server", common_name="router-1", now=now)

    assert list(_ext(cert, x509.ExtendedKeyUsage)) == [SERVER_AUTH, CLIENT_AUTH]
    sans = _ext(cert, x509.SubjectAlternativeName)
    assert sans.get_values_for_type(x509.DNSName) == ["router.example.com", "edge.example.com"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.1.1.1"),
        ipaddress.ip_address("::1"),
    ]
    assert _ext(cert, x509.KeyUsage).key_encipherment is True  # an RSA key
    store = verification.Store([ca.root_cert])
    verifier = (
        verification.PolicyBuilder()
        .store(store)
        .time(now)
        .build_server_verifier(x509.DNSName("edge.example.com"))
    )
    assert verifier.verify(cert, [ca.intermediate_cert]) == [cert, ca.intermediate_cert, ca.root_cert]


def test_server_profile_given_sans_replace_the_requested_ones(
    ca: CertificateAuthority, make_csr: CsrFactory
) -> None:
    csr, _ = make_csr("r", dns=["ignored.example.com"])

    cert = _sign(ca, csr, "server", sans=["er1.example.com", "192.0.2.7", "er1.example.com", " "])

    sans = _ext(cert, x509.SubjectAlternativeName)
    assert list(sans) == [x509.DNSName("er1.example.com"), x509.IPAddress(ipaddress.ip_address("192.0.2.7"))]


def test_server_profile_keeps_only_dns_and_ip_sans(
    ca: CertificateAuthority, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    names = [
        x509.UniformResourceIdentifier("spiffe://example/router"),
        x509.RFC822Name("a@example.com"),
        x509.DNSName("router.example.com"),
    ]
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "r")]))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ec_key, hashes.SHA256())
    )

    cert = _sign(ca, request.public_bytes(serialization.Encoding.PEM).decode(), "server")

    assert list(_ext(cert, x509.SubjectAlternativeName)) == [x509.DNSName("router.example.com")]


def test_server_profile_without_any_san_has_no_san_extension(
    ca: CertificateAuthority, make_csr: CsrFactory
) -> None:
    csr, _ = make_csr("r")

    assert not _has_san(_sign(ca, csr, "server"))


def test_invalid_given_san_is_a_field_error_on_the_field(
    ca: CertificateAuthority, make_csr: CsrFactory
) -> None:
    csr, _ = make_csr("r")

    with pytest.raises(FieldError) as info:
        _sign(ca, csr, "server", sans=["not a name"], field="serverCertCsr")

    assert info.value.field == "serverCertCsr"


def test_subject_is_ours_whatever_the_csr_asks(ca: CertificateAuthority, make_mbedtls_csr: Any) -> None:
    cert = _sign(ca, make_mbedtls_csr("sdk-sub"), common_name="identity-9")

    assert cert.subject.rfc4514_string() == "CN=identity-9,O=Trellis"


# --- the answer --------------------------------------------------------------------------------


def test_issued_certificate_info_and_chain(
    ca: CertificateAuthority, make_csr: CsrFactory, now: datetime
) -> None:
    csr, _ = make_csr()

    issued = ca.sign_csr(csr, profile="client", common_name="identity-1", validity=YEAR, now=now)

    leaf = x509.load_pem_x509_certificate(issued.pem.encode())
    assert issued.info == ports.CertInfo(
        pem=issued.pem,
        fingerprint=fingerprint(leaf),
        common_name="identity-1",
        not_before=now - BACKDATE,
        not_after=now + YEAR,
        is_ca=False,
        subject="CN=identity-1,O=Trellis",
        public_key_id=issued.info.public_key_id,
    )
    assert len(issued.info.public_key_id) == 64
    assert issued.fingerprint == issued.info.fingerprint
    assert issued.info.not_after.tzinfo is not None
    assert x509.load_pem_x509_certificates(issued.chain_pem.encode()) == [leaf, ca.intermediate_cert]
    assert issued.chain_pem.startswith(issued.pem)


def test_validity_is_capped_at_the_intermediate_expiry(
    ca: CertificateAuthority, make_csr: CsrFactory
) -> None:
    csr, _ = make_csr()

    cert = _sign(ca, csr, validity=timedelta(days=20 * 365))

    assert cert.not_valid_after_utc == ca.intermediate_cert.not_valid_after_utc


def test_naive_now_is_taken_as_utc(ca: CertificateAuthority, make_csr: CsrFactory, now: datetime) -> None:
    csr, _ = make_csr()

    cert = _sign(ca, csr, now=now.replace(tzinfo=None))

    assert cert.not_valid_before_utc == now - BACKDATE


@pytest.mark.parametrize("profile", ["client", "router", "server"])
def test_every_profile_accepts_every_key_type(
    ca: CertificateAuthority,
    make_csr: CsrFactory,
    rsa4096_key: rsa.RSAPrivateKey,
    ed25519_key: ed25519.Ed25519PrivateKey,
    profile: CertProfile,
) -> None:
    for key in (rsa4096_key, ed25519_key, ec.generate_private_key(ec.SECP384R1())):
        csr, _ = make_csr("k", key=key)

        cert = _sign(ca, csr, profile)

        assert cert.public_key() == key.public_key()
        cert.verify_directly_issued_by(ca.intermediate_cert)


# --- caller bugs are ValueErrors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"profile": "admin"}, "unknown certificate profile"),
        ({"validity": timedelta(0)}, "validity must be positive"),
        ({"common_name": ""}, "common_name"),
        ({"common_name": "x" * 65}, "common_name"),
        ({"now": datetime(2040, 1, 1, tzinfo=UTC)}, "signing CA has expired"),
    ],
)
def test_caller_bugs_are_value_errors(
    ca: CertificateAuthority, make_csr: CsrFactory, kwargs: dict[str, Any], message: str
) -> None:
    csr, _ = make_csr()
    args: dict[str, Any] = {
        "profile": "client",
        "common_name": "c",
        "validity": YEAR,
        "now": datetime(2026, 3, 1, tzinfo=UTC),
    }

    with pytest.raises(ValueError, match=message):
        ca.sign_csr(csr, **(args | kwargs))
