"""Service edge router policies: which services may be reached through which edge routers."""

from __future__ import annotations

from engine.entities.policies import ServiceEdgeRouterPolicy
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.managers._policies import PolicyManager
from engine.roles import EDGE_ROUTER_ROLES, SERVICE_ROLES


class ServiceEdgeRouterPolicyManager(PolicyManager[ServiceEdgeRouterPolicy]):
    kind = ServiceEdgeRouterPolicy
    store_name = "serviceEdgeRouterPolicies"
    role_fields = (
        (SERVICE_ROLES, Service),
        (EDGE_ROUTER_ROLES, EdgeRouter),
    )
