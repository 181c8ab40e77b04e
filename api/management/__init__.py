"""Management API (``/edge/management/v1``) resources, one module per entity family.

Every module here that defines ``register(routes)`` is mounted by :func:`register_all`.
"""

from __future__ import annotations

import importlib
import pkgutil

from api.routing import Routes


def register_all(routes: Routes) -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(routes)
