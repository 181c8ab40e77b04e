"""Edge router policies: which identities may connect through which edge routers.

System policies (``isSystem``, created for tunneler-enabled routers) refuse updates and deletes
from the API, as OpenZiti's system-entity constraint does.
"""

from __future__ import annotations

from typing import Any

from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy
from engine.entities.routers import EdgeRouter
from engine.errors import SystemPolicyCanNotBeDeletedError, SystemPolicyCanNotBeUpdatedError
from engine.managers._policies import PolicyManager
from engine.ports import UnitOfWork
from engine.roles import EDGE_ROUTER_ROLES, IDENTITY_ROLES


class EdgeRouterPolicyManager(PolicyManager[EdgeRouterPolicy]):
    kind = EdgeRouterPolicy
    store_name = "edgeRouterPolicies"
    immutable = PolicyManager.immutable | {"is_system"}
    role_fields = (
        (IDENTITY_ROLES, Identity),
        (EDGE_ROUTER_ROLES, EdgeRouter),
    )

    def apply(self, uow: UnitOfWork, old: EdgeRouterPolicy, fields: dict[str, Any]) -> EdgeRouterPolicy:
        if old.is_system:
            raise SystemPolicyCanNotBeUpdatedError(old.id)
        return super().apply(uow, old, fields)

    def before_delete(self, uow: UnitOfWork, entity: EdgeRouterPolicy) -> None:
        if entity.is_system:
            raise SystemPolicyCanNotBeDeletedError(entity.id)
