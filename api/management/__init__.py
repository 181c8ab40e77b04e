"""Management API (``/edge/management/v1``) resources, one module per entity family.

Every module here that defines ``register(routes)`` is mounted by :func:`register_all`.
"""

from __future__ import annotations

from api.routing import Routes, register_package


def register_all(routes: Routes) -> None:
    register_package(routes, __name__, __path__)
