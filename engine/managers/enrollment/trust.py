"""Bootstrapping trust in the network before enrolling: the network JWT, the enrollment JWKS and
the nonce challenge (client API ``GET /network-jwts``, ``GET /enroll/jwks``,
``POST /enroll/challenge``; no authentication).

The network JWT is what a device enrolls from when no identity was made for it in advance
(enrollment with an external JWT): OpenZiti's ``routes/network-jwt_router.go`` signs one per
controller process, named ``default``, with the enrollment signer (the API listener's TLS key, as
every enrollment JWT) and the claims ``iss`` = ``sub`` = ``https://<edge API address>/`` (with the
trailing slash), ``aud`` = ``["openziti-enroller"]``, ``em`` = ``network``, a random ``jti`` and
``ctrls`` = null (the SDK's ``EnrollmentClaims`` field, never filled there); no ``exp`` and no
``iat``. It is signed on first use and kept: every later call answers the same token.

The JWKS lists the public key of that signer. The challenge signs a caller's nonce (a UUID) with
the key the caller names by ``kid``, so the caller can check with the JWKS key that the host
holds the key behind the JWTs, and answers the CA bundle (``caPool``) to trust afterwards.
OpenZiti's spec defines both operations; its controller does not serve them (501) at the time of
writing (docs/api.md §6.3), so the signature format is ours: the JWS signature of the nonce's
UTF-8 bytes (``pki.tokens``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from engine.errors import FieldError
from engine.managers._base import Env
from engine.managers.enrollment._core import EnrollmentSettings

#: The ``em`` claim of a network JWT, and its audience.
NETWORK = "network"
NETWORK_AUDIENCE = "openziti-enroller"
#: The name of the one network JWT a controller serves.
DEFAULT_NETWORK_JWT = "default"


@dataclass(frozen=True)
class NetworkJwt:
    name: str
    token: str


@dataclass(frozen=True)
class NonceSignature:
    """A signed nonce: the signature, the JWS algorithm, the key's ``kid`` and the CA bundle PEM."""

    signature: str
    algorithm: str
    kid: str
    ca_pool: str


def network_claims(settings: EnrollmentSettings, jti: str) -> dict[str, Any]:
    """The claims of the network JWT (no ``exp``, no ``iat``, as OpenZiti)."""
    issuer = settings.issuer.rstrip("/") + "/"
    return {"iss": issuer, "sub": issuer, "aud": [NETWORK_AUDIENCE], "jti": jti, "em": NETWORK, "ctrls": None}


class EnrollmentTrust:
    """The unauthenticated operations a device uses to trust the network it is about to join."""

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        self.env = env
        self.settings = settings
        self._lock = threading.Lock()
        self._network_jwt: str | None = None

    def network_jwts(self) -> list[NetworkJwt]:
        """The network JWTs: the one ``default`` token, signed on first use and kept."""
        with self._lock:
            if self._network_jwt is None:
                self._network_jwt = self.env.tokens.sign(
                    network_claims(self.settings, self.env.ids.new_token())
                )
            return [NetworkJwt(DEFAULT_NETWORK_JWT, self._network_jwt)]

    def jwks(self) -> list[dict[str, Any]]:
        """The public JWKs of the keys that sign enrollment JWTs."""
        return self.env.tokens.public_jwks()

    def challenge(self, nonce: str, key_id: str) -> NonceSignature:
        """``nonce`` signed with the enrollment key ``key_id``; an unknown ``key_id`` is a field error."""
        signed = self.env.tokens.sign_detached(nonce.encode("utf-8"), key_id)
        if signed is None:
            raise FieldError("keyId", "keyId is not the id of an enrollment signing key", key_id)
        algorithm, signature = signed
        return NonceSignature(signature, algorithm, key_id, self.env.ca.ca_bundle_pem())
