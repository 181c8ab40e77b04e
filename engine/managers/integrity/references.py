"""The database's own consistency: dangling references and orphans (see the package docstring)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from engine.entities import Entity
from engine.entities.all import (
    ApiSession,
    ApiSessionCertificate,
    Authenticator,
    AuthPolicy,
    Ca,
    Config,
    ConfigType,
    EdgeRouter,
    Enrollment,
    Identity,
    Mfa,
    Router,
    Service,
    Session,
    Terminator,
)
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID
from engine.entities.policies import Policy
from engine.managers._policies import PolicyManager
from engine.managers.edge_router_policies import EdgeRouterPolicyManager
from engine.managers.integrity._core import (
    Problem,
    StoreView,
    deleter,
    exist,
    its,
    listed,
    named,
    session_deleter,
    singular,
    updater,
)
from engine.managers.service_edge_router_policies import ServiceEdgeRouterPolicyManager
from engine.managers.service_policies import ServicePolicyManager
from engine.ports import UnitOfWork

#: The policy kinds with their label and their role fields (from the managers: one source).
_POLICY_MANAGERS: tuple[tuple[type[PolicyManager[Any]], str], ...] = (
    (ServicePolicyManager, "service policy"),
    (EdgeRouterPolicyManager, "edge router policy"),
    (ServiceEdgeRouterPolicyManager, "service edge router policy"),
)


def policy_references(view: StoreView) -> Iterator[Problem]:
    """Policy ``@id`` roles naming entities that do not exist (OpenZiti drops them on delete)."""
    for manager, label in _POLICY_MANAGERS:
        for policy in view.all(manager.kind):
            for role_field, target in manager.role_fields:
                roles: list[str] = getattr(policy, role_field.attr)
                missing = [r for r in roles if r.startswith("@") and view.get(target, r[1:]) is None]
                if missing:
                    yield Problem(
                        f"{label} {named(policy)}: {role_field.wire} names {singular(target)} "
                        f"{listed(r[1:] for r in missing)}, which {exist(len(missing))}",
                        updater(manager.kind, policy.id, _roles_without(role_field.attr, target)),
                    )


def _roles_without(attr: str, target: type[Entity]) -> Callable[[UnitOfWork, Policy], dict[str, Any]]:
    """The policy's ``attr`` roles less the ``@id`` entries naming no ``target`` entity."""

    def change(uow: UnitOfWork, policy: Policy) -> dict[str, Any]:
        roles: list[str] = getattr(policy, attr)
        return {attr: [r for r in roles if not r.startswith("@") or uow.get(target, r[1:]) is not None]}

    return change


def _configs_kept(uow: UnitOfWork, holder: Service | EdgeRouter | Router) -> dict[str, Any]:
    return {"configs": [c for c in holder.configs if uow.get(Config, c) is not None]}


def _overrides_kept(uow: UnitOfWork, identity: Identity) -> dict[str, Any]:
    kept: dict[str, dict[str, str]] = {}
    for service_id, by_type in identity.service_configs.items():
        if uow.get(Service, service_id) is None:
            continue
        configs = {t: c for t, c in by_type.items() if uow.get(Config, c) is not None}
        if configs:
            kept[service_id] = configs
    return {"service_configs": kept}


def _hosting_kept(uow: UnitOfWork, identity: Identity) -> dict[str, Any]:
    def exists(service_id: str) -> bool:
        return uow.get(Service, service_id) is not None

    return {
        "service_hosting_costs": {k: v for k, v in identity.service_hosting_costs.items() if exists(k)},
        "service_hosting_precedences": {
            k: v for k, v in identity.service_hosting_precedences.items() if exists(k)
        },
    }


def _default_auth_policy(uow: UnitOfWork, identity: Identity) -> dict[str, Any]:
    return {"auth_policy_id": DEFAULT_AUTH_POLICY_ID}


def config_references(view: StoreView) -> Iterator[Problem]:
    """Configs of missing config types; services and routers listing missing configs."""
    for config in view.all(Config):
        if view.get(ConfigType, config.config_type_id) is None:
            yield Problem(
                f"config {named(config)}: its config type {config.config_type_id} does not exist "
                "(not fixed: delete the config or recreate its type)"
            )
    holders: tuple[tuple[type[Service] | type[EdgeRouter] | type[Router], str], ...] = (
        (Service, "service"),
        (EdgeRouter, "edge router"),
        (Router, "router"),
    )
    for kind, label in holders:
        for router in view.all(kind):
            missing = [c for c in router.configs if view.get(Config, c) is None]
            if missing:
                yield Problem(
                    f"{label} {named(router)}: lists config {listed(missing)}, which {exist(len(missing))}",
                    updater(kind, router.id, _configs_kept),
                )


def identity_references(view: StoreView) -> Iterator[Problem]:
    """Identities' service-config overrides, hosting costs and auth policy naming what is gone."""
    for identity in view.all(Identity):
        overrides = identity.service_configs
        gone_services = {s for s in overrides if view.get(Service, s) is None}
        gone_configs = {
            c for by_type in overrides.values() for c in by_type.values() if view.get(Config, c) is None
        }
        if gone_services or gone_configs:
            what = [f"service {listed(gone_services)}"] if gone_services else []
            what += [f"config {listed(gone_configs)}"] if gone_configs else []
            yield Problem(
                f"identity {named(identity)}: its service-config overrides name "
                f"{' and '.join(what)}, which do not exist",
                updater(Identity, identity.id, _overrides_kept),
            )
        hosted = set(identity.service_hosting_costs) | set(identity.service_hosting_precedences)
        gone_hosted = {s for s in hosted if view.get(Service, s) is None}
        if gone_hosted:
            yield Problem(
                f"identity {named(identity)}: its service hosting costs or precedences name service "
                f"{listed(gone_hosted)}, which {exist(len(gone_hosted))}",
                updater(Identity, identity.id, _hosting_kept),
            )
        if view.get(AuthPolicy, identity.auth_policy_id) is None:
            yield Problem(
                f"identity {named(identity)}: its auth policy {identity.auth_policy_id} does not exist "
                f"(fixed: the {DEFAULT_AUTH_POLICY_ID} auth policy)",
                updater(Identity, identity.id, _default_auth_policy),
            )


def identity_dependents(view: StoreView) -> Iterator[Problem]:
    """Authenticators, enrollments and MFA enrollments of missing identities; enrollments of a
    missing CA. Deleting the identity (or the CA) would have deleted them."""
    kinds: tuple[tuple[type[Authenticator] | type[Enrollment] | type[Mfa], str], ...] = (
        (Authenticator, "authenticator"),
        (Enrollment, "enrollment"),
        (Mfa, "MFA enrollment"),
    )
    for kind, label in kinds:
        for entity in view.all(kind):
            if view.get(Identity, entity.identity_id) is None:
                yield Problem(
                    f"{label} {entity.id}: its identity {entity.identity_id} does not exist",
                    deleter(kind, entity.id),
                )
    for enrollment in view.all(Enrollment):
        ca_gone = bool(enrollment.ca_id) and view.get(Ca, enrollment.ca_id or "") is None
        if ca_gone and view.get(Identity, enrollment.identity_id) is not None:
            yield Problem(
                f"enrollment {enrollment.id}: its CA {enrollment.ca_id} does not exist",
                deleter(Enrollment, enrollment.id),
            )


def terminator_references(view: StoreView) -> Iterator[Problem]:
    """Terminators of a missing service or router (deleting either deletes its terminators)."""
    for terminator in view.all(Terminator):
        gone = []
        if view.get(Service, terminator.service_id) is None:
            gone.append(f"service {terminator.service_id}")
        if (
            view.get(EdgeRouter, terminator.router_id) is None
            and view.get(Router, terminator.router_id) is None
        ):
            gone.append(f"router {terminator.router_id}")
        if gone:
            yield Problem(
                f"terminator {terminator.id}: {its(gone)}",
                deleter(Terminator, terminator.id),
            )


def orphan_sessions(view: StoreView) -> Iterator[Problem]:
    """API sessions of a missing identity or CA; Dial/Bind sessions and API-session certificates
    whose owners are gone."""
    for api_session in view.all(ApiSession):
        gone = []
        if view.get(Identity, api_session.identity_id) is None:
            gone.append(f"identity {api_session.identity_id}")
        if api_session.ca_id and view.get(Ca, api_session.ca_id) is None:
            gone.append(f"CA {api_session.ca_id}")
        if gone:
            yield Problem(
                f"API session {api_session.id}: {its(gone)}",
                session_deleter(api_session.id),
            )
    for session in view.all(Session):
        gone = []
        if view.get(ApiSession, session.api_session_id) is None:
            gone.append(f"API session {session.api_session_id}")
        if view.get(Identity, session.identity_id) is None:
            gone.append(f"identity {session.identity_id}")
        if view.get(Service, session.service_id) is None:
            gone.append(f"service {session.service_id}")
        if gone:
            yield Problem(
                f"session {session.id}: {its(gone)}",
                deleter(Session, session.id),
            )
    for cert in view.all(ApiSessionCertificate):
        if view.get(ApiSession, cert.api_session_id) is None:
            yield Problem(
                f"API session certificate {cert.id}: its API session {cert.api_session_id} does not exist",
                deleter(ApiSessionCertificate, cert.id),
            )


#: The database checks, in the order their findings are listed.
DATABASE_CHECKS: tuple[Callable[[StoreView], Iterator[Problem]], ...] = (
    policy_references,
    config_references,
    identity_references,
    identity_dependents,
    terminator_references,
    orphan_sessions,
)
