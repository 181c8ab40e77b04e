"""scrypt password hashing and random passwords."""

from __future__ import annotations

import base64
import re
import string

import pytest

from pki import ScryptPasswordHasher, generate_password

ENCODED = re.compile(r"^scrypt\$(\d+)\$(\d+)\$(\d+)\$([A-Za-z0-9+/=]+)\$([A-Za-z0-9+/=]+)$")


@pytest.fixture(scope="module")
def hasher() -> ScryptPasswordHasher:
    """The default hasher (n=2**14, r=8, p=1)."""
    return ScryptPasswordHasher()


@pytest.fixture(scope="module")
def fast() -> ScryptPasswordHasher:
    """A cheap hasher, for tests about the format rather than the cost."""
    return ScryptPasswordHasher(n=2**10, r=4, p=1)


def test_hash_then_verify_round_trips(hasher: ScryptPasswordHasher) -> None:
    encoded = hasher.hash("correct horse battery staple")

    assert hasher.verify("correct horse battery staple", encoded) is True


def test_wrong_password_does_not_verify(hasher: ScryptPasswordHasher) -> None:
    encoded = hasher.hash("s3cret")

    assert hasher.verify("s3cret!", encoded) is False
    assert hasher.verify("", encoded) is False


def test_default_encoding_is_self_describing(hasher: ScryptPasswordHasher) -> None:
    encoded = hasher.hash("pw")

    match = ENCODED.match(encoded)
    assert match is not None
    n, r, p, salt, digest = match.groups()
    assert (int(n), int(r), int(p)) == (2**14, 8, 1)
    assert len(base64.b64decode(salt)) == 16
    assert len(base64.b64decode(digest)) == 32


def test_each_hash_uses_a_fresh_salt(fast: ScryptPasswordHasher) -> None:
    first, second = fast.hash("same"), fast.hash("same")

    assert first != second
    assert fast.verify("same", first)
    assert fast.verify("same", second)


def test_verify_accepts_parameters_from_the_encoding(
    hasher: ScryptPasswordHasher, fast: ScryptPasswordHasher
) -> None:
    encoded = fast.hash("pw")

    assert hasher.verify("pw", encoded) is True


def test_non_ascii_password_round_trips(fast: ScryptPasswordHasher) -> None:
    encoded = fast.hash("pässwörd-密码")

    assert fast.verify("pässwörd-密码", encoded) is True
    assert fast.verify("passwort-密码", encoded) is False


def test_needs_rehash_when_parameters_differ(
    hasher: ScryptPasswordHasher, fast: ScryptPasswordHasher
) -> None:
    old = fast.hash("pw")

    assert hasher.needs_rehash(old) is True
    assert fast.needs_rehash(old) is False
    assert hasher.needs_rehash("garbage") is True


def _valid_tail() -> str:
    salt = base64.b64encode(b"0123456789abcdef").decode()
    digest = base64.b64encode(b"x" * 32).decode()
    return f"{salt}${digest}"


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "scrypt",
        "not-a-hash",
        f"bcrypt$16384$8$1${_valid_tail()}",
        f"scrypt$16384$8${_valid_tail()}",
        f"scrypt$16384$8$1$1${_valid_tail()}",
        f"scrypt$abc$8$1${_valid_tail()}",
        f"scrypt$-16384$8$1${_valid_tail()}",
        f"scrypt$١٦$8$1${_valid_tail()}",
        f"scrypt$1000$8$1${_valid_tail()}",
        f"scrypt$1$8$1${_valid_tail()}",
        f"scrypt$1073741824$8$1${_valid_tail()}",
        f"scrypt$16384$0$1${_valid_tail()}",
        f"scrypt$16384$8$0${_valid_tail()}",
        f"scrypt$16384$8$99${_valid_tail()}",
        "scrypt$16384$8$1$!!!notbase64$eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHg=",
        "scrypt$16384$8$1$MDEyMzQ1Njc4OWFiY2RlZg==$eHh4",
        "scrypt$16384$8$1$$eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHh4eHg=",
        "scrypt$16384$8$1$MDEyMzQ1Njc4OWFiY2RlZg==$",
    ],
)
def test_malformed_encodings_never_verify(hasher: ScryptPasswordHasher, encoded: str) -> None:
    assert hasher.verify("pw", encoded) is False


def test_verify_rejects_non_string_encoding(hasher: ScryptPasswordHasher) -> None:
    assert hasher.verify("pw", None) is False  # type: ignore[arg-type]


def test_a_tampered_digest_does_not_verify(fast: ScryptPasswordHasher) -> None:
    encoded = fast.hash("pw")
    head, digest = encoded.rsplit("$", 1)
    raw = bytearray(base64.b64decode(digest))
    raw[0] ^= 1

    assert fast.verify("pw", f"{head}${base64.b64encode(bytes(raw)).decode()}") is False


@pytest.mark.parametrize(
    "kwargs",
    [{"n": 1000}, {"n": 1}, {"r": 0}, {"p": 0}, {"salt_bytes": 4}, {"dklen": 8}],
)
def test_hasher_rejects_bad_parameters(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"must be|invalid scrypt parameters"):
        ScryptPasswordHasher(**kwargs)


def test_generate_password_has_length_and_url_safe_alphabet() -> None:
    alphabet = set(string.ascii_letters + string.digits + "-_")

    password = generate_password()

    assert len(password) == 24
    assert set(password) <= alphabet
    assert len(generate_password(40)) == 40


def test_generate_password_is_random() -> None:
    assert len({generate_password() for _ in range(50)}) == 50


def test_generate_password_rejects_non_positive_length() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        generate_password(0)
