"""Certificate helpers for the management API: parsing, fingerprints, CA checks, PKCS#7.

Used by ``POST /cas`` (a third-party CA's ``certPem``), ``POST /cas/{id}/verify`` (the proof of
possession of that CA's key), certificate authenticators (fingerprints),
``GET /.well-known/est/cacerts`` (the PKCS#7 bundle) and every use of a presented client
certificate chain (:func:`issuer_index`: signatures, CA constraints and fitness for TLS client
authentication, which the API listener's handshake no longer judges).

Fingerprints follow OpenZiti: the lowercase hex SHA-1 of the certificate's DER encoding, 40
characters, no separators (``common/cert/fingerprint.go`` ``FromRaw``:
``fmt.Sprintf("%x", sha1.Sum(raw))``; the same as ``nfpem.FingerprintFromCertificate``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import warnings
from collections.abc import Sequence
from datetime import datetime
from urllib.parse import unquote

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs7
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from engine.errors import CertificateIsNotCaError, FieldError
from engine.ports import CertInfo
from pki import _der
from pki._x509 import LIBRARY_ERRORS, as_utc

__all__ = [
    "LEAF_CRITICAL_EXTENSIONS",
    "allows_client_auth",
    "cert_info",
    "certificate_pem",
    "common_name",
    "directly_issued",
    "fingerprint",
    "is_ca",
    "issuer_index",
    "parse_ca_certificate",
    "parse_certificate",
    "parse_certificates",
    "pkcs7_certs_only_b64",
    "proxied_certificates",
    "verify_ca_verification_cert",
]

_PARSE_REASON = "could not parse PEM certificate"
_EXTENSIONS_REASON = "invalid extensions in certificate"
_PKCS7_LINE = 64
_CHECK_ERRORS: tuple[type[Exception], ...] = (InvalidSignature, *LIBRARY_ERRORS)
#: The most certificates of a presented chain looked at (leaf included).
MAX_CHAIN = 10


def parse_certificates(pem: str, field: str = "certPem") -> list[x509.Certificate]:
    """Every certificate in ``pem``, in order; FieldError when there is none or one is garbage.

    cryptography decodes names and extensions lazily; they are decoded here, so that a malformed
    certificate is refused now rather than raising a library error later.
    """
    if not isinstance(pem, str) or "-----BEGIN CERTIFICATE-----" not in pem:
        raise FieldError(field, _PARSE_REASON)
    try:
        certs = x509.load_pem_x509_certificates(pem.encode("utf-8"))
        for cert in certs:
            _ = (cert.subject, cert.issuer, cert.not_valid_before_utc, cert.not_valid_after_utc)
    except LIBRARY_ERRORS as exc:
        raise FieldError(field, _PARSE_REASON) from exc
    if not certs:
        raise FieldError(field, _PARSE_REASON)
    for cert in certs:
        try:
            _ = cert.extensions
        except LIBRARY_ERRORS as exc:
            raise FieldError(field, _EXTENSIONS_REASON) from exc
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


def _basic_constraints(cert: x509.Certificate) -> x509.BasicConstraints | None:
    """The BasicConstraints extension's value, None without one; ValueError when malformed."""
    try:
        return cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None


def _key_usage(cert: x509.Certificate) -> x509.KeyUsage | None:
    """The KeyUsage extension's value, None without one; ValueError when malformed."""
    try:
        return cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return None


def is_ca(cert: x509.Certificate, field: str = "certPem") -> bool:
    """Whether ``cert`` has BasicConstraints ``CA:TRUE``; FieldError when its extensions are malformed."""
    try:
        constraints = _basic_constraints(cert)
    except _CHECK_ERRORS as exc:
        raise FieldError(field, _EXTENSIONS_REASON) from exc
    return constraints is not None and constraints.ca


def cert_info(cert: x509.Certificate, field: str = "certPem") -> CertInfo:
    """What the engine knows of ``cert`` (PEM, OpenZiti fingerprint, CN, validity, CA flag)."""
    try:
        cn = common_name(cert)
        with warnings.catch_warnings():  # odd attribute lengths only warn; the subject is informative
            warnings.simplefilter("ignore", UserWarning)
            subject = cert.subject.rfc4514_string()
        uris, emails = _san_uris_and_emails(cert)
        key_id = hashlib.sha256(
            cert.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        ).hexdigest()
    except _CHECK_ERRORS as exc:
        raise FieldError(field, _PARSE_REASON) from exc
    return CertInfo(
        pem=certificate_pem(cert),
        fingerprint=fingerprint(cert),
        common_name=cn,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        is_ca=is_ca(cert, field),
        subject=subject,
        uris=uris,
        emails=emails,
        public_key_id=key_id,
    )


def _san_uris_and_emails(cert: x509.Certificate) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The URI and e-mail SANs of ``cert``, in order (CA auto-enrollment reads external ids there)."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return (), ()
    uris = tuple(str(n.value) for n in names if isinstance(n, x509.UniformResourceIdentifier))
    emails = tuple(str(n.value) for n in names if isinstance(n, x509.RFC822Name))
    return uris, emails


def parse_ca_certificate(pem: str, field: str = "certPem") -> x509.Certificate:
    """Parse a CA certificate for ``POST /cas``.

    Raises FieldError when ``pem`` holds no parsable certificate and CertificateIsNotCaError when
    the (first) certificate lacks BasicConstraints ``CA:TRUE``.
    """
    cert = parse_certificate(pem, field)
    if not is_ca(cert, field):
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
    except _CHECK_ERRORS as exc:
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


def directly_issued(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    """Whether ``cert`` names ``issuer``'s subject as its issuer and ``issuer``'s key signed it."""
    try:
        cert.verify_directly_issued_by(issuer)
    except _CHECK_ERRORS:
        return False
    return True


#: More than a client chain ever needs: a proxy header carrying more is refused.
MAX_PROXIED_CERTS = 8
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
_PEM_END = "-----END CERTIFICATE-----"


def proxied_certificates(value: str, *, field: str) -> list[str]:
    """The client chain a TLS-terminating proxy forwards in a header, as PEM, leaf first.

    OpenZiti's edge routers send standard base64 of the DER certificates back to back; proxies
    such as nginx send (URL-encoded) PEM, whose newlines may be lost on the way. Anything that
    does not decode to 1 to :data:`MAX_PROXIED_CERTS` certificates raises ``FieldError(field)``.
    """
    text = unquote(value).strip() if "%" in value else value.strip()
    if _PEM_BEGIN in text:
        ders = [_b64decode(part.split(_PEM_END, 1)[0], field) for part in text.split(_PEM_BEGIN)[1:]]
    else:
        ders = _split_der(_b64decode(text, field), field)
    if not ders:
        raise FieldError(field, "the proxied certificate is empty")
    out: list[str] = []
    for der in ders:
        try:
            out.append(certificate_pem(x509.load_der_x509_certificate(der)))
        except LIBRARY_ERRORS:
            raise FieldError(field, "could not parse the proxied certificate") from None
    return out


def _b64decode(text: str, field: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise FieldError(field, "could not decode the proxied certificate") from None


def _split_der(data: bytes, field: str) -> list[bytes]:
    """DER certificates back to back (each a SEQUENCE), as OpenZiti's ``x509.ParseCertificates``."""
    out: list[bytes] = []
    offset = 0
    try:
        while offset < len(data):
            tlv, offset = _der.read(data, offset)
            if tlv.tag != _der.SEQUENCE or len(out) == MAX_PROXIED_CERTS:
                raise _der.DerError("not a certificate")
            out.append(tlv.raw)
    except _der.DerError:
        raise FieldError(field, "could not parse the proxied certificate") from None
    return out


#: The critical extensions a presented leaf may carry: those the checks here interpret
#: (basicConstraints, keyUsage, extendedKeyUsage) and those that do not restrict what a client
#: certificate is good for when nothing processes them (subjectAltName -- critical when the subject
#: is empty, RFC 5280 4.2.1.6 --, certificatePolicies, cRLDistributionPoints). Go's ``x509.Verify``
#: and OpenSSL both handle these. Any other critical extension -- unknown to the parser, or known
#: but not interpreted here (name or policy constraints, policy mappings, inhibitAnyPolicy, Netscape
#: cert type) -- refuses the leaf (RFC 5280 4.2), as both verifiers do.
LEAF_CRITICAL_EXTENSIONS: frozenset[x509.ObjectIdentifier] = frozenset(
    {
        ExtensionOID.BASIC_CONSTRAINTS,
        ExtensionOID.KEY_USAGE,
        ExtensionOID.EXTENDED_KEY_USAGE,
        ExtensionOID.SUBJECT_ALTERNATIVE_NAME,
        ExtensionOID.CERTIFICATE_POLICIES,
        ExtensionOID.CRL_DISTRIBUTION_POINTS,
    }
)
_CLIENT_AUTH_USAGES = frozenset({ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE})


def allows_client_auth(cert: x509.Certificate) -> bool:
    """Whether ``cert``'s extendedKeyUsage, if it has one, allows TLS client authentication.

    It must list clientAuth or anyExtendedKeyUsage; a certificate without the extension is not
    restricted, a malformed one allows nothing. Go's ``x509.Verify`` with ``KeyUsages:
    [ExtKeyUsageClientAuth]`` applies this to every certificate of the chain, leaf to root.
    """
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return True
    except _CHECK_ERRORS:
        return False
    return any(usage in _CLIENT_AUTH_USAGES for usage in usages)


def _acceptable_leaf(leaf: x509.Certificate, client_auth: bool) -> bool:
    """No critical extension outside :data:`LEAF_CRITICAL_EXTENSIONS`, and fit for client
    authentication when ``client_auth``."""
    try:
        extensions = leaf.extensions
    except _CHECK_ERRORS:
        return False
    if any(ext.critical and ext.oid not in LEAF_CRITICAL_EXTENSIONS for ext in extensions):
        return False
    return not client_auth or allows_client_auth(leaf)


def _may_issue(issuer: x509.Certificate, below: int, client_auth: bool) -> bool:
    """Whether ``issuer`` may sign a certificate with ``below`` intermediates under it (RFC 5280).

    It must be a CA (BasicConstraints CA:TRUE) whose pathLenConstraint allows ``below``
    intermediates after it, with keyCertSign when it has a keyUsage extension. Without this a
    holder of any leaf certificate could sign certificates of their own and present them with
    their leaf as an "intermediate". With ``client_auth`` its extendedKeyUsage, if any, must
    allow client authentication (:func:`allows_client_auth`): a CA restricted to other purposes
    does not vouch for clients.
    """
    try:
        constraints = _basic_constraints(issuer)
        usage = _key_usage(issuer)
    except _CHECK_ERRORS:
        return False
    if constraints is None or not constraints.ca:
        return False
    if constraints.path_length is not None and constraints.path_length < below:
        return False
    if usage is not None and not usage.key_cert_sign:
        return False
    return not client_auth or allows_client_auth(issuer)


def issuer_index(
    chain: Sequence[x509.Certificate],
    cas: Sequence[x509.Certificate | None],
    *,
    client_auth: bool = True,
) -> int | None:
    """Which of ``cas`` issued ``chain[0]``, directly or through intermediates of ``chain[1:]``.

    The one chain check of a presented client certificate (the API listener's handshake judges
    nothing, ``controller.tls``). Every link's names and signature are checked, and every issuer on the
    path must be a CA allowed to issue at that depth (:func:`_may_issue`); dates are not checked.
    The leaf must carry no critical extension outside :data:`LEAF_CRITICAL_EXTENSIONS`. With
    ``client_auth`` (the default) the chain must be fit for TLS client authentication, as the
    handshake's verification required before: the leaf and every CA on the path, the one of
    ``cas`` included, either have no extendedKeyUsage or list clientAuth or anyExtendedKeyUsage
    (Go's ``x509.Verify`` with ``KeyUsages: [ExtKeyUsageClientAuth]``); an intermediate that is
    not is passed over, as if the chain did not carry it. ``client_auth=False`` is for a
    certificate that is not a TLS client's. The shortest path wins; among CAs that issued the
    same certificate, the first in ``cas`` (None entries, CAs that did not parse, never match).
    At most :data:`MAX_CHAIN` certificates of ``chain`` are looked at.
    """
    if not chain or not _acceptable_leaf(chain[0], client_auth):
        return None
    pool = chain[1:MAX_CHAIN]
    used: set[int] = set()
    level: list[x509.Certificate] = [chain[0]]
    below = 0  # how many intermediates the issuer of a certificate of ``level`` has under it
    while level:
        for cert in level:
            for index, ca in enumerate(cas):
                if ca is not None and directly_issued(cert, ca) and _may_issue(ca, below, client_auth):
                    return index
        next_level: list[x509.Certificate] = []
        for cert in level:
            for position, candidate in enumerate(pool):
                if (
                    position not in used
                    and directly_issued(cert, candidate)
                    and _may_issue(candidate, below, client_auth)
                ):
                    used.add(position)
                    next_level.append(candidate)
        level, below = next_level, below + 1
    return None
