"""The typed set of managers (OpenZiti's ``env.Managers``), built once by the composition root.

Resources receive this object and call one manager method per request; nothing else builds a
manager, so every manager shares one :class:`Env` and there is exactly one of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.api_session_certificates import ApiSessionCertificateManager
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.auth_policies import AuthPolicyManager
from engine.managers.authentication import AuthenticationManager
from engine.managers.authenticators import AuthenticatorManager
from engine.managers.bootstrap import ensure_builtins
from engine.managers.cas import CaManager
from engine.managers.circuits import CircuitManager
from engine.managers.config_types import ConfigTypeManager, ensure_builtin_config_types
from engine.managers.configs import ConfigManager
from engine.managers.controllers import ControllerManager
from engine.managers.database import DatabaseManager
from engine.managers.edge_control import EdgeControlManager
from engine.managers.edge_router_policies import EdgeRouterPolicyManager
from engine.managers.edge_routers import EdgeRouterManager
from engine.managers.enrollment import EnrollManager, EnrollmentSettings
from engine.managers.enrollment.trust import EnrollmentTrust
from engine.managers.enrollments import EnrollmentManager
from engine.managers.external_jwt_signers import ExternalJwtSignerManager
from engine.managers.fleet import Fleet
from engine.managers.identities import IdentityManager
from engine.managers.identity_traces import IdentityTraceManager
from engine.managers.integrity import IntegrityManager
from engine.managers.mfa import DEFAULT_CODE_BACKOFF, MfaManager
from engine.managers.oidc import OidcKeys, OidcManager
from engine.managers.posture import PostureManager
from engine.managers.posture_checks import PostureCheckManager
from engine.managers.routers import RouterManager
from engine.managers.service_edge_router_policies import ServiceEdgeRouterPolicyManager
from engine.managers.service_policies import ServicePolicyManager
from engine.managers.service_updates import ServiceUpdates
from engine.managers.services import ServiceManager
from engine.managers.sessions import SessionManager
from engine.managers.terminators import TerminatorManager
from engine.ports import Backoff


@dataclass(frozen=True)
class Managers:
    env: Env
    enrollment_settings: EnrollmentSettings
    access: AccessManager
    api_sessions: ApiSessionManager
    api_session_certificates: ApiSessionCertificateManager
    authentication: AuthenticationManager
    auth_policies: AuthPolicyManager
    authenticators: AuthenticatorManager
    cas: CaManager
    #: The circuits routers carry now (not persisted).
    circuits: CircuitManager
    config_types: ConfigTypeManager
    configs: ConfigManager
    #: The controllers of the network (durable members; online from the fleet).
    controllers: ControllerManager
    database: DatabaseManager
    #: The routers' control connections: who a router is, Dial/Bind checks, what routers are told.
    edge_control: EdgeControlManager
    edge_router_policies: EdgeRouterPolicyManager
    edge_routers: EdgeRouterManager
    enroll: EnrollManager
    enrollments: EnrollmentManager
    enrollment_trust: EnrollmentTrust
    external_jwt_signers: ExternalJwtSignerManager
    #: The edge routers connected now (not persisted).
    fleet: Fleet
    identities: IdentityManager
    identity_traces: IdentityTraceManager
    integrity: IntegrityManager
    mfa: MfaManager
    #: The OIDC provider (``/oidc``): its logins are API sessions, its access tokens name them.
    oidc: OidcManager
    posture: PostureManager
    posture_checks: PostureCheckManager
    routers: RouterManager
    service_edge_router_policies: ServiceEdgeRouterPolicyManager
    service_policies: ServicePolicyManager
    service_updates: ServiceUpdates
    services: ServiceManager
    sessions: SessionManager
    terminators: TerminatorManager


def build_managers(
    env: Env,
    enrollment: EnrollmentSettings,
    *,
    session_timeout: timedelta,
    code_backoff: Backoff = DEFAULT_CODE_BACKOFF,
) -> Managers:
    """Every manager over ``env``; the built-in entities are ensured first, then the graph is built.
    ``code_backoff`` throttles MFA code guesses (:class:`~engine.managers.mfa.MfaManager`)."""
    ensure_builtins(env)
    ensure_builtin_config_types(env)
    access = AccessManager(env.store)  # the policy graph, resolved from the store in bulk
    env.listeners.append(access.on_commit)
    service_updates = ServiceUpdates(env.store, env.clock, env.store.commit_times())
    access.observe(service_updates)
    sessions = ApiSessionManager(env, session_timeout)
    posture = PostureManager(env, access)
    env.listeners.append(posture.on_commit)
    posture.add_listener(
        lambda identity_id: service_updates.posture_changed(identity_id, posture.changed_at(identity_id))
    )
    fleet = Fleet(env.clock, env.fleet_board)
    controllers = ControllerManager(env, fleet)

    def peers() -> tuple[str, ...]:
        """The control addresses of the network's other controllers, online or not (routers
        enroll to connect to every controller, and keep trying one that is away)."""
        return tuple(a for a in controllers.ctrl_addresses() if a not in enrollment.ctrls)

    dial_bind = SessionManager(env, access, posture, fleet)
    env.listeners.append(dial_bind.on_commit)
    posture.add_listener(dial_bind.enforce_posture)
    database = DatabaseManager(env)
    terminators = TerminatorManager(env, access)
    edge_control = EdgeControlManager(env, access, posture, sessions, terminators, fleet)
    env.listeners.append(edge_control.on_commit)  # after the sessions a batch ends are ended
    authentication = AuthenticationManager(env, sessions)
    mfa = MfaManager(env, sessions, issuer=enrollment.issuer, code_backoff=code_backoff)
    oidc_keys = env.tokens if isinstance(env.tokens, OidcKeys) else None  # the TLS key, as OpenZiti
    oidc = OidcManager(env, sessions, authentication, mfa, issuer=f"{enrollment.issuer}/oidc", keys=oidc_keys)
    return Managers(
        env=env,
        enrollment_settings=enrollment,
        access=access,
        api_sessions=sessions,
        api_session_certificates=ApiSessionCertificateManager(env, enrollment),
        authentication=authentication,
        auth_policies=AuthPolicyManager(env),
        authenticators=AuthenticatorManager(env),
        cas=CaManager(env, enrollment),
        circuits=CircuitManager(env.clock, env.ids, fleet),
        config_types=ConfigTypeManager(env),
        configs=ConfigManager(env),
        controllers=controllers,
        database=database,
        edge_control=edge_control,
        edge_router_policies=EdgeRouterPolicyManager(env),
        edge_routers=EdgeRouterManager(env, enrollment, peers),
        enroll=EnrollManager(env, enrollment),
        enrollments=EnrollmentManager(env, enrollment),
        enrollment_trust=EnrollmentTrust(env, enrollment),
        external_jwt_signers=ExternalJwtSignerManager(env),
        fleet=fleet,
        identities=IdentityManager(env),
        identity_traces=IdentityTraceManager(env),
        integrity=IntegrityManager(env, access, database, service_updates),
        mfa=mfa,
        oidc=oidc,
        posture=posture,
        posture_checks=PostureCheckManager(env),
        routers=RouterManager(env, enrollment, peers),
        service_edge_router_policies=ServiceEdgeRouterPolicyManager(env),
        service_policies=ServicePolicyManager(env),
        service_updates=service_updates,
        services=ServiceManager(env),
        sessions=dial_bind,
        terminators=terminators,
    )
