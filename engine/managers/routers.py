"""Transit (fabric) routers: create with a one-time enrollment (``trott``), update, delete.

Deleting a transit router deletes its terminators.
"""

from __future__ import annotations

from engine.entities.routers import Router
from engine.managers.edge_routers import RouterManagerBase
from engine.managers.enrollment._core import TRANSIT_ROUTER_OTT
from engine.managers.terminators import delete_terminators_of
from engine.ports import UnitOfWork


class RouterManager(RouterManagerBase[Router]):
    kind = Router
    method = TRANSIT_ROUTER_OTT

    def after_delete(self, uow: UnitOfWork, entity: Router) -> None:
        delete_terminators_of(uow, "router_id", entity.id)
