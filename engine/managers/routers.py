"""Transit (fabric) routers: create with a one-time enrollment (``trott``), update, delete."""

from __future__ import annotations

from engine.entities.routers import Router
from engine.managers.edge_routers import RouterManagerBase
from engine.managers.enrollment._core import TRANSIT_ROUTER_OTT


class RouterManager(RouterManagerBase[Router]):
    kind = Router
    method = TRANSIT_ROUTER_OTT
