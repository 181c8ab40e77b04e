"""Edge routers: create with a one-time enrollment (``erott``), update, re-enroll, delete.

Edge routers and transit routers share OpenZiti's router store, so a name is unique across both
kinds (``duplicate value '<name>' in unique index on routers store``).
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, TypeVar

from engine.entities.routers import EdgeRouter, Router, RouterBase
from engine.errors import NameConflictError
from engine.managers._base import EntityManager, Env, check_attributes
from engine.managers.references import remove_entity_references
from engine.managers.router_identities import sync_router_identity
from engine.ports import UnitOfWork

R = TypeVar("R", bound=RouterBase)

ROUTER_STORE = "routers"
#: Fields only the enrollment process sets; never taken from a create or update body.
ENROLLMENT_FIELDS = frozenset(
    {
        "fingerprint",
        "cert_pem",
        "is_verified",
        "enrollment_token",
        "enrollment_created_at",
        "enrollment_expires_at",
        "unverified_cert_pem",
        "unverified_fingerprint",
        "hostname",
        "supported_protocols",
    }
)


def new_enrollment(env: Env, duration: timedelta) -> dict[str, Any]:
    """Fresh one-time enrollment fields: a UUIDv4 token valid for ``duration``."""
    now = env.clock.now()
    return {
        "enrollment_token": env.ids.new_token(),
        "enrollment_created_at": now,
        "enrollment_expires_at": now + duration,
    }


def check_router_name(uow: UnitOfWork, router: RouterBase) -> None:
    """A router's name may not be used by a router of the other kind."""
    other_kind: type[RouterBase] = Router if isinstance(router, EdgeRouter) else EdgeRouter
    other = uow.store.find_unique(other_kind, "name", router.name)
    if other is not None:
        current = uow.get(other_kind, other.id)
        if current is not None and current.name == router.name:
            raise NameConflictError("name", router.name, ROUTER_STORE)


class RouterManagerBase(EntityManager[R]):
    """Enrollment on create and the shared router-store name index."""

    immutable = EntityManager.immutable | ENROLLMENT_FIELDS

    def __init__(self, env: Env, enrollment_duration: timedelta) -> None:
        super().__init__(env)
        self.enrollment_duration = enrollment_duration

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> R:
        router = super().build(uow, fields)
        return dataclasses.replace(router, **new_enrollment(self.env, self.enrollment_duration))

    def check_unique(self, uow: UnitOfWork, entity: R) -> None:
        try:
            super().check_unique(uow, entity)
        except NameConflictError as ex:
            if ex.field != "name":
                raise
            raise NameConflictError("name", ex.value, ROUTER_STORE) from None
        check_router_name(uow, entity)


class EdgeRouterManager(RouterManagerBase[EdgeRouter]):
    kind = EdgeRouter

    def validate(self, uow: UnitOfWork, new: EdgeRouter, old: EdgeRouter | None) -> None:
        check_attributes(new.role_attributes)

    def re_enroll(self, id: str) -> EdgeRouter:
        """A new one-time enrollment; the router's certificate no longer authenticates it."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            new = dataclasses.replace(
                old,
                updated_at=self.env.clock.now(),
                fingerprint=None,
                cert_pem=None,
                is_verified=False,
                unverified_cert_pem=None,
                unverified_fingerprint=None,
                **new_enrollment(self.env, self.enrollment_duration),
            )
            uow.put(new)
            self.env.commit(uow)
            return new

    def after_create(self, uow: UnitOfWork, entity: EdgeRouter) -> None:
        sync_router_identity(uow, None, entity, self.env.clock)

    def after_update(self, uow: UnitOfWork, old: EdgeRouter, new: EdgeRouter) -> None:
        sync_router_identity(uow, old, new, self.env.clock)

    def after_delete(self, uow: UnitOfWork, entity: EdgeRouter) -> None:
        sync_router_identity(uow, entity, None, self.env.clock)
        remove_entity_references(uow, entity, self.env.clock)
