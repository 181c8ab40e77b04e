"""Secondary factors: what an API session still owes before it is fully authenticated.

As OpenZiti's ``env.ProcessAuthQueries``, worked out on every request from the session and the
identity's current auth policy:

- TOTP, when the session requires MFA (the identity had verified MFA at login, or its policy
  requires TOTP) or the policy requires TOTP now, until the session completes MFA. An identity
  that must use TOTP but has not enrolled yet can still enroll: the MFA enrollment operations
  are open to a partially authenticated session, and verifying the enrollment completes MFA;
- an external JWT, when the policy names ``secondary.requireExtJwtSigner``: every request must
  carry a bearer token of that signer naming the session's identity.

Each unmet factor is an :class:`AuthQuery` in the session's ``authQueries``; while there is one,
the session is partially authenticated. The default admin owes only its own MFA, never factors
its policy imposes (:func:`~engine.managers.auth_policies.secondary_for`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.entities.identities import ApiSession, Identity
from engine.entities.trust import ExternalJwtSigner
from engine.managers._base import Env
from engine.managers.auth_policies import secondary_for
from engine.managers.authentication.ext_jwt import ExtJwtCheck

#: TOTP codes are 6 digits; recovery codes 6 characters (OpenZiti's ``TotpMinLength``/``MaxLength``).
TOTP_MIN_LENGTH, TOTP_MAX_LENGTH = 4, 6


@dataclass(frozen=True)
class AuthQuery:
    """One outstanding secondary factor (OpenZiti's ``authQueryDetail``)."""

    type_id: str
    provider: str
    http_method: str | None = None
    http_url: str | None = None
    format: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    id: str | None = None
    client_id: str | None = None
    scopes: tuple[str, ...] = ()


#: OpenZiti's ``NewAuthQueryZitiMfa`` (``controller/env/appenv.go``).
TOTP_QUERY = AuthQuery(
    type_id="MFA",
    provider="ziti",
    http_method="POST",
    http_url="./authenticate/mfa",
    format="alphaNumeric",
    min_length=TOTP_MIN_LENGTH,
    max_length=TOTP_MAX_LENGTH,
)


@dataclass(frozen=True)
class Pending:
    """The outstanding factors of a session on one request."""

    queries: tuple[AuthQuery, ...] = ()
    #: The ``WWW-Authenticate`` value for a missing or failing secondary external JWT.
    challenge: str | None = None

    @property
    def partial(self) -> bool:
        return bool(self.queries)


def pending(
    env: Env, ext_jwt: ExtJwtCheck, session: ApiSession, identity: Identity, tokens: Sequence[str]
) -> Pending:
    rules = secondary_for(env.store, identity)
    queries: list[AuthQuery] = []
    challenge = None
    if (session.is_mfa_required or rules.require_totp) and not session.is_mfa_complete:
        queries.append(TOTP_QUERY)
    signer_id = rules.require_ext_jwt_signer
    if signer_id is not None and not ext_jwt.satisfies(identity, signer_id, tokens):
        signer = env.store.get(ExternalJwtSigner, signer_id)
        queries.append(
            AuthQuery(
                type_id="EXT-JWT",
                provider="url",
                http_url=(signer.external_auth_url if signer is not None else None) or "",
                id=signer_id,
                client_id=signer.client_id if signer is not None else None,
                scopes=tuple(signer.scopes) if signer is not None else (),
            )
        )
        challenge = ext_jwt.secondary_challenge(signer_id, tokens)
    return Pending(queries=tuple(queries), challenge=challenge)
