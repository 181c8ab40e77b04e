"""The controller's side of the edge routers' control connections (``channel.control``).

:mod:`.server` listens on ``TRELLIS_CTRL_BIND`` beside the HTTP server and keeps one connection
per router; :mod:`.wire` reads and writes the protocol's bodies. What the requests mean and what
routers are told is the engine's (``engine.managers.edge_control``); which routers are online,
the fleet's (``engine.managers.fleet``).
"""

from controller.control.server import ControlServer

__all__ = ["ControlServer"]
