"""Password hashing (scrypt) and random password generation.

Hashes are self-describing strings::

    scrypt$<n>$<r>$<p>$<b64salt>$<b64hash>

``n``, ``r`` and ``p`` are the scrypt cost parameters in decimal; salt and hash are standard,
padded base64. Because the parameters travel with the hash, the defaults can be raised later and
old hashes still verify (:meth:`ScryptPasswordHasher.needs_rehash` tells when to upgrade one).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import string

__all__ = ["ScryptPasswordHasher", "generate_password"]

_SCHEME = "scrypt"
_SEPARATOR = "$"

# Bounds on what ``verify`` accepts from an encoded string, so that a stored (or attacker-supplied)
# value cannot make one verification allocate gigabytes or spin for minutes.
_MAX_N = 2**20
_MAX_R = 32
_MAX_P = 16
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
    return power_of_two and n <= _MAX_N and 0 < r <= _MAX_R and 0 < p <= _MAX_P


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


def generate_password(length: int = 24) -> str:
    """A random password of ``length`` characters from the URL-safe alphabet ``[A-Za-z0-9_-]``."""
    if length < 1:
        raise ValueError("length must be at least 1")
    return "".join(secrets.choice(_URL_SAFE_ALPHABET) for _ in range(length))
