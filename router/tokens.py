"""OIDC access tokens in SDK hellos: the router verifies them itself (docs/dataplane.md §4).

An SDK logged in through the controllers' OIDC provider (OpenZiti's Go SDK in HA mode) opens its
router channels with the JWT access token in the hello's session-token header (1002), where a
legacy SDK puts its ``zt-session`` token, and sends a fresh one on the open channel (UpdateToken,
60803) after each refresh. The router needs nobody to accept it:

- **the signature**: by the key of one of the network's controllers, found by the token's ``kid``
  (the SHA-1 fingerprint of that controller's certificate). The controllers tell the router their
  keys over the control connection (``SIGNING_KEYS``, :mod:`channel.control`), each the whole set
  it publishes at ``/oidc/keys``; the router trusts the union of the latest sets;
- **the claims**: ``z_t`` ``"a"`` (an access token), an audience of OpenZiti's clients
  (``openziti`` or ``native``), not expired, not before ``nbf`` (with :data:`LEEWAY`), a subject
  (the identity) and ``z_asid`` (the API session, as the controllers know it);
- **revocation**: an API session the controllers removed (``API_SESSION_REMOVED``, or missing
  from a full state) is remembered here for :data:`REVOKED_SECONDS`, longer than any access token
  lives, and its tokens are refused (:class:`Revocations`) unless a controller lists it again.

What the edge listener does with the claims (the certificate check, waiting for the controllers'
state) is in :mod:`router.edge`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

log = logging.getLogger(__name__)

#: ``z_t`` of an access token, and the audiences of OpenZiti's OIDC clients.
ACCESS_TYPE = "a"
AUDIENCES = frozenset({"openziti", "native"})
#: Seconds a token's ``nbf`` may be ahead of the router's clock, and its ``exp`` behind.
LEEWAY = 30.0
#: Algorithms a controller's key may sign with (RS256 for RSA keys, ES* for EC keys).
ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
#: Seconds a removed API session's tokens stay refused: longer than an access token lives (30 min).
REVOKED_SECONDS = 2 * 3600.0
#: Removed API sessions remembered at most (the oldest go first).
MAX_REVOKED = 100_000
#: Characters a token may have (a hello's header is bounded anyway).
MAX_TOKEN_CHARS = 8192


class TokenRefused(Exception):
    """A bearer token that does not verify: the reason, for the log and UpdateToken's failure."""


def is_bearer(token: str) -> bool:
    """Whether a session token is a JWT (three base64url parts, a JSON header: ``ey...``) rather
    than a legacy ``zt-session`` token (a UUID)."""
    return token.startswith("ey") and token.count(".") == 2


@dataclass(frozen=True, slots=True)
class AccessClaims:
    """What the router takes from a verified access token."""

    api_session_id: str
    identity_id: str
    #: Lowercase SHA-1 fingerprints of the certificates the login presented (``z_cfs``).
    fingerprints: frozenset[str]
    expires_at: float
    kid: str


class SigningKeys:
    """The controllers' public keys, by ``kid``: the latest set each control connection (a
    *source*) sent, merged. A source's set stays after its connection drops (its tokens stay
    verifiable while no controller is reachable) and is replaced by its next one."""

    def __init__(self) -> None:
        self._by_source: dict[object, dict[str, jwt.PyJWK]] = {}
        self._merged: dict[str, jwt.PyJWK] = {}

    def __len__(self) -> int:
        return len(self._merged)

    def kids(self) -> list[str]:
        return sorted(self._merged)

    def put(self, jwks: Iterable[Mapping[str, Any]], source: object = None) -> int:
        """``source``'s whole set (JWKs as ``/oidc/keys`` lists them); the keys taken. A JWK
        without a ``kid`` or that is not a signing key PyJWT can load is skipped."""
        keys: dict[str, jwt.PyJWK] = {}
        for value in jwks:
            kid = value.get("kid")
            if not isinstance(kid, str) or not kid:
                continue
            try:
                key = jwt.PyJWK(dict(value))
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as ex:
                log.warning("skipping signing key %s: %s", kid, ex)
                continue
            if key.algorithm_name not in ALGORITHMS:
                log.warning("skipping signing key %s: algorithm %s", kid, key.algorithm_name)
                continue
            keys[kid.strip().lower()] = key
        self._by_source[source] = keys
        self._merge()
        return len(keys)

    def _merge(self) -> None:
        merged: dict[str, jwt.PyJWK] = {}
        for held in self._by_source.values():
            merged.update(held)
        self._merged = merged

    def forget(self, source: object) -> None:
        """``source`` is gone for good (a controller removed from the network): its set goes."""
        if self._by_source.pop(source, None) is not None:
            self._merge()

    def get(self, kid: str) -> jwt.PyJWK | None:
        return self._merged.get(kid.strip().lower())

    def verify(self, token: str, *, now: float | None = None) -> AccessClaims:
        """The claims of an access token one of the keys signed (:class:`TokenRefused` otherwise)."""
        if len(token) > MAX_TOKEN_CHARS or not is_bearer(token):
            raise TokenRefused("not a JWT")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as ex:
            raise TokenRefused(f"unreadable JWT: {ex}") from None
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise TokenRefused("the JWT names no kid")
        key = self.get(kid)
        if key is None:
            raise TokenRefused(f"no controller's key has kid {kid}")
        if header.get("alg") != key.algorithm_name:
            raise TokenRefused(f"the JWT's alg {header.get('alg')!r} is not its key's")
        moment = time.time() if now is None else now
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm_name],
                options={"verify_aud": False, "verify_exp": False, "verify_nbf": False, "verify_iat": False},
            )
        except jwt.PyJWTError as ex:
            raise TokenRefused(f"the JWT does not verify: {ex}") from None
        if claims.get("z_t") != ACCESS_TYPE:
            raise TokenRefused(f"not an access token (z_t {claims.get('z_t')!r})")
        audience = claims.get("aud")
        audiences = {audience} if isinstance(audience, str) else set(audience or ())
        if not audiences & AUDIENCES:
            raise TokenRefused(f"audience {sorted(map(str, audiences))} is none of OpenZiti's clients")
        exp, nbf = _number(claims.get("exp")), _number(claims.get("nbf"))
        if exp is None:
            raise TokenRefused("the JWT has no exp")
        if exp <= moment - LEEWAY:
            raise TokenRefused("the JWT has expired")
        if nbf is not None and nbf > moment + LEEWAY:
            raise TokenRefused("the JWT is not valid yet")
        session_id, subject = claims.get("z_asid"), claims.get("sub")
        if not isinstance(session_id, str) or not session_id or not isinstance(subject, str) or not subject:
            raise TokenRefused("the JWT names no API session (z_asid) or identity (sub)")
        prints = claims.get("z_cfs")
        fingerprints = frozenset(
            p.lower() for p in (prints if isinstance(prints, list) else []) if isinstance(p, str)
        )
        return AccessClaims(
            api_session_id=session_id,
            identity_id=subject,
            fingerprints=fingerprints,
            expires_at=exp,
            kid=kid,
        )


class Revocations:
    """API sessions the controllers removed, remembered for :data:`REVOKED_SECONDS` so that their
    still-unexpired access tokens open no channel (a JWT hello needs no pushed session)."""

    def __init__(self, keep_seconds: float = REVOKED_SECONDS, limit: int = MAX_REVOKED) -> None:
        self.keep_seconds = keep_seconds
        self.limit = limit
        self._at: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._at)

    def add(self, session_ids: Iterable[str], *, now: float | None = None) -> None:
        moment = time.monotonic() if now is None else now
        for session_id in session_ids:
            self._at.pop(session_id, None)
            self._at[session_id] = moment
        self._prune(moment)

    def discard(self, session_ids: Iterable[str]) -> None:
        """The controllers list these sessions again (a push that came late after a full state
        that missed them): no longer refused."""
        for session_id in session_ids:
            self._at.pop(session_id, None)

    def __contains__(self, session_id: object) -> bool:
        at = self._at.get(session_id) if isinstance(session_id, str) else None
        return at is not None and time.monotonic() - at < self.keep_seconds

    def _prune(self, moment: float) -> None:
        while self._at:
            oldest, at = next(iter(self._at.items()))
            if len(self._at) <= self.limit and moment - at < self.keep_seconds:
                return
            del self._at[oldest]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
