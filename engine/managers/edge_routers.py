"""Edge routers: create with a one-time enrollment (``erott``), update, re-enroll, delete.

Edge routers and transit routers share OpenZiti's router store, so a name is unique across both
kinds (``duplicate value '<name>' in unique index on routers store``). Deleting a router of either
kind deletes its terminators. ``ctrlChanListeners`` (listener address -> groups) is set by
administrators like any other field: a replacement without it clears it. So are ``configs``
(router-targeted configs, one per config type, checked whenever they are set:
:func:`~engine.managers.configs.router_configs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from engine.entities.routers import EdgeRouter, Router, RouterBase
from engine.errors import NameConflictError
from engine.managers._base import EntityManager, Env, check_attributes
from engine.managers.configs import router_configs
from engine.managers.enrollment._core import EDGE_ROUTER_OTT, EnrollmentSettings, router_enrollment_fields
from engine.managers.references import remove_entity_references
from engine.managers.router_identities import sync_router_identity
from engine.managers.terminators import delete_terminators_of
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
        "enrollment_jwt",
        "unverified_cert_pem",
        "unverified_fingerprint",
        "hostname",
        "supported_protocols",
    }
)


def check_router_name(uow: UnitOfWork, router: RouterBase) -> None:
    """A router's name may not be used by a router of the other kind."""
    other_kind: type[RouterBase] = Router if isinstance(router, EdgeRouter) else EdgeRouter
    other = uow.store.find_unique(other_kind, "name", router.name)
    if other is not None:
        current = uow.get(other_kind, other.id)
        if current is not None and current.name == router.name:
            raise NameConflictError("name", router.name, ROUTER_STORE)


def _with_configs(uow: UnitOfWork, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with their ``configs`` (when set) checked and in stored form."""
    if "configs" not in fields:
        return fields
    return {**fields, "configs": router_configs(uow, fields["configs"] or [])}


class RouterManagerBase(EntityManager[R]):
    """Enrollment on create and the shared router-store name index."""

    immutable = EntityManager.immutable | ENROLLMENT_FIELDS
    #: The ``em`` claim of this kind's enrollment JWT.
    method: str

    def __init__(
        self, env: Env, settings: EnrollmentSettings, peers: Callable[[], tuple[str, ...]] | None = None
    ) -> None:
        super().__init__(env)
        self.settings = settings
        #: The control addresses of the network's other controllers, asked at each enrollment.
        self.peers = peers

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> R:
        router = super().build(uow, _with_configs(uow, fields))
        return dataclasses.replace(router, **self.new_enrollment(router.id))

    def apply(self, uow: UnitOfWork, old: R, fields: dict[str, Any]) -> R:
        return super().apply(uow, old, _with_configs(uow, fields))

    def new_enrollment(self, router_id: str) -> dict[str, Any]:
        peers = self.peers() if self.peers is not None else ()
        return router_enrollment_fields(self.env, self.settings, router_id, self.method, peers)

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
    method = EDGE_ROUTER_OTT

    def validate(self, uow: UnitOfWork, new: EdgeRouter, old: EdgeRouter | None) -> None:
        check_attributes(new.role_attributes)

    def re_enroll(self, id: str) -> EdgeRouter:
        """Back to awaiting enrollment (seed 001): the certificate no longer identifies the router,
        a new JWT replaces any outstanding one, everything else stays."""
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
                **self.new_enrollment(old.id),
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
        delete_terminators_of(uow, "router_id", entity.id)
