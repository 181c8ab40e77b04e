"""API sessions: created by authentication, kept alive by activity, ended by logout or expiry."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta

from engine.entities.identities import ApiSession, Authenticator, Identity
from engine.managers._base import EntityManager, Env
from engine.ports import UnitOfWork

#: Activity is kept in memory and written to storage at most this often per session.
ACTIVITY_FLUSH = timedelta(seconds=60)


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
    ) -> ApiSession:
        now = self.env.clock.now()
        session = ApiSession(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            token=self.env.ids.new_token(),
            identity_id=identity.id,
            authenticator_id=authenticator.id,
            ip_address=ip_address,
            config_types=config_types,
            last_activity_at=now,
            is_mfa_required=mfa_required,
            is_mfa_complete=False,
        )
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            uow.put(session)
            self.env.commit(uow)
        return session

    def last_activity(self, session: ApiSession) -> datetime:
        cached = self._activity.get(session.id)
        return max(cached, session.last_activity_at) if cached else session.last_activity_at

    def expires_at(self, session: ApiSession) -> datetime:
        return self.last_activity(session) + self.timeout

    def is_expired(self, session: ApiSession, now: datetime | None = None) -> bool:
        return self.expires_at(session) <= (now or self.env.clock.now())

    def resolve(self, token: str) -> ApiSession | None:
        """The live session for ``token``, its activity refreshed; expired ones are removed."""
        session = self.env.store.find_unique(ApiSession, "token", token)
        if session is None:
            return None
        now = self.env.clock.now()
        if self.is_expired(session, now):
            self._remove_quietly(session.id)
            return None
        with self._activity_lock:
            self._activity[session.id] = now
        if now - session.last_activity_at >= ACTIVITY_FLUSH:
            self._flush(session.id, now)
        return session

    def active(self) -> list[ApiSession]:
        now = self.env.clock.now()
        return [s for s in self.list() if not self.is_expired(s, now)]

    def end_for_identity(self, uow: UnitOfWork, identity_id: str) -> None:
        for session in uow.all(ApiSession):
            if session.identity_id == identity_id:
                uow.delete(ApiSession, session.id)

    def after_delete(self, uow: UnitOfWork, entity: ApiSession) -> None:
        with self._activity_lock:
            self._activity.pop(entity.id, None)

    def _flush(self, session_id: str, when: datetime) -> None:
        with self.env.store.write_lock():
            current = self.env.store.get(ApiSession, session_id)
            if current is None or current.last_activity_at >= when:
                return
            uow = UnitOfWork(self.env.store)
            uow.put(dataclasses.replace(current, last_activity_at=when))
            self.env.commit(uow)

    def _remove_quietly(self, session_id: str) -> None:
        with self.env.store.write_lock():
            if self.env.store.get(ApiSession, session_id) is None:
                return
            uow = UnitOfWork(self.env.store)
            uow.delete(ApiSession, session_id)
            self.env.commit(uow)
        with self._activity_lock:
            self._activity.pop(session_id, None)
