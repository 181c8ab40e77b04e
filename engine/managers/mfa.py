"""TOTP MFA of an identity: enroll, verify, disable, recovery codes, and completing a login.

Seed 000's MFA state table, with OpenZiti's rules (``model/mfa_manager.go``,
``routes/current_identity_router.go``, ``routes/authenticate_router.go``):

- an identity has at most one MFA record, verified or not: initiating again is ``MFA_EXISTS``;
- verifying takes a valid TOTP code (recovery codes do not verify an enrollment) and completes
  MFA for the session that sent it; the identity's ``isMfaEnabled`` becomes true;
- removing an unverified enrollment needs no code; a verified one needs a valid TOTP or recovery
  code (a recovery code is used up);
- viewing recovery codes needs a valid TOTP code; regenerating them a valid TOTP or recovery
  code; both only once verified (404 before);
- completing a login's MFA (``/authenticate/mfa``) takes a TOTP code or a recovery code, which is
  then removed; an identity without a verified enrollment gets ``MFA_NOT_ENROLLED``;
- an administrator can remove any identity's MFA;
- a fully authenticated session trades a valid TOTP code (recovery codes do not count) for a TOTP
  token (``/current-api-session/totp-token``): a JWT the controller signs that proves a code was
  checked at ``iat``, bound to the identity (``sub``) and the API session (``z_asid``), type
  ``z_t: "t"``, without expiry (OpenZiti's ``TotpClaims``). An empty code is
  ``MFA_INVALID_TOKEN``, no verified enrollment ``MFA_NOT_ENROLLED``. OpenZiti issues these only
  to OIDC (JWT) sessions and answers ``INVALID_BACKING_TOKEN_TYPE`` to ``zt-session`` ones;
  Trellis has only the latter, so it issues them to those.

Bad codes are ``MFA_INVALID_TOKEN``; a missing (or, where it must be verified, an unverified)
enrollment is ``NOT_FOUND``; completing a login without a verified enrollment is 401
``MFA_NOT_ENROLLED`` (seed 000 lists 401 and 429 only for it). Codes are checked against the
controller's clock.

Every code check goes through :meth:`MfaManager._check_code`, whichever operation takes the code:
the guess is counted in the environment's :class:`~engine.ports.Attempts` ledger under the identity
before the code is compared, under a :class:`~engine.ports.Backoff` (by default 10 failures free,
then one guess at a time with a wait doubling from 30 s to an hour, cleared by a right code):
past it a guess is refused unchecked with 429 ``SERVER_TOO_MANY_REQUESTS`` and ``Retry-After``.
A stolen session therefore gets about 24 guesses a day at its owner's codes instead of a thousand
a second. A TOTP code's time step is accepted once per identity (RFC 6238 §5.2; OpenZiti accepts a
code again within its window): a code already used, or one older than a code used since, is
``MFA_INVALID_TOKEN`` and counts as a failure.
"""

from __future__ import annotations

import dataclasses
import hmac
import logging
import math
from dataclasses import dataclass
from datetime import datetime

from engine.attempts import code_key, step_key
from engine.entities.identities import ApiSession, Identity, Mfa
from engine.errors import (
    MfaExistsError,
    MfaInvalidTokenError,
    MfaLoginNotEnrolledError,
    MfaNotEnrolledError,
    NotFoundError,
    TooManyRequestsError,
)
from engine.logs import event
from engine.managers._base import EntityManager, Env
from engine.managers.api_sessions import ApiSessionManager, forget_mfa, mark_mfa_complete
from engine.ports import Backoff, UnitOfWork

log = logging.getLogger(__name__)

#: The default throttle of MFA code guesses per identity (see the module docstring).
DEFAULT_CODE_BACKOFF = Backoff(free=10, base=30.0, cap=3600.0)

#: A TOTP token's ``z_t`` claim and audience (OpenZiti's ``TokenTypeTotp`` and its access tokens').
TOTP_TOKEN_TYPE = "t"
TOTP_TOKEN_AUDIENCE = "openziti"


@dataclass(frozen=True)
class TotpToken:
    """A signed proof that the session's identity gave a valid TOTP code at ``issued_at``."""

    token: str
    issued_at: datetime


class MfaManager(EntityManager[Mfa]):
    kind = Mfa

    def __init__(
        self,
        env: Env,
        api_sessions: ApiSessionManager,
        issuer: str = "",
        code_backoff: Backoff = DEFAULT_CODE_BACKOFF,
    ) -> None:
        super().__init__(env)
        self.api_sessions = api_sessions
        #: The ``iss`` of TOTP tokens: the client API's ``https://host:port``.
        self.issuer = issuer
        self.code_backoff = code_backoff

    # -- reads -----------------------------------------------------------------------------------
    def of_identity(self, identity_id: str) -> Mfa | None:
        """The identity's enrollment. One not seen here, or seen unverified, may have been made or
        verified by another process sharing the store a moment ago (the client's previous request
        went there): this one catches up once before answering without it."""
        mfa = self.env.store.find_unique(Mfa, "identity_id", identity_id)
        if (mfa is None or not mfa.is_verified) and self.env.store.catch_up():
            mfa = self.env.store.find_unique(Mfa, "identity_id", identity_id)
        return mfa

    def require_of(self, identity_id: str) -> Mfa:
        """The identity's enrollment, verified or not (404 when there is none)."""
        mfa = self.of_identity(identity_id)
        if mfa is None:
            raise NotFoundError()
        return mfa

    def provisioning_url(self, mfa: Mfa) -> str:
        """The ``otpauth://`` URL of an enrollment, named after its identity."""
        identity = self.env.store.get(Identity, mfa.identity_id)
        account = identity.name if identity is not None else mfa.identity_id
        return self.env.totp.provisioning_url(mfa.secret, account)

    def qr_code_url(self, identity_id: str) -> str:
        """What the QR code of an unverified enrollment encodes (404 once verified, as OpenZiti)."""
        mfa = self.require_of(identity_id)
        if mfa.is_verified:
            raise NotFoundError()
        return self.provisioning_url(mfa)

    def recovery_codes(self, identity_id: str, code: str) -> Mfa:
        """A verified enrollment, to show its recovery codes; needs a valid TOTP code."""
        mfa = self._require_verified(identity_id)
        self._check_code(mfa, code, purpose="recovery-codes")
        return mfa

    # -- enrollment ------------------------------------------------------------------------------
    def enroll(self, identity_id: str) -> Mfa:
        """Start an enrollment: a new secret and recovery codes, unverified (409 if one exists)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            if uow.find_unique(Mfa, "identity_id", identity_id) is not None:
                raise MfaExistsError()
            if uow.get(Identity, identity_id) is None:
                raise NotFoundError()
            now = self.env.clock.now()
            mfa = Mfa(
                id=self.env.ids.new_id(),
                created_at=now,
                updated_at=now,
                identity_id=identity_id,
                is_verified=False,
                secret=self.env.totp.new_secret(),
                recovery_codes=self.env.totp.new_recovery_codes(),
            )
            uow.put(mfa)
            self.env.commit(uow)
            return mfa

    def verify(self, identity_id: str, code: str, session: ApiSession | None = None) -> Mfa:
        """Complete an enrollment with a TOTP code; ``session`` (the caller's) passes MFA with it."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            mfa = uow.find_unique(Mfa, "identity_id", identity_id)
            if mfa is None or mfa.is_verified:
                raise NotFoundError()
            self._check_code(mfa, code, purpose="verify")
            now = self.env.clock.now()
            verified = dataclasses.replace(mfa, is_verified=True, updated_at=now)
            uow.put(verified)
            self._set_enabled(uow, identity_id, True)
            if session is not None:
                mark_mfa_complete(uow, session, now, required=True)
            self.env.commit(uow)
        self._event(logging.INFO, "mfa.enrolled", identity_id)
        return verified

    def remove(self, identity_id: str, code: str) -> None:
        """The identity removes its own MFA: no code before verification, a valid one after it."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            mfa = uow.find_unique(Mfa, "identity_id", identity_id)
            if mfa is None:
                raise NotFoundError()
            if mfa.is_verified:
                self._check_code(mfa, code, uow, purpose="remove")
            self._delete(uow, mfa)
            self.env.commit(uow)
        self._event(logging.INFO, "mfa.removed", identity_id, by="self")

    def remove_for_identity(self, identity_id: str) -> None:
        """An administrator removes an identity's MFA, verified or not (404 for an unknown identity)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            if uow.get(Identity, identity_id) is None:
                raise NotFoundError()
            mfa = uow.find_unique(Mfa, "identity_id", identity_id)
            if mfa is None:
                return
            self._delete(uow, mfa)
            self.env.commit(uow)
        self._event(logging.INFO, "mfa.removed", identity_id, by="administrator")

    def regenerate_recovery_codes(self, identity_id: str, code: str) -> Mfa:
        """Replace every recovery code; needs a valid TOTP or recovery code."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            mfa = self._require_verified(identity_id, uow)
            self._check_code(mfa, code, uow, purpose="regenerate-recovery-codes")
            current = uow.get(Mfa, mfa.id) or mfa
            renewed = dataclasses.replace(
                current, recovery_codes=self.env.totp.new_recovery_codes(), updated_at=self.env.clock.now()
            )
            uow.put(renewed)
            self.env.commit(uow)
            return renewed

    # -- login -----------------------------------------------------------------------------------
    def complete_login(self, session: ApiSession, code: str) -> ApiSession:
        """Pass the session's MFA with a TOTP code or a single-use recovery code."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            mfa = uow.find_unique(Mfa, "identity_id", session.identity_id)
            if mfa is None or not mfa.is_verified:
                self._event(
                    logging.WARNING, "mfa.failed", session.identity_id, purpose="login", reason="not enrolled"
                )
                raise MfaLoginNotEnrolledError()
            self._check_code(mfa, code, uow, purpose="login")
            updated = mark_mfa_complete(uow, session, self.env.clock.now())
            self.env.commit(uow)
        self._event(logging.INFO, "mfa.login_completed", session.identity_id, session_id=session.id)
        return updated

    def totp_token(self, session: ApiSession, code: str) -> TotpToken:
        """A TOTP token for ``session`` once ``code`` is a valid TOTP code of its identity."""
        if not code:
            self._event(
                logging.WARNING, "mfa.failed", session.identity_id, purpose="totp-token", reason="no code"
            )
            raise MfaInvalidTokenError()
        mfa = self.of_identity(session.identity_id)
        if mfa is None or not mfa.is_verified:
            raise MfaNotEnrolledError()
        self._check_code(mfa, code, purpose="totp-token")
        now = self.env.clock.now()
        claims = {
            "iss": self.issuer,
            "sub": session.identity_id,
            "aud": [TOTP_TOKEN_AUDIENCE],
            "iat": int(now.timestamp()),
            "jti": self.env.ids.new_token(),
            "z_asid": session.id,
            "z_t": TOTP_TOKEN_TYPE,
        }
        return TotpToken(token=self.env.tokens.sign(claims), issued_at=now)

    # -- helpers ---------------------------------------------------------------------------------
    def _require_verified(self, identity_id: str, uow: UnitOfWork | None = None) -> Mfa:
        mfa = (
            uow.find_unique(Mfa, "identity_id", identity_id)
            if uow is not None
            else self.of_identity(identity_id)
        )
        if mfa is None or not mfa.is_verified:
            raise NotFoundError()
        return mfa

    def _check_code(self, mfa: Mfa, code: str, uow: UnitOfWork | None = None, *, purpose: str) -> None:
        """Pass when ``code`` is a TOTP code of ``mfa`` not used before, or (given ``uow``, which
        then removes it) one of its recovery codes; else ``MFA_INVALID_TOKEN``. The guess is
        counted before it is compared; past the backoff it is refused unchecked (429).
        Failures and refusals are logged (``mfa.failed``, ``mfa.throttled``: WARNING) with the
        identity and ``purpose`` (what the code was for), never the code."""
        if not code:
            self._event(logging.WARNING, "mfa.failed", mfa.identity_id, purpose=purpose, reason="no code")
            raise MfaInvalidTokenError()
        ledger, rule = self.env.attempts, self.code_backoff
        now = self.env.clock.now()
        attempt = ledger.begin(code_key(mfa.identity_id), now.timestamp(), rule)
        if not attempt.granted:
            wait = max(1, math.ceil(attempt.retry_after or rule.base))
            self._event(logging.WARNING, "mfa.throttled", mfa.identity_id, purpose=purpose, retry_after=wait)
            raise TooManyRequestsError(
                headers={"Retry-After": str(wait)}, reason="too many wrong MFA codes; try again later"
            )
        reason = "wrong code"
        try:
            right = self._recovery_code_used(uow, mfa, code) if uow is not None else False
            if not right:
                step = self.env.totp.step(mfa.secret, code, now)
                right = step is not None and ledger.claim(step_key(mfa.identity_id), step, now.timestamp())
                if step is not None and not right:
                    reason = "code already used"
        except BaseException:
            ledger.abandon(attempt)
            raise
        if not right:
            failures = ledger.fail(attempt, now.timestamp(), rule)
            self._event(
                logging.WARNING,
                "mfa.failed",
                mfa.identity_id,
                purpose=purpose,
                reason=reason,
                failures=failures,
            )
            raise MfaInvalidTokenError()
        ledger.succeed(attempt)

    def _event(self, level: int, name: str, identity_id: str, **fields: object) -> None:
        """Log MFA event ``name`` about ``identity_id`` (with its name, when it still exists)."""
        if not log.isEnabledFor(level):
            return
        identity = self.env.store.get(Identity, identity_id)
        event(
            log,
            level,
            name,
            identity_id=identity_id,
            identity_name=identity.name if identity is not None else None,
            **fields,
        )

    def _recovery_code_used(self, uow: UnitOfWork, mfa: Mfa, code: str) -> bool:
        """Whether ``code`` is one of ``mfa``'s recovery codes; if so it is removed in ``uow``."""
        current = uow.get(Mfa, mfa.id) or mfa
        matched = [c for c in current.recovery_codes if hmac.compare_digest(c.encode(), code.encode())]
        if not matched:
            return False
        remaining = [c for c in current.recovery_codes if c not in matched]
        uow.put(dataclasses.replace(current, recovery_codes=remaining, updated_at=self.env.clock.now()))
        return True

    def _delete(self, uow: UnitOfWork, mfa: Mfa) -> None:
        uow.delete(Mfa, mfa.id)
        self._set_enabled(uow, mfa.identity_id, False)
        forget_mfa(uow, mfa.identity_id)

    def _set_enabled(self, uow: UnitOfWork, identity_id: str, enabled: bool) -> None:
        identity = uow.get(Identity, identity_id)
        if identity is not None and identity.is_mfa_enabled != enabled:
            uow.put(dataclasses.replace(identity, is_mfa_enabled=enabled))
