"""Edge routers as clients see them: in sessions, per service and for the current identity.

``isOnline``, ``syncStatus``, ``hostname`` and ``supportedProtocols`` come from the router's
control connection while it is online (the fleet, :mod:`engine.managers.fleet`); offline, the
hostname and protocols it last reported. ``supportedProtocols`` (and, in sessions, the deprecated
``urls`` older SDKs still read) is the router's protocol -> address map, e.g.
``{"tls": "tls://er1.example.com:3022"}``. A session names offline routers too, with
``isOnline`` false.
"""

from __future__ import annotations

from typing import Any

from api.schemas.routers import edge_router_state
from api.wire import base
from engine.entities.routers import EdgeRouter
from engine.managers.fleet import Fleet, Presence
from engine.query import Symbol, SymbolTable, SymbolType


def _common(router: EdgeRouter, state: dict[str, Any]) -> dict[str, Any]:
    out = {
        "cost": router.cost,
        "disabled": router.disabled,
        "hostname": state["hostname"],
        "isOnline": state["isOnline"],
        "name": router.name,
        "noTraversal": router.no_traversal,
        "supportedProtocols": state["supportedProtocols"],
        "syncStatus": state["syncStatus"],
    }
    if router.app_data:  # Go's omitempty: no appData while the router has none
        out["appData"] = router.app_data
    return out


def render_common_edge_router(fleet: Fleet, router: EdgeRouter) -> dict[str, Any]:
    """``commonEdgeRouterProperties`` (the entries of ``/services/{id}/edge-routers``)."""
    return _common(router, edge_router_state(fleet, router))


def render_session_edge_router(
    router: EdgeRouter, presence: Presence | None, sync_status: str
) -> dict[str, Any]:
    """``sessionEdgeRouter``: the common properties plus ``urls``; ``presence`` None for a router
    offline now (its last reported hostname and protocols, as :func:`edge_router_state`)."""
    state: dict[str, Any]
    if presence is None:
        state = {
            "hostname": router.hostname,
            "isOnline": False,
            "supportedProtocols": dict(router.supported_protocols),
            "syncStatus": sync_status,
        }
    else:
        state = {
            "hostname": presence.hostname,
            "isOnline": True,
            "supportedProtocols": dict(presence.protocols),
            "syncStatus": presence.sync_status,
        }
    out = _common(router, state)
    out["urls"] = dict(state["supportedProtocols"])  # a copy: the two maps are separate values
    return out


def render_current_identity_edge_router(fleet: Fleet, router: EdgeRouter) -> dict[str, Any]:
    """``currentIdentityEdgeRouterDetail``: the common entity fields plus the common properties."""
    out = base(router)
    out.update(render_common_edge_router(fleet, router))
    return out


def _common_symbols(fleet: Fleet) -> dict[str, Symbol]:
    """The fields every client edge-router entry (``commonEdgeRouterProperties``) shows."""
    return {
        "name": Symbol(SymbolType.STRING, lambda r: r.name),
        "hostname": Symbol(SymbolType.STRING, lambda r: edge_router_state(fleet, r)["hostname"]),
        "isOnline": Symbol(SymbolType.BOOL, lambda r: fleet.is_online(r.id)),
        "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
        "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
        "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
    }


def current_identity_edge_router_symbols(fleet: Fleet) -> SymbolTable:
    """What the client lists of edge routers filter and sort on: only fields their entries show
    (a filter on a hidden field, such as the routers' ``roleAttributes``, would read the hidden
    value one guess at a time; any other symbol is refused as unknown, 400 ``INVALID_FILTER``).
    ``/current-identity/edge-routers`` shows the base entity fields too, and filters on
    OpenZiti's ``connected`` and ``online`` (the shown ``isOnline`` under its other names)."""
    common = _common_symbols(fleet)
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda r: r.id),
            **common,
            "connected": common["isOnline"],
            "online": common["isOnline"],
            "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
        },
        tags_getter=lambda r: r.tags,
    )


def service_edge_router_symbols(fleet: Fleet) -> SymbolTable:
    """The client ``/services/{id}/edge-routers`` filters on the common properties only."""
    return SymbolTable(_common_symbols(fleet))
