"""TOTP MFA (``engine.ports.TotpService``) through pyotp, with OpenZiti's sizes.

OpenZiti (``controller/model/mfa_manager.go``) issues a secret of 10 random bytes in base32 (16
characters), 20 recovery codes of 6 base32 characters each (the first six characters of 8 random
bytes in base32), and accepts a code within a window of 5 steps (dgoogauth's ``WindowSize: 5``:
two 30-second steps either side of now). The provisioning URL names the identity under the
issuer ``openziti.io`` (its default ``edge.totp.hostname``).

pyotp 2.12 refuses secrets under 112 bits (NIST SP 800-63B); OpenZiti's are 80 bits, so codes
are computed by pyotp with that one check relaxed to OpenZiti's size (:class:`_Totp`).
"""

from __future__ import annotations

import base64
import hmac
import secrets
from datetime import datetime

import pyotp

DEFAULT_ISSUER = "openziti.io"
SECRET_BYTES = 10
RECOVERY_CODES = 20
RECOVERY_CODE_LENGTH = 6
#: Steps accepted either side of the current one.
WINDOW = 2
#: Digits of a code.
DIGITS = 6


def _base32(raw: bytes) -> str:
    return base64.b32encode(raw).decode("ascii").replace("=", "")


class _Totp(pyotp.TOTP):
    """pyotp's TOTP for secrets of at least OpenZiti's 10 bytes."""

    def byte_secret(self) -> bytes:
        padded = self.secret + "=" * (-len(self.secret) % 8)
        decoded = base64.b32decode(padded, casefold=True)
        if len(decoded) < SECRET_BYTES:
            raise ValueError(f"TOTP secrets must be at least {SECRET_BYTES * 8} bits")
        return decoded


class PyotpTotp:
    """RFC 6238 codes (SHA-1, 6 digits, 30 s) checked with pyotp at the time the caller gives."""

    def __init__(self, issuer: str = DEFAULT_ISSUER) -> None:
        self.issuer = issuer

    def new_secret(self) -> str:
        return _base32(secrets.token_bytes(SECRET_BYTES))

    def new_recovery_codes(self) -> list[str]:
        return [_base32(secrets.token_bytes(8))[:RECOVERY_CODE_LENGTH] for _ in range(RECOVERY_CODES)]

    def step(self, secret: str, code: str, at: datetime) -> int | None:
        """The time step of ``code`` within :data:`WINDOW` steps of ``at`` (now first, then the
        nearest); each candidate is compared in constant time."""
        if not code or not code.isdigit() or len(code) != DIGITS:
            return None
        try:
            totp = _Totp(secret)
            now = totp.timecode(at)
            for offset in sorted(range(-WINDOW, WINDOW + 1), key=abs):
                if hmac.compare_digest(totp.generate_otp(now + offset), code):
                    return now + offset
        except (ValueError, TypeError):  # a corrupt secret never verifies
            return None
        return None

    def verify(self, secret: str, code: str, at: datetime) -> bool:
        """Whether ``code`` is a TOTP of ``secret`` within the window around ``at``."""
        return self.step(secret, code, at) is not None

    def provisioning_url(self, secret: str, account: str) -> str:
        return _Totp(secret).provisioning_uri(name=account, issuer_name=self.issuer)


def totp_code(secret: str, at: datetime) -> str:
    """The TOTP code of ``secret`` at ``at`` (what an authenticator app shows then)."""
    return _Totp(secret).at(at)
