"""TOTP MFA through pyotp with OpenZiti's sizes: secrets, recovery codes, the window, the URL."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlparse

import pytest

from pki.totp import PyotpTotp, totp_code

AT = datetime(2026, 1, 1, 12, 0, 15, tzinfo=UTC)


@pytest.fixture
def totp() -> PyotpTotp:
    return PyotpTotp()


def test_secret_is_ten_random_bytes_in_base32(totp: PyotpTotp) -> None:
    secret = totp.new_secret()

    assert re.fullmatch(r"[A-Z2-7]{16}", secret)
    assert len(base64.b32decode(secret)) == 10
    assert totp.new_secret() != secret


def test_twenty_recovery_codes_of_six_base32_characters(totp: PyotpTotp) -> None:
    codes = totp.new_recovery_codes()

    assert len(codes) == 20
    assert all(re.fullmatch(r"[A-Z2-7]{6}", code) for code in codes)
    assert len(set(codes)) > 1


def test_codes_are_rfc_6238_sha1_six_digits(totp: PyotpTotp) -> None:
    # RFC 6238 appendix B: the SHA-1 key "12345678901234567890" at 59 s gives 94287082 (8 digits).
    secret = base64.b32encode(b"12345678901234567890").decode()

    assert totp_code(secret, datetime.fromtimestamp(59, UTC)) == "287082"


def test_the_code_of_the_moment_verifies(totp: PyotpTotp) -> None:
    secret = totp.new_secret()

    assert totp.verify(secret, totp_code(secret, AT), AT)


@pytest.mark.parametrize("steps", [-2, -1, 1, 2])
def test_codes_two_steps_either_side_verify(totp: PyotpTotp, steps: int) -> None:
    secret = totp.new_secret()
    code = totp_code(secret, AT + timedelta(seconds=30 * steps))

    assert totp.verify(secret, code, AT)


@pytest.mark.parametrize("steps", [-4, 4])
def test_codes_further_away_do_not_verify(totp: PyotpTotp, steps: int) -> None:
    secret = totp.new_secret()
    code = totp_code(secret, AT + timedelta(seconds=30 * steps))

    assert not totp.verify(secret, code, AT)


@pytest.mark.parametrize("code", ["", "12345", "abcdef", "1234567"])
def test_malformed_codes_do_not_verify(totp: PyotpTotp, code: str) -> None:
    assert not totp.verify(totp.new_secret(), code, AT)


def test_a_corrupt_secret_verifies_nothing(totp: PyotpTotp) -> None:
    assert not totp.verify("not base32!", "123456", AT)


def test_provisioning_url_names_the_account_under_the_issuer(totp: PyotpTotp) -> None:
    secret = totp.new_secret()

    url = urlparse(totp.provisioning_url(secret, "alice"))

    assert (url.scheme, url.netloc) == ("otpauth", "totp")
    assert url.path == "/openziti.io:alice"
    query = parse_qs(url.query)
    assert query["secret"] == [secret]
    assert query["issuer"] == ["openziti.io"]
