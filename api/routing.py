"""Route registration on both API prefixes; the table of routes is what the spec is generated from.

Registering only mounts resources: managers and every other collaborator already exist on the
controller (``routes.ctrl.managers``), so ``register(routes)`` functions build nothing else.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import Any, ClassVar

import falcon
from falcon import constants
from falcon.routing import CompiledRouter, map_http_methods, set_default_responders
from falcon.routing.util import SuffixedMethodNotFoundError

from api.controller import CLIENT_BASE, FABRIC_BASE, MANAGEMENT_BASE, Controller
from api.views import Listing, View, Views
from engine.managers.registry import Managers

#: Trellis's own access analysis API (api/analysis.py): a root beside OpenZiti's, never under /edge;
#: mounted raw, so it is in neither the routes' table nor docs/api.md's (it has its own spec).
ANALYSIS_BASE = "/analysis/v1"

APIS = {"client": CLIENT_BASE, "management": MANAGEMENT_BASE, "fabric": FABRIC_BASE}

#: (api, template, resource, suffix) of one mounted route.
Route = tuple[str, str, Any, str | None]


#: (resource class, suffix) -> what :func:`_responder_names` found.
_RESPONDERS: dict[tuple[type, str | None], tuple[tuple[str, str], ...]] = {}


def _responder_names(cls: type, suffix: str | None) -> tuple[tuple[str, str], ...]:
    """(HTTP method, attribute) of each responder ``cls`` defines for ``suffix``: what Falcon's
    ``map_http_methods`` finds on an instance, looked up once per class."""
    found = _RESPONDERS.get((cls, suffix))
    if found is None:
        names = []
        for method in constants.COMBINED_METHODS:
            name = "on_" + method.lower() + (f"_{suffix}" if suffix else "")
            if callable(getattr(cls, name, None)):
                names.append((method, name))
        found = _RESPONDERS[(cls, suffix)] = tuple(names)
    return found


#: The methods a resource answers -> Falcon's responders for the others (405 and OPTIONS naming
#: what it answers): the same for every route that answers the same methods.
_DEFAULTS: dict[frozenset[str], dict[str, Any]] = {}


def _defaults(answered: frozenset[str]) -> dict[str, Any]:
    found = _DEFAULTS.get(answered)
    if found is None:
        method_map: dict[str, Any] = dict.fromkeys(answered)
        set_default_responders(method_map)
        found = _DEFAULTS[answered] = {m: r for m, r in method_map.items() if m not in answered}
    return found


class _Template:
    """What the shared matcher routes to: a template, with no responders of its own."""

    __slots__ = ()


_TEMPLATE = _Template()


class SharedRouter(CompiledRouter):
    """A Falcon router whose URI matching is compiled once per process for a table of templates.

    Falcon's ``CompiledRouter`` checks each new route against the tree (and then compiles the
    tree into Python source) on every app: some 30 ms for Trellis's 180-odd routes, paid by every
    worker's start and by each of the thousands of apps the tests build. The templates of every
    app are the same, only the resources differ: so one ``CompiledRouter`` per distinct table
    matches the path to its template (``find`` answers the template), and each app looks up its
    own resource and responders by template. Routing is Falcon's own: the same templates, the
    same precedence, the same 405 and OPTIONS responders.
    """

    #: (template, ...) in adding order -> the compiled matcher of that table.
    _matchers: ClassVar[dict[tuple[str, ...], CompiledRouter]] = {}
    _matchers_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        super().__init__()
        self._routes: dict[str, tuple[object, dict[str, Any]]] = {}
        self._matcher: CompiledRouter | None = None

    def add_route(self, uri_template: str, resource: object, **kwargs: Any) -> None:
        suffix = kwargs.get("suffix")
        names = _responder_names(type(resource), suffix)
        known = {name for _, name in names}
        method_map: dict[str, Any]
        if any(n.startswith("on_") and n not in known for n in getattr(resource, "__dict__", ())):
            # a responder the class lacks, set on the instance: Falcon's own look-up
            method_map = dict(map_http_methods(resource, suffix=suffix))
        else:  # the class's, less those the instance hides (None: a truthful Allow header)
            method_map = {m: r for m, name in names if callable(r := getattr(resource, name, None))}
        if suffix and not method_map:
            raise SuffixedMethodNotFoundError("No responders found for the specified suffix")
        method_map = {**_defaults(frozenset(method_map)), **method_map}
        self._routes[uri_template] = (resource, method_map)
        self._matcher = None

    def _compiled(self) -> CompiledRouter:
        table = tuple(self._routes)
        with self._matchers_lock:
            matcher = self._matchers.get(table)
            if matcher is None:
                matcher = CompiledRouter()
                for template in table:
                    matcher.add_route(template, _TEMPLATE)
                matcher.find("/")  # compiles it now, once
                self._matchers[table] = matcher
        self._matcher = matcher
        return matcher

    def find(
        self, uri: str, req: falcon.Request | None = None
    ) -> tuple[object, dict[str, Any], dict[str, Any], str] | None:
        matcher = self._matcher or self._compiled()
        found = matcher.find(uri, req)
        if found is None:
            return None
        params, template = found[2], found[3] or ""
        resource, method_map = self._routes[template]
        return resource, method_map, params, template


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
