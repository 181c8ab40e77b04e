"""Route registration on both API prefixes; the table of routes is what the spec is generated from.

Registering only mounts resources: managers and every other collaborator already exist on the
controller (``routes.ctrl.managers``), so ``register(routes)`` functions build nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import falcon

from api.controller import CLIENT_BASE, FABRIC_BASE, MANAGEMENT_BASE, Controller
from api.views import Listing, View, Views
from engine.managers.registry import Managers

APIS = {"client": CLIENT_BASE, "management": MANAGEMENT_BASE, "fabric": FABRIC_BASE}

#: (api, template, resource, suffix) of one mounted route.
Route = tuple[str, str, Any, str | None]


class Routes:
    """Where resources are mounted, with what they are built from: the controller and every
    kind's view (``views``, built once by the composition root and shared by both APIs)."""

    def __init__(
        self, app: falcon.App[falcon.Request, falcon.Response], ctrl: Controller, views: Views
    ) -> None:
        self.app = app
        self.ctrl = ctrl
        self.views = views
        #: Every route mounted under an API base, in mounting order.
        self.table: list[Route] = []

    @property
    def managers(self) -> Managers:
        return self.ctrl.managers

    def add(self, api: str, template: str, resource: Any, suffix: str | None = None) -> None:
        """Mount ``resource`` at ``template`` under the ``api`` base path ("client", "management"
        or "fabric")."""
        full = APIS[api] + template
        if suffix:
            self.app.add_route(full, resource, suffix=suffix)
        else:
            self.app.add_route(full, resource)
        self.table.append((api, template, resource, suffix))

    def mount_sublists(self, view: View[Any], entity: str | None = None) -> None:
        """Mount ``/<entity>/{id}/<path>`` (management API) for each of the view's sub-lists."""
        base = entity or view.kind.ENTITY
        for sub in view.sublists:
            self.management(f"/{base}/{{id}}/{sub.path}", Listing(self.views.of(sub.kind), sub.query))

    def management(self, template: str, resource: Any, suffix: str | None = None) -> None:
        self.add("management", template, resource, suffix)

    def client(self, template: str, resource: Any, suffix: str | None = None) -> None:
        self.add("client", template, resource, suffix)

    def fabric(self, template: str, resource: Any, suffix: str | None = None) -> None:
        self.add("fabric", template, resource, suffix)

    def both(self, template: str, resource: Any, suffix: str | None = None) -> None:
        self.add("client", template, resource, suffix)
        self.add("management", template, resource, suffix)

    def raw(self, path: str, resource: Any, suffix: str | None = None) -> None:
        """A route outside both bases (``/version``, ``/.well-known/est/cacerts``)."""
        if suffix:
            self.app.add_route(path, resource, suffix=suffix)
        else:
            self.app.add_route(path, resource)


def register_package(routes: Routes, package: str, path: list[str]) -> None:
    """Mount every module of ``package`` that defines ``register(routes)``, in name order."""
    for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        module = importlib.import_module(f"{package}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(routes)
