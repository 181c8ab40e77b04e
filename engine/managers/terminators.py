"""Terminators: where a service's traffic leaves the overlay (management CRUD, per-service lists).

OpenZiti (``controller/model/terminator_manager.go``, ``controller/db/terminator_store.go``,
``controller/internal/routes/terminator_api_model.go``):

- ``service`` and ``router`` must name existing entities (the router may be an edge router or a
  transit router: both live in the router store); a missing one is the store's not-found error
  on that field. ``address`` may not be empty.
- an empty ``binding`` becomes ``udp`` for a ``udp:`` address and ``transport`` otherwise.
- ``cost`` is 0-65535 (default 0); ``precedence`` is ``default``, ``required`` or ``failed``
  (default ``default``).
- the service, the instance id (wire ``identity``) and its secret are set at create only; a
  replacement or patch silently keeps them.
- deleting a service or a router deletes its terminators (:func:`delete_terminators_of`).
- the client API lists a service's terminators only to an identity holding Dial or Bind on it
  (``ReadForIdentity`` without management access); otherwise the service is not found.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.entities.routers import EdgeRouter, Router
from engine.entities.services import Service, Terminator
from engine.errors import FieldError, NotFoundError
from engine.managers._base import EntityManager, Env
from engine.managers.access import AccessManager
from engine.ports import Store, UnitOfWork

PRECEDENCES = ("default", "required", "failed")
DEFAULT_PRECEDENCE = "default"
COST_MAX = 65535
#: Fields only a create may set.
CREATE_ONLY = frozenset({"service_id", "instance_id", "instance_secret", "identity"})


def default_binding(address: str) -> str:
    """OpenZiti's binding for a terminator created without one."""
    return "udp" if address.startswith("udp:") else "transport"


#: The ``address`` to create a terminator with whose address is to be its own id.
ITS_OWN_ID: Any = object()


class TerminatorManager(EntityManager[Terminator]):
    kind = Terminator

    def __init__(self, env: Env, access: AccessManager) -> None:
        super().__init__(env)
        self.access = access

    # -- reads -------------------------------------------------------------------------------
    def of_service(self, service_id: str) -> list[Terminator]:
        """The terminators of an existing service (management ``/services/{id}/terminators``)."""
        if self.env.store.get(Service, service_id) is None:
            raise NotFoundError()
        return self.env.store.find_by(Terminator, "service_id", service_id)

    def of_service_for_identity(self, identity_id: str, service_id: str) -> list[Terminator]:
        """The terminators of a service the identity may Dial or Bind (client API); else not found."""
        self.access.service_for_identity(identity_id, service_id)
        return self.env.store.find_by(Terminator, "service_id", service_id)

    def of_router(self, router_id: str) -> list[Terminator]:
        """The terminators of an existing edge or transit router (fabric ``/routers/{id}/terminators``)."""
        if router_by_id(self.env.store, router_id) is None:
            raise NotFoundError()
        return self.env.store.find_by(Terminator, "router_id", router_id)

    def service_of(self, terminator: Terminator) -> Service | None:
        return self.env.store.get(Service, terminator.service_id)

    def router_of(self, terminator: Terminator) -> EdgeRouter | Router | None:
        return router_by_id(self.env.store, terminator.router_id)

    # -- hooks -------------------------------------------------------------------------------
    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Terminator:
        chosen = fields.get("id")  # an id the hosting router chose (edge_control)
        fields = {k: v for k, v in fields.items() if k != "id"}
        if fields.get("address") is ITS_OWN_ID:
            # an SDK-hosted terminator's address is its own id, as OpenZiti 1.x's
            made = super().build(uow, _with_binding({**fields, "address": "-"}))
            if chosen:
                made = dataclasses.replace(made, id=chosen)
            return dataclasses.replace(made, address=made.id)
        made = super().build(uow, _with_binding(fields))
        return dataclasses.replace(made, id=chosen) if chosen else made

    def apply(self, uow: UnitOfWork, old: Terminator, fields: dict[str, Any]) -> Terminator:
        kept = {k: v for k, v in fields.items() if k not in CREATE_ONLY}
        if "binding" in kept and not kept["binding"]:
            kept["binding"] = default_binding(kept.get("address", old.address))
        return super().apply(uow, old, kept)

    def validate(self, uow: UnitOfWork, new: Terminator, old: Terminator | None) -> None:
        if uow.get(Service, new.service_id) is None:
            raise NotFoundError(
                field="service", value=new.service_id, reason=f"service with id {new.service_id} not found"
            )
        if router_by_id(uow, new.router_id) is None:
            raise NotFoundError(
                field="router", value=new.router_id, reason=f"router with id {new.router_id} not found"
            )
        if not new.address:
            raise FieldError("address", "address is required", new.address)
        if not 0 <= new.cost <= COST_MAX:
            raise FieldError("cost", f"cost must be between 0 and {COST_MAX}", new.cost)
        if new.precedence not in PRECEDENCES:
            raise FieldError("precedence", f"precedence must be one of {list(PRECEDENCES)}", new.precedence)


def _with_binding(fields: dict[str, Any]) -> dict[str, Any]:
    if fields.get("binding"):
        return fields
    return {**fields, "binding": default_binding(str(fields.get("address") or ""))}


def router_by_id(source: UnitOfWork | Store, router_id: str) -> EdgeRouter | Router | None:
    """The edge or transit router with ``router_id`` (OpenZiti keeps both in one router store)."""
    if not router_id:
        return None
    return source.get(EdgeRouter, router_id) or source.get(Router, router_id)


def delete_terminators_of(uow: UnitOfWork, field: str, entity_id: str) -> None:
    """Delete the terminators whose ``field`` (``service_id`` or ``router_id``) is ``entity_id``."""
    for terminator in uow.find_by(Terminator, field, entity_id):
        uow.delete(Terminator, terminator.id)
