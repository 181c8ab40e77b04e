"""Low-level X.509 building blocks shared by the ``pki`` modules (private).

Names, SANs, leaf and CA certificates and the PEM file I/O of keys and certificates.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeAlias

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import NameOID

from engine.errors import FieldError

PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
"""The key types this CA creates and loads (RSA for the server, EC for the CAs)."""

LeafPublicKey: TypeAlias = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)
"""Public key types a leaf certificate may carry."""

LIBRARY_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.InvalidVersion,
    x509.DuplicateExtension,
    x509.UnsupportedGeneralNameType,
)
"""What cryptography raises for malformed or unsupported input (caught and reported as FieldErrors)."""

BACKDATE = timedelta(minutes=5)
"""How far every ``notBefore`` is set before ``now`` (clock skew between peers)."""

ORGANIZATION = "Trellis"


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime; a naive value is taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def name(common_name: str) -> x509.Name:
    """A subject ``O=Trellis, CN=<common_name>``."""
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def general_names(entries: list[str], *, field: str) -> list[x509.GeneralName]:
    """SANs from strings: an IP address becomes an IP SAN, anything else a DNS SAN.

    Blank entries and duplicates (case-insensitive for DNS) are dropped, order is kept. A DNS
    name that is not ASCII (IDNA A-label) raises FieldError on ``field``.
    """
    out: list[x509.GeneralName] = []
    seen: set[str] = set()
    for raw in entries:
        entry = raw.strip()
        if not entry:
            continue
        general: x509.GeneralName
        try:
            address = ipaddress.ip_address(entry)
        except ValueError:
            if not entry.isascii() or any(ch.isspace() for ch in entry):
                raise FieldError(field, f"invalid DNS name '{entry}'", entry) from None
            general, key = x509.DNSName(entry), "dns:" + entry.lower()
        else:
            general, key = x509.IPAddress(address), "ip:" + str(address)
        if key not in seen:
            seen.add(key)
            out.append(general)
    return out


def hash_for(key: PrivateKey) -> hashes.SHA256 | hashes.SHA384 | hashes.SHA512:
    """The signature hash matching an issuer key (SHA-256 for RSA, by curve size for EC)."""
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.key_size > 384:
            return hashes.SHA512()
        if key.curve.key_size > 256:
            return hashes.SHA384()
    return hashes.SHA256()


def public_key_der(key: CertificatePublicKeyTypes) -> bytes:
    """SubjectPublicKeyInfo DER, to compare public keys."""
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def build_leaf(
    *,
    subject: x509.Name,
    public_key: LeafPublicKey,
    sans: list[x509.GeneralName],
    usages: list[x509.ObjectIdentifier],
    issuer_cert: x509.Certificate,
    issuer_key: PrivateKey,
    now: datetime,
    validity: timedelta,
) -> x509.Certificate:
    """An end-entity certificate (CA:FALSE) signed by ``issuer_key``.

    keyUsage digitalSignature (+ keyEncipherment for RSA keys), the given extendedKeyUsage,
    SubjectKeyIdentifier and AuthorityKeyIdentifier; SAN only when ``sans`` is non-empty. Valid
    from ``now - BACKDATE`` to ``now + validity``, capped at the issuer's expiry.
    """
    key_usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=isinstance(public_key, rsa.RSAPublicKey),
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + validity, issuer_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hash_for(issuer_key))


def _ca_extensions(
    builder: x509.CertificateBuilder,
    key: PrivateKey,
    issuer_key: PrivateKey,
    path_length: int | None,
) -> x509.CertificateBuilder:
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    return (
        builder.add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
            critical=False,
        )
    )


def build_ca(
    now_utc: datetime,
    common_name: str,
    validity: timedelta,
    issuer: tuple[x509.Certificate, PrivateKey] | None,
    path_length: int | None,
) -> tuple[x509.Certificate, PrivateKey]:
    """An EC P-384 CA certificate and key; self-signed when ``issuer`` is None.

    BasicConstraints CA:TRUE (critical, ``path_length``), keyUsage keyCertSign + cRLSign +
    digitalSignature, SKI and AKI; valid from ``now - BACKDATE`` for ``validity``, capped at the
    issuer's expiry.
    """
    key = ec.generate_private_key(ec.SECP384R1())
    subject = name(common_name)
    not_after = now_utc + validity
    issuer_name: x509.Name = subject
    issuer_key: PrivateKey = key
    if issuer is not None:
        issuer_name, issuer_key = issuer[0].subject, issuer[1]
        not_after = min(not_after, issuer[0].not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now_utc - BACKDATE)
        .not_valid_after(not_after)
    )
    builder = _ca_extensions(builder, key, issuer_key, path_length)
    return builder.sign(issuer_key, hash_for(issuer_key)), key


def key_pem(key: PrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM of ``key``."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_file(path: Path, data: bytes | str, mode: int) -> None:
    """Write ``data`` atomically (temporary file + rename) with permission bits ``mode``."""
    payload = data.encode("ascii") if isinstance(data, str) else data
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load_certificates(path: Path) -> list[x509.Certificate]:
    """Every certificate of a PEM file, in order."""
    return x509.load_pem_x509_certificates(path.read_bytes())


def load_private_key(path: Path) -> PrivateKey:
    """An unencrypted PEM RSA or EC private key."""
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise TypeError(f"{path}: expected an RSA or EC private key")
    return key


#: The JOSE ``alg`` of each elliptic curve the controller signs with.
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}


def jws_algorithm(key: PrivateKey | rsa.RSAPublicKey | ec.EllipticCurvePublicKey) -> str:
    """The JOSE ``alg`` for ``key`` (private or public): RS256 for RSA, ES256/ES384/ES512 for
    P-256/P-384/P-521."""
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return "RS256"
    if (
        isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey)
        and key.curve.name in _EC_ALGORITHMS
    ):
        return _EC_ALGORITHMS[key.curve.name]
    raise ValueError(f"no JWS algorithm for a {type(key).__name__} key")
