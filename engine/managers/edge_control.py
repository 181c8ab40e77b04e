"""What edge routers ask of the controller over their control connections, and what they are told.

The use cases behind ``controller.control`` (OpenZiti's edge control handlers), free of the wire:

- **who a router is**: the client certificate it connected with must come from our CA, be valid
  now, and be the current certificate (``fingerprint``) of a verified, enabled edge router
  (:meth:`EdgeControlManager.authenticate_router`);
- **its hello**: the hostname and addresses it reports are kept on the router (what the REST
  models show once it is offline again), and its terminators are reconciled: the edge-hosted
  terminators of the router it no longer holds are deleted, and those it holds that the
  controller does not know are named back to it (:meth:`~EdgeControlManager.router_hello`);
- **may this SDK Dial or Bind here?**: a circuit request or a terminator request is checked as
  OpenZiti checks it: the session token exists, is of the right type and belongs to the SDK
  channel's API session, that API session is live and fully authenticated and one of the
  channel's certificates is one of its certificates, the router is one the session may use (edge
  router and service edge router policies), the service exists, the identity still holds the
  session's type on it and passes posture, and end-to-end encryption has its key
  (:class:`Refusal` says why not). A Dial then gets a terminator of the service (precedence
  ``required`` over ``default`` over ``failed``, then the lowest cost, at random among equals, on
  this router or another online one); a Bind gets a persisted terminator (binding ``edge``,
  address its own id, as OpenZiti 1.x), listed by ``/terminators`` like any other;
- **what a tunneler router hosts**: a tunneler-enabled router acts as its router identity (type
  ``Router``, the router's id): every service that identity may Bind and that carries a
  ``host.v1`` config (the identity's service-config override first, as the client API resolves
  it) is hosted by the router (:meth:`~EdgeControlManager.hosted_services`), which asks for one
  terminator per such service (binding ``tunnel``, address ``tunnel:<service id>``, the router's
  identity as host: :meth:`~EdgeControlManager.create_tunnel_terminator`); cost and precedence
  are the identity's per-service hosting entries, else the config's ``listenOptions``, else the
  identity's defaults;
- **what routers are told**: every committed batch is read for what the routers' copies need
  (:data:`Event`): API sessions that became fully authenticated or whose certificates, or
  identity name, changed (added), API sessions that ended (removed), Dial/Bind sessions that
  ended (their terminators are deleted too, in the next batch), and routers whose connection
  must close (deleted, disabled, re-enrolled or given a new certificate), and batches that may
  change what tunneler routers host (service policies, services, configs, config types, edge
  routers, router identities). Whoever serves the connections subscribes with
  :meth:`~EdgeControlManager.add_sink`.

The fully authenticated API sessions, as routers see them, are kept here (:class:`RouterApiSession`:
a token hash, identity, and certificate fingerprints), so a change is pushed only when what a
router holds would change, and a router's full state is a copy of them.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import random
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engine.entities.controllers import ControllerMember
from engine.entities.identities import ApiSession, ApiSessionCertificate, Authenticator, Identity
from engine.entities.policies import ServicePolicy
from engine.entities.routers import EdgeRouter
from engine.entities.services import Config, ConfigType, Service, Terminator
from engine.entities.sessions import BIND, DIAL, Session
from engine.errors import ControllerError, NotFoundError
from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.builtin_config_types import HOST_V1_ID
from engine.managers.fleet import Fleet, VersionInfo
from engine.managers.identities import ROUTER_TYPE
from engine.managers.posture import PostureManager
from engine.managers.terminators import COST_MAX, ITS_OWN_ID, PRECEDENCES, TerminatorManager
from engine.ports import Change, Delete, Put, UnitOfWork

log = logging.getLogger(__name__)

#: The binding of terminators SDKs host through a router (OpenZiti's ``edge``).
EDGE_BINDING = "edge"
#: The binding of terminators a tunneler router hosts itself (``host.v1``; OpenZiti's ``tunnel``),
#: and their address prefix (then the service id).
TUNNEL_BINDING = "tunnel"
TUNNEL_PREFIX = "tunnel:"
#: Bindings of the terminators a router makes for itself, reconciled at its hello.
ROUTER_BINDINGS = frozenset({EDGE_BINDING, TUNNEL_BINDING})
#: Terminator precedences, best first.
PRECEDENCE_RANK = {"required": 0, "default": 1, "failed": 2}


#: A terminator id a router may choose.
TERMINATOR_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class Refusal(enum.Enum):
    """Why a circuit or terminator request is refused (the wire carries OpenZiti's edge error
    code for each: ``controller.control``)."""

    INTERNAL = "internal"
    INVALID_API_SESSION = "invalid API session"
    INVALID_SESSION = "invalid session"
    WRONG_SESSION_TYPE = "wrong session type"
    INVALID_EDGE_ROUTER_FOR_SESSION = "edge router not allowed for the session"
    INVALID_SERVICE = "invalid service"
    INVALID_TERMINATOR = "no usable terminator"
    INVALID_PRECEDENCE = "invalid precedence"
    INVALID_COST = "invalid cost"
    ENCRYPTION_DATA_MISSING = "encryption data missing"
    TUNNELING_NOT_ENABLED = "tunneling not enabled"


class ControlRefused(Exception):
    """A router's request is refused: ``refusal`` is the kind, ``reason`` the detail."""

    def __init__(self, refusal: Refusal, reason: str) -> None:
        super().__init__(reason)
        self.refusal = refusal
        self.reason = reason


class RouterRefused(Exception):
    """A control connection is refused: the certificate does not identify a router that may connect."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RouterApiSession:
    """A fully authenticated API session as routers hold it: the SHA-256 of its token, its
    identity, and the fingerprints of the certificates that may open SDK channels with it (the
    identity's certificate authenticators and the session's ephemeral certificates)."""

    id: str
    token_hash: str
    identity_id: str
    identity_name: str
    fingerprints: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RouterHello:
    """What a router says of itself when its control connection opens."""

    hostname: str
    protocols: dict[str, str]
    link_listener: str
    tunneler: bool
    terminators: tuple[str, ...]
    version: VersionInfo
    #: When the router's process started (None from a router that does not say): a terminator
    #: made since, and not in ``terminators``, was asked for through another controller while
    #: this hello was on its way, and is kept.
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class CircuitGrant:
    """Yes to a Dial: the session, who dials, the terminator to reach and the routers on the way."""

    session: Session
    service: Service
    #: The dialing identity's name (what a binder is shown as the caller).
    caller_id: str
    terminator: Terminator
    #: Router ids from the asking router to the terminator's.
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HostedService:
    """A service a tunneler router hosts: its ``host.v1`` config data, and the cost, precedence
    and instance id of the terminator the router makes for it."""

    service: Service
    host: dict[str, Any]
    cost: int
    precedence: str
    instance_id: str


# -- what routers are told (delivered to sinks after each committed batch) --------------------------
@dataclass(frozen=True, slots=True)
class ApiSessionsAdded:
    sessions: tuple[RouterApiSession, ...]


@dataclass(frozen=True, slots=True)
class ApiSessionsRemoved:
    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SessionsRemoved:
    """Dial/Bind sessions that ended: their ids and tokens (a token is "" when it was not known)."""

    ids: tuple[str, ...]
    tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RouterRevoked:
    """A router's connection must close: the router went, was disabled or its certificate changed."""

    router_id: str
    connection: int
    reason: str


@dataclass(frozen=True, slots=True)
class HostedServicesChanged:
    """What tunneler routers host may have changed (each router's list is computed again)."""


@dataclass(frozen=True, slots=True)
class ControllersChanged:
    """The network's controllers changed (one joined, moved or was removed): routers are told
    every control address again."""


Event = (
    ApiSessionsAdded
    | ApiSessionsRemoved
    | SessionsRemoved
    | RouterRevoked
    | HostedServicesChanged
    | ControllersChanged
)
Sink = Callable[[list[Event]], None]


class EdgeControlManager:
    def __init__(
        self,
        env: Env,
        access: AccessManager,
        posture: PostureManager,
        api_sessions: ApiSessionManager,
        terminators: TerminatorManager,
        fleet: Fleet,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.env = env
        self.access = access
        self.posture = posture
        self.api_sessions = api_sessions
        self.terminators = terminators
        self.fleet = fleet
        self._rng = rng if rng is not None else random.Random()
        self._lock = threading.Lock()
        self._sinks: tuple[Sink, ...] = ()
        #: What routers hold: fully authenticated API sessions by id, and their ids by identity.
        self._pushed: dict[str, RouterApiSession] = {}
        self._by_identity: dict[str, set[str]] = {}
        #: Dial/Bind session id -> token: a deleted session's token is no longer in the store.
        self._tokens: dict[str, str] = {}
        #: Ephemeral certificate id -> API session id; certificate authenticator id -> identity id.
        self._cert_session: dict[str, str] = {}
        self._cert_identity: dict[str, str] = {}
        self._load()

    # -- subscriptions -------------------------------------------------------------------------
    def add_sink(self, sink: Sink) -> None:
        """Call ``sink`` with the events of every committed batch that has some (on the thread
        that publishes it, in commit order; a sink must not block)."""
        with self._lock:
            self._sinks = (*self._sinks, sink)

    def remove_sink(self, sink: Sink) -> None:
        with self._lock:
            self._sinks = tuple(s for s in self._sinks if s is not sink)

    # -- the routers' connection ---------------------------------------------------------------
    def authenticate_router(self, chain: Sequence[str]) -> EdgeRouter:
        """The edge router whose current certificate is the leaf of ``chain`` (PEM, leaf first);
        :class:`RouterRefused` unless it is ours, valid now, and the router verified and enabled."""
        if not chain:
            raise RouterRefused("a client certificate is required")
        try:
            leaf = self.env.ca.parse_certificate(chain[0])
        except ControllerError:
            raise RouterRefused("the client certificate could not be parsed") from None
        if not leaf.is_valid_at(self.env.clock.now()):
            raise RouterRefused("the client certificate is expired or not yet valid")
        if not self.env.ca.issued_by_us(list(chain[:1])):
            raise RouterRefused("the client certificate was not issued by this controller's CA")
        router = self.env.store.find_unique(EdgeRouter, "fingerprint", leaf.fingerprint)
        if router is None:
            raise RouterRefused("the client certificate is not the current certificate of an edge router")
        if not router.is_verified:
            raise RouterRefused(f"edge router {router.id} is not enrolled")
        if router.disabled:
            raise RouterRefused(f"edge router {router.id} is disabled")
        return router

    def router_hello(self, router: EdgeRouter, hello: RouterHello) -> list[str]:
        """Keep what the router reports of itself and reconcile its terminators; the ids it holds
        that the controller does not know (it ends those binds, or asks again for those it hosts).
        Its edge-hosted and tunnel terminators it did not list are deleted if they are older than
        the router's process (terminators an administrator made are left alone): one made since
        came from a request of this process to another controller, crossing this hello."""
        store = self.env.store
        with store.write_lock():
            uow = UnitOfWork(store)
            current = uow.get(EdgeRouter, router.id)
            if current is None or current.fingerprint != router.fingerprint or current.disabled:
                raise RouterRefused(f"edge router {router.id} changed while connecting")
            if current.hostname != hello.hostname or current.supported_protocols != hello.protocols:
                uow.put(
                    dataclasses.replace(
                        current,
                        hostname=hello.hostname,
                        supported_protocols=dict(hello.protocols),
                        updated_at=self.env.clock.now(),
                    )
                )
            held = set(hello.terminators)
            mine = uow.find_by(Terminator, "router_id", router.id)
            for terminator in mine:
                if terminator.binding not in ROUTER_BINDINGS or terminator.id in held:
                    continue
                if hello.started_at is not None and terminator.created_at >= hello.started_at:
                    continue
                uow.delete(Terminator, terminator.id)
            known = {t.id for t in mine}
            if uow.changes():
                self.env.commit(uow)
        return [t for t in dict.fromkeys(hello.terminators) if t not in known]

    def api_session_state(self) -> list[RouterApiSession]:
        """Every live, fully authenticated API session (a router's full state), by id."""
        with self._lock:
            entries = sorted(self._pushed.values(), key=lambda e: e.id)
        now = self.env.clock.now()
        out = []
        for entry in entries:
            session = self.env.store.get(ApiSession, entry.id)
            if session is not None and not self.api_sessions.is_expired(session, now):
                out.append(entry)
        return out

    def api_session_activity(self, session_ids: Iterable[str]) -> dict[str, str]:
        """SDK channels are open with these API sessions: their activity is refreshed. The live
        ones, id -> identity id (the others have ended: the router is told so)."""
        live = self.api_sessions.touch(dict.fromkeys(session_ids))
        return {session_id: session.identity_id for session_id, session in live.items()}

    # -- Dial and Bind ---------------------------------------------------------------------------
    def create_circuit(
        self,
        router_id: str,
        *,
        token: str,
        api_session_id: str,
        fingerprints: Sequence[str],
        terminator_instance_id: str = "",
        has_public_key: bool = False,
    ) -> CircuitGrant:
        """May the SDK channel's API session Dial with this session through ``router_id``, and
        to which terminator (:class:`ControlRefused` when not)."""
        session, identity, service = self._check_session(router_id, token, api_session_id, fingerprints, DIAL)
        if service.encryption_required and not has_public_key:
            raise ControlRefused(
                Refusal.ENCRYPTION_DATA_MISSING,
                "encryption required on service, initiator did not send public header",
            )
        terminator = self._pick_terminator(service, router_id, terminator_instance_id)
        path = (router_id,) if terminator.router_id == router_id else (router_id, terminator.router_id)
        return CircuitGrant(session, service, identity.name, terminator, path)

    def create_terminator(
        self,
        router_id: str,
        *,
        token: str,
        api_session_id: str,
        fingerprints: Sequence[str],
        instance_id: str = "",
        cost: int = 0,
        precedence: str = "default",
        has_public_key: bool = False,
        terminator_id: str = "",
    ) -> Terminator:
        """A Bind through ``router_id``: a new terminator of the session's service, hosted by the
        session's identity (cost 0 and precedence ``default`` take the identity's hosting
        cost and precedence for the service, as set).

        ``terminator_id``, when the router chose one (as OpenZiti's routers do), is the new
        terminator's id, and asking again is safe: a router that got no answer (its controller went
        away after committing) asks another controller with the same id and gets the terminator
        made the first time, not a second one it would never know of."""
        if terminator_id and not TERMINATOR_ID.fullmatch(terminator_id):
            raise ControlRefused(
                Refusal.INVALID_TERMINATOR, "terminatorId must be 1-64 letters, digits, '.', '_' or '-'"
            )
        if not 0 <= cost <= COST_MAX:
            raise ControlRefused(Refusal.INVALID_COST, f"cost must be between 0 and {COST_MAX}")
        if precedence not in PRECEDENCES:
            raise ControlRefused(Refusal.INVALID_PRECEDENCE, f"precedence must be one of {list(PRECEDENCES)}")
        session, identity, service = self._check_session(router_id, token, api_session_id, fingerprints, BIND)
        if service.encryption_required and not has_public_key:
            raise ControlRefused(
                Refusal.ENCRYPTION_DATA_MISSING,
                "encryption required on service, terminator did not send public header",
            )
        if cost == 0:
            cost = identity.service_hosting_costs.get(service.id, identity.default_hosting_cost)
        if precedence == "default":
            precedence = identity.service_hosting_precedences.get(
                service.id, identity.default_hosting_precedence
            )
        fields = {
            "service_id": service.id,
            "router_id": router_id,
            "binding": EDGE_BINDING,
            "address": ITS_OWN_ID,
            "instance_id": instance_id,
            "cost": cost,
            "precedence": precedence,
            "identity": identity.id,
            "host_id": session.id,
        }
        with self.env.store.write_lock():
            # checked again under the lock: a session that ended meanwhile had its terminators
            # deleted already, so one made now would never be
            if self.env.store.get(Session, session.id) is None:
                raise ControlRefused(Refusal.INVALID_SESSION, "the session ended")
            if terminator_id:
                made = self.env.store.get(Terminator, terminator_id)
                if made is not None:
                    if (made.router_id, made.service_id, made.host_id) != (router_id, service.id, session.id):
                        raise ControlRefused(Refusal.INVALID_TERMINATOR, f"terminator {terminator_id} exists")
                    return made  # asked again: the one made the first time
                fields["id"] = terminator_id
            try:
                return self.terminators.create(fields)
            except ControllerError as ex:
                raise ControlRefused(Refusal.INVALID_SERVICE, ex.reason or ex.message) from None

    # -- what tunneler routers host ------------------------------------------------------------
    def hosted_services(self, router_id: str) -> list[HostedService]:
        """The services the router hosts, by service id: none unless it is tunneler-enabled and
        has its router identity; else each service the identity may Bind that has a ``host.v1``
        config."""
        store = self.env.store
        router = store.get(EdgeRouter, router_id)
        identity = self._router_identity(router)
        if identity is None:
            return []
        try:
            services = self.access.services_of_identity(identity.id, BIND)
        except NotFoundError:  # the identity went meanwhile
            return []
        out = []
        for service in sorted(services, key=lambda s: s.id):
            host = self._host_config(identity, service)
            if host is not None:
                out.append(_hosting(identity, service, host))
        return out

    def create_tunnel_terminator(
        self,
        router_id: str,
        *,
        service_id: str,
        cost: int | None = None,
        precedence: str | None = None,
        instance_id: str | None = None,
    ) -> Terminator:
        """The terminator a tunneler router hosts ``service_id`` with (binding ``tunnel``, address
        ``tunnel:<service id>``, its router identity as host). One per router and service: asking
        again gives the same terminator, with the cost and precedence asked for now (a changed
        instance id replaces it). Cost, precedence and instance id not given are the ones
        :meth:`hosted_services` says. :class:`ControlRefused` unless the router is
        tunneler-enabled and its identity may Bind the service, which has a ``host.v1`` config."""
        if cost is not None and not 0 <= cost <= COST_MAX:
            raise ControlRefused(Refusal.INVALID_COST, f"cost must be between 0 and {COST_MAX}")
        if precedence is not None and precedence not in PRECEDENCES:
            raise ControlRefused(Refusal.INVALID_PRECEDENCE, f"precedence must be one of {list(PRECEDENCES)}")
        store = self.env.store
        with store.write_lock():
            router = store.get(EdgeRouter, router_id)
            identity = self._router_identity(router)
            if identity is None:
                raise ControlRefused(
                    Refusal.TUNNELING_NOT_ENABLED, f"edge router {router_id} is not tunneler-enabled"
                )
            service = store.get(Service, service_id) if service_id else None
            if service is None:
                raise ControlRefused(Refusal.INVALID_SERVICE, f"no service has id {service_id!r}")
            if BIND not in self.access.permissions(identity.id, service.id):
                raise ControlRefused(
                    Refusal.INVALID_SERVICE,
                    f"the identity of edge router {router_id} may not bind service {service.name}",
                )
            host = self._host_config(identity, service)
            if host is None:
                raise ControlRefused(Refusal.INVALID_SERVICE, f"service {service.name} has no host.v1 config")
            wanted = _hosting(identity, service, host)
            fields = {
                "cost": wanted.cost if cost is None else cost,
                "precedence": wanted.precedence if precedence is None else precedence,
            }
            instance = wanted.instance_id if instance_id is None else instance_id
            uow = UnitOfWork(store)
            kept: Terminator | None = None
            for held in uow.find_by(Terminator, "router_id", router_id):
                if held.binding != TUNNEL_BINDING or held.service_id != service.id:
                    continue
                if kept is None and held.instance_id == instance:
                    kept = held
                else:
                    uow.delete(Terminator, held.id)  # another instance id, or a duplicate
            if uow.changes():
                self.env.commit(uow)
            try:
                if kept is not None:
                    if all(getattr(kept, k) == v for k, v in fields.items()):
                        return kept
                    return self.terminators.update(kept.id, fields)
                return self.terminators.create(
                    {
                        "service_id": service.id,
                        "router_id": router_id,
                        "binding": TUNNEL_BINDING,
                        "address": TUNNEL_PREFIX + service.id,
                        "instance_id": instance,
                        "identity": identity.id,
                        "host_id": identity.id,
                        **fields,
                    }
                )
            except ControllerError as ex:
                raise ControlRefused(Refusal.INVALID_SERVICE, ex.reason or ex.message) from None

    def _router_identity(self, router: EdgeRouter | None) -> Identity | None:
        """The router identity of a tunneler-enabled router (None for any other router)."""
        if router is None or not router.is_tunneler_enabled:
            return None
        identity = self.env.store.get(Identity, router.id)
        if identity is None or identity.type_id != ROUTER_TYPE:
            return None
        return identity

    def _host_config(self, identity: Identity, service: Service) -> dict[str, Any] | None:
        """The ``host.v1`` config data the identity sees on the service: its own service-config
        override of that type, else the service's config of that type (as the client API's
        ``config`` of a service)."""
        store = self.env.store
        if store.get(ConfigType, HOST_V1_ID) is None:
            return None
        override = identity.service_configs.get(service.id, {}).get(HOST_V1_ID)
        if override is not None:
            config = store.get(Config, override)
            if config is not None:
                return dict(config.data)
        for config_id in service.configs:
            config = store.get(Config, config_id)
            if config is not None and config.config_type_id == HOST_V1_ID:
                return dict(config.data)
        return None

    def remove_terminators(self, router_id: str, terminator_ids: Iterable[str]) -> int:
        """Delete those of ``terminator_ids`` that are the router's; how many went."""
        store = self.env.store
        with store.write_lock():
            uow = UnitOfWork(store)
            for terminator_id in dict.fromkeys(terminator_ids):
                terminator = uow.get(Terminator, terminator_id)
                if terminator is not None and terminator.router_id == router_id:
                    uow.delete(Terminator, terminator_id)
            removed = len(uow.changes())
            if removed:
                self.env.commit(uow)
        return removed

    def _check_session(
        self, router_id: str, token: str, api_session_id: str, fingerprints: Sequence[str], wanted: str
    ) -> tuple[Session, Identity, Service]:
        store = self.env.store
        session = store.find_unique(Session, "token", token) if token else None
        if session is None:
            raise ControlRefused(Refusal.INVALID_SESSION, "no session has this token")
        if session.type != wanted:
            raise ControlRefused(Refusal.WRONG_SESSION_TYPE, f"a {session.type} session cannot {wanted}")
        if session.api_session_id != api_session_id:
            raise ControlRefused(Refusal.INVALID_SESSION, "the session belongs to another API session")
        api_session = store.get(ApiSession, api_session_id)
        if api_session is None or self.api_sessions.is_expired(api_session):
            raise ControlRefused(Refusal.INVALID_API_SESSION, "the API session has ended")
        entry = self._entry(api_session)
        if entry is None:
            raise ControlRefused(Refusal.INVALID_API_SESSION, "the API session is not fully authenticated")
        if not {f.lower() for f in fingerprints} & set(entry.fingerprints):
            raise ControlRefused(
                Refusal.INVALID_API_SESSION, "no certificate of the SDK's channel belongs to the API session"
            )
        allowed = self.access.common_edge_routers(session.identity_id, session.service_id)
        if not any(r.id == router_id for r in allowed):
            raise ControlRefused(
                Refusal.INVALID_EDGE_ROUTER_FOR_SESSION,
                f"edge router {router_id} is not allowed for the session",
            )
        service = store.get(Service, session.service_id)
        if service is None:
            raise ControlRefused(Refusal.INVALID_SERVICE, "the service is gone")
        identity = store.get(Identity, session.identity_id)
        if identity is None:
            raise ControlRefused(Refusal.INVALID_API_SESSION, "the identity is gone")
        if not identity.is_admin and wanted not in self.access.permissions(identity.id, service.id):
            raise ControlRefused(Refusal.INVALID_SESSION, f"the identity may no longer {wanted} the service")
        verdict = self.posture.evaluate(identity.id, api_session.id, service.id, wanted, refresh=True)
        if not verdict.passed:
            raise ControlRefused(Refusal.INVALID_SESSION, "the session no longer passes posture")
        return session, identity, service

    def _pick_terminator(self, service: Service, router_id: str, instance_id: str) -> Terminator:
        candidates = self.env.store.find_by(Terminator, "service_id", service.id)
        if instance_id:
            candidates = [t for t in candidates if t.instance_id == instance_id]
            if not candidates:
                raise ControlRefused(
                    Refusal.INVALID_TERMINATOR,
                    f"service {service.name} has no terminator for instance id {instance_id}",
                )
        reachable = [t for t in candidates if t.router_id == router_id or self.fleet.is_online(t.router_id)]
        if not reachable:
            raise ControlRefused(
                Refusal.INVALID_TERMINATOR,
                f"service {service.name} has no terminators"
                if not candidates
                else f"service {service.name} has no terminator on an online router",
            )

        def rank(t: Terminator) -> tuple[int, int]:
            return PRECEDENCE_RANK.get(t.precedence, 1), t.cost

        best = min(rank(t) for t in reachable)
        return self._rng.choice(sorted((t for t in reachable if rank(t) == best), key=lambda t: t.id))

    # -- committed changes -----------------------------------------------------------------------
    def on_commit(self, changes: list[Change]) -> None:
        """An Env listener: what the batch means to routers (see the module docstring)."""
        store = self.env.store
        touched: set[str] = set()
        deleted: list[str] = []
        identities: set[str] = set()
        ended: dict[str, str] = {}
        routers: set[str] = set()
        hosting = False
        controllers = False
        with self._lock:
            for change in changes:
                kind = change.kind if isinstance(change, Delete) else type(change.entity)
                entity_id = change.id if isinstance(change, Delete) else change.entity.id
                entity = change.entity if isinstance(change, Put) else None
                if kind in _HOSTING_KINDS or (
                    kind is Identity and (entity is None or getattr(entity, "type_id", "") == ROUTER_TYPE)
                ):
                    hosting = True
                if kind is ApiSession:
                    if entity is None:
                        deleted.append(entity_id)
                    else:
                        touched.add(entity_id)
                elif kind is ApiSessionCertificate:
                    if isinstance(entity, ApiSessionCertificate):
                        self._cert_session[entity_id] = entity.api_session_id
                        touched.add(entity.api_session_id)
                    elif entity_id in self._cert_session:
                        touched.add(self._cert_session.pop(entity_id))
                elif kind is Authenticator:
                    if isinstance(entity, Authenticator) and entity.method == "cert":
                        self._cert_identity[entity_id] = entity.identity_id
                        identities.add(entity.identity_id)
                    elif entity_id in self._cert_identity:
                        identities.add(self._cert_identity.pop(entity_id))
                elif kind is Identity:
                    if isinstance(entity, Identity) and self._renamed(entity):
                        identities.add(entity_id)
                elif kind is Session:
                    if isinstance(entity, Session):
                        self._tokens[entity_id] = entity.token
                    else:
                        ended[entity_id] = self._tokens.pop(entity_id, "")
                elif kind is EdgeRouter:
                    routers.add(entity_id)
                elif kind is ControllerMember:
                    controllers = True
            for identity_id in identities:
                touched.update(self._by_identity.get(identity_id, ()))
            added: list[RouterApiSession] = []
            removed: list[str] = []
            for session_id in deleted:
                touched.discard(session_id)
                if self._forget(session_id):
                    removed.append(session_id)
            for session_id in sorted(touched):
                session = store.get(ApiSession, session_id)
                entry = self._entry(session) if session is not None else None
                old = self._pushed.get(session_id)
                if entry == old:
                    continue
                if entry is None:
                    self._forget(session_id)
                    removed.append(session_id)
                else:
                    self._remember(entry)
                    added.append(entry)
            sinks = self._sinks
        if deleted:
            self.fleet.forget_api_sessions(deleted)
        if ended and not store.replaying:  # another process's batch: that process deletes them
            self._delete_hosted_terminators(list(ended))
        events: list[Event] = []
        if added:
            events.append(ApiSessionsAdded(tuple(added)))
        if removed:
            events.append(ApiSessionsRemoved(tuple(removed)))
        if ended:
            events.append(SessionsRemoved(tuple(ended), tuple(ended.values())))
        events.extend(self._revoked(routers))
        if hosting:
            events.append(HostedServicesChanged())
        if controllers:
            events.append(ControllersChanged())
        if not events:
            return
        for sink in sinks:
            try:
                sink(events)
            except Exception:
                log.exception("a control event sink failed")

    def _revoked(self, router_ids: Iterable[str]) -> list[RouterRevoked]:
        out = []
        for router_id in sorted(router_ids):
            presence = self.fleet.presence(router_id)
            if presence is None:
                continue
            router = self.env.store.get(EdgeRouter, router_id)
            if router is None:
                reason = "the edge router was deleted"
            elif router.disabled:
                reason = "the edge router was disabled"
            elif not router.is_verified or router.fingerprint != presence.fingerprint:
                reason = "the edge router's certificate is no longer its current one"
            else:
                continue
            out.append(RouterRevoked(router_id, presence.connection, reason))
        return out

    def _delete_hosted_terminators(self, session_ids: list[str]) -> None:
        """The terminators hosted with sessions that ended go too (one more commit)."""
        store = self.env.store
        with store.write_lock():
            uow = UnitOfWork(store)
            for session_id in session_ids:
                for terminator in uow.find_by(Terminator, "host_id", session_id):
                    uow.delete(Terminator, terminator.id)
            if uow.changes():
                self.env.commit(uow)

    # -- what routers hold (under the lock) ----------------------------------------------------
    def _load(self) -> None:
        store = self.env.store
        with self._lock:
            self._tokens = {s.id: s.token for s in store.all(Session)}
            self._cert_session = {c.id: c.api_session_id for c in store.all(ApiSessionCertificate)}
            self._cert_identity = {
                a.id: a.identity_id for a in store.all(Authenticator) if a.method == "cert"
            }
            for session in store.all(ApiSession):
                entry = self._entry(session)
                if entry is not None:
                    self._remember(entry)

    def _entry(self, session: ApiSession) -> RouterApiSession | None:
        """How routers hold ``session``: None unless it is fully authenticated (MFA done when due)."""
        if session.is_mfa_required and not session.is_mfa_complete:
            return None
        store = self.env.store
        identity = store.get(Identity, session.identity_id)
        if identity is None:
            return None
        prints = {
            a.fingerprint
            for a in store.find_by(Authenticator, "identity_id", identity.id)
            if a.method == "cert" and a.fingerprint
        }
        prints.update(
            c.fingerprint for c in store.find_by(ApiSessionCertificate, "api_session_id", session.id)
        )
        return RouterApiSession(
            id=session.id,
            token_hash=session.token_hash,
            identity_id=identity.id,
            identity_name=identity.name,
            fingerprints=tuple(sorted(p.lower() for p in prints)),
        )

    def _renamed(self, identity: Identity) -> bool:
        ids = self._by_identity.get(identity.id)
        if not ids:
            return False
        sample = self._pushed.get(next(iter(ids)))
        return sample is not None and sample.identity_name != identity.name

    def _remember(self, entry: RouterApiSession) -> None:
        old = self._pushed.get(entry.id)
        if old is not None and old.identity_id != entry.identity_id:
            self._forget(entry.id)
        self._pushed[entry.id] = entry
        self._by_identity.setdefault(entry.identity_id, set()).add(entry.id)

    def _forget(self, session_id: str) -> bool:
        entry = self._pushed.pop(session_id, None)
        if entry is None:
            return False
        ids = self._by_identity.get(entry.identity_id)
        if ids is not None:
            ids.discard(session_id)
            if not ids:
                del self._by_identity[entry.identity_id]
        return True


#: Kinds whose changes may change what tunneler routers host (besides router identities).
_HOSTING_KINDS: frozenset[type[Any]] = frozenset({ServicePolicy, Service, Config, ConfigType, EdgeRouter})


def _hosting(identity: Identity, service: Service, host: dict[str, Any]) -> HostedService:
    """How ``identity`` hosts ``service`` with ``host`` (its ``host.v1`` data): the identity's
    per-service hosting cost and precedence win over the config's ``listenOptions``, which win
    over the identity's defaults; the instance id comes from ``listenOptions.identity`` (with
    ``$tunneler_id.name`` and ``$tunneler_id.tag[name]``) or ``bindUsingEdgeIdentity``."""
    options = host.get("listenOptions")
    if not isinstance(options, dict):
        options = {}
    cost = identity.service_hosting_costs.get(service.id)
    if cost is None:
        listed = options.get("cost")
        cost = (
            listed if isinstance(listed, int) and 0 <= listed <= COST_MAX else identity.default_hosting_cost
        )
    precedence = identity.service_hosting_precedences.get(service.id)
    if precedence is None:
        listed = options.get("precedence")
        precedence = listed if listed in PRECEDENCES else identity.default_hosting_precedence
    instance_id = ""
    template = options.get("identity")
    if isinstance(template, str) and template:
        instance_id = _instance_id(template, identity)
    elif options.get("bindUsingEdgeIdentity") is True:
        instance_id = identity.name
    return HostedService(service, host, int(cost), str(precedence), instance_id)


def _instance_id(template: str, identity: Identity) -> str:
    out = template.replace("$tunneler_id.name", identity.name)
    while "$tunneler_id.tag[" in out:
        start = out.index("$tunneler_id.tag[")
        end = out.find("]", start)
        if end < 0:
            break
        name = out[start + len("$tunneler_id.tag[") : end]
        value = identity.tags.get(name, "")
        out = out[:start] + ("" if value is None else str(value)) + out[end + 1 :]
    return out
