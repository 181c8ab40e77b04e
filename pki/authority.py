"""The controller's certificate authority: a root CA, a signing CA and the API server certificate.

``init_pki`` creates, once, under a directory (normally ``<home>/pki``)::

    root-ca.pem / root-ca.key                  EC P-384, self-signed, 10 years
    intermediate-ca.pem / intermediate-ca.key  EC P-384, pathlen 0, signed by the root, 5 years
    server.pem / server.key                    RSA 2048, signed by the intermediate, 2 years;
                                               server.pem = server + intermediate (the TLS chain)
    ca-bundle.pem                              root + intermediate

All PEM; keys are unencrypted PKCS#8 written with mode 0600. ``CertificateAuthority`` loads them
and signs CSRs (enrollment) with the intermediate. Enrollment JWTs are signed with the TLS server
key because OpenZiti SDKs verify them against the server certificate they receive (see
``wire-contract.md`` §6.1), hence :meth:`CertificateAuthority.signing_key_for_jwt`.

Time is passed in (``now``); nothing here reads the clock. Every certificate's ``notBefore`` is
backdated by :data:`BACKDATE` to tolerate clock skew between the controller and its clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from pki._x509 import (
    BACKDATE,
    PrivateKey,
    as_utc,
    build_ca,
    build_leaf,
    csr_public_key,
    general_names,
    key_pem,
    load_certificates,
    load_private_key,
    name,
    parse_csr,
    public_key_der,
    requested_sans,
    with_common_name,
    write_file,
)
from pki.certs import certificate_pem, fingerprint

__all__ = ["BACKDATE", "CertificateAuthority", "PkiPaths", "init_pki"]

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

    def ca_bundle_pem(self) -> str:
        """Root then intermediate, PEM (the contents of ``ca-bundle.pem``)."""
        return _pems(self._root_cert, self._intermediate_cert)

    def chain_pem(self) -> str:
        """Intermediate then root, PEM: the chain to append after a leaf this CA signed."""
        return _pems(self._intermediate_cert, self._root_cert)

    def signing_key_for_jwt(self) -> PrivateKey:
        """The key enrollment JWTs are signed with: the TLS server key (wire-contract §6.1)."""
        return self._server_key

    def jwt_kid(self) -> str:
        """The JWT ``kid``: lowercase hex SHA-1 of the server certificate's DER."""
        return fingerprint(self._server_cert)

    def jwt_algorithm(self) -> str:
        """The JOSE ``alg`` for :meth:`signing_key_for_jwt`: RS256, or ES256/ES384/ES512."""
        key = self._server_key
        if isinstance(key, rsa.RSAPrivateKey):
            return "RS256"
        return {256: "ES256", 384: "ES384", 521: "ES512"}[key.curve.key_size]

    def sign_csr(
        self,
        csr_pem: str,
        *,
        kind: Literal["client", "server"],
        validity: timedelta,
        now: datetime,
        common_name: str | None = None,
        sans: list[str] | None = None,
    ) -> str:
        """Issue a leaf certificate for a PEM CSR, signed by the intermediate; returns its PEM.

        The CSR's signature is checked; a CSR that does not parse, is not self-consistent or has
        an unsupported key raises ``FieldError("csr", ...)``. The subject is the CSR's, with its
        CN replaced by ``common_name`` when given. SANs are ``sans`` when given (IP or DNS),
        otherwise those the CSR requests; no other requested extension is honoured. ``client``
        certificates get extendedKeyUsage clientAuth, ``server`` ones serverAuth + clientAuth.
        The validity runs from ``now`` (backdated by :data:`BACKDATE`) to ``now + validity``,
        capped at the intermediate's expiry.
        """
        if kind not in ("client", "server"):
            raise ValueError(f"unknown certificate kind {kind!r}")
        if validity <= timedelta(0):
            raise ValueError("validity must be positive")
        csr = parse_csr(csr_pem)
        subject = csr.subject if common_name is None else with_common_name(csr.subject, common_name)
        names = requested_sans(csr) if sans is None else general_names(sans, field="sans")
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
        if kind == "server":
            usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = build_leaf(
            subject=subject,
            public_key=csr_public_key(csr),
            sans=names,
            usages=usages,
            issuer_cert=self._intermediate_cert,
            issuer_key=self._intermediate_key,
            now=as_utc(now),
            validity=validity,
        )
        return certificate_pem(cert)
