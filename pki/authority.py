"""The controller's certificate authority: a root CA, a signing CA and the API server certificate.

``init_pki`` creates, once, under a directory (normally ``<home>/pki``)::

    root-ca.pem / root-ca.key                  EC P-384, self-signed, 10 years
    intermediate-ca.pem / intermediate-ca.key  EC P-384, pathlen 0, signed by the root, 5 years
    server.pem / server.key                    RSA 2048, signed by the intermediate, 2 years;
                                               server.pem = server + intermediate (the TLS chain)
    ca-bundle.pem                              root + intermediate

All PEM; keys are unencrypted PKCS#8 written with mode 0600. ``CertificateAuthority`` loads them
and implements ``engine.ports.CertificateAuthority``: it signs CSRs (enrollment) with the
intermediate for a profile (:data:`PROFILES`), parses certificates into ``CertInfo`` and checks
who issued a presented chain, and that it is fit for TLS client authentication (every profile's
certificate lists clientAuth, so everything this CA issues passes). Enrollment JWTs are signed
with the TLS server key because OpenZiti SDKs verify them against the server certificate they
receive (see ``docs/api.md`` §6.1), hence :meth:`CertificateAuthority.signing_key_for_jwt`
and :class:`pki.tokens.JwtSigner`.

Time is passed in (``now``); nothing here reads the clock. Every certificate's ``notBefore`` is
backdated by :data:`BACKDATE` to tolerate clock skew between the controller and its clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from engine import ports
from engine.errors import FieldError
from engine.ports import CertInfo, CertProfile, IssuedCertificate
from pki import certs
from pki._x509 import (
    BACKDATE,
    PrivateKey,
    as_utc,
    build_ca,
    build_leaf,
    general_names,
    jws_algorithm,
    key_pem,
    load_certificates,
    load_private_key,
    name,
    public_key_der,
    write_file,
)
from pki.certs import (
    cert_info,
    certificate_pem,
    fingerprint,
    issuer_index,
)
from pki.csr import csr_public_key, load_csr, requested_sans

__all__ = ["BACKDATE", "PROFILES", "CertificateAuthority", "PkiPaths", "init_pki"]

ROOT_VALIDITY = timedelta(days=3650)
INTERMEDIATE_VALIDITY = timedelta(days=1825)
SERVER_VALIDITY = timedelta(days=730)
ROOT_COMMON_NAME = "Trellis Root CA"
INTERMEDIATE_COMMON_NAME = "Trellis Signing CA"

_KEY_MODE = 0o600
_CERT_MODE = 0o644
_DIR_MODE = 0o700
_MAX_CN = 64  # ub-common-name (RFC 5280)


@dataclass(frozen=True, slots=True)
class PkiPaths:
    """Where the controller's PKI files live (all PEM) inside one directory."""

    directory: Path
    root_cert: Path
    root_key: Path
    intermediate_cert: Path
    intermediate_key: Path
    server_cert: Path
    server_key: Path
    ca_bundle: Path

    @classmethod
    def in_directory(cls, directory: Path) -> PkiPaths:
        """The standard file names under ``directory`` (normally ``<home>/pki``)."""
        return cls(
            directory=directory,
            root_cert=directory / "root-ca.pem",
            root_key=directory / "root-ca.key",
            intermediate_cert=directory / "intermediate-ca.pem",
            intermediate_key=directory / "intermediate-ca.key",
            server_cert=directory / "server.pem",
            server_key=directory / "server.key",
            ca_bundle=directory / "ca-bundle.pem",
        )

    def all_files(self) -> list[Path]:
        """Every file of the PKI."""
        return [
            self.root_cert,
            self.root_key,
            self.intermediate_cert,
            self.intermediate_key,
            self.server_cert,
            self.server_key,
            self.ca_bundle,
        ]

    def key_files(self) -> list[Path]:
        """The private-key files (mode 0600)."""
        return [self.root_key, self.intermediate_key, self.server_key]

    def exists(self) -> bool:
        """Whether every file is present."""
        return all(path.is_file() for path in self.all_files())


def _server_sans(sans: list[str]) -> list[x509.GeneralName]:
    """``sans`` (in order) then ``localhost`` and ``127.0.0.1``, without duplicates."""
    return general_names([*sans, "localhost", "127.0.0.1"], field="sans")


def _make_server(
    now_utc: datetime,
    names: list[x509.GeneralName],
    issuer_cert: x509.Certificate,
    issuer_key: PrivateKey,
) -> tuple[x509.Certificate, PrivateKey]:
    """An RSA 2048 server certificate and key; CN = the first SAN that fits in a CN."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    common_name = next(str(n.value) for n in names if len(str(n.value)) <= _MAX_CN)
    cert = build_leaf(
        subject=name(common_name),
        public_key=key.public_key(),
        sans=names,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        issuer_cert=issuer_cert,
        issuer_key=issuer_key,
        now=now_utc,
        validity=SERVER_VALIDITY,
    )
    return cert, key


def _pems(*certs: x509.Certificate) -> str:
    return "".join(certificate_pem(cert) for cert in certs)


def init_pki(directory: Path, *, sans: list[str], now: datetime) -> PkiPaths:
    """Create the controller's PKI under ``directory`` unless it is already there.

    Idempotent: files that exist are kept as they are (a second call with other ``sans`` does not
    reissue the server certificate). A missing piece is created from the pieces it depends on;
    if a CA is (re)created, everything it signed is reissued too. Each entry of ``sans`` that
    parses as an IP address becomes an IP SAN, any other a DNS SAN; ``localhost`` and
    ``127.0.0.1`` are always added after them, and the server certificate's CN is the first SAN.
    """
    paths = PkiPaths.in_directory(directory)
    if paths.exists():
        return paths
    names = _server_sans(sans)  # validate before writing anything
    now_utc = as_utc(now)
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)

    renew_root = not (paths.root_cert.is_file() and paths.root_key.is_file())
    if renew_root:
        root_cert, root_key = build_ca(now_utc, ROOT_COMMON_NAME, ROOT_VALIDITY, None, None)
        write_file(paths.root_key, key_pem(root_key), _KEY_MODE)
        write_file(paths.root_cert, _pems(root_cert), _CERT_MODE)
    else:
        root_cert = load_certificates(paths.root_cert)[0]
        root_key = load_private_key(paths.root_key)

    renew_intermediate = renew_root or not (
        paths.intermediate_cert.is_file() and paths.intermediate_key.is_file()
    )
    if renew_intermediate:
        inter_cert, inter_key = build_ca(
            now_utc,
            INTERMEDIATE_COMMON_NAME,
            INTERMEDIATE_VALIDITY,
            (root_cert, root_key),
            0,
        )
        write_file(paths.intermediate_key, key_pem(inter_key), _KEY_MODE)
        write_file(paths.intermediate_cert, _pems(inter_cert), _CERT_MODE)
    else:
        inter_cert = load_certificates(paths.intermediate_cert)[0]
        inter_key = load_private_key(paths.intermediate_key)

    if renew_intermediate or not (paths.server_cert.is_file() and paths.server_key.is_file()):
        server_cert, server_key = _make_server(now_utc, names, inter_cert, inter_key)
        write_file(paths.server_key, key_pem(server_key), _KEY_MODE)
        write_file(paths.server_cert, _pems(server_cert, inter_cert), _CERT_MODE)

    if renew_intermediate or not paths.ca_bundle.is_file():
        write_file(paths.ca_bundle, _pems(root_cert, inter_cert), _CERT_MODE)
    return paths


class CertificateAuthority:
    """The loaded PKI: signs CSRs with the intermediate and exposes the CA and server material."""

    def __init__(
        self,
        *,
        root_cert: x509.Certificate,
        intermediate_cert: x509.Certificate,
        intermediate_key: PrivateKey,
        server_cert: x509.Certificate,
        server_key: PrivateKey,
    ) -> None:
        if public_key_der(intermediate_key.public_key()) != public_key_der(intermediate_cert.public_key()):
            raise ValueError("the intermediate key does not match the intermediate certificate")
        if public_key_der(server_key.public_key()) != public_key_der(server_cert.public_key()):
            raise ValueError("the server key does not match the server certificate")
        self._root_cert = root_cert
        self._intermediate_cert = intermediate_cert
        self._intermediate_key = intermediate_key
        self._server_cert = server_cert
        self._server_key = server_key

    @classmethod
    def load(cls, paths: PkiPaths) -> CertificateAuthority:
        """Load the files written by :func:`init_pki`."""
        return cls(
            root_cert=load_certificates(paths.root_cert)[0],
            intermediate_cert=load_certificates(paths.intermediate_cert)[0],
            intermediate_key=load_private_key(paths.intermediate_key),
            server_cert=load_certificates(paths.server_cert)[0],
            server_key=load_private_key(paths.server_key),
        )

    @property
    def root_cert(self) -> x509.Certificate:
        """The self-signed root CA certificate."""
        return self._root_cert

    @property
    def intermediate_cert(self) -> x509.Certificate:
        """The signing CA certificate (issuer of every leaf)."""
        return self._intermediate_cert

    @property
    def server_cert(self) -> x509.Certificate:
        """The API listener's certificate."""
        return self._server_cert

    @property
    def server_cert_pem(self) -> str:
        """The API listener's certificate alone, PEM."""
        return certificate_pem(self._server_cert)

    @property
    def server_chain_pem(self) -> str:
        """The API listener's TLS chain, PEM: server certificate then intermediate."""
        return _pems(self._server_cert, self._intermediate_cert)

    @property
    def server_key(self) -> PrivateKey:
        """The API listener's private key."""
        return self._server_key

    def ca_certificates(self) -> list[x509.Certificate]:
        """The controller's CA certificates: root, then intermediate (e.g. for PKCS#7 cacerts)."""
        return [self._root_cert, self._intermediate_cert]

    def ca_certificates_pkcs7_b64(self) -> str:
        """The CA certificates as a base64 PKCS#7 certs-only bundle (EST ``cacerts``)."""
        return certs.pkcs7_certs_only_b64(self.ca_certificates())

    @property
    def server_fingerprint(self) -> str:
        """OpenZiti's fingerprint (hex SHA-1 of the DER) of the API listener's certificate."""
        return certs.fingerprint(self._server_cert)

    def ca_bundle_pem(self) -> str:
        """Root then intermediate, PEM (the contents of ``ca-bundle.pem``)."""
        return _pems(self._root_cert, self._intermediate_cert)

    def chain_pem(self) -> str:
        """Intermediate then root, PEM: the chain to append after a leaf this CA signed."""
        return _pems(self._intermediate_cert, self._root_cert)

    def signing_key_for_jwt(self) -> PrivateKey:
        """The key enrollment JWTs are signed with: the TLS server key (docs/api.md §6.1)."""
        return self._server_key

    def jwt_kid(self) -> str:
        """The JWT ``kid``: lowercase hex SHA-1 of the server certificate's DER."""
        return fingerprint(self._server_cert)

    def jwt_algorithm(self) -> str:
        """The JOSE ``alg`` for :meth:`signing_key_for_jwt`: RS256, or ES256/ES384/ES512."""
        return jws_algorithm(self._server_key)

    # --- engine.ports.CertificateAuthority ------------------------------------------------------

    def sign_csr(
        self,
        csr: str,
        *,
        profile: CertProfile,
        common_name: str,
        validity: timedelta,
        now: datetime,
        sans: Sequence[str] = (),
        field: str = "csr",
    ) -> IssuedCertificate:
        """Issue a certificate for ``csr``, signed by the intermediate (signing) CA.

        ``csr`` is PEM, base64 DER or raw DER text, parsed leniently about mbedTLS's encoding and
        strictly about the key and the self-signature (:func:`pki.csr.load_csr`); a failure is a
        FieldError on ``field``. The subject is ``O=Trellis, CN=<common_name>``, whatever the CSR
        asks. Profiles (:data:`PROFILES`): ``client`` gets extendedKeyUsage clientAuth and no
        SAN; ``router`` (a router's control-channel certificate) clientAuth + serverAuth and no
        SAN; ``server`` serverAuth + clientAuth with ``sans`` (an IP address becomes an IP SAN,
        anything else a DNS SAN) or, when ``sans`` is empty, the DNS and IP SANs the CSR asks
        for. Valid from ``now - BACKDATE`` to ``now + validity``, capped at the intermediate's
        expiry. A bad ``profile``, ``validity`` or ``common_name`` is a caller's bug: ValueError.
        """
        usages = PROFILES.get(profile)
        if usages is None:
            raise ValueError(f"unknown certificate profile {profile!r}")
        if validity <= timedelta(0):
            raise ValueError("validity must be positive")
        if not 1 <= len(common_name) <= _MAX_CN:
            raise ValueError(f"common_name must have 1 to {_MAX_CN} characters")
        now_utc = as_utc(now)
        if now_utc - BACKDATE >= self._intermediate_cert.not_valid_after_utc:
            raise ValueError("the signing CA has expired")
        request = load_csr(csr, field=field)
        key = csr_public_key(request, field=field)
        names: list[x509.GeneralName] = []
        if profile == "server":
            names = general_names(list(sans), field=field) if sans else requested_sans(request, field=field)
        cert = build_leaf(
            subject=name(common_name),
            public_key=key,
            sans=names,
            usages=list(usages),
            issuer_cert=self._intermediate_cert,
            issuer_key=self._intermediate_key,
            now=now_utc,
            validity=validity,
        )
        return IssuedCertificate(info=cert_info(cert), chain_pem=_pems(cert, self._intermediate_cert))

    def parse_certificate(self, pem: str, *, field: str = "certPem") -> CertInfo:
        """The first certificate of ``pem``; FieldError(field, "could not parse PEM certificate")."""
        return cert_info(certs.parse_certificate(pem, field), field)

    def parse_certificates(self, pem: str, *, field: str = "certPem") -> list[CertInfo]:
        """Every certificate of ``pem``, in order (at least one, or FieldError)."""
        return [cert_info(cert, field) for cert in certs.parse_certificates(pem, field)]

    def parse_ca_certificate(self, pem: str, *, field: str = "certPem") -> CertInfo:
        """The first certificate of ``pem``, which must be a CA (else CertificateIsNotCaError)."""
        return cert_info(certs.parse_ca_certificate(pem, field), field)

    def issued_by_us(self, chain: Sequence[str], *, client_auth: bool = True) -> bool:
        """Whether the leaf of ``chain`` (its first certificate) was signed by our signing CA.

        The signature is checked, not only the names; dates are not. The leaf must also pass
        :func:`pki.certs.issuer_index`'s checks of a presented client certificate (no unhandled
        critical extension; with ``client_auth``, an extendedKeyUsage allowing clientAuth, which
        every certificate :meth:`sign_csr` issues has). Text that holds no certificate is simply
        not issued by us (False).
        """
        presented = _chain(chain)
        return issuer_index(presented[:1], [self._intermediate_cert], client_auth=client_auth) == 0

    def issuer_index(
        self, chain: Sequence[str], ca_pems: Sequence[str], *, client_auth: bool = True
    ) -> int | None:
        """Which of ``ca_pems`` issued the leaf of ``chain``, directly or through its intermediates.

        See :func:`pki.certs.issuer_index`: every link's names and signature are checked, every
        issuer must be a CA allowed to issue at its depth, the leaf must have no unhandled
        critical extension and, with ``client_auth`` (the default; every presented client chain),
        the leaf and the CAs on the path must allow TLS client authentication in their
        extendedKeyUsage; dates are not checked. None when no CA did, when ``chain`` holds no
        certificate; an unparsable entry of ``ca_pems`` never matches.
        """
        cas = [_first_certificate(pem) for pem in ca_pems]
        return issuer_index(_chain(chain), cas, client_auth=client_auth)


#: Extended key usages of each certificate profile.
PROFILES: dict[str, tuple[x509.ObjectIdentifier, ...]] = {
    "client": (ExtendedKeyUsageOID.CLIENT_AUTH,),
    "router": (ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH),
    "server": (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
}


def _first_certificate(pem: str) -> x509.Certificate | None:
    try:
        return certs.parse_certificate(pem)
    except FieldError:
        return None


def _chain(pems: Sequence[str]) -> list[x509.Certificate]:
    """Every certificate of ``pems`` (each one or more PEM blocks) in order; [] if one is garbage."""
    try:
        return [cert for pem in pems for cert in certs.parse_certificates(pem)]
    except FieldError:
        return []


def _conforms(ca: CertificateAuthority) -> ports.CertificateAuthority:
    """Never called: mypy proves here that :class:`CertificateAuthority` satisfies the port."""
    return ca
