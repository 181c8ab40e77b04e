"""Certificate helpers for the management API: parsing, fingerprints, CA checks, PKCS#7.

Used by ``POST /cas`` (a third-party CA's ``certPem``), ``POST /cas/{id}/verify`` (the proof of
possession of that CA's key), certificate authenticators (fingerprints) and
``GET /.well-known/est/cacerts`` (the PKCS#7 bundle).

Fingerprints follow OpenZiti: the lowercase hex SHA-1 of the certificate's DER encoding, 40
characters, no separators (``common/cert/fingerprint.go`` ``FromRaw``:
``fmt.Sprintf("%x", sha1.Sum(raw))``; the same as ``nfpem.FingerprintFromCertificate``).
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import NameOID

from engine.errors import CertificateIsNotCaError, FieldError
from pki._x509 import as_utc

__all__ = [
    "certificate_pem",
    "common_name",
    "fingerprint",
    "parse_ca_certificate",
    "parse_certificate",
    "parse_certificates",
    "pkcs7_certs_only_b64",
    "verify_ca_verification_cert",
]

_PARSE_REASON = "could not parse PEM certificate"
_PKCS7_LINE = 64


def parse_certificates(pem: str, field: str = "certPem") -> list[x509.Certificate]:
    """Every certificate in ``pem``, in order; FieldError when there is none or one is garbage."""
    if not isinstance(pem, str) or "-----BEGIN CERTIFICATE-----" not in pem:
        raise FieldError(field, _PARSE_REASON)
    try:
        certs = x509.load_pem_x509_certificates(pem.encode("utf-8"))
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise FieldError(field, _PARSE_REASON) from exc
    if not certs:
        raise FieldError(field, _PARSE_REASON)
    return certs


def parse_certificate(pem: str, field: str = "certPem") -> x509.Certificate:
    """The first certificate in ``pem``; FieldError(field, "could not parse PEM certificate")."""
    return parse_certificates(pem, field)[0]


def certificate_pem(cert: x509.Certificate) -> str:
    """``cert`` as a PEM string (one ``CERTIFICATE`` block, trailing newline)."""
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def fingerprint(cert: x509.Certificate) -> str:
    """OpenZiti's certificate fingerprint: lowercase hex SHA-1 of the DER, no separators."""
    der = cert.public_bytes(serialization.Encoding.DER)
    return hashlib.sha1(der, usedforsecurity=False).hexdigest()


def common_name(cert: x509.Certificate) -> str | None:
    """The subject's first common name, or None when the subject has none."""
    attributes = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not attributes:
        return None
    value = attributes[0].value
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return constraints.ca


def parse_ca_certificate(pem: str, field: str = "certPem") -> x509.Certificate:
    """Parse a CA certificate for ``POST /cas``.

    Raises FieldError when ``pem`` holds no parsable certificate and CertificateIsNotCaError when
    the (first) certificate lacks BasicConstraints ``CA:TRUE``.
    """
    cert = parse_certificate(pem, field)
    if not _is_ca(cert):
        raise CertificateIsNotCaError(field=field, reason="certificate is not a CA")
    return cert


def verify_ca_verification_cert(
    ca_cert: x509.Certificate,
    pem: str,
    token: str,
    *,
    field: str = "certificate",
    now: datetime | None = None,
) -> None:
    """Check the proof that the creator of a CA holds its private key (``POST /cas/{id}/verify``).

    The verification certificate in ``pem`` must have subject CN equal to ``token`` (the CA's
    verification token) and be signed directly by ``ca_cert``. When ``now`` is given its validity
    period must include ``now``. Checks run in OpenZiti's order (parse, common name, signature);
    each failure raises FieldError on ``field`` with its own reason.
    """
    cert = parse_certificate(pem, field)
    if common_name(cert) != token:
        raise FieldError(field, "common name does not match the verification token")
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm) as exc:
        raise FieldError(field, "certificate is not signed by the CA") from exc
    if now is not None:
        moment = as_utc(now)
        if not cert.not_valid_before_utc <= moment <= cert.not_valid_after_utc:
            raise FieldError(field, "certificate is expired or not yet valid")


def pkcs7_certs_only_b64(certs: list[x509.Certificate]) -> str:
    """The ``/.well-known/est/cacerts`` body for ``certs``.

    Standard padded base64 of a DER PKCS#7 SignedData certs-only bundle, in 64-character lines
    joined by ``\\n`` with no trailing newline (as OpenZiti's ``enroll_router.go`` writes it).
    """
    if not certs:
        raise ValueError("at least one certificate is required")
    der = pkcs7.serialize_certificates(certs, serialization.Encoding.DER)
    text = base64.b64encode(der).decode("ascii")
    return "\n".join(text[i : i + _PKCS7_LINE] for i in range(0, len(text), _PKCS7_LINE))


def issued_by(ca_pem: str, cert_pem: str) -> bool:
    """Whether ``cert_pem``'s first certificate names the CA as issuer and its signature verifies."""
    try:
        ca = parse_certificate(ca_pem)
        cert = parse_certificate(cert_pem)
    except FieldError:
        return False
    if cert.issuer != ca.subject:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True
