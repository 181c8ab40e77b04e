"""External JWTs: one bearer token checked against the external JWT signers, and its claims read.

What logging in with an external JWT (``authentication/ext_jwt.py``) and enrolling with one
(``enrollment/token.py``) share. OpenZiti's checks (``model/token_issuer_cache.go``):

- the signer is the one whose ``issuer`` equals the token's ``iss`` exactly (or one named by the
  caller, whose issuer the token must then name), and it is enabled;
- the token's header names a ``kid``; the signer's key for it (its certificate, or its JWKS
  through the :class:`~engine.ports.ExternalJwtVerifier` port) verifies the signature;
- when the signer has an ``audience``, the token's ``aud`` contains it;
- the token has an ``exp`` (a number) and it has not passed (by the controller's clock: no
  leeway). OpenZiti accepts a token without ``exp``; one that never expires is no credential
  here;
- ``nbf`` and ``iat``, when present, are numbers and not later than :data:`LEEWAY` seconds from
  now (an identity provider's clock a little ahead is tolerated; OpenZiti checks ``nbf`` without
  leeway and ignores ``iat``).

A signer's claim selectors (``claimsProperty``, ``enrollNameClaimsSelector``,
``enrollAttributeClaimsSelector``) are JSON pointers or bare names (:func:`resolve_claim`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.entities.trust import ExternalJwtSigner
from engine.managers._base import Env
from engine.ports import JwtKeySource

#: Bearer tokens looked at per request (OpenZiti's ``MaxCandidateJwtProcessing`` is 2).
MAX_CANDIDATES = 2

#: Why a token failed (the ``error`` of a ``WWW-Authenticate`` challenge).
MISSING, INVALID, EXPIRED = "missing", "invalid", "expired"

#: Seconds an ``nbf`` or ``iat`` may lie ahead of the controller's clock (clock skew).
LEEWAY = 30

#: What :func:`resolve_claim` answers for a selector that names nothing in the claims.
MISSING_CLAIM: Any = object()


def resolve_claim(claims: dict[str, Any], selector: str) -> Any:
    """The claim a selector names, or :data:`MISSING_CLAIM`.

    A selector is a JSON pointer (RFC 6901: ``/``-separated, ``~1`` for ``/`` and ``~0`` for
    ``~``, numbers index arrays) or a bare name, read as ``/name`` (OpenZiti's
    ``resolveStringClaimSelector``).
    """
    pointer = selector if selector.startswith("/") else "/" + selector
    value: Any = claims
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isascii() and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING_CLAIM
    return value


def claim_value(claims: dict[str, Any], selector: str) -> Any:
    """The claim a signer's ``claimsProperty`` names (default ``sub``), None when there is none."""
    value = resolve_claim(claims, selector or "sub")
    return None if value is MISSING_CLAIM else value


def _audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list):
        return [a for a in aud if isinstance(a, str)]
    return []


def _number(value: Any) -> float | None:
    """A NumericDate claim as a float; None when it is not a number, too large for one, or not
    finite (JSON parsers read ``NaN`` and ``Infinity``: an ``exp`` of either would never pass)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _timing(claims: dict[str, Any], now: datetime) -> str | None:
    """Why the token's times refuse it (see the module's docstring), or None."""
    moment = now.timestamp()
    exp = _number(claims.get("exp"))
    if exp is None:
        return INVALID
    if moment >= exp:
        return EXPIRED
    for name in ("nbf", "iat"):
        if name in claims:
            value = _number(claims[name])
            if value is None or value > moment + LEEWAY:
                return INVALID
    return None


@dataclass(frozen=True)
class Verification:
    """One bearer token checked against the signers: its signer and claims, or why it failed."""

    signer: ExternalJwtSigner | None = None
    claims: dict[str, Any] | None = None
    #: ``""`` when the token verified, else :data:`INVALID` or :data:`EXPIRED`, or :data:`MISSING`
    #: when no enabled signer issues it (OpenZiti does not count such a token as a candidate).
    error: str = INVALID


def verify_token(env: Env, token: str, signer: ExternalJwtSigner | None = None) -> Verification:
    """Check ``token`` against the signer its ``iss`` names, or against ``signer`` (whose issuer
    the token must then name); see the module's docstring for the checks."""
    verifier = env.jwt_verifier
    peeked = verifier.peek(token)
    if peeked is None or peeked.kid is None:
        return Verification()
    issuer = peeked.claims.get("iss")
    if not isinstance(issuer, str):
        return Verification()
    if signer is None:
        signer = env.store.find_unique(ExternalJwtSigner, "issuer", issuer)
    if signer is None or signer.issuer != issuer or not signer.enabled:
        return Verification(error=MISSING)
    if signer.audience and signer.audience not in _audiences(peeked.claims):
        return Verification()
    source = JwtKeySource(cert_pem=signer.cert_pem, jwks_endpoint=signer.jwks_endpoint, kid=signer.kid)
    claims = verifier.verify(token, source)
    if claims is None:
        return Verification()
    timing = _timing(claims, env.clock.now())
    if timing is not None:
        return Verification(error=timing)
    return Verification(signer=signer, claims=claims, error="")
