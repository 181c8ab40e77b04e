"""The private DER reader/writer and the CSR NULL-parameter rewrite."""

from __future__ import annotations

import base64

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st

from pki import _der
from tests.conftest import examples
from tests.unit.pki.conftest import CsrFactory, MbedtlsCsrFactory, der_tlv


def _der_of(pem: str) -> bytes:
    return base64.b64decode("".join(line for line in pem.splitlines() if not line.startswith("-----")))


@pytest.mark.parametrize("length", [0, 1, 127, 128, 255, 256, 65535, 65536])
def test_encode_then_read_round_trips(length: int) -> None:
    value = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    encoded = _der.encode(0x04, value)

    tlv = _der.read_one(encoded)

    assert (tlv.tag, tlv.value, tlv.raw) == (0x04, value, encoded)
    assert encoded == der_tlv(0x04, value)  # the test fixtures' independent writer agrees


def test_read_children_of_a_sequence() -> None:
    seq = _der.read_one(der_tlv(0x30, der_tlv(0x02, b"\x01") + b"\x05\x00"))

    assert [(c.tag, c.value) for c in _der.read_children(seq)] == [(0x02, b"\x01"), (0x05, b"")]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "missing tag"),
        (b"\x30", "missing length"),
        (b"\x30\x80\x00\x00", "indefinite"),
        (b"\x1f\x01\x00", "high tag"),
        (b"\x30\x85\x01\x02\x03\x04\x05", "too large"),
        (b"\x30\x82\x01", "length octets"),
        (b"\x30\x05\x00", "content shorter"),
        (b"\x05\x00\x00", "trailing"),
    ],
)
def test_malformed_input_is_a_der_error(data: bytes, message: str) -> None:
    with pytest.raises(_der.DerError, match=message):
        _der.read_one(data)


def test_children_of_a_primitive_is_a_der_error() -> None:
    with pytest.raises(_der.DerError):
        _der.read_children(_der.read_one(b"\x04\x00"))


def test_negative_length_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        _der.encode_length(-1)


def test_the_mbedtls_rewrite_gives_the_strict_encoding(make_mbedtls_csr: MbedtlsCsrFactory) -> None:
    received = _der_of(make_mbedtls_csr())

    fixed = _der.drop_null_parameters(received)

    assert fixed is not None
    assert not fixed.info_changed
    csr = x509.load_der_x509_csr(fixed.der)
    assert csr.is_signature_valid
    assert fixed.signed_info == csr.tbs_certrequest_bytes
    assert len(fixed.der) == len(received) - 2  # exactly the NULL's two octets are gone


def test_a_strict_csr_has_nothing_to_rewrite(make_csr: CsrFactory) -> None:
    der = x509.load_pem_x509_csr(make_csr()[0].encode()).public_bytes(serialization.Encoding.DER)

    assert _der.drop_null_parameters(der) is None


@pytest.mark.parametrize(
    "data",
    [
        der_tlv(0x04, b""),  # not a SEQUENCE
        der_tlv(0x30, b"\x05\x00"),  # not three parts
        der_tlv(0x30, der_tlv(0x02, b"\x00") + b"\x05\x00" + b"\x05\x00"),  # info not a SEQUENCE
        der_tlv(0x30, der_tlv(0x30, b"\x02\x01\x00") + b"\x05\x00" + b"\x05\x00"),  # no SPKI
        der_tlv(0x30, der_tlv(0x30, b"\x02\x01\x00\x30\x00\x30\x00") + b"\x05\x00" * 2),  # empty SPKI
    ],
)
def test_shapes_that_are_no_csr_are_der_errors(data: bytes) -> None:
    with pytest.raises(_der.DerError):
        _der.drop_null_parameters(data)


@settings(max_examples=examples(500), deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_only_ever_raise_der_errors(data: bytes) -> None:
    try:
        _der.read_one(data)
        _der.drop_null_parameters(data)
    except _der.DerError:
        pass


@settings(max_examples=examples(200), deadline=None)
@given(tag=st.integers(min_value=0, max_value=0x1E), value=st.binary(max_size=300))
def test_any_element_round_trips(tag: int, value: bytes) -> None:
    tlv = _der.read_one(_der.encode(tag, value))

    assert (tlv.tag, tlv.value) == (tag, value)
