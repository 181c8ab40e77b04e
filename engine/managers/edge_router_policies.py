"""Edge router policies: which identities may connect through which edge routers.

System policies (``isSystem``, created for tunneler-enabled routers) refuse updates and deletes
from the API, as OpenZiti's system-entity constraint does.
"""

from __future__ import annotations

from typing import Any

from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy
from engine.entities.routers import EdgeRouter
from engine.errors import EntityCanNotBeDeletedError, EntityCanNotBeUpdatedError
from engine.managers._policies import PolicyManager
from engine.ports import UnitOfWork
from engine.roles import EDGE_ROUTER_ROLES, IDENTITY_ROLES


def _system_cause(operation: str, id: str) -> dict[str, Any]:
    """OpenZiti wraps a plain error as the cause: ``{code: UNHANDLED, message}``."""
    return {
        "code": "UNHANDLED",
        "message": f"cannot {operation} system edgeRouterPolicy in a non-system context (id={id})",
    }


class SystemPolicyCanNotBeUpdatedError(EntityCanNotBeUpdatedError):
    def __init__(self, id: str) -> None:
        super().__init__()
        self._cause = _system_cause("update", id)

    def cause(self) -> dict[str, Any] | None:
        return self._cause


class SystemPolicyCanNotBeDeletedError(EntityCanNotBeDeletedError):
    def __init__(self, id: str) -> None:
        super().__init__()
        self._cause = _system_cause("delete", id)

    def cause(self) -> dict[str, Any] | None:
        return self._cause


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
