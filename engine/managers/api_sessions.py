"""API sessions: created by authentication, kept alive by activity, ended by logout or expiry.

A session's token is a random UUIDv4 handed to the caller once (at login); the store keeps only
its SHA-256 (:func:`token_hash`), so neither a copy of the database nor an admin listing can
open someone else's session. Deleting a session deletes its ephemeral certificates.

A session that must pass MFA (``is_mfa_required``) is only partially authenticated until it does
(``is_mfa_complete``); ``mfa_completed_at`` records when, for MFA posture checks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Iterable
from datetime import datetime, timedelta

from engine.entities.identities import ApiSession, ApiSessionCertificate, Authenticator, Identity
from engine.entities.sessions import Session
from engine.errors import InvalidAuthError, UnauthorizedError
from engine.managers._base import EntityManager, Env
from engine.ports import Change, Put, StoreView, UnitOfWork

#: Activity is kept in memory and written to storage at most this often per session.
ACTIVITY_FLUSH = timedelta(seconds=60)
#: Expired sessions deleted per transaction by :meth:`ApiSessionManager.purge_expired`.
PURGE_BATCH = 500


def token_hash(token: str) -> str:
    """What the store keeps of an API session token: lowercase hex SHA-256."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiSessionManager(EntityManager[ApiSession]):
    kind = ApiSession

    def __init__(self, env: Env, timeout: timedelta) -> None:
        super().__init__(env)
        self.timeout = timeout
        self._activity: dict[str, datetime] = {}
        self._activity_lock = threading.Lock()

    def start(
        self,
        identity: Identity,
        authenticator: Authenticator,
        *,
        ip_address: str,
        config_types: list[str],
        mfa_required: bool = False,
        ca_id: str | None = None,
        bound_to: str | None = None,
    ) -> tuple[ApiSession, str]:
        """A new session and its token (the only time the token exists outside the caller);
        ``INVALID_AUTH`` if the identity is disabled (or gone) by then.

        ``bound_to``: what the store keeps instead of the token's hash, a value no ``zt-session``
        token hashes to (an OIDC login's stage, :mod:`engine.managers.oidc`): the token returned
        then opens nothing."""
        now = self.env.clock.now()
        token = self.env.ids.new_token()
        session = ApiSession(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            token_hash=bound_to if bound_to is not None else token_hash(token),
            identity_id=identity.id,
            authenticator_id=authenticator.id,
            ip_address=ip_address,
            config_types=config_types,
            last_activity_at=now,
            is_mfa_required=mfa_required,
            is_mfa_complete=False,
            ca_id=ca_id,
        )
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            # Checked again with every write before this one applied (with a shared database the
            # write lock brings them): a lockout another process committed a moment ago counts.
            current = uow.get(Identity, identity.id)
            if current is None or current.is_disabled_at(now):
                raise InvalidAuthError()
            uow.put(session)
            self.env.commit(uow)
        return session, token

    def last_activity(self, session: ApiSession) -> datetime:
        cached = self._activity.get(session.id)
        return max(cached, session.last_activity_at) if cached else session.last_activity_at

    def expires_at(self, session: ApiSession) -> datetime:
        return self.last_activity(session) + self.timeout

    def is_expired(self, session: ApiSession, now: datetime | None = None) -> bool:
        return self.expires_at(session) <= (now or self.env.clock.now())

    def resolve(self, token: str) -> ApiSession | None:
        """The live session for ``token``, its activity refreshed; expired ones are removed. A
        token not found is looked for again once the store has caught up with what other
        processes sharing it committed (a login on another one a moment ago)."""
        hashed = token_hash(token)
        session = self.env.store.find_unique(ApiSession, "token_hash", hashed)
        if session is None and self.env.store.catch_up():
            session = self.env.store.find_unique(ApiSession, "token_hash", hashed)
        if session is None:
            return None
        now = self.env.clock.now()
        if self.is_expired(session, now) and not self._used_elsewhere([session.id], now):
            self._remove_quietly(session.id)
            return None
        self._seen(session, now)
        return session

    def _used_elsewhere(self, session_ids: list[str], now: datetime) -> set[str]:
        """Which of these sessions, expired by what this process knows, another process sharing
        the store saw used since (``env.activity``): they are live, and learnt as such."""
        shared = self.env.activity.latest(session_ids) if session_ids else {}
        live: set[str] = set()
        with self._activity_lock:
            for session_id, when in shared.items():
                if when + self.timeout > now:
                    cached = self._activity.get(session_id)
                    self._activity[session_id] = max(cached, when) if cached else when
                    live.add(session_id)
        return live

    def touch(self, session_ids: Iterable[str]) -> dict[str, ApiSession]:
        """Activity seen elsewhere (an edge router reports SDK channels open with these sessions):
        the live sessions among ``session_ids``, their activity refreshed as by :meth:`resolve`;
        ended and expired ones are left out (an expired one is left to the purge)."""
        now = self.env.clock.now()
        live: dict[str, ApiSession] = {}
        for session_id in session_ids:
            session = self.env.store.get(ApiSession, session_id)
            if session is None or self.is_expired(session, now):
                continue
            self._seen(session, now)
            live[session_id] = session
        return live

    def _seen(self, session: ApiSession, now: datetime) -> None:
        with self._activity_lock:
            self._activity[session.id] = now
        self.env.activity.note(session.id, now)
        if now - session.last_activity_at >= ACTIVITY_FLUSH:
            self._flush(session.id, now)

    def active(self) -> list[ApiSession]:
        now = self.env.clock.now()
        return [s for s in self.list() if not self.is_expired(s, now)]

    def purge_expired(self, now: datetime) -> int:
        """Delete every API session expired at ``now`` with what belongs to it (its Dial/Bind
        sessions and ephemeral certificates, :func:`delete_session`); returns how many went.

        Batches of :data:`PURGE_BATCH` per transaction, so the write lock is never held long; a
        session used again since it was picked (its activity refreshed) is kept.
        """
        expired = [s.id for s in self.list() if self.is_expired(s, now)]
        if expired:  # used on another process of a shared store since: not expired
            used = self._used_elsewhere(expired, now)
            expired = [session_id for session_id in expired if session_id not in used]
        purged = 0
        for start in range(0, len(expired), PURGE_BATCH):
            gone: list[str] = []
            with self.env.store.write_lock():
                uow = UnitOfWork(self.env.store)
                for session_id in expired[start : start + PURGE_BATCH]:
                    current = self.env.store.get(ApiSession, session_id)
                    if current is not None and self.is_expired(current, now):
                        delete_session(uow, session_id)
                        gone.append(session_id)
                if gone:
                    self.env.commit(uow)
            with self._activity_lock:
                for session_id in gone:
                    self._activity.pop(session_id, None)
            self.env.activity.forget(gone)
            purged += len(gone)
        return purged

    def end_for_identity(self, uow: UnitOfWork, identity_id: str, *, keep: str | None = None) -> None:
        """End every API session of ``identity_id`` but ``keep`` (the caller's own, if given)."""
        end_identity_sessions(uow, identity_id, keep=keep)

    def after_delete(self, uow: UnitOfWork, entity: ApiSession) -> None:
        delete_session(uow, entity.id)
        with self._activity_lock:
            self._activity.pop(entity.id, None)

    def _flush(self, session_id: str, when: datetime) -> None:
        """Persist the session's activity, off the read path: staged without waiting for its
        commit, and skipped (kept in memory, tried again by the next request) while a writer holds
        the write lock."""

        def refreshed(view: StoreView) -> list[Change]:
            current = view.get(ApiSession, session_id)
            if current is None or current.last_activity_at >= when:
                return []
            return [Put(dataclasses.replace(current, last_activity_at=when))]

        self.env.store.try_submit(refreshed)

    def _remove_quietly(self, session_id: str) -> None:
        with self.env.store.write_lock():
            if self.env.store.get(ApiSession, session_id) is None:
                return
            uow = UnitOfWork(self.env.store)
            delete_session(uow, session_id)
            self.env.commit(uow)
        with self._activity_lock:
            self._activity.pop(session_id, None)


def end_identity_sessions(uow: UnitOfWork, identity_id: str, *, keep: str | None = None) -> None:
    """End every API session of ``identity_id`` except ``keep``."""
    for session in uow.find_by(ApiSession, "identity_id", identity_id):
        if session.id != keep:
            delete_session(uow, session.id)


def mark_mfa_complete(
    uow: UnitOfWork, session: ApiSession, now: datetime, *, required: bool = False
) -> ApiSession:
    """The session passed MFA at ``now`` (``required``: it must from now on, as after enrolling).

    401 when the session ended meanwhile (a concurrent logout): it is not brought back.
    """
    current = uow.get(ApiSession, session.id)
    if current is None:
        raise UnauthorizedError()
    updated = dataclasses.replace(
        current,
        is_mfa_complete=True,
        is_mfa_required=current.is_mfa_required or required,
        mfa_completed_at=now,
        updated_at=now,
    )
    uow.put(updated)
    return updated


def forget_mfa(uow: UnitOfWork, identity_id: str) -> None:
    """The identity's MFA is gone: its sessions no longer count as having passed MFA (posture)."""
    for session in uow.find_by(ApiSession, "identity_id", identity_id):
        if session.mfa_completed_at is not None:
            uow.put(dataclasses.replace(session, mfa_completed_at=None))


def delete_session_certificates(uow: UnitOfWork, session_id: str) -> None:
    """The ephemeral certificates of an API session go with it."""
    for cert in uow.find_by(ApiSessionCertificate, "api_session_id", session_id):
        uow.delete(ApiSessionCertificate, cert.id)


def delete_session(uow: UnitOfWork, session_id: str) -> None:
    """Delete an API session and what belongs to it (used by every cascade that ends sessions):
    its ephemeral certificates and its Dial/Bind sessions."""
    uow.delete(ApiSession, session_id)
    delete_session_certificates(uow, session_id)
    for session in uow.find_by(Session, "api_session_id", session_id):
        uow.delete(Session, session.id)
