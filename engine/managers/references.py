"""Which policy role fields may name an entity kind, and clean-up of ``@id`` on delete."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.entities import Entity
from engine.entities.policies import EdgeRouterPolicy, Policy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.ports import Clock, UnitOfWork

#: entity kind name -> the (policy kind, role field) pairs that may reference it with ``@id``.
ROLE_FIELDS: dict[str, list[tuple[type[Policy], str]]] = {
    "identities": [(ServicePolicy, "identity_roles"), (EdgeRouterPolicy, "identity_roles")],
    "services": [(ServicePolicy, "service_roles"), (ServiceEdgeRouterPolicy, "service_roles")],
    "edge-routers": [
        (EdgeRouterPolicy, "edge_router_roles"),
        (ServiceEdgeRouterPolicy, "edge_router_roles"),
    ],
    "posture-checks": [(ServicePolicy, "posture_check_roles")],
}


def remove_entity_references(uow: UnitOfWork, entity: Entity, clock: Clock) -> None:
    """Drop ``@<entity.id>`` from every policy role list that holds it (OpenZiti does this)."""
    needle = "@" + entity.id
    now = clock.now()
    for policy_kind, field in ROLE_FIELDS.get(entity.ENTITY, []):
        for policy in uow.all(policy_kind):
            roles: list[str] = getattr(policy, field)
            if needle in roles:
                kept = [r for r in roles if r != needle]
                changes: dict[str, Any] = {field: kept, "updated_at": now}
                uow.put(dataclasses.replace(policy, **changes))
