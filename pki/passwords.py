"""Password hashing (argon2id; scrypt hashes of older databases still verify) and random passwords.

Hashes are self-describing strings. New ones are argon2id in the PHC string format::

    $argon2id$v=19$m=<memory KiB>,t=<passes>,p=<lanes>$<b64salt>$<b64hash>

salt and hash in standard base64 without padding, as OpenZiti's controller and most argon2
libraries write it. The defaults are OpenZiti's (``t=1``, 3 MiB, ``p=4``, a 32-byte hash; the salt
is 16 random bytes where OpenZiti's is 10). Hashes made before argon2id are scrypt::

    scrypt$<n>$<r>$<p>$<b64salt>$<b64hash>

``n``, ``r`` and ``p`` in decimal, salt and hash in standard, padded base64. Because the parameters
travel with the hash, the defaults can be raised later and old hashes still verify:
``needs_rehash`` says when a stored hash should be replaced (the password login does it,
``engine/managers/authentication/password.py``). Every parameter read from a stored string is
bounded before anything is derived, so that a stored (or attacker-supplied) value cannot make one
verification allocate gigabytes or spin for seconds; a malformed or out-of-bounds string simply
does not match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import string

from argon2.exceptions import HashingError
from argon2.low_level import ARGON2_VERSION, Type, core, error_to_str, ffi

__all__ = ["Argon2idPasswordHasher", "ScryptPasswordHasher", "generate_password"]

_SCHEME = "scrypt"
_SEPARATOR = "$"

# Bounds on what ``verify`` accepts from an encoded string, so that a stored (or attacker-supplied)
# value cannot make one verification allocate gigabytes or spin for seconds.
_MAX_N = 2**20
_MAX_R = 32
_MAX_P = 16
_MAX_WORK = 2**20  # n * r * p: 8 times the default's (128 MiB mixed at most; about a second)
_MIN_DKLEN = 16
_MAX_DKLEN = 128
_MAX_SALT_BYTES = 64
_MAXMEM = 256 * 1024 * 1024  # bytes; scrypt needs about 128 * n * r (+ 128 * r * p)

_URL_SAFE_ALPHABET = string.ascii_letters + string.digits + "-_"


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _valid_params(n: int, r: int, p: int) -> bool:
    """Whether scrypt parameters are well formed and within the accepted bounds."""
    power_of_two = n > 1 and (n & (n - 1)) == 0
    in_bounds = n <= _MAX_N and 0 < r <= _MAX_R and 0 < p <= _MAX_P
    return power_of_two and in_bounds and n * r * p <= _MAX_WORK


class ScryptPasswordHasher:
    """Hash and verify passwords with scrypt (memory-hard).

    The defaults (``n=2**14``, ``r=8``, ``p=1``) use about 16 MiB and a few tens of
    milliseconds per hash. The salt is 16 random bytes per hash; the derived key is 32 bytes.
    """

    def __init__(
        self,
        *,
        n: int = 2**14,
        r: int = 8,
        p: int = 1,
        salt_bytes: int = 16,
        dklen: int = 32,
    ) -> None:
        if not _valid_params(n, r, p):
            raise ValueError(f"invalid scrypt parameters n={n} r={r} p={p}")
        if not 8 <= salt_bytes <= _MAX_SALT_BYTES:
            raise ValueError(f"salt_bytes must be between 8 and {_MAX_SALT_BYTES}")
        if not _MIN_DKLEN <= dklen <= _MAX_DKLEN:
            raise ValueError(f"dklen must be between {_MIN_DKLEN} and {_MAX_DKLEN}")
        self.n = n
        self.r = r
        self.p = p
        self.salt_bytes = salt_bytes
        self.dklen = dklen

    def hash(self, password: str) -> str:
        """Hash ``password`` with a fresh random salt; returns the encoded string."""
        salt = secrets.token_bytes(self.salt_bytes)
        digest = self._derive(password, salt, self.n, self.r, self.p, self.dklen)
        fields = [_SCHEME, str(self.n), str(self.r), str(self.p), _b64encode(salt)]
        return _SEPARATOR.join([*fields, _b64encode(digest)])

    def verify(self, password: str, encoded: str) -> bool:
        """Whether ``password`` matches ``encoded``.

        Accepts any (bounded) parameters found in ``encoded``. Never raises: a malformed or
        unsupported encoding simply does not match. The comparison is constant-time.
        """
        parsed = self._parse(encoded)
        if parsed is None:
            return False
        n, r, p, salt, expected = parsed
        try:
            actual = self._derive(password, salt, n, r, p, len(expected))
        except (ValueError, MemoryError, UnicodeError):
            return False
        return hmac.compare_digest(actual, expected)

    def needs_rehash(self, encoded: str) -> bool:
        """Whether ``encoded`` was made with other parameters than this hasher's (or is invalid)."""
        parsed = self._parse(encoded)
        if parsed is None:
            return True
        n, r, p, salt, digest = parsed
        current = (self.n, self.r, self.p, self.salt_bytes, self.dklen)
        return (n, r, p, len(salt), len(digest)) != current

    @staticmethod
    def _derive(password: str, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
        return hashlib.scrypt(
            password.encode("utf-8"),
            salt=salt,
            n=n,
            r=r,
            p=p,
            maxmem=_MAXMEM,
            dklen=dklen,
        )

    @staticmethod
    def _parse(encoded: object) -> tuple[int, int, int, bytes, bytes] | None:
        """Split an encoded hash into (n, r, p, salt, digest), or None when malformed."""
        if not isinstance(encoded, str):
            return None
        parts = encoded.split(_SEPARATOR)
        if len(parts) != 6 or parts[0] != _SCHEME:
            return None
        _, n_text, r_text, p_text, salt_text, digest_text = parts
        if not all(text.isascii() and text.isdigit() for text in (n_text, r_text, p_text)):
            return None
        n, r, p = int(n_text), int(r_text), int(p_text)
        if not _valid_params(n, r, p):
            return None
        try:
            salt = _b64decode(salt_text)
            digest = _b64decode(digest_text)
        except (binascii.Error, ValueError):
            return None
        if not salt or len(salt) > _MAX_SALT_BYTES:
            return None
        if not _MIN_DKLEN <= len(digest) <= _MAX_DKLEN:
            return None
        return n, r, p, salt, digest


# -- argon2id -------------------------------------------------------------------------------------

_ARGON2_PREFIX = "$argon2id$"
_ARGON2_VERSION_FIELD = f"v={ARGON2_VERSION}"  # 19, Argon2 1.3: the only version made or accepted
# Bounds on what ``verify`` accepts from an encoded string (and on a hasher's own parameters). RFC
# 9106's second recommended setting (64 MiB, t=3, p=4) is the costliest accepted: about 0.3 s here.
_ARGON2_MAX_MEMORY_KIB = 64 * 1024
_ARGON2_MAX_TIME = 10
_ARGON2_MAX_WORK_KIB = 3 * 64 * 1024  # memory * passes
_ARGON2_MAX_LANES = 16  # also the threads one verification starts
_ARGON2_MIN_SALT, _ARGON2_MAX_SALT = 8, 64
_ARGON2_MIN_HASH, _ARGON2_MAX_HASH = 16, 128
# No accepted string is longer: three parameters of at most 10 digits, 64 + 128 bytes in base64.
_ARGON2_MAX_ENCODED = 320
_B64_ALPHABET = frozenset(string.ascii_letters + string.digits + "+/")
_MAX_DIGITS = 10


def _valid_argon2(memory_kib: int, time_cost: int, lanes: int) -> bool:
    """Whether argon2id parameters are well formed and within the accepted bounds."""
    return (
        1 <= time_cost <= _ARGON2_MAX_TIME
        and 1 <= lanes <= _ARGON2_MAX_LANES
        and 8 * lanes <= memory_kib <= _ARGON2_MAX_MEMORY_KIB
        and memory_kib * time_cost <= _ARGON2_MAX_WORK_KIB
    )


def _b64encode_unpadded(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")


def _b64decode_unpadded(text: str) -> bytes | None:
    """Standard base64 without padding (PHC), or None when it is not that."""
    if not text or len(text) % 4 == 1 or not _B64_ALPHABET.issuperset(text):
        return None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None


def _decimal(text: str) -> int | None:
    """A PHC decimal (ASCII digits, no sign, no leading zero, at most 10 digits), or None."""
    if not text or len(text) > _MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    if len(text) > 1 and text[0] == "0":
        return None
    return int(text)


def _parse_argon2(encoded: object) -> tuple[int, int, int, bytes, bytes] | None:
    """Split a PHC argon2id string into (memory KiB, passes, lanes, salt, hash), or None when it is
    malformed, of another algorithm or version, or outside the bounds."""
    if not isinstance(encoded, str) or len(encoded) > _ARGON2_MAX_ENCODED:
        return None
    if not encoded.startswith(_ARGON2_PREFIX):
        return None
    parts = encoded.split(_SEPARATOR)
    if len(parts) != 6 or parts[2] != _ARGON2_VERSION_FIELD:
        return None
    params = parts[3].split(",")
    if len(params) != 3:
        return None
    values: list[int] = []
    for param, name in zip(params, ("m", "t", "p"), strict=True):
        key, eq, text = param.partition("=")
        value = _decimal(text)
        if key != name or not eq or value is None:
            return None
        values.append(value)
    memory_kib, time_cost, lanes = values
    if not _valid_argon2(memory_kib, time_cost, lanes):
        return None
    salt, digest = _b64decode_unpadded(parts[4]), _b64decode_unpadded(parts[5])
    if salt is None or not _ARGON2_MIN_SALT <= len(salt) <= _ARGON2_MAX_SALT:
        return None
    if digest is None or not _ARGON2_MIN_HASH <= len(digest) <= _ARGON2_MAX_HASH:
        return None
    return memory_kib, time_cost, lanes, salt, digest


class Argon2idPasswordHasher:
    """Hash passwords with argon2id (memory-hard; argon2-cffi's binding of the reference C code);
    verify argon2id hashes and the scrypt hashes of databases made before it.

    The defaults are OpenZiti's controller's (``time_cost=1``, ``memory_kib=3072``,
    ``parallelism=4``, a 32-byte hash) with a 16-byte salt: a few milliseconds per hash here,
    where scrypt at ``n=2**14, r=8`` took some 65 ms. :meth:`needs_rehash` is true for a scrypt
    hash and for an argon2id hash of other parameters, so that a login can replace it.
    """

    def __init__(
        self,
        *,
        time_cost: int = 1,
        memory_kib: int = 3 * 1024,
        parallelism: int = 4,
        salt_bytes: int = 16,
        hash_bytes: int = 32,
    ) -> None:
        if not _valid_argon2(memory_kib, time_cost, parallelism):
            raise ValueError(
                f"invalid argon2id parameters m={memory_kib} t={time_cost} p={parallelism}: "
                f"at most {_ARGON2_MAX_MEMORY_KIB} KiB, t {_ARGON2_MAX_TIME}, p {_ARGON2_MAX_LANES}, "
                f"memory x t {_ARGON2_MAX_WORK_KIB}, and memory at least 8 KiB per lane"
            )
        if not _ARGON2_MIN_SALT <= salt_bytes <= _ARGON2_MAX_SALT:
            raise ValueError(f"salt_bytes must be between {_ARGON2_MIN_SALT} and {_ARGON2_MAX_SALT}")
        if not _ARGON2_MIN_HASH <= hash_bytes <= _ARGON2_MAX_HASH:
            raise ValueError(f"hash_bytes must be between {_ARGON2_MIN_HASH} and {_ARGON2_MAX_HASH}")
        self.time_cost = time_cost
        self.memory_kib = memory_kib
        self.parallelism = parallelism
        self.salt_bytes = salt_bytes
        self.hash_bytes = hash_bytes
        self._scrypt = ScryptPasswordHasher()

    def hash(self, password: str) -> str:
        """Hash ``password`` with a fresh random salt; returns the PHC string."""
        salt = secrets.token_bytes(self.salt_bytes)
        digest = _argon2id(password, salt, self.memory_kib, self.time_cost, self.parallelism, self.hash_bytes)
        params = f"m={self.memory_kib},t={self.time_cost},p={self.parallelism}"
        return (
            f"{_ARGON2_PREFIX}{_ARGON2_VERSION_FIELD}${params}"
            f"${_b64encode_unpadded(salt)}${_b64encode_unpadded(digest)}"
        )

    def verify(self, password: str, encoded: str) -> bool:
        """Whether ``password`` matches ``encoded`` (argon2id, or scrypt of an older database).

        Accepts any (bounded) parameters found in ``encoded``. Never raises: a malformed,
        unsupported or out-of-bounds encoding simply does not match. The comparison is
        constant-time.
        """
        if not isinstance(password, str):
            return False
        if isinstance(encoded, str) and encoded.startswith(_SCHEME + _SEPARATOR):
            return self._scrypt.verify(password, encoded)
        parsed = _parse_argon2(encoded)
        if parsed is None:
            return False
        memory_kib, time_cost, lanes, salt, expected = parsed
        try:
            actual = _argon2id(password, salt, memory_kib, time_cost, lanes, len(expected))
        except (HashingError, ValueError, MemoryError, UnicodeError):
            return False
        return hmac.compare_digest(actual, expected)

    def needs_rehash(self, encoded: str) -> bool:
        """Whether ``encoded`` is not an argon2id hash of exactly this hasher's parameters (a scrypt
        hash, other parameters, or nothing valid)."""
        parsed = _parse_argon2(encoded)
        if parsed is None:
            return True
        memory_kib, time_cost, lanes, salt, digest = parsed
        current = (self.memory_kib, self.time_cost, self.parallelism, self.salt_bytes, self.hash_bytes)
        return (memory_kib, time_cost, lanes, len(salt), len(digest)) != current


def _argon2id(password: str, salt: bytes, memory_kib: int, time_cost: int, lanes: int, length: int) -> bytes:
    """argon2id of ``password``, its ``lanes`` computed one after the other on the calling thread.

    argon2's lanes are part of the hash (``p``); the threads that compute them are not, and the
    reference code's high-level call starts one thread per lane for every hash. A server hashes
    for many logins at once, so the concurrency is already there: starting and joining four
    threads per hash costs about a third more CPU for the same bytes (measured here: 3.4 against
    5.0 ms a hash at OpenZiti's parameters).
    """
    secret = password.encode("utf-8")
    out = ffi.new("uint8_t[]", length)
    pwd = ffi.new("uint8_t[]", secret)
    salt_buffer = ffi.new("uint8_t[]", salt)
    context = ffi.new(
        "argon2_context *",
        {
            "version": ARGON2_VERSION,
            "out": out,
            "outlen": length,
            "pwd": pwd,
            "pwdlen": len(secret),
            "salt": salt_buffer,
            "saltlen": len(salt),
            "secret": ffi.NULL,
            "secretlen": 0,
            "ad": ffi.NULL,
            "adlen": 0,
            "t_cost": time_cost,
            "m_cost": memory_kib,
            "lanes": lanes,
            "threads": 1,
            "allocate_cbk": ffi.NULL,
            "free_cbk": ffi.NULL,
            "flags": 0,
        },
    )
    code = core(context, Type.ID.value)
    if code != 0:
        raise HashingError(error_to_str(code))
    return bytes(ffi.buffer(out, length))


def generate_password(length: int = 24) -> str:
    """A random password of ``length`` characters from the URL-safe alphabet ``[A-Za-z0-9_-]``."""
    if length < 1:
        raise ValueError("length must be at least 1")
    return "".join(secrets.choice(_URL_SAFE_ALPHABET) for _ in range(length))
