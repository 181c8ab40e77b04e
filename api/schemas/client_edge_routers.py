"""Edge routers as clients see them: in sessions, per service and for the current identity.

Nothing here is online (routers never connect to Trellis): ``isOnline`` is false and the sync
status unknown. ``supportedProtocols`` (and, in sessions, the deprecated ``urls`` older SDKs still
read) is the router's protocol -> address map, e.g. ``{"tls": "tls://er1.example.com:3022"}``.
"""

from __future__ import annotations

from typing import Any

from api.schemas.routers import SYNC_UNKNOWN
from api.wire import base
from engine.entities.routers import EdgeRouter
from engine.query import Symbol, SymbolTable, SymbolType


def render_common_edge_router(router: EdgeRouter) -> dict[str, Any]:
    """``commonEdgeRouterProperties`` (the entries of ``/services/{id}/edge-routers``)."""
    return {
        "appData": router.app_data,
        "cost": router.cost,
        "disabled": router.disabled,
        "hostname": router.hostname,
        "isOnline": False,
        "name": router.name,
        "noTraversal": router.no_traversal,
        "supportedProtocols": dict(router.supported_protocols),
        "syncStatus": SYNC_UNKNOWN,
    }


def render_session_edge_router(router: EdgeRouter) -> dict[str, Any]:
    """``sessionEdgeRouter``: the common properties plus ``urls``."""
    out = render_common_edge_router(router)
    out["urls"] = dict(router.supported_protocols)
    return out


def render_current_identity_edge_router(router: EdgeRouter) -> dict[str, Any]:
    """``currentIdentityEdgeRouterDetail``: the common entity fields plus the common properties."""
    out = base(router)
    out.update(render_common_edge_router(router))
    return out


#: The fields every client edge-router entry (``commonEdgeRouterProperties``) shows.
_COMMON_EDGE_ROUTER_SYMBOLS = {
    "name": Symbol(SymbolType.STRING, lambda r: r.name),
    "hostname": Symbol(SymbolType.STRING, lambda r: r.hostname),
    "isOnline": Symbol(SymbolType.BOOL, lambda r: False),
    "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
    "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
    "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
}

#: What the client lists of edge routers filter and sort on: only fields their entries show (a
#: filter on a hidden field, such as the routers' ``roleAttributes``, would read the hidden value
#: one guess at a time; any other symbol is refused as unknown, 400 ``INVALID_FILTER``).
#: ``/current-identity/edge-routers`` shows the base entity fields too;
#: the client ``/services/{id}/edge-routers`` only the common properties.
CURRENT_IDENTITY_EDGE_ROUTER_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda r: r.id),
        **_COMMON_EDGE_ROUTER_SYMBOLS,
        "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
    },
    tags_getter=lambda r: r.tags,
)
SERVICE_EDGE_ROUTER_SYMBOLS = SymbolTable(dict(_COMMON_EDGE_ROUTER_SYMBOLS))
