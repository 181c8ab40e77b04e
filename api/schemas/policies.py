"""Policy wire shapes: request models and the detail renderers of the three policy kinds.

``semantic`` and service policy ``type`` are REST enums checked exactly (go-swagger's message),
role lists are plain string lists validated by the managers (engine/roles.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from api.controller import Controller
from api.wire import Semantic, Tags, WireModel, base, one_of, require_field
from engine.entities import Entity
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.managers._base import EntityManager
from engine.managers.access import AccessManager
from engine.query import Symbol, SymbolTable, SymbolType
from engine.roles import named_roles

#: The REST ``dialBind`` enum: ``Invalid`` passes here and is refused by the manager.
DialBind = Annotated[str, AfterValidator(one_of("type", ("Dial", "Bind", "Invalid")))]
Roles = list[str] | None


class _PolicyBody(WireModel):
    def check_required(self, *fields: str) -> None:
        """Required fields sent as ``null`` fail like absent ones."""
        for name in fields:
            require_field(getattr(self, name), _camel(name))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


# -- service policies -----------------------------------------------------------------------------
class ServicePolicyCreate(_PolicyBody):
    name: str | None
    type: DialBind | None
    semantic: Semantic | None
    identity_roles: Roles = None
    service_roles: Roles = None
    posture_check_roles: Roles = None
    tags: Tags = None


class ServicePolicyUpdate(ServicePolicyCreate):
    pass


class ServicePolicyPatch(_PolicyBody):
    name: str | None = None
    type: DialBind | None = None
    semantic: Semantic | None = None
    identity_roles: Roles = None
    service_roles: Roles = None
    posture_check_roles: Roles = None
    tags: Tags = None


# -- edge router policies -------------------------------------------------------------------------
class EdgeRouterPolicyCreate(_PolicyBody):
    name: str | None
    semantic: Semantic | None
    identity_roles: Roles = None
    edge_router_roles: Roles = None
    tags: Tags = None


class EdgeRouterPolicyUpdate(EdgeRouterPolicyCreate):
    pass


class EdgeRouterPolicyPatch(_PolicyBody):
    name: str | None = None
    semantic: Semantic | None = None
    identity_roles: Roles = None
    edge_router_roles: Roles = None
    tags: Tags = None


# -- service edge router policies -----------------------------------------------------------------
class ServiceEdgeRouterPolicyCreate(_PolicyBody):
    name: str | None
    semantic: Semantic | None
    service_roles: Roles = None
    edge_router_roles: Roles = None
    tags: Tags = None


class ServiceEdgeRouterPolicyUpdate(ServiceEdgeRouterPolicyCreate):
    pass


class ServiceEdgeRouterPolicyPatch(_PolicyBody):
    name: str | None = None
    semantic: Semantic | None = None
    service_roles: Roles = None
    edge_router_roles: Roles = None
    tags: Tags = None


# -- filterable fields ----------------------------------------------------------------------------
def _members(access: AccessManager, kind: type[Entity], table: SymbolTable) -> Symbol:
    """The ids of the entities of ``kind`` a service policy selects; a subquery (``from
    identities where ...``) filters the entities themselves with ``table``."""
    return Symbol(
        SymbolType.STRING,
        lambda p: access.member_ids(ServicePolicy, p.id, kind),
        is_set=True,
        related=table,
        related_getter=lambda p: access.load(kind, list(access.member_ids(ServicePolicy, p.id, kind))),
    )


def service_policy_symbols(
    access: AccessManager, *, identities: SymbolTable, services: SymbolTable
) -> SymbolTable:
    """The filterable fields of service policies. ``identities`` and ``services`` are the ids of
    the identities and services the policy selects now (its roles resolved, as
    ``/service-policies/{id}/identities`` lists them): ``anyOf(identities) = "<id>"``, or with
    a subquery on those kinds' own fields (their tables given), ``isEmpty(from identities where
    name = "x")``."""
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda p: p.id),
            "name": Symbol(SymbolType.STRING, lambda p: p.name),
            "semantic": Symbol(SymbolType.STRING, lambda p: p.semantic),
            "type": Symbol(SymbolType.STRING, lambda p: p.type),
            "identityRoles": Symbol(SymbolType.STRING, lambda p: p.identity_roles, is_set=True),
            "serviceRoles": Symbol(SymbolType.STRING, lambda p: p.service_roles, is_set=True),
            "postureCheckRoles": Symbol(SymbolType.STRING, lambda p: p.posture_check_roles, is_set=True),
            "identities": _members(access, Identity, identities),
            "services": _members(access, Service, services),
            "createdAt": Symbol(SymbolType.DATETIME, lambda p: p.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda p: p.updated_at),
        },
        tags_getter=lambda p: p.tags,
    )


EDGE_ROUTER_POLICY_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda p: p.id),
        "name": Symbol(SymbolType.STRING, lambda p: p.name),
        "semantic": Symbol(SymbolType.STRING, lambda p: p.semantic),
        "identityRoles": Symbol(SymbolType.STRING, lambda p: p.identity_roles, is_set=True),
        "edgeRouterRoles": Symbol(SymbolType.STRING, lambda p: p.edge_router_roles, is_set=True),
        "isSystem": Symbol(SymbolType.BOOL, lambda p: p.is_system),
        "createdAt": Symbol(SymbolType.DATETIME, lambda p: p.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda p: p.updated_at),
    },
    tags_getter=lambda p: p.tags,
)

SERVICE_EDGE_ROUTER_POLICY_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda p: p.id),
        "name": Symbol(SymbolType.STRING, lambda p: p.name),
        "semantic": Symbol(SymbolType.STRING, lambda p: p.semantic),
        "serviceRoles": Symbol(SymbolType.STRING, lambda p: p.service_roles, is_set=True),
        "edgeRouterRoles": Symbol(SymbolType.STRING, lambda p: p.edge_router_roles, is_set=True),
        "createdAt": Symbol(SymbolType.DATETIME, lambda p: p.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda p: p.updated_at),
    },
    tags_getter=lambda p: p.tags,
)


# -- rendering ------------------------------------------------------------------------------------
def _display(ctrl: Controller, kind: type[Entity], roles: list[str]) -> list[dict[str, str]]:
    managers = ctrl.managers
    by_kind: dict[type[Entity], EntityManager[Any]] = {
        Identity: managers.identities,
        Service: managers.services,
        EdgeRouter: managers.edge_routers,
        PostureCheck: managers.posture_checks,
    }
    manager = by_kind[kind]

    def name_of(id: str) -> str | None:
        entity = manager.get(id)
        return None if entity is None else str(getattr(entity, "name", ""))

    return named_roles(roles, name_of)


def render_service_policy(ctrl: Controller, policy: ServicePolicy) -> dict[str, Any]:
    out = base(policy, "identities", "posture-checks", "services")
    out.update(
        {
            "identityRoles": policy.identity_roles,
            "identityRolesDisplay": _display(ctrl, Identity, policy.identity_roles),
            "name": policy.name,
            "postureCheckRoles": policy.posture_check_roles,
            "postureCheckRolesDisplay": _display(ctrl, PostureCheck, policy.posture_check_roles),
            "semantic": policy.semantic,
            "serviceRoles": policy.service_roles,
            "serviceRolesDisplay": _display(ctrl, Service, policy.service_roles),
            "type": policy.type,
        }
    )
    return out


def render_edge_router_policy(ctrl: Controller, policy: EdgeRouterPolicy) -> dict[str, Any]:
    out = base(policy, "edge-routers", "identities")
    out.update(
        {
            "edgeRouterRoles": policy.edge_router_roles,
            "edgeRouterRolesDisplay": _display(ctrl, EdgeRouter, policy.edge_router_roles),
            "identityRoles": policy.identity_roles,
            "identityRolesDisplay": _display(ctrl, Identity, policy.identity_roles),
            "isSystem": policy.is_system,
            "name": policy.name,
            "semantic": policy.semantic,
        }
    )
    return out


def render_service_edge_router_policy(ctrl: Controller, policy: ServiceEdgeRouterPolicy) -> dict[str, Any]:
    out = base(policy, "edge-routers", "services")
    out.update(
        {
            "edgeRouterRoles": policy.edge_router_roles,
            "edgeRouterRolesDisplay": _display(ctrl, EdgeRouter, policy.edge_router_roles),
            "name": policy.name,
            "semantic": policy.semantic,
            "serviceRoles": policy.service_roles,
            "serviceRolesDisplay": _display(ctrl, Service, policy.service_roles),
        }
    )
    return out
