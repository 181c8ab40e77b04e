"""Trusting the network before enrolling (no session): ``GET /network-jwts`` (both APIs, enveloped),
``GET /enroll/jwks`` and ``POST /enroll/challenge`` (client API; their answers are the bare
``jwks`` and ``nonceSignature`` documents, as the spec declares them, not ``{data, meta}``).

The use cases and what OpenZiti does are in :mod:`engine.managers.enrollment.trust`.
"""

from __future__ import annotations

import falcon

from api.http import ok, read_model
from api.middleware import NONE
from api.routing import Routes
from api.schemas.enroll_trust import NonceChallenge, nonce_signature
from engine.managers.enrollment.trust import EnrollmentTrust


class NetworkJwtsResource:
    """``GET /network-jwts``: ``[{name, token}]``, the JWT to enroll from without a made identity."""

    auth = NONE

    def __init__(self, trust: EnrollmentTrust) -> None:
        self.trust = trust

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, [{"name": jwt.name, "token": jwt.token} for jwt in self.trust.network_jwts()])


class EnrollmentJwksResource:
    """``GET /enroll/jwks``: ``{keys: [...]}``, the public keys that sign enrollment JWTs."""

    auth = NONE

    def __init__(self, trust: EnrollmentTrust) -> None:
        self.trust = trust

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"keys": self.trust.jwks()}


class EnrollmentChallengeResource:
    """``POST /enroll/challenge``: a nonce signed with the enrollment key the caller names."""

    auth = NONE
    body_models = {"post": NonceChallenge}

    def __init__(self, trust: EnrollmentTrust) -> None:
        self.trust = trust

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_model(req, NonceChallenge)
        resp.media = nonce_signature(self.trust.challenge(body.nonce, body.key_id))


def register(routes: Routes) -> None:
    trust = routes.managers.enrollment_trust
    routes.both("/network-jwts", NetworkJwtsResource(trust))
    routes.client("/enroll/jwks", EnrollmentJwksResource(trust))
    routes.client("/enroll/challenge", EnrollmentChallengeResource(trust))
