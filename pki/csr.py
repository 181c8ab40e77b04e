"""Certificate signing requests as clients really send them: decoding, lenient parsing, checks.

What arrives as a CSR (``POST /enroll`` bodies, router enrollment fields) is text in one of
these forms, all accepted by :func:`load_csr`:

- PEM (``CERTIFICATE REQUEST`` or the older ``NEW CERTIFICATE REQUEST`` label), possibly with
  CRLF line ends or with JSON-escaped ``\\n`` sequences left in;
- base64 of the DER, on one line or wrapped (an EST/``application/pkcs10``-style upload with
  ``Content-Transfer-Encoding: base64``), standard or URL-safe alphabet, padded or not; base64 of
  a PEM is unwrapped too;
- the raw DER carried in a ``str`` (one character per byte, latin-1).

Parsing is lenient about one encoding quirk only: mbedTLS (the OpenZiti C SDK 0.29.x) writes the
CSR's ``ecdsa-with-SHA256`` AlgorithmIdentifier with an explicit NULL parameter, which
pyca/cryptography refuses. When, and only when, cryptography cannot load the DER, the NULL is
dropped (:mod:`pki._der`) and the result loaded again. The self-signature covers only the
CertificationRequestInfo, which that rewrite leaves alone, so it still verifies.

Everything else is strict: the self-signature must verify and the key must be RSA of at least
2048 bits, EC on P-256/P-384/P-521, or Ed25519. Every failure is a
:class:`~engine.errors.FieldError` on the caller's ``field``; no library exception escapes.
"""

from __future__ import annotations

import base64
import binascii
import re
from ipaddress import IPv4Address, IPv6Address

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import SignatureAlgorithmOID

from engine.errors import FieldError
from pki import _der
from pki._x509 import LIBRARY_ERRORS

__all__ = [
    "CSR_PARSE_REASON",
    "CSR_SIGNATURE_REASON",
    "MAX_CSR_CHARS",
    "MIN_RSA_BITS",
    "CsrPublicKey",
    "csr_der",
    "csr_public_key",
    "load_csr",
    "requested_sans",
]

CSR_PARSE_REASON = "could not parse certificate signing request"
CSR_SIGNATURE_REASON = "certificate signing request signature is invalid"
#: Real CSRs are a few hundred bytes (an RSA-4096 one ~1.7 KB of PEM); refuse anything huge.
MAX_CSR_CHARS = 64 * 1024
MIN_RSA_BITS = 2048
CURVES = frozenset({"secp256r1", "secp384r1", "secp521r1"})

CsrPublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

_CSR_LABELS = ("CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_URLSAFE = str.maketrans("-_", "+/")
_LOAD_ERRORS = LIBRARY_ERRORS
_VERIFY_ERRORS: tuple[type[Exception], ...] = (InvalidSignature, *LIBRARY_ERRORS)


def _b64decode(text: str) -> bytes | None:
    """Base64 (standard or URL-safe, padding optional) ignoring whitespace and header lines."""
    lines = [line for line in text.splitlines() if ":" not in line]  # MIME/PEM headers
    compact = "".join("".join(lines).split())
    if not compact or not _BASE64.fullmatch(compact):
        return None
    compact = compact.rstrip("=").translate(_URLSAFE)
    try:
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _from_pem(text: str) -> bytes | None:
    """The body of the first CSR PEM block in ``text`` (linear scans, no backtracking regex)."""
    for label in _CSR_LABELS:
        begin = f"-----BEGIN {label}-----"
        start = text.find(begin)
        if start < 0:
            continue
        end = text.find(f"-----END {label}-----", start + len(begin))
        return None if end < 0 else _b64decode(text[start + len(begin) : end])
    return None


def csr_der(text: str) -> bytes | None:
    """The DER bytes of a CSR sent as PEM, base64 or raw DER text; None when it is none of them.

    Only the encoding is undone here; whether the bytes are a CSR is :func:`load_csr`'s job.
    """
    if not isinstance(text, str) or not text or len(text) > MAX_CSR_CHARS:
        return None
    text = text.lstrip("\ufeff")
    if not text.isascii():
        try:
            return text.encode("latin-1")  # raw DER (a real CSR's length octets are >= 0x80)
        except UnicodeEncodeError:
            return None
    text = text.replace("\\r", "").replace("\\n", "\n")  # JSON escapes left in by a client
    if "-----BEGIN" in text:
        return _from_pem(text)
    der = _b64decode(text)
    if der is not None and der.startswith(b"-----BEGIN"):  # base64 of a PEM
        return _from_pem(der.decode("ascii", "replace"))
    return der


def _load_der(der: bytes, field: str) -> tuple[x509.CertificateSigningRequest, bytes | None]:
    """The CSR and, when its signed part had to be rewritten, the signed bytes as received."""
    try:
        return x509.load_der_x509_csr(der), None
    except _LOAD_ERRORS:
        pass
    try:
        fixed = _der.drop_null_parameters(der)
    except _der.DerError:
        fixed = None
    if fixed is None:
        raise FieldError(field, CSR_PARSE_REASON)
    try:
        csr = x509.load_der_x509_csr(fixed.der)
    except _LOAD_ERRORS:
        raise FieldError(field, CSR_PARSE_REASON) from None
    return csr, (fixed.signed_info if fixed.info_changed else None)


def csr_public_key(csr: x509.CertificateSigningRequest, *, field: str = "csr") -> CsrPublicKey:
    """The CSR's public key if it is RSA (>= 2048 bits), EC on a NIST P-curve, or Ed25519."""
    try:
        key = csr.public_key()
    except _LOAD_ERRORS:
        raise FieldError(field, "unsupported public key in certificate signing request") from None
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise FieldError(field, f"RSA keys must have at least {MIN_RSA_BITS} bits, got {key.key_size}")
        return key
    if isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in CURVES:
            raise FieldError(
                field, f"unsupported elliptic curve {key.curve.name} (use P-256, P-384 or P-521)"
            )
        return key
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    raise FieldError(field, "unsupported public key in certificate signing request (use RSA, EC or Ed25519)")


def _signature_valid(csr: x509.CertificateSigningRequest, key: CsrPublicKey, signed: bytes | None) -> bool:
    """Whether the self-signature verifies, over ``signed`` when the info had to be rewritten."""
    try:
        if signed is None:
            return csr.is_signature_valid
        # Only an Ed25519 key's algorithm is ever rewritten inside the info (pki._der).
        if not isinstance(key, ed25519.Ed25519PublicKey):
            return False
        if csr.signature_algorithm_oid != SignatureAlgorithmOID.ED25519:
            return False
        key.verify(csr.signature, signed)
    except _VERIFY_ERRORS:
        return False
    return True


def load_csr(text: str, *, field: str = "csr") -> x509.CertificateSigningRequest:
    """A CSR whose key is acceptable and whose self-signature verifies (see the module doc).

    Raises FieldError(``field``, ...): "could not parse certificate signing request" when the text
    is no CSR in any accepted form, a reason naming the key when the key is refused, and
    "certificate signing request signature is invalid" when the signature does not verify.
    """
    der = csr_der(text)
    if der is None:
        raise FieldError(field, CSR_PARSE_REASON)
    csr, signed = _load_der(der, field)
    key = csr_public_key(csr, field=field)
    if not _signature_valid(csr, key, signed):
        raise FieldError(field, CSR_SIGNATURE_REASON)
    return csr


def requested_sans(csr: x509.CertificateSigningRequest, *, field: str = "csr") -> list[x509.GeneralName]:
    """The DNS names and IP addresses a CSR's SAN extension asks for, in order (others dropped)."""
    try:
        ext = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    except _LOAD_ERRORS:  # a malformed or duplicated extension
        raise FieldError(field, "invalid extensions in certificate signing request") from None
    return [
        name
        for name in ext.value
        if isinstance(name, x509.DNSName)
        or (isinstance(name, x509.IPAddress) and isinstance(name.value, IPv4Address | IPv6Address))
    ]
