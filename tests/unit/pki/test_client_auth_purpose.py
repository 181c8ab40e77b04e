"""The chain check refuses what a TLS client-authentication handshake refused (real keys).

Through the CA port (``issuer_index``, ``issued_by_us``): every certificate on the path from the
leaf to the trusting CA that has an extendedKeyUsage extension must list clientAuth or
anyExtendedKeyUsage (Go's ``x509.Verify`` with ``KeyUsages: [ClientAuth]``), and the leaf must not
carry a critical extension the check does not handle.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine import ports
from engine.ports import CertProfile
from pki import CertificateAuthority, PkiPaths, certificate_pem
from pki.certs import LEAF_CRITICAL_EXTENSIONS, allows_client_auth
from tests.unit.pki.conftest import NOW, CsrFactory

Pair = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]

CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
ANY = ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE
EMAIL = ExtendedKeyUsageOID.EMAIL_PROTECTION
#: A private-enterprise OID no verifier knows.
UNKNOWN = x509.ObjectIdentifier("1.3.6.1.4.1.55555.1.1")


def build(
    cn: str,
    issuer: Pair | None = None,
    *,
    is_ca: bool = False,
    usages: Sequence[x509.ObjectIdentifier] | None = None,
    extra: Sequence[tuple[x509.ExtensionType, bool]] = (),
    key: ec.EllipticCurvePrivateKey | None = None,
    subject: x509.Name | None = None,
) -> Pair:
    """A certificate (self-signed when ``issuer`` is None): a CA with keyCertSign when ``is_ca``;
    extendedKeyUsage ``usages`` when given; ``extra`` extensions as (value, critical)."""
    own_key = key if key is not None else ec.generate_private_key(ec.SECP256R1())
    name = subject if subject is not None else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    issuer_name, signer = (name, own_key) if issuer is None else (issuer[0].subject, issuer[1])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(own_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - timedelta(days=1))
        .not_valid_after(NOW + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    for value, critical in extra:
        builder = builder.add_extension(value, critical=critical)
    return builder.sign(signer, hashes.SHA256()), own_key


def pems(*pairs: Pair) -> list[str]:
    return [certificate_pem(pair[0]) for pair in pairs]


@pytest.fixture(scope="module")
def port(ca: CertificateAuthority) -> ports.CertificateAuthority:
    """Our CA seen only through the engine's port."""
    return ca


@pytest.fixture(scope="module")
def root() -> Pair:
    """A third-party root CA without extendedKeyUsage."""
    return build("Acme Root CA", is_ca=True)


@pytest.fixture(scope="module")
def signing(pki_paths: PkiPaths, ca: CertificateAuthority) -> Pair:
    """Our signing CA and its key, to sign leaves our sign_csr would never make."""
    key = serialization.load_pem_private_key(pki_paths.intermediate_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return ca.intermediate_cert, key


# --- the leaf's extendedKeyUsage -----------------------------------------------------------------


@pytest.mark.parametrize(
    "usages",
    [[SERVER_AUTH], [EMAIL, SERVER_AUTH], [x509.ObjectIdentifier("1.3.6.1.4.1.55555.2")]],
    ids=["server-auth", "email-and-server", "unknown-purpose"],
)
def test_a_leaf_whose_eku_lacks_client_auth_is_refused(
    port: ports.CertificateAuthority, root: Pair, usages: list[x509.ObjectIdentifier]
) -> None:
    leaf = build("device", root, usages=usages)

    assert port.issuer_index(pems(leaf), pems(root)) is None


@pytest.mark.parametrize(
    "usages",
    [[CLIENT_AUTH], [SERVER_AUTH, CLIENT_AUTH], [ANY], [EMAIL, ANY]],
    ids=["client-auth", "server-and-client", "any", "email-and-any"],
)
def test_a_leaf_whose_eku_allows_client_auth_is_accepted(
    port: ports.CertificateAuthority, root: Pair, usages: list[x509.ObjectIdentifier]
) -> None:
    leaf = build("device", root, usages=usages)

    assert port.issuer_index(pems(leaf), pems(root)) == 0


def test_a_leaf_without_eku_is_accepted(port: ports.CertificateAuthority, root: Pair) -> None:
    leaf = build("device", root)

    assert port.issuer_index(pems(leaf), pems(root)) == 0


# --- extendedKeyUsage down the chain --------------------------------------------------------------


@pytest.mark.parametrize("leaf_usages", [[CLIENT_AUTH], None], ids=["client-auth-leaf", "no-eku-leaf"])
def test_an_intermediate_whose_eku_excludes_client_auth_refuses_its_leaves(
    port: ports.CertificateAuthority, root: Pair, leaf_usages: list[x509.ObjectIdentifier] | None
) -> None:
    intermediate = build("Acme Server CA", root, is_ca=True, usages=[SERVER_AUTH])
    leaf = build("device", intermediate, usages=leaf_usages)

    assert port.issuer_index(pems(leaf, intermediate), pems(root)) is None
    assert port.issuer_index(pems(leaf), pems(intermediate)) is None  # registered as the CA itself


@pytest.mark.parametrize("usages", [[CLIENT_AUTH], [ANY], None], ids=["client-auth", "any", "no-eku"])
def test_an_intermediate_whose_eku_allows_client_auth_issues(
    port: ports.CertificateAuthority, root: Pair, usages: list[x509.ObjectIdentifier] | None
) -> None:
    intermediate = build("Acme Client CA", root, is_ca=True, usages=usages)
    leaf = build("device", intermediate, usages=[CLIENT_AUTH])

    assert port.issuer_index(pems(leaf, intermediate), pems(root)) == 0


def test_a_root_whose_eku_excludes_client_auth_refuses_its_leaves(port: ports.CertificateAuthority) -> None:
    server_root = build("Acme Server Root", is_ca=True, usages=[SERVER_AUTH])
    leaf = build("device", server_root, usages=[CLIENT_AUTH])

    assert port.issuer_index(pems(leaf), pems(server_root)) is None


def test_another_path_through_a_fit_intermediate_is_found(
    port: ports.CertificateAuthority, root: Pair
) -> None:
    """Two certificates for one intermediate (same name and key): the one restricted to serverAuth
    is passed over, the one without extendedKeyUsage makes the path."""
    key = ec.generate_private_key(ec.SECP256R1())
    restricted = build("Acme Issuing CA", root, is_ca=True, usages=[SERVER_AUTH], key=key)
    open_ = build("Acme Issuing CA", root, is_ca=True, key=key)
    leaf = build("device", restricted, usages=[CLIENT_AUTH])

    assert port.issuer_index(pems(leaf, restricted), pems(root)) is None
    assert port.issuer_index(pems(leaf, restricted, open_), pems(root)) == 0


# --- critical extensions of the leaf --------------------------------------------------------------


def test_a_leaf_with_an_unknown_critical_extension_is_refused(
    port: ports.CertificateAuthority, root: Pair
) -> None:
    unknown = x509.UnrecognizedExtension(UNKNOWN, b"\x05\x00")
    critical = build("device", root, usages=[CLIENT_AUTH], extra=[(unknown, True)])
    not_critical = build("device", root, usages=[CLIENT_AUTH], extra=[(unknown, False)])

    assert port.issuer_index(pems(critical), pems(root)) is None
    assert port.issuer_index(pems(not_critical), pems(root)) == 0


def test_a_critical_extension_known_to_cryptography_but_not_handled_is_refused(
    port: ports.CertificateAuthority, root: Pair
) -> None:
    """Known to the parser is not enough: critical inhibitAnyPolicy in a leaf is not interpreted here."""
    leaf = build("device", root, usages=[CLIENT_AUTH], extra=[(x509.InhibitAnyPolicy(0), True)])

    assert x509.InhibitAnyPolicy.oid not in LEAF_CRITICAL_EXTENSIONS
    assert port.issuer_index(pems(leaf), pems(root)) is None


def test_critical_extensions_the_check_handles_are_accepted(
    port: ports.CertificateAuthority, root: Pair
) -> None:
    """RFC 5280 makes the SAN critical when the subject is empty; policies may be critical too."""
    san = x509.SubjectAlternativeName([x509.UniformResourceIdentifier("spiffe://acme/device")])
    policies = x509.CertificatePolicies([x509.PolicyInformation(x509.ObjectIdentifier("2.5.29.32.0"), None)])
    leaf = build(
        "device",
        root,
        usages=[CLIENT_AUTH],
        extra=[(san, True), (policies, True)],
        subject=x509.Name([]),
    )

    assert port.issuer_index(pems(leaf), pems(root)) == 0


def test_only_the_leafs_critical_extensions_are_looked_at(
    port: ports.CertificateAuthority, root: Pair
) -> None:
    """Intermediates carry critical CA extensions (name constraints) the leaf check does not list."""
    constraints = x509.NameConstraints(
        permitted_subtrees=[x509.DNSName("acme.example")], excluded_subtrees=None
    )
    intermediate = build("Acme Constrained CA", root, is_ca=True, extra=[(constraints, True)])
    leaf = build("device", intermediate, usages=[CLIENT_AUTH])

    assert port.issuer_index(pems(leaf, intermediate), pems(root)) == 0


# --- issued_by_us ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usages", "extra", "ours"),
    [
        ([SERVER_AUTH], [], False),
        ([CLIENT_AUTH], [(x509.UnrecognizedExtension(UNKNOWN, b"\x05\x00"), True)], False),
        ([CLIENT_AUTH], [], True),
        (None, [], True),
    ],
    ids=["server-auth", "critical-unknown", "client-auth", "no-eku"],
)
def test_issued_by_us_applies_the_same_rule(
    port: ports.CertificateAuthority,
    signing: Pair,
    usages: list[x509.ObjectIdentifier] | None,
    extra: list[tuple[x509.ExtensionType, bool]],
    ours: bool,
) -> None:
    leaf = build("device", signing, usages=usages, extra=extra)

    assert port.issued_by_us(pems(leaf)) is ours
    assert port.issued_by_us(pems(leaf, signing)) is ours


@pytest.mark.parametrize("profile", ["client", "router", "server"])
def test_every_certificate_we_issue_passes(
    port: ports.CertificateAuthority, ca: CertificateAuthority, make_csr: CsrFactory, profile: CertProfile
) -> None:
    issued = port.sign_csr(
        make_csr()[0],
        profile=profile,
        common_name="c",
        validity=timedelta(days=1),
        now=NOW,
        sans=["a.example"],
    )
    root = certificate_pem(ca.root_cert)

    assert port.issued_by_us([issued.chain_pem])
    assert port.issuer_index([issued.chain_pem], [root]) == 0
    assert port.issued_by_us([ca.server_chain_pem])


# --- checks that are not about a presented client chain -------------------------------------------


def test_client_auth_false_skips_only_the_extended_key_usage(ca: CertificateAuthority, root: Pair) -> None:
    """For a certificate that is not a TLS client's (a CA's proof of possession), as OpenZiti's
    ``x509.Verify`` with ``ExtKeyUsageAny``: the purpose is not checked, critical extensions are."""
    server = build("device", root, usages=[SERVER_AUTH])
    unknown = build("device", root, extra=[(x509.UnrecognizedExtension(UNKNOWN, b"\x05\x00"), True)])

    assert ca.issuer_index(pems(server), pems(root), client_auth=False) == 0
    assert ca.issuer_index(pems(unknown), pems(root), client_auth=False) is None


def test_allows_client_auth() -> None:
    assert allows_client_auth(build("none")[0])
    assert allows_client_auth(build("client", usages=[CLIENT_AUTH])[0])
    assert allows_client_auth(build("any", usages=[ANY])[0])
    assert not allows_client_auth(build("server", usages=[SERVER_AUTH])[0])
