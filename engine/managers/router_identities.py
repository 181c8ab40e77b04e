"""Tunneler-enabled edge routers: their router identity and system edge router policy.

OpenZiti (``db/edge_router_store.go``, docs/policy.md §2): when ``isTunnelerEnabled`` goes
on (at create or update) the controller creates an identity with the router's id and name, type
``Router``, and an edge router policy with the router's id, named ``edge-router-<id>-system``,
``isSystem``, ``AnyOf``, linking ``@<id>`` to ``@<id>``. Turning the flag off, or deleting the
router, deletes both; renaming the router renames its identity.
"""

from __future__ import annotations

import dataclasses

from engine.entities.identities import Identity
from engine.entities.policies import ANY_OF, EdgeRouterPolicy
from engine.entities.routers import EdgeRouter
from engine.errors import NameConflictError
from engine.managers.identities import ROUTER_TYPE, delete_identity_cascade
from engine.ports import Clock, UnitOfWork


def system_policy_name(router_id: str) -> str:
    return f"edge-router-{router_id}-system"


def sync_router_identity(
    uow: UnitOfWork, old: EdgeRouter | None, new: EdgeRouter | None, clock: Clock
) -> None:
    """Bring the router identity and system policy in step with ``new`` (None: deleted)."""
    current = new if new is not None else old
    if current is None:
        return
    router_id = current.id
    wanted = new is not None and new.is_tunneler_enabled
    identity = uow.get(Identity, router_id)
    policy = uow.get(EdgeRouterPolicy, router_id)
    now = clock.now()
    if not wanted:
        if policy is not None and policy.is_system:
            uow.delete(EdgeRouterPolicy, router_id)
        if identity is not None and identity.type_id == ROUTER_TYPE:
            delete_identity_cascade(uow, identity, clock)
            uow.delete(Identity, router_id)
        return
    assert new is not None
    if identity is None:
        _check_free_name(uow, new.name, router_id)
        uow.put(
            Identity(
                id=router_id,
                created_at=now,
                updated_at=now,
                name=new.name,
                type_id=ROUTER_TYPE,
                is_admin=False,
            )
        )
    elif identity.name != new.name:
        _check_free_name(uow, new.name, router_id)
        uow.put(dataclasses.replace(identity, name=new.name, updated_at=now))
    if policy is None:
        uow.put(
            EdgeRouterPolicy(
                id=router_id,
                created_at=now,
                updated_at=now,
                name=system_policy_name(router_id),
                semantic=ANY_OF,
                identity_roles=["@" + router_id],
                edge_router_roles=["@" + router_id],
                is_system=True,
            )
        )


def _check_free_name(uow: UnitOfWork, name: str, router_id: str) -> None:
    other = uow.store.find_unique(Identity, "name", name)
    if other is not None and other.id != router_id and uow.get(Identity, other.id) is not None:
        raise NameConflictError("name", name, "identities")
