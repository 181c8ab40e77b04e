"""``method=ext-jwt``: a JWT from an external identity provider, sent as ``Authorization: Bearer``.

OpenZiti's rules (``model/authenticator_mod_ext_jwt.go``, ``model/token_provider_cache.go``);
every refusal is 401 ``INVALID_AUTH`` with a ``WWW-Authenticate`` challenge naming the signers
that would have been accepted (realm ``openziti-primary-ext-jwt``, error ``missing``,
``invalid`` or ``expired``):

- the token passes :func:`~engine.managers.external_jwts.verify_token`: the signer its ``iss``
  names is enabled, its key for the token's ``kid`` verifies the signature, the audience matches,
  it has an ``exp`` that has not passed, and its ``nbf`` and ``iat`` have come (give or take a
  minute of clock skew);
- the signer's ``claimsProperty`` (default ``sub``; a JSON pointer reaches into nested claims)
  holds a non-empty string: the identity's id, or its ``externalId`` when the signer has
  ``useExternalId``;
- the identity's auth policy allows ``extJwt`` and, when it lists ``allowedSigners``, this signer.

The same check serves an auth policy's ``secondary.requireExtJwtSigner``: on every request of a
session, a bearer token of that signer must name the session's identity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.entities.identities import Authenticator, Identity
from engine.entities.trust import ExternalJwtSigner
from engine.errors import InvalidAuthError
from engine.managers._base import Env
from engine.managers.auth_policies import rules_for
from engine.managers.authentication._core import LoginAttempt
from engine.managers.external_jwts import EXPIRED, INVALID, MAX_CANDIDATES, MISSING, claim_value, verify_token

REALM_PRIMARY = "openziti-primary-ext-jwt"
REALM_SECONDARY = "openziti-secondary-ext-jwt"

_DESCRIPTIONS = {
    MISSING: "no matching token was provided",
    INVALID: "token is invalid",
    EXPIRED: "token expired",
}


def authenticator_id(signer: ExternalJwtSigner) -> str:
    """The authenticator id an ext-jwt API session reports (OpenZiti: ``extJwtId:<signer id>``)."""
    return f"extJwtId:{signer.id}"


def _quoted(value: str) -> str:
    """``value`` escaped for a quoted-string of an auth-param (RFC 7235: ``\\`` and ``"``)."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def challenge(realm: str, error: str, signers: Sequence[ExternalJwtSigner]) -> str:
    """A ``WWW-Authenticate`` value naming the acceptable signers (ids and issuers ``|``-joined)."""
    ids = _quoted("|".join(s.id for s in signers))
    issuers = _quoted("|".join(s.issuer for s in signers))
    return (
        f'Bearer realm="{realm}" error="{error}" error_description="{_DESCRIPTIONS[error]}" '
        f'id="{ids}" issuer="{issuers}"'
    )


@dataclass(frozen=True)
class ExtJwtProof:
    identity: Identity
    signer: ExternalJwtSigner
    #: A stand-in (never stored) whose id is ``extJwtId:<signer id>``.
    authenticator: Authenticator


@dataclass(frozen=True)
class _Outcome:
    identity: Identity | None = None
    signer: ExternalJwtSigner | None = None
    error: str = INVALID


def _challenge_error(errors: Sequence[str]) -> str:
    """The challenge's ``error``: ``missing`` unless some token was a candidate (issued by a signer)."""
    candidates = [e for e in errors if e != MISSING]
    if not candidates:
        return MISSING
    return EXPIRED if EXPIRED in candidates else INVALID


class ExtJwtCheck:
    def __init__(self, env: Env) -> None:
        self.env = env

    # -- primary ---------------------------------------------------------------------------------
    def prove(self, tokens: Sequence[str], attempt: LoginAttempt | None = None) -> ExtJwtProof:
        """Who the first acceptable bearer token proves the caller is, or ``INVALID_AUTH``
        (``attempt`` learns who it was for and why it was refused; never the token)."""
        errors: list[str] = []
        for token in list(tokens)[:MAX_CANDIDATES]:
            outcome = self._check(token)
            if outcome.identity is None or outcome.signer is None:
                errors.append(outcome.error)
                continue
            if not rules_for(self.env.store, outcome.identity).ext_jwt.allows(outcome.signer.id):
                if attempt is not None:
                    attempt.refuse(
                        f"the auth policy does not allow signer {outcome.signer.id}", outcome.identity
                    )
                errors.append(INVALID)
                continue
            return ExtJwtProof(
                identity=outcome.identity,
                signer=outcome.signer,
                authenticator=self._stand_in(outcome.identity, outcome.signer),
            )
        error = _challenge_error(errors)
        if attempt is not None:
            attempt.refuse(f"no acceptable token ({error})")
        signers = [s for s in self.env.store.all(ExternalJwtSigner) if s.enabled]
        raise InvalidAuthError(
            reason="no valid external JWT was provided",
            headers={"WWW-Authenticate": challenge(REALM_PRIMARY, error, signers)},
        )

    # -- secondary -------------------------------------------------------------------------------
    def satisfies(self, identity: Identity, signer_id: str, tokens: Sequence[str]) -> bool:
        """Whether a bearer token of signer ``signer_id`` names ``identity`` (a secondary factor)."""
        for token in list(tokens)[:MAX_CANDIDATES]:
            outcome = self._check(token)
            if (
                outcome.signer is not None
                and outcome.signer.id == signer_id
                and outcome.identity is not None
                and outcome.identity.id == identity.id
            ):
                return True
        return False

    def secondary_challenge(self, signer_id: str, tokens: Sequence[str]) -> str:
        """The ``WWW-Authenticate`` value of a missing or failing secondary ext-jwt."""
        signer = self.env.store.get(ExternalJwtSigner, signer_id)
        errors = []
        for token in list(tokens)[:MAX_CANDIDATES]:
            # only tokens the required signer issued are candidates (OpenZiti's
            # GetExternalTokenForExtJwtSigner); any other token counts as not sent
            peeked = self.env.jwt_verifier.peek(token)
            if signer is None or peeked is None or peeked.claims.get("iss") != signer.issuer:
                errors.append(MISSING)
            else:
                errors.append(self._check(token).error)
        return challenge(REALM_SECONDARY, _challenge_error(errors), [signer] if signer is not None else [])

    # -- one token -------------------------------------------------------------------------------
    def _check(self, token: str) -> _Outcome:
        verified = verify_token(self.env, token)
        signer, claims = verified.signer, verified.claims
        if signer is None or claims is None:
            return _Outcome(error=verified.error)
        value = claim_value(claims, signer.claims_property)
        if not isinstance(value, str) or not value:
            return _Outcome()
        if signer.use_external_id:
            identity = self.env.store.find_unique(Identity, "external_id", value)
        else:
            identity = self.env.store.get(Identity, value)
        if identity is None:
            return _Outcome()
        return _Outcome(identity=identity, signer=signer, error="")

    @staticmethod
    def _stand_in(identity: Identity, signer: ExternalJwtSigner) -> Authenticator:
        return Authenticator(
            id=authenticator_id(signer),
            created_at=signer.created_at,
            updated_at=signer.updated_at,
            identity_id=identity.id,
            method="ext-jwt",
        )
