"""A minimal DER reader and writer, just enough to normalise CSRs from lenient encoders (private).

pyca/cryptography is strict about ``AlgorithmIdentifier`` parameters: RFC 5758 §3.2 says the
parameters of ``ecdsa-with-SHA*`` MUST be absent, and RFC 8410 §3 says the same of Ed25519/Ed448.
mbedTLS (the OpenZiti C SDK 0.29.x) writes an explicit ASN.1 NULL there, which cryptography
refuses (``ParseError { kind: ExtraData, location: ["Csr::signature_alg"] }``) while OpenSSL
accepts it. :func:`drop_null_parameters` rewrites such a CSR into the strict form.

Only definite lengths and low tag numbers are read (DER allows nothing else); anything odd raises
:class:`DerError`, never an ``IndexError`` or the like.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DerError",
    "NormalisedCsr",
    "Tlv",
    "drop_null_parameters",
    "encode",
    "read",
    "read_children",
    "read_one",
]

SEQUENCE = 0x30
OBJECT_IDENTIFIER = 0x06
NULL = 0x05
_NULL_ENCODING = bytes((NULL, 0))
_MAX_LENGTH_OCTETS = 4
_HIGH_TAG_NUMBER = 0x1F
_CONSTRUCTED = 0x20

# OID content octets (the value of the OBJECT IDENTIFIER TLV).
_ECDSA_WITH_SHA = {
    bytes.fromhex("2a8648ce3d0401"),  # 1.2.840.10045.4.1 ecdsa-with-SHA1
    bytes.fromhex("2a8648ce3d040301"),  # 1.2.840.10045.4.3.1 ecdsa-with-SHA224
    bytes.fromhex("2a8648ce3d040302"),  # 1.2.840.10045.4.3.2 ecdsa-with-SHA256
    bytes.fromhex("2a8648ce3d040303"),  # 1.2.840.10045.4.3.3 ecdsa-with-SHA384
    bytes.fromhex("2a8648ce3d040304"),  # 1.2.840.10045.4.3.4 ecdsa-with-SHA512
}
_EDDSA = {
    bytes.fromhex("2b6570"),  # 1.3.101.112 Ed25519
    bytes.fromhex("2b6571"),  # 1.3.101.113 Ed448
}
#: Signature algorithms whose parameters must be absent (a NULL there is dropped).
NO_PARAMETER_SIGNATURES = frozenset(_ECDSA_WITH_SHA | _EDDSA)
#: Public key algorithms whose parameters must be absent (EC keys carry a curve, never NULL).
NO_PARAMETER_KEYS = frozenset(_EDDSA)


class DerError(ValueError):
    """The bytes are not the DER structure expected."""


@dataclass(frozen=True, slots=True)
class Tlv:
    """One DER element: its identifier octet, its content octets and its whole encoding."""

    tag: int
    value: bytes
    raw: bytes

    @property
    def constructed(self) -> bool:
        return bool(self.tag & _CONSTRUCTED)


def read(data: bytes, offset: int = 0) -> tuple[Tlv, int]:
    """The element starting at ``offset`` and the offset just after it."""
    if offset >= len(data):
        raise DerError("truncated: missing tag")
    tag = data[offset]
    if tag & _HIGH_TAG_NUMBER == _HIGH_TAG_NUMBER:
        raise DerError("high tag numbers are not supported")
    pos = offset + 1
    if pos >= len(data):
        raise DerError("truncated: missing length")
    first = data[pos]
    pos += 1
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0:
            raise DerError("indefinite lengths are not DER")
        if count > _MAX_LENGTH_OCTETS:
            raise DerError("length too large")
        if pos + count > len(data):
            raise DerError("truncated: length octets")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    end = pos + length
    if end > len(data):
        raise DerError("truncated: content shorter than its length")
    return Tlv(tag=tag, value=data[pos:end], raw=data[offset:end]), end


def read_one(data: bytes) -> Tlv:
    """The single element ``data`` encodes (no trailing bytes)."""
    tlv, end = read(data)
    if end != len(data):
        raise DerError("trailing data after the element")
    return tlv


def read_children(tlv: Tlv) -> list[Tlv]:
    """The elements inside a constructed element, in order."""
    if not tlv.constructed:
        raise DerError("not a constructed element")
    out: list[Tlv] = []
    pos = 0
    while pos < len(tlv.value):
        child, pos = read(tlv.value, pos)
        out.append(child)
    return out


def encode_length(length: int) -> bytes:
    """The DER length octets for ``length`` (short form below 128, minimal long form above)."""
    if length < 0:
        raise ValueError("negative length")
    if length < 0x80:
        return bytes((length,))
    octets = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes((0x80 | len(octets),)) + octets


def encode(tag: int, value: bytes) -> bytes:
    """One DER element."""
    return bytes((tag,)) + encode_length(len(value)) + value


def _without_null(algorithm: Tlv, oids: frozenset[bytes]) -> bytes | None:
    """``algorithm`` (an AlgorithmIdentifier) re-encoded without a NULL parameter, or None.

    None when it is not a SEQUENCE { one of ``oids``, NULL }, i.e. when there is nothing to drop.
    """
    if algorithm.tag != SEQUENCE:
        return None
    parts = read_children(algorithm)
    if len(parts) != 2 or parts[0].tag != OBJECT_IDENTIFIER or parts[1].raw != _NULL_ENCODING:
        return None
    if parts[0].value not in oids:
        return None
    return encode(SEQUENCE, parts[0].raw)


@dataclass(frozen=True, slots=True)
class NormalisedCsr:
    """A CSR rewritten into strict DER, and what changed."""

    der: bytes
    #: The CertificationRequestInfo as received: what the self-signature covers.
    signed_info: bytes
    #: Whether the CertificationRequestInfo itself was rewritten (then a library re-encoding of
    #: it no longer matches the signature, which must be checked over :attr:`signed_info`).
    info_changed: bool


def _normalised_info(info: Tlv) -> bytes | None:
    """The CertificationRequestInfo with a NULL dropped from its key's algorithm, or None."""
    if info.tag != SEQUENCE:
        raise DerError("CertificationRequestInfo is not a SEQUENCE")
    fields = read_children(info)
    if len(fields) < 3 or fields[2].tag != SEQUENCE:
        raise DerError("CertificationRequestInfo has no SubjectPublicKeyInfo")
    spki = read_children(fields[2])
    if len(spki) != 2:
        raise DerError("malformed SubjectPublicKeyInfo")
    algorithm = _without_null(spki[0], NO_PARAMETER_KEYS)
    if algorithm is None:
        return None
    new_spki = encode(SEQUENCE, algorithm + spki[1].raw)
    rest = b"".join(f.raw for f in fields[3:])
    return encode(SEQUENCE, fields[0].raw + fields[1].raw + new_spki + rest)


def drop_null_parameters(der: bytes) -> NormalisedCsr | None:
    """A PKCS#10 CSR with explicit NULL parameters removed where they must be absent.

    The outer signatureAlgorithm (ECDSA, EdDSA) and the subject key's algorithm (EdDSA) are
    rewritten; nothing else is touched. Returns None when there is nothing to rewrite and raises
    :class:`DerError` when ``der`` is not shaped like a CSR.
    """
    outer = read_one(der)
    if outer.tag != SEQUENCE:
        raise DerError("not a SEQUENCE")
    parts = read_children(outer)
    if len(parts) != 3:
        raise DerError("a CSR has three parts")
    info, algorithm, signature = parts
    new_algorithm = _without_null(algorithm, NO_PARAMETER_SIGNATURES)
    new_info = _normalised_info(info)
    if new_algorithm is None and new_info is None:
        return None
    body = (new_info or info.raw) + (new_algorithm or algorithm.raw) + signature.raw
    return NormalisedCsr(der=encode(SEQUENCE, body), signed_info=info.raw, info_changed=new_info is not None)
