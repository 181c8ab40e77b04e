"""Dial and Bind sessions (client ``/sessions``, management ``/sessions``).

Creation runs OpenZiti's checks in order (``model/session_manager.go`` ``Create``,
docs/policy.md §5.2):

1. the service exists and the identity holds Dial or Bind on it, else :class:`NotFoundError`;
2. the requested type (Dial when absent) is held, else a field error on ``ServiceId``
   (``service not found``); ``Invalid`` is never a session type;
3. posture passes (§6), else :class:`InvalidPostureError` naming the failing policies;
4. some edge router is linked to the identity (edge router policy) and to the service (service
   edge router policy), online or not, else :class:`NoEdgeRoutersAvailableError`.

A session names the routers its identity and service share, online or not, the online ones first
and at most :data:`MAX_SESSION_ROUTERS`, each with what the fleet (:mod:`engine.managers.fleet`)
knows of it, as OpenZiti 1.x lists a session's edge routers (``ListForIdentityAndService``:
``SORT BY connected DESC LIMIT 25``): SDKs connect to the online ones, and a client sees which
router is missing instead of seeing none.

A session is then kept per (API session, type, service): asking again returns the same session,
as OpenZiti's legacy sessions are deduplicated. The session records the service policies that
granted it (those of its type whose posture passed).

Sessions end with their API session and their service, when the identity loses that type of
access to the service (OpenZiti's ``ServicePolicyEnforcer``; admins' sessions are spared), and when
new posture data, or the removal of the identity's MFA, makes them fail their posture (OpenZiti's
posture cache).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.entities.identities import ApiSession, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.entities.sessions import BIND, DIAL, Session
from engine.errors import (
    FieldError,
    InvalidPostureError,
    NoEdgeRoutersAvailableError,
    NotFoundError,
    UnauthorizedError,
)
from engine.managers._base import EntityManager, Env
from engine.managers.access import AccessManager
from engine.managers.fleet import Fleet, Presence
from engine.managers.posture import PostureManager
from engine.ports import Change, Delete, Put, UnitOfWork

#: At most this many edge routers are named in a session (``ListForIdentityAndService``).
MAX_SESSION_ROUTERS = 25


@dataclass(frozen=True)
class SessionView:
    """A session with what its wire form names: service, API session, its routers (with what each
    online one reported when it connected) and policies."""

    session: Session
    service: Service | None
    api_session: ApiSession | None
    edge_routers: list[EdgeRouter]
    service_policies: list[ServicePolicy]
    #: The fleet's record of each online router of ``edge_routers``, by router id.
    presences: Mapping[str, Presence] = field(default_factory=dict)
    #: The synchronisation status of each router of ``edge_routers`` (offline ones too), by id.
    sync_statuses: Mapping[str, str] = field(default_factory=dict)


class SessionManager(EntityManager[Session]):
    kind = Session

    def __init__(self, env: Env, access: AccessManager, posture: PostureManager, fleet: Fleet) -> None:
        super().__init__(env)
        self.access = access
        self.posture = posture
        self.fleet = fleet

    # -- create ----------------------------------------------------------------------------------
    def open(
        self,
        api_session: ApiSession,
        service_id: str | None,
        session_type: str | None,
        tags: dict[str, object] | None = None,
    ) -> SessionView:
        """A Dial or Bind session for the API session's identity (§5.2 checks, in order), as its
        answer shows it (the routers found by the checks are the ones it names)."""
        identity_id = api_session.identity_id
        service, permissions = self.access.service_for_identity(identity_id, service_id)
        wanted = session_type or DIAL
        if wanted not in (DIAL, BIND):
            raise FieldError("type", "invalid session type", wanted)
        if wanted not in permissions:
            raise FieldError("ServiceId", "service not found", service.id)
        verdict = self.posture.evaluate(identity_id, api_session.id, service.id, wanted, record_failure=True)
        if not verdict.passed:
            raise InvalidPostureError(
                [f.policy_id for f in verdict.failures],
                {
                    f.policy_id: [
                        {"id": c.check_id, "isPassing": False, "typeId": c.check_type} for c in f.checks
                    ]
                    for f in verdict.failures
                },
            )
        routers = self.access.common_edge_routers(identity_id, service.id)
        if not routers:
            raise NoEdgeRoutersAvailableError()
        use = (api_session.id, wanted, service.id)
        # The pair's session, when it has one already, is answered without the write lock: with
        # several processes that lock is the cluster's write token, which a Dial asked again
        # (SDKs do, for every connection) would otherwise pull from process to process.
        existing = self.env.store.find_unique(Session, "use", use)
        if existing is not None:
            return self.view(existing, routers)
        with self.env.store.write_lock():
            existing = self.env.store.find_unique(Session, "use", use)
            if existing is not None:
                return self.view(existing, routers)
            if self.env.store.get(ApiSession, api_session.id) is None:
                raise NotFoundError()
            now = self.env.clock.now()
            session = Session(
                id=self.env.ids.new_id(),
                created_at=now,
                updated_at=now,
                tags=dict(tags or {}),
                token=self.env.ids.new_token(),
                api_session_id=api_session.id,
                identity_id=identity_id,
                service_id=service.id,
                type=wanted,
                service_policy_ids=list(verdict.passing_policy_ids),
            )
            return self.view(self.save(session), routers)

    # -- reads -----------------------------------------------------------------------------------
    def view(self, session: Session, edge_routers: list[EdgeRouter] | None = None) -> SessionView:
        """The session with what its wire form names; ``edge_routers``: the pair's common routers,
        when the caller has them already."""
        store = self.env.store
        policies = (store.get(ServicePolicy, i) for i in session.service_policy_ids)
        common = (
            edge_routers
            if edge_routers is not None
            else self.access.common_edge_routers(session.identity_id, session.service_id)
        )
        named, presences = self._named(common)
        return SessionView(
            session=session,
            service=store.get(Service, session.service_id),
            api_session=store.get(ApiSession, session.api_session_id),
            edge_routers=named,
            service_policies=[p for p in policies if p is not None],
            presences=presences,
            sync_statuses={r.id: self.fleet.sync_status(r.id) for r in named},
        )

    def _named(self, routers: list[EdgeRouter]) -> tuple[list[EdgeRouter], dict[str, Presence]]:
        """The first :data:`MAX_SESSION_ROUTERS` of ``routers`` (id order), online ones first, and
        the fleet's record of the online ones among them."""
        online: list[EdgeRouter] = []
        offline: list[EdgeRouter] = []
        presences: dict[str, Presence] = {}
        for router in routers:
            presence = self.fleet.presence(router.id)
            if presence is None:
                if len(offline) < MAX_SESSION_ROUTERS:
                    offline.append(router)
                continue
            presences[router.id] = presence
            online.append(router)
            if len(online) == MAX_SESSION_ROUTERS:
                break
        return (online + offline)[:MAX_SESSION_ROUTERS], presences

    def of_api_session(self, api_session_id: str) -> list[Session]:
        return self.env.store.find_by(Session, "api_session_id", api_session_id)

    def read_for(self, identity: Identity, session_id: str) -> Session:
        """A session as the client API shows it: admins see any, others only their own."""
        session = self.require(session_id)
        if not identity.is_admin and session.identity_id != identity.id:
            raise NotFoundError()
        return session

    def delete_for(self, identity: Identity, session_id: str) -> None:
        self.read_for(identity, session_id)
        self.delete(session_id)

    def require_token(self, api_session: ApiSession, token: str) -> Session:
        """The caller's session with ``token``; :class:`UnauthorizedError` for any other token."""
        session = self.env.store.find_unique(Session, "token", token)
        if session is None or session.api_session_id != api_session.id:
            raise UnauthorizedError()
        return session

    def service_edge_routers(
        self, api_session: ApiSession, service_id: str, token: str | None
    ) -> list[EdgeRouter]:
        """Client ``/services/{id}/edge-routers``: the routers a session to the service may name,
        all of them in id order (the list pages them; its first page, when no ``limit`` is asked,
        is the :data:`MAX_SESSION_ROUTERS` a session names).

        A ``session-token`` given must be one of the caller's sessions (checked first, as
        OpenZiti does); the service must be visible to the caller (Dial or Bind).
        """
        if token is not None:
            self.require_token(api_session, token)
        self.access.service_for_identity(api_session.identity_id, service_id)
        return self.access.common_edge_routers(api_session.identity_id, service_id)

    # -- enforcement -----------------------------------------------------------------------------
    def on_commit(self, changes: list[Change]) -> None:
        """An Env listener: end sessions whose API session or service went, or whose access did.

        It runs after the policy graph took the batch; the sessions it ends are one more commit.
        A service policy change re-checks every session; an identity or service change only
        that entity's sessions. Not for a batch another process committed (``replaying``): that
        process ends them, and the batch that does arrives through the log.
        """
        if self.env.store.replaying:
            return
        candidates: dict[str, Session] = {}
        mfa_lost: dict[str, Session] = {}
        rescan_all = False
        store = self.env.store
        for change in changes:
            kind = change.kind if isinstance(change, Delete) else type(change.entity)
            entity_id = change.id if isinstance(change, Delete) else change.entity.id
            if kind is ServicePolicy:
                rescan_all = True
            elif kind in (ApiSession, Identity, Service):
                column = {ApiSession: "api_session_id", Identity: "identity_id", Service: "service_id"}[kind]
                found = store.find_by(Session, column, entity_id)
                candidates.update((s.id, s) for s in found)
                entity = change.entity if isinstance(change, Put) else None
                if isinstance(entity, ApiSession) and entity.mfa_completed_at is None:
                    mfa_lost.update((s.id, s) for s in found)
        if rescan_all:
            candidates = {s.id: s for s in store.all(Session)}
        doomed = {s.id: s for s in candidates.values() if not self._still_allowed(s)}
        # an API session that no longer counts as having passed MFA (its identity's MFA was removed)
        # keeps only the sessions that still pass posture (OpenZiti's posture cache on MFA delete)
        doomed.update(
            (s.id, s)
            for s in mfa_lost.values()
            if s.id not in doomed
            and not self.posture.evaluate(s.identity_id, s.api_session_id, s.service_id, s.type).passed
        )
        self._end(doomed.values())

    def enforce_posture_all(self) -> int:
        """End every session that no longer passes posture; how many ended.

        OpenZiti's posture cache re-evaluates all legacy sessions every few seconds, so posture
        that lapses with time alone (an MFA check's ``timeoutSeconds``) ends sessions too. Nothing
        is evaluated when no posture check exists (§6).
        """
        if not self.access.has_posture_checks():
            return 0
        # Only the sessions of services a policy with checks selects: every other session passes
        # whatever the time. Evaluating every session cost ~10 µs each, holding the GIL, every
        # 5 s: 120 ms at 12k sessions on an idle server, 90-930 ms on a loaded one, the event
        # loop getting the GIL back only between the sweep's switch intervals.
        store = self.env.store
        doomed = [
            s
            for service_id in self.access.posture_gated_services()
            for s in store.find_by(Session, "service_id", service_id)
            if not self.posture.evaluate(s.identity_id, s.api_session_id, s.service_id, s.type).passed
        ]
        self._end(doomed)
        return len(doomed)

    def enforce_posture(self, identity_id: str) -> None:
        """End the identity's sessions that no longer pass posture (after new posture data)."""
        doomed = [
            s
            for s in self.env.store.find_by(Session, "identity_id", identity_id)
            if not self.posture.evaluate(s.identity_id, s.api_session_id, s.service_id, s.type).passed
        ]
        self._end(doomed)

    def _still_allowed(self, session: Session) -> bool:
        """Its API session, identity and service exist, and the identity (unless an admin) still
        holds the session's type on the service."""
        store = self.env.store
        identity = store.get(Identity, session.identity_id)
        if identity is None or store.get(Service, session.service_id) is None:
            return False
        if store.get(ApiSession, session.api_session_id) is None:
            return False
        if identity.is_admin:
            return True
        return session.type in self.access.permissions(session.identity_id, session.service_id)

    def _end(self, sessions: Iterable[Session]) -> None:
        sessions = list(sessions)
        if not sessions:
            return
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            for session in sessions:
                if self.env.store.get(Session, session.id) is not None:
                    uow.delete(Session, session.id)
            if uow.changes():
                self.env.commit(uow)
