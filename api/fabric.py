"""``/fabric/v1``: the read side of OpenZiti's fabric management API, for operators (``ziti fabric``).

Served, to an administrator's API session (the same ``zt-session`` as the management API's, as
OpenZiti takes the edge session on the fabric API), in OpenZiti's shapes (``api.schemas.fabric``):

- ``GET /routers``, ``/routers/{id}``, ``/routers/{id}/terminators``: every router, edge and transit;
- ``GET /links``, ``/links/{id}``: the links up between online routers, as the routers report them;
- ``GET /circuits``, ``/circuits/{id}``, ``DELETE /circuits/{id}``: the circuits routers carry now;
  a delete forgets the circuit and asks the router that opened it to close it;
- ``GET /services``, ``/services/{id}``, ``/services/{id}/terminators``, ``/terminators``,
  ``/terminators/{id}``.

Lists page and filter as the management API's (ZitiQL ``filter``, ``limit``, ``offset``,
``meta.pagination``). What is not served answers OpenZiti's error envelope with the reason in
``cause.message``: a write to routers, services, terminators or links is 405 ``METHOD_NOT_ALLOWED``
(they are written through the management API, or not at all), any other path 404 ``NOT_FOUND``
naming what Trellis lacks (inspections, the cluster) or where it serves it (the database).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import falcon

from api.controller import FABRIC_BASE, MANAGEMENT_BASE
from api.http import LOOP_READS, Indexed, empty, index_fields, list_response, ok, read_model
from api.middleware import ADMIN, NONE
from api.resources import refusal, whole_collection
from api.routing import Routes
from api.schemas.fabric import (
    CIRCUIT_SYMBOLS,
    LINK_SYMBOLS,
    SERVICE_SYMBOLS,
    CircuitDelete,
    render_circuit,
    render_link,
    render_router,
    render_service,
    render_terminator,
    router_symbols,
)
from api.schemas.terminators import terminator_symbols
from engine.entities.routers import RouterBase
from engine.entities.services import Service, Terminator
from engine.errors import MethodNotAllowedError, NotFoundError
from engine.managers.registry import Managers
from engine.query import SymbolTable

Render = Callable[[Any], dict[str, Any]]

#: Why a write to a kind is refused (405), by the kind's path.
WRITES = {
    "routers": (
        "Trellis serves the fabric API to read: routers are created, changed and deleted through "
        f"the management API ({MANAGEMENT_BASE}/edge-routers and /transit-routers)"
    ),
    "services": (
        "Trellis serves the fabric API to read: services are created, changed and deleted through "
        f"the management API ({MANAGEMENT_BASE}/services)"
    ),
    "terminators": (
        "Trellis serves the fabric API to read: terminators are created, changed and deleted "
        f"through the management API ({MANAGEMENT_BASE}/terminators)"
    ),
    "links": (
        "links are made and ended by the routers themselves: Trellis has no link cost or down "
        "state to change, and does not delete links"
    ),
    "circuits": "circuits are made by routers for SDKs; an administrator may only delete one",
}

#: Why OpenZiti's other fabric paths are not served (404), by their first segment.
ABSENT = {
    "inspections": "Trellis has no inspections",
    "database": f"the database operations are served by the management API ({MANAGEMENT_BASE}/database/...)",
    "cluster": "Trellis runs one controller: there is no cluster",
}
SERVED = (
    "of OpenZiti's fabric API Trellis serves the reads of routers, links, circuits, services and "
    "terminators, and the delete of circuits"
)


def _refuse(kind: str, allowed: str) -> MethodNotAllowedError:
    return MethodNotAllowedError(WRITES[kind], headers={"Allow": allowed})


class FabricCollection:
    """A fabric list: ``items`` filtered, sorted and paged as every list is."""

    auth = ADMIN

    def __init__(
        self,
        kind: str,
        items: Callable[[], Iterable[Any] | Indexed[Any]],
        symbols: SymbolTable,
        render: Render,
    ) -> None:
        self.kind = kind
        self.items = items
        self.symbols = symbols
        self.render = render

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        list_response(req, resp, self.items(), self.symbols, self.render)

    @refusal
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        raise _refuse(self.kind, "GET")


class FabricItem:
    """One fabric entity: ``find`` it (404 when it is not there) and render it."""

    auth = ADMIN
    loop_methods = LOOP_READS

    def __init__(self, kind: str, find: Callable[[str], Any], render: Render) -> None:
        self.kind = kind
        self.find = find
        self.render = render

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, self.render(self.find(id)))

    @refusal
    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        raise _refuse(self.kind, "GET")

    @refusal
    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        raise _refuse(self.kind, "GET")

    @refusal
    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        raise _refuse(self.kind, "GET")


class CircuitItem(FabricItem):
    """A circuit: read, or deleted (its router is asked to close it)."""

    body_models = {"delete": CircuitDelete}

    def __init__(self, managers: Managers, render: Render) -> None:
        super().__init__("circuits", managers.circuits.require, render)
        self.managers = managers

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Delete a circuit: forget it and ask the router that opened it to close it (``immediate``
        is taken and ignored: the close is always at once)."""
        read_model(req, CircuitDelete, allow_empty=True)
        self.managers.circuits.remove(id)
        empty(resp)

    @refusal
    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        raise _refuse("circuits", "GET, DELETE")

    @refusal
    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        raise _refuse("circuits", "GET, DELETE")


class FabricSubList:
    """``/<kind>/{id}/terminators``: a parent's terminators (404 when the parent is not there)."""

    auth = ADMIN

    def __init__(self, items: Callable[[str], Iterable[Any]], symbols: SymbolTable, render: Render) -> None:
        self.items = items
        self.symbols = symbols
        self.render = render

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        list_response(req, resp, self.items(id), self.symbols, self.render)


class NotServed:
    """Every other path under ``/fabric/v1``: 404 with what Trellis does not serve, to anyone."""

    auth = NONE

    def _answer(self, req: falcon.Request, rest: str = "") -> None:
        first = rest.split("/", 1)[0]
        why = ABSENT.get(first, SERVED)
        path = f"{FABRIC_BASE}/{rest}" if rest else FABRIC_BASE
        raise NotFoundError(f"{req.method} {path} is not served: {why}")

    def on_get(self, req: falcon.Request, resp: falcon.Response, rest: str = "") -> None:
        self._answer(req, rest)

    on_post = on_put = on_patch = on_delete = on_head = on_get


def register(routes: Routes) -> None:
    m = routes.managers
    fleet, terminators, services = m.fleet, m.terminators, m.services

    def router(router_id: str) -> RouterBase | None:
        return m.edge_routers.get(router_id) or m.routers.get(router_id)

    def require_router(router_id: str) -> RouterBase:
        found = router(router_id)
        if found is None:
            raise NotFoundError()
        return found

    def all_routers() -> list[RouterBase]:
        every: list[RouterBase] = [*m.edge_routers.list(), *m.routers.list()]
        return sorted(every, key=lambda r: r.id)

    def show_router(r: RouterBase) -> dict[str, Any]:
        return render_router(fleet, r)

    def show_terminator(t: Any) -> dict[str, Any]:
        return render_terminator(t, terminators.service_of(t), terminators.router_of(t))

    def require_link(link_id: str) -> Any:
        found = fleet.link(link_id)
        if found is None:
            raise NotFoundError()
        return found

    def show_link(k: Any) -> dict[str, Any]:
        return render_link(k, router)

    def show_circuit(c: Any) -> dict[str, Any]:
        return render_circuit(c, services.get, router, fleet.link_between)

    def service_terminators(service_id: str) -> Iterable[Any]:
        return terminators.of_service(service_id)

    t_symbols = terminator_symbols(terminators, controller_id=routes.ctrl.instance_id)
    r_symbols = router_symbols(fleet)

    routes.fabric("/routers", FabricCollection("routers", all_routers, r_symbols, show_router))
    routes.fabric("/routers/{id}", FabricItem("routers", require_router, show_router))
    routes.fabric(
        "/routers/{id}/terminators", FabricSubList(terminators.of_router, t_symbols, show_terminator)
    )
    routes.fabric("/links", FabricCollection("links", fleet.links, LINK_SYMBOLS, show_link))
    routes.fabric("/links/{id}", FabricItem("links", require_link, show_link))
    routes.fabric("/circuits", FabricCollection("circuits", m.circuits.list, CIRCUIT_SYMBOLS, show_circuit))
    routes.fabric("/circuits/{id}", CircuitItem(m, show_circuit))
    service_fields = index_fields(Service, SERVICE_SYMBOLS)
    terminator_fields = index_fields(Terminator, t_symbols)

    def all_services() -> Indexed[Service]:
        return whole_collection(services, service_fields)

    def all_terminators() -> Indexed[Terminator]:
        return whole_collection(terminators, terminator_fields)

    routes.fabric("/services", FabricCollection("services", all_services, SERVICE_SYMBOLS, render_service))
    routes.fabric("/services/{id}", FabricItem("services", services.require, render_service))
    routes.fabric(
        "/services/{id}/terminators", FabricSubList(service_terminators, t_symbols, show_terminator)
    )
    routes.fabric(
        "/terminators", FabricCollection("terminators", all_terminators, t_symbols, show_terminator)
    )
    routes.fabric("/terminators/{id}", FabricItem("terminators", terminators.require, show_terminator))
    not_served = NotServed()
    routes.raw(FABRIC_BASE, not_served)
    routes.raw(FABRIC_BASE + "/{rest:path}", not_served)
