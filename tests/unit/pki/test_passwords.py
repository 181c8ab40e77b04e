"""Password hashing (argon2id, and the scrypt hashes of older databases) and random passwords."""

from __future__ import annotations

import base64
import re
import string

import argon2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pki import Argon2idPasswordHasher, ScryptPasswordHasher, generate_password
from tests.conftest import examples

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


# -- argon2id ------------------------------------------------------------------------------------

PHC = re.compile(r"^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$")


@pytest.fixture(scope="module")
def argon() -> Argon2idPasswordHasher:
    """The default hasher (OpenZiti's parameters: t=1, 3 MiB, p=4)."""
    return Argon2idPasswordHasher()


def _unpadded(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def _phc(m: int, t: int, p: int, salt: bytes, digest: bytes) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode().rstrip("=")

    return f"$argon2id$v=19$m={m},t={t},p={p}${b64(salt)}${b64(digest)}"


def _reference(password: str, m: int, t: int, p: int, salt: bytes = b"0123456789abcdef") -> str:
    """A correct argon2id hash made by argon2-cffi itself (not through our hasher)."""
    raw = argon2.low_level.hash_secret_raw(
        password.encode(), salt, time_cost=t, memory_cost=m, parallelism=p, hash_len=32, type=argon2.Type.ID
    )
    return _phc(m, t, p, salt, raw)


def test_argon2id_hash_then_verify_round_trips(argon: Argon2idPasswordHasher) -> None:
    encoded = argon.hash("correct horse battery staple")

    assert argon.verify("correct horse battery staple", encoded) is True


def test_argon2id_wrong_password_does_not_verify(argon: Argon2idPasswordHasher) -> None:
    encoded = argon.hash("s3cret")

    assert argon.verify("s3cret!", encoded) is False
    assert argon.verify("S3cret", encoded) is False
    assert argon.verify("", encoded) is False


def test_argon2id_encoding_is_a_phc_string_no_weaker_than_openziti(argon: Argon2idPasswordHasher) -> None:
    """OpenZiti's controller: argon2id, t=1, 3 MiB, 4 lanes, a 32-byte key, a 10-byte salt."""
    match = PHC.match(argon.hash("pw"))

    assert match is not None
    m, t, p, salt, digest = match.groups()
    assert int(m) >= 3 * 1024
    assert int(t) >= 1
    assert int(p) == 4
    assert len(_unpadded(salt)) >= 16
    assert len(_unpadded(digest)) == 32


def test_argon2id_each_hash_uses_a_fresh_salt(argon: Argon2idPasswordHasher) -> None:
    first, second = argon.hash("same"), argon.hash("same")

    assert first != second
    assert argon.verify("same", first)
    assert argon.verify("same", second)


def test_argon2id_non_ascii_password_round_trips(argon: Argon2idPasswordHasher) -> None:
    encoded = argon.hash("pässwörd-密码")

    assert argon.verify("pässwörd-密码", encoded) is True
    assert argon.verify("passwort-密码", encoded) is False


def test_argon2id_hashes_are_argon2_cffis_and_the_other_way_round(argon: Argon2idPasswordHasher) -> None:
    """The PHC string is the standard one: the library's own verifier reads ours, and hashes it
    made with other (bounded) parameters verify with ours."""
    ours = argon.hash("pw")
    theirs = argon2.PasswordHasher(time_cost=2, memory_cost=8 * 1024, parallelism=2).hash("pw")

    assert argon2.PasswordHasher().verify(ours, "pw") is True
    assert argon.verify("pw", theirs) is True
    assert argon.verify("nope", theirs) is False


def test_argon2id_verifies_older_scrypt_hashes(
    argon: Argon2idPasswordHasher, hasher: ScryptPasswordHasher
) -> None:
    old = hasher.hash("from-an-older-database")

    assert argon.verify("from-an-older-database", old) is True
    assert argon.verify("from-an-older-database!", old) is False


def test_needs_rehash_is_true_for_scrypt_and_for_other_parameters(
    argon: Argon2idPasswordHasher, fast: ScryptPasswordHasher
) -> None:
    stronger = Argon2idPasswordHasher(time_cost=2, memory_kib=8 * 1024)

    assert argon.needs_rehash(argon.hash("pw")) is False
    assert argon.needs_rehash(fast.hash("pw")) is True
    assert argon.needs_rehash(stronger.hash("pw")) is True
    assert stronger.needs_rehash(argon.hash("pw")) is True
    assert argon.needs_rehash(argon.hash("pw").replace("argon2id", "argon2i")) is True
    assert argon.needs_rehash("garbage") is True
    assert argon.needs_rehash(None) is True  # type: ignore[arg-type]


def test_argon2id_a_tampered_digest_does_not_verify(argon: Argon2idPasswordHasher) -> None:
    encoded = argon.hash("pw")
    head, digest = encoded.rsplit("$", 1)
    raw = bytearray(_unpadded(digest))
    raw[0] ^= 1

    assert argon.verify("pw", f"{head}${base64.b64encode(bytes(raw)).decode().rstrip('=')}") is False


_SALT = base64.b64encode(b"0123456789abcdef").decode().rstrip("=")
_HASH = base64.b64encode(b"x" * 32).decode().rstrip("=")
_TAIL = f"{_SALT}${_HASH}"


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "$argon2id$",
        "argon2id$v=19$m=3072,t=1,p=4$" + _TAIL,  # no leading $
        "$argon2i$v=19$m=3072,t=1,p=4$" + _TAIL,  # another variant
        "$argon2d$v=19$m=3072,t=1,p=4$" + _TAIL,
        "$argon2id$v=16$m=3072,t=1,p=4$" + _TAIL,  # another version
        "$argon2id$m=3072,t=1,p=4$" + _TAIL,  # no version
        "$argon2id$v=19$m=3072,t=1$" + _TAIL,
        "$argon2id$v=19$t=1,m=3072,p=4$" + _TAIL,  # out of order
        "$argon2id$v=19$m=3072,t=1,p=4,keyid=abc$" + _TAIL,
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT,
        "$argon2id$v=19$m=3072,t=1,p=4$" + _TAIL + "$",
        "$argon2id$v=19$m=03072,t=1,p=4$" + _TAIL,  # a leading zero
        "$argon2id$v=19$m=+3072,t=1,p=4$" + _TAIL,
        "$argon2id$v=19$m=-3072,t=1,p=4$" + _TAIL,
        "$argon2id$v=19$m=٣٠٧٢,t=1,p=4$" + _TAIL,  # non-ASCII digits
        "$argon2id$v=19$m=" + "9" * 5000 + ",t=1,p=4$" + _TAIL,  # a huge number
        "$argon2id$v=19$m=4194304,t=1,p=4$" + _TAIL,  # 4 GiB
        "$argon2id$v=19$m=3072,t=4294967295,p=4$" + _TAIL,  # passes without end
        "$argon2id$v=19$m=3072,t=0,p=4$" + _TAIL,
        "$argon2id$v=19$m=3072,t=1,p=0$" + _TAIL,
        "$argon2id$v=19$m=3072,t=1,p=255$" + _TAIL,
        "$argon2id$v=19$m=16,t=1,p=4$" + _TAIL,  # under 8 KiB a lane
        "$argon2id$v=19$m=65536,t=4,p=4$" + _TAIL,  # memory x passes over the bound
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT + "==$" + _HASH,  # padded
        "$argon2id$v=19$m=3072,t=1,p=4$!!!notbase64$" + _HASH,
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT + "$" + _HASH[:-1] + "-",  # URL-safe alphabet
        "$argon2id$v=19$m=3072,t=1,p=4$MDEyMw$" + _HASH,  # a 4-byte salt
        "$argon2id$v=19$m=3072,t=1,p=4$" + "A" * 100 + "$" + _HASH,  # a 75-byte salt
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT + "$eHh4eA",  # a 4-byte hash
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT + "$" + "A" * 200,  # a 150-byte hash
        "$argon2id$v=19$m=3072,t=1,p=4$" + _SALT + "$" + "A" * 5,  # not a base64 length
        "$argon2id$v=19$m=3072,t=1,p=4$" + _TAIL + "A" * 1_000_000,
        "scrypt$16384$8$1$!!!$",  # a broken older hash
        "scrypt$1048576$32$16$" + _TAIL,  # an older hash out of bounds
    ],
)
def test_argon2id_malformed_or_hostile_encodings_never_verify(
    argon: Argon2idPasswordHasher, encoded: str
) -> None:
    assert argon.verify("pw", encoded) is False
    assert argon.needs_rehash(encoded) is True


@pytest.mark.parametrize(
    ("m", "t", "p"),
    [
        (64 * 1024 + 8, 1, 1),  # memory over 64 MiB
        (32 * 1024, 7, 1),  # memory x passes over 3 x 64 MiB
        (64, 11, 1),  # over 10 passes
        (17 * 8, 1, 17),  # over 16 lanes
    ],
)
def test_a_correct_hash_outside_the_bounds_does_not_verify(
    argon: Argon2idPasswordHasher, m: int, t: int, p: int
) -> None:
    """The bounds are checked before anything is derived: a stored string asking for more is
    refused even when it is the password's true hash."""
    encoded = _reference("pw", m, t, p)

    assert argon.verify("pw", encoded) is False


def test_the_costliest_accepted_parameters_verify(argon: Argon2idPasswordHasher) -> None:
    """RFC 9106's second recommended setting (64 MiB, t=3, p=4) is within the bounds."""
    assert argon.verify("pw", _reference("pw", 64 * 1024, 3, 4)) is True


def test_argon2id_rejects_non_string_inputs(argon: Argon2idPasswordHasher) -> None:
    encoded = argon.hash("pw")

    assert argon.verify("pw", None) is False  # type: ignore[arg-type]
    assert argon.verify("pw", b"$argon2id$") is False  # type: ignore[arg-type]
    assert argon.verify(None, encoded) is False  # type: ignore[arg-type]


def test_argon2id_a_password_that_is_not_utf8_does_not_verify(argon: Argon2idPasswordHasher) -> None:
    assert argon.verify("\ud800", argon.hash("pw")) is False


@given(st.text(max_size=300))
@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
def test_argon2id_verify_never_raises_on_arbitrary_encodings(tail: str) -> None:
    hasher = Argon2idPasswordHasher()
    for encoded in (tail, "$argon2id$v=19$" + tail, "$argon2id$v=19$m=3072,t=1,p=4$" + tail):
        assert hasher.verify("pw", encoded) is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {"time_cost": 0},
        {"time_cost": 11},
        {"memory_kib": 16},
        {"memory_kib": 128 * 1024},
        {"parallelism": 0},
        {"parallelism": 17},
        {"salt_bytes": 4},
        {"hash_bytes": 8},
    ],
)
def test_argon2id_hasher_rejects_bad_parameters(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"must be|invalid argon2id parameters"):
        Argon2idPasswordHasher(**kwargs)
