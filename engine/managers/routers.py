"""Transit (fabric) routers: create with a one-time enrollment (``trott``), update, delete."""

from __future__ import annotations

from engine.entities.routers import Router
from engine.managers.edge_routers import RouterManagerBase


class RouterManager(RouterManagerBase[Router]):
    kind = Router
