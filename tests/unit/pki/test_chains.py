"""The CA port's certificate checks: CertInfo parsing, issued_by_us, issuer_index."""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import ports
from engine.errors import CertificateIsNotCaError, FieldError
from pki import CertificateAuthority, certificate_pem
from tests.conftest import examples
from tests.unit.pki.conftest import CsrFactory, der_tlv

CertPair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
CertFactory = Callable[..., CertPair]
TOKEN = "5c7e3b9a-0d1f-4a4e-8e55-2b7d1c9f0a11"


def _pem(*pairs: CertPair | x509.Certificate) -> str:
    return "".join(certificate_pem(p if isinstance(p, x509.Certificate) else p[0]) for p in pairs)


@pytest.fixture(scope="module")
def port(ca: CertificateAuthority) -> ports.CertificateAuthority:
    """Our CA seen only through the engine's port."""
    return ca


@pytest.fixture(scope="module")
def acme(make_cert: CertFactory) -> CertPair:
    """A third-party root CA."""
    return make_cert("Acme Root CA", key_cert_sign=True)


@pytest.fixture(scope="module")
def acme_issuing(make_cert: CertFactory, acme: CertPair) -> CertPair:
    """An intermediate CA under Acme's root."""
    return make_cert("Acme Issuing CA", issuer=acme, key_cert_sign=True)


# --- parse_certificate(s) / parse_ca_certificate -> CertInfo -----------------------------------


def test_parse_certificate_gives_the_facts_of_the_first(
    port: ports.CertificateAuthority, ca: CertificateAuthority
) -> None:
    info = port.parse_certificate(ca.server_chain_pem)

    der = ca.server_cert.public_bytes(serialization.Encoding.DER)
    assert info == ports.CertInfo(
        pem=ca.server_cert_pem,
        fingerprint=hashlib.sha1(der).hexdigest(),
        common_name="ctrl.example.com",
        not_before=ca.server_cert.not_valid_before_utc,
        not_after=ca.server_cert.not_valid_after_utc,
        is_ca=False,
        subject="CN=ctrl.example.com,O=Trellis",
        public_key_id=hashlib.sha256(
            ca.server_cert.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        ).hexdigest(),
    )
    assert info.not_before.utcoffset() == timedelta(0)
    assert info.is_valid_at(info.not_before)
    assert not info.is_valid_at(info.not_after + timedelta(seconds=1))


def test_parse_certificates_gives_all_in_order(
    port: ports.CertificateAuthority, ca: CertificateAuthority
) -> None:
    infos = port.parse_certificates(ca.ca_bundle_pem())

    assert [(i.common_name, i.is_ca) for i in infos] == [
        ("Trellis Root CA", True),
        ("Trellis Signing CA", True),
    ]


def test_certificate_without_common_name(
    port: ports.CertificateAuthority, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "NoCN")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(ec_key.public_key())
        .serial_number(1)
        .not_valid_before(datetime(2026, 1, 1, tzinfo=UTC))
        .not_valid_after(datetime(2027, 1, 1, tzinfo=UTC))
        .sign(ec_key, hashes.SHA256())
    )

    assert port.parse_certificate(certificate_pem(cert)).common_name is None


def test_parse_ca_certificate(port: ports.CertificateAuthority, acme: CertPair) -> None:
    assert port.parse_ca_certificate(_pem(acme)).is_ca


def test_parse_ca_certificate_refuses_a_leaf(
    port: ports.CertificateAuthority, ca: CertificateAuthority
) -> None:
    with pytest.raises(CertificateIsNotCaError):
        port.parse_ca_certificate(ca.server_cert_pem, field="certPem")


@pytest.mark.parametrize("method", ["parse_certificate", "parse_certificates", "parse_ca_certificate"])
@pytest.mark.parametrize(
    "garbage", ["", "junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"]
)
def test_garbage_is_a_field_error_on_the_field(
    port: ports.CertificateAuthority, method: str, garbage: str
) -> None:
    with pytest.raises(FieldError) as info:
        getattr(port, method)(garbage, field="caCert")

    assert (info.value.field, info.value.reason) == ("caCert", "could not parse PEM certificate")


def test_malformed_extensions_are_a_field_error(
    port: ports.CertificateAuthority, ec_key: ec.EllipticCurvePrivateKey
) -> None:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bad")])
    bogus = x509.UnrecognizedExtension(x509.ObjectIdentifier("2.5.29.19"), der_tlv(0x04, b"\x00"))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(ec_key.public_key())
        .serial_number(2)
        .not_valid_before(datetime(2026, 1, 1, tzinfo=UTC))
        .not_valid_after(datetime(2027, 1, 1, tzinfo=UTC))
        .add_extension(bogus, critical=True)
        .sign(ec_key, hashes.SHA256())
    )

    with pytest.raises(FieldError) as info:
        port.parse_certificate(certificate_pem(cert), field="certPem")

    assert info.value.field == "certPem"


# --- issued_by_us ------------------------------------------------------------------------------


def test_a_certificate_we_signed_is_ours(
    port: ports.CertificateAuthority, make_csr: CsrFactory, now: datetime
) -> None:
    issued = port.sign_csr(
        make_csr()[0], profile="client", common_name="c", validity=timedelta(days=1), now=now
    )

    assert port.issued_by_us([issued.pem])
    assert port.issued_by_us([issued.chain_pem])
    assert port.issued_by_us(x509_pems(issued.chain_pem))


def x509_pems(chain_pem: str) -> list[str]:
    return [certificate_pem(c) for c in x509.load_pem_x509_certificates(chain_pem.encode())]


def test_our_server_certificate_is_ours(port: ports.CertificateAuthority, ca: CertificateAuthority) -> None:
    assert port.issued_by_us([ca.server_chain_pem])


def test_the_signing_ca_itself_is_not_issued_by_us(
    port: ports.CertificateAuthority, ca: CertificateAuthority
) -> None:
    assert not port.issued_by_us([certificate_pem(ca.intermediate_cert)])


def test_a_forgery_with_our_names_is_not_ours(
    port: ports.CertificateAuthority, ca: CertificateAuthority, make_cert: CertFactory
) -> None:
    impostor_ca = make_cert("unused")
    forged_issuer = (ca.intermediate_cert, impostor_ca[1])  # our name, another key
    forged, _ = make_cert("c", issuer=forged_issuer, is_ca=False)

    assert forged.issuer == ca.intermediate_cert.subject
    assert not port.issued_by_us([_pem(forged)])


@pytest.mark.parametrize("chain", [[], [""], ["junk"]])
def test_no_certificate_is_not_ours(port: ports.CertificateAuthority, chain: list[str]) -> None:
    assert not port.issued_by_us(chain)


# --- issuer_index ------------------------------------------------------------------------------


def test_a_leaf_signed_directly_by_a_ca(
    port: ports.CertificateAuthority, ca: CertificateAuthority, make_cert: CertFactory, acme: CertPair
) -> None:
    leaf = make_cert("device", issuer=acme, is_ca=False)
    cas = [ca.ca_bundle_pem(), _pem(make_cert("Other CA")), _pem(acme)]

    assert port.issuer_index([_pem(leaf)], cas) == 2


def test_a_leaf_through_an_intermediate_in_the_chain(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair, acme_issuing: CertPair
) -> None:
    leaf = make_cert("device", issuer=acme_issuing, is_ca=False)

    assert port.issuer_index([_pem(leaf), _pem(acme_issuing)], [_pem(acme)]) == 0
    assert port.issuer_index([_pem(leaf, acme_issuing)], ["junk", _pem(acme)]) == 1
    assert port.issuer_index([_pem(leaf)], [_pem(acme)]) is None  # the intermediate is missing
    assert port.issuer_index([_pem(leaf)], [_pem(acme_issuing)]) == 0  # an intermediate CA registered itself


def test_two_intermediates_in_any_order(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair, acme_issuing: CertPair
) -> None:
    sub = make_cert("Acme Sub CA", issuer=acme_issuing)
    leaf = make_cert("device", issuer=sub, is_ca=False)

    assert port.issuer_index([_pem(leaf, acme_issuing, sub)], [_pem(acme)]) == 0


def test_our_own_ca_is_found(
    port: ports.CertificateAuthority, ca: CertificateAuthority, make_csr: CsrFactory, now: datetime
) -> None:
    issued = port.sign_csr(
        make_csr()[0], profile="client", common_name="c", validity=timedelta(days=1), now=now
    )
    root, signing = certificate_pem(ca.root_cert), certificate_pem(ca.intermediate_cert)

    assert port.issuer_index([issued.chain_pem], [root]) == 0
    assert port.issuer_index([issued.pem], [root]) is None
    assert port.issuer_index([issued.pem], [root, signing]) == 1


def test_a_foreign_ca_did_not_issue_it(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair
) -> None:
    leaf = make_cert("device", issuer=make_cert("Foreign CA"), is_ca=False)

    assert port.issuer_index([_pem(leaf)], [_pem(acme)]) is None


def test_a_same_named_ca_with_another_key_did_not_issue_it(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair
) -> None:
    impostor = make_cert("Acme Root CA")
    leaf = make_cert("device", issuer=impostor, is_ca=False)

    assert port.issuer_index([_pem(leaf)], [_pem(acme)]) is None


def test_dates_are_ignored(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair, now: datetime
) -> None:
    leaf = make_cert("old", issuer=acme, is_ca=False, not_after=now - timedelta(hours=1))

    assert port.issuer_index([_pem(leaf)], [_pem(acme)]) == 0


def test_a_leaf_cannot_act_as_an_intermediate(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair
) -> None:
    """A holder of an Acme leaf signs a certificate of their own and sends their leaf along."""
    their_leaf = make_cert("device", issuer=acme, is_ca=False)
    forged = make_cert("admin", issuer=their_leaf, is_ca=False)
    unconstrained = make_cert("device2", issuer=acme, basic_constraints=False)
    forged2 = make_cert("admin", issuer=unconstrained, is_ca=False)

    assert port.issuer_index([_pem(forged, their_leaf)], [_pem(acme)]) is None
    assert port.issuer_index([_pem(forged2, unconstrained)], [_pem(acme)]) is None


def test_an_intermediate_without_key_cert_sign_cannot_issue(
    port: ports.CertificateAuthority, make_cert: CertFactory, acme: CertPair
) -> None:
    no_sign = make_cert("Acme No-Sign CA", issuer=acme, key_cert_sign=False)
    leaf = make_cert("device", issuer=no_sign, is_ca=False)

    assert port.issuer_index([_pem(leaf, no_sign)], [_pem(acme)]) is None


def test_path_length_constraints_are_enforced(
    port: ports.CertificateAuthority, make_cert: CertFactory
) -> None:
    """A CA with pathlen 0 (as our signing CA) may sign leaves but not a CA that signs them."""
    root = make_cert("Len Root", path_length=0)
    sub = make_cert("Len Sub", issuer=root)
    leaf = make_cert("device", issuer=sub, is_ca=False)

    assert port.issuer_index([_pem(leaf, sub)], [_pem(root)]) is None
    assert port.issuer_index([_pem(leaf, sub)], [_pem(root), _pem(sub)]) == 1


@pytest.mark.parametrize("chain", [[], ["junk"], [""]])
def test_no_leaf_has_no_issuer(port: ports.CertificateAuthority, acme: CertPair, chain: list[str]) -> None:
    assert port.issuer_index(chain, [_pem(acme)]) is None


# --- fuzzing: only FieldErrors, False or None ---------------------------------------------------


# A flipped sign bit makes a negative serial number, which cryptography still loads with a warning.
@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
@settings(max_examples=examples(300), deadline=None)
@given(position=st.integers(min_value=0), mask=st.integers(min_value=1, max_value=255), cut=st.booleans())
def test_corrupted_certificates_never_raise_library_errors(
    port: ports.CertificateAuthority, ca: CertificateAuthority, position: int, mask: int, cut: bool
) -> None:
    der = bytearray(ca.intermediate_cert.public_bytes(serialization.Encoding.DER))
    index = position % len(der)
    if cut:
        del der[index:]
    else:
        der[index] ^= mask
    pem = (
        "-----BEGIN CERTIFICATE-----\n"
        + base64.encodebytes(bytes(der)).decode()
        + "-----END CERTIFICATE-----\n"
    )
    root = certificate_pem(ca.root_cert)

    for check in (port.parse_certificate, port.parse_certificates, port.parse_ca_certificate):
        with contextlib.suppress(FieldError, CertificateIsNotCaError):
            check(pem, field="certPem")
    assert port.issued_by_us([pem]) in (True, False)
    assert port.issuer_index([ca.server_cert_pem, pem], [pem, root]) in (None, 0, 1)
