"""The fabric API's wire shapes (OpenZiti's ``/fabric/v1``, its ``swagger.yml`` of v1.6.0): routers,
links, circuits, services and terminators as an operator's ``ziti fabric`` sees them, and what each
list filters and sorts on.

The fabric shows the same store as the management API in other shapes: a router is any router,
edge or transit (``routerDetail``: ``connected``, ``listenerAddresses`` and ``versionInfo`` while
its control connection is up); a service carries only its name and terminator strategy; a
terminator names its service and router by reference and shows ``instanceId``, ``hostId`` and a
``dynamicCost`` (always 0: Trellis has no routing strategy that adds cost). Links and circuits are
what routers report now (``engine.managers.fleet``, ``engine.managers.circuits``), never stored.
References are OpenZiti's ``entityRef`` with links relative to ``/fabric/v1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from api.wire import WireModel, base, link, ts
from engine.entities.routers import EdgeRouter, RouterBase
from engine.entities.services import Service, Terminator
from engine.managers.circuits import Circuit
from engine.managers.fleet import Fleet, Link
from engine.query import Symbol, SymbolTable, SymbolType

#: Lookups a renderer needs: an entity by id (None when it is gone).
Lookup = Callable[[str], Any]


class CircuitDelete(WireModel):
    """``circuitDelete``: ``immediate`` (ignored: a deleted circuit always closes at once)."""

    immediate: bool | None = None


def entity_ref(entity: str, id: str, name: str, *subs: str) -> dict[str, Any]:
    """OpenZiti's ``entityRef``: ``{_links, entity, id, name}``."""
    links: dict[str, Any] = {"self": link(entity, id)}
    for sub in subs:
        links[sub] = link(entity, id, sub)
    return {"_links": links, "entity": entity, "id": id, "name": name}


def router_ref(router: RouterBase | None, router_id: str) -> dict[str, Any]:
    return entity_ref("routers", router_id, router.name if router is not None else "", "terminators")


def service_ref(service: Service | None, service_id: str) -> dict[str, Any]:
    """A service reference; a service that is gone is named ``<deleted>``, as OpenZiti names it."""
    name = service.name if service is not None else "<deleted>"
    return entity_ref("services", service_id, name, "terminators")


# -- routers --------------------------------------------------------------------------------------
def listener_address(url: str) -> str:
    """A router's link listener as OpenZiti writes addresses (``tls:host:port``)."""
    return "tls:" + url.removeprefix("tls://") if url.startswith("tls://") else url


def render_router(fleet: Fleet, router: RouterBase) -> dict[str, Any]:
    """``routerDetail``: an edge or transit router, ``connected`` while its control connection is
    up, with the link listener and version its hello reported then (``listenerAddresses`` null and
    no ``versionInfo`` otherwise, as OpenZiti renders a router that is not connected)."""
    out = base(router)
    out["_links"] = {
        "self": link("routers", router.id),
        "terminators": link("routers", router.id, "terminators"),
    }
    presence = fleet.presence(router.id) if isinstance(router, EdgeRouter) else None
    out.update(
        {
            "connected": presence is not None,
            "cost": router.cost,
            # not in OpenZiti's fabric model of v1.6.0; shown as the management detail shows it
            "ctrlChanListeners": router.ctrl_chan_listeners,
            "disabled": router.disabled,
            "fingerprint": router.fingerprint,
            "listenerAddresses": None,
            "name": router.name,
            "noTraversal": router.no_traversal,
        }
    )
    if presence is not None:
        if presence.link_listener:
            address = listener_address(presence.link_listener)
            out["listenerAddresses"] = [{"address": address, "protocol": address.split(":", 1)[0]}]
        out["versionInfo"] = presence.version.as_wire()
    return out


def router_symbols(fleet: Fleet) -> SymbolTable:
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda r: r.id),
            "name": Symbol(SymbolType.STRING, lambda r: r.name),
            "fingerprint": Symbol(SymbolType.STRING, lambda r: r.fingerprint),
            "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
            "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
            "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
            "connected": Symbol(SymbolType.BOOL, lambda r: fleet.is_online(r.id)),
            "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
        },
        tags_getter=lambda r: r.tags,
    )


# -- services -------------------------------------------------------------------------------------
def render_service(service: Service) -> dict[str, Any]:
    """``serviceDetail``: the name and terminator strategy (the rest is the edge's)."""
    out = base(service, "terminators")
    out["name"] = service.name
    out["terminatorStrategy"] = service.terminator_strategy
    return out


SERVICE_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda s: s.id),
        "name": Symbol(SymbolType.STRING, lambda s: s.name),
        "terminatorStrategy": Symbol(SymbolType.STRING, lambda s: s.terminator_strategy),
        "createdAt": Symbol(SymbolType.DATETIME, lambda s: s.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda s: s.updated_at),
    },
    tags_getter=lambda s: s.tags,
)


# -- terminators ----------------------------------------------------------------------------------
def render_terminator(
    terminator: Terminator, service: Service | None, router: RouterBase | None
) -> dict[str, Any]:
    """``terminatorDetail``."""
    out = base(terminator)
    out.update(
        {
            "address": terminator.address,
            "binding": terminator.binding,
            "cost": terminator.cost,
            "dynamicCost": 0,
            "hostId": terminator.host_id,
            "instanceId": terminator.instance_id,
            "precedence": terminator.precedence,
            "router": router_ref(router, terminator.router_id),
            "routerId": terminator.router_id,
            "service": service_ref(service, terminator.service_id),
            "serviceId": terminator.service_id,
        }
    )
    return out


# -- links ----------------------------------------------------------------------------------------
def render_link(link_: Link, router_of: Lookup) -> dict[str, Any]:
    """``linkDetail`` (no timestamps nor ``_links``: OpenZiti's has none). Latencies are not
    measured (0), so ``cost`` is the static cost."""
    return {
        "cost": link_.cost,
        "destLatency": link_.dest_latency,
        "destRouter": router_ref(router_of(link_.dest_id), link_.dest_id),
        "down": link_.down,
        "id": link_.id,
        "iteration": link_.iteration,
        "protocol": link_.protocol,
        "sourceLatency": link_.source_latency,
        "sourceRouter": router_ref(router_of(link_.source_id), link_.source_id),
        "state": link_.state,
        "staticCost": link_.static_cost,
    }


LINK_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda k: k.id),
        "protocol": Symbol(SymbolType.STRING, lambda k: k.protocol),
        "dialAddress": Symbol(SymbolType.STRING, lambda k: k.dial_address),
        "sourceRouter": Symbol(SymbolType.STRING, lambda k: k.source_id),
        "destRouter": Symbol(SymbolType.STRING, lambda k: k.dest_id),
        "cost": Symbol(SymbolType.NUMBER, lambda k: k.cost),
        "staticCost": Symbol(SymbolType.NUMBER, lambda k: k.static_cost),
        "sourceLatency": Symbol(SymbolType.NUMBER, lambda k: k.source_latency),
        "destLatency": Symbol(SymbolType.NUMBER, lambda k: k.dest_latency),
        "state": Symbol(SymbolType.STRING, lambda k: k.state),
        "down": Symbol(SymbolType.BOOL, lambda k: k.down),
        "iteration": Symbol(SymbolType.NUMBER, lambda k: k.iteration),
    }
)


# -- circuits -------------------------------------------------------------------------------------
def render_circuit(
    circuit: Circuit, service_of: Lookup, router_of: Lookup, link_between: Callable[[str, str], Link | None]
) -> dict[str, Any]:
    """``circuitDetail``: the path's routers and, between each two, the link (the one recorded when
    the circuit was granted, else the one up between them now; an empty reference when none, so
    that there is always one link fewer than nodes, as the ``ziti`` CLI expects)."""
    links: list[dict[str, Any]] = []
    for i, recorded in enumerate(circuit.links):
        link_id = recorded
        if not link_id:
            now = link_between(circuit.path[i], circuit.path[i + 1])
            link_id = now.id if now is not None else ""
        links.append(entity_ref("links", link_id, link_id))
    stamp = ts(circuit.created_at)
    return {
        "_links": {
            "self": link("circuits", circuit.id),
            "services": link("circuits", circuit.id, "services"),
            "terminators": link("circuits", circuit.id, "terminators"),
        },
        "clientId": circuit.client_id,
        "createdAt": stamp,
        "id": circuit.id,
        "path": {
            "links": links,
            "nodes": [router_ref(router_of(r), r) for r in circuit.path],
        },
        "service": service_ref(service_of(circuit.service_id), circuit.service_id),
        "tags": dict(circuit.tags),
        "terminator": entity_ref("terminators", circuit.terminator_id, circuit.terminator_id),
        "updatedAt": stamp,
    }


CIRCUIT_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda c: c.id),
        "clientId": Symbol(SymbolType.STRING, lambda c: c.client_id),
        "service": Symbol(SymbolType.STRING, lambda c: c.service_id),
        "terminator": Symbol(SymbolType.STRING, lambda c: c.terminator_id),
        "createdAt": Symbol(SymbolType.DATETIME, lambda c: c.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda c: c.created_at),
    },
    tags_getter=lambda c: c.tags,
)
