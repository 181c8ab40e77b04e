"""Router wire shapes: edge router and (transit) router request models and detail renderers."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from api.controller import Controller
from api.wire import Tags, WireModel, base, ts
from engine.entities.routers import EdgeRouter, Router, RouterBase
from engine.managers.fleet import EMPTY_VERSION, SYNC_UNKNOWN, Fleet
from engine.query import Symbol, SymbolTable, SymbolType

__all__ = ["SYNC_UNKNOWN"]

EDGE_ROUTER_ENROLLMENT = "erott"
TRANSIT_ROUTER_ENROLLMENT = "trott"
COST_MAX = 65535


def _cost(value: int) -> int:
    if value < 0:
        raise PydanticCustomError("minimum", "cost in body should be greater than or equal to 0")
    if value > COST_MAX:
        raise PydanticCustomError("maximum", f"cost in body should be less than or equal to {COST_MAX}")
    return value


#: ``cost``: 0-65535, reported with go-swagger's messages.
RouterCost = Annotated[int, AfterValidator(_cost)]


#: ``ctrlChanListeners``: control-channel listener address -> the groups it serves.
CtrlChanListeners = dict[str, list[str]] | None


class RouterCreate(WireModel):
    name: str | None
    #: Ids (or names) of router-targeted configs, one per config type (``routerCreate`` and
    #: ``edgeRouterCreate``); a replacement without it clears them.
    configs: list[str] | None = None
    cost: RouterCost | None = None
    ctrl_chan_listeners: CtrlChanListeners = None
    disabled: bool | None = None
    no_traversal: bool | None = None
    tags: Tags = None


class RouterUpdate(RouterCreate):
    pass


class RouterPatch(RouterCreate):
    name: str | None = None


class EdgeRouterCreate(RouterCreate):
    app_data: Tags = None
    is_tunneler_enabled: bool | None = None
    role_attributes: list[str] | None = None


class EdgeRouterUpdate(EdgeRouterCreate):
    pass


class EdgeRouterPatch(EdgeRouterCreate):
    name: str | None = None


def _enrollment(router: RouterBase) -> dict[str, Any]:
    """``enrollment*`` fields: only while the router is unverified and has an enrollment (Go
    leaves the null ones out, ``omitempty``, as OpenZiti v1.6.0 answers)."""
    if router.is_verified or router.enrollment_token is None:
        return {}
    return {
        "enrollmentCreatedAt": ts(router.enrollment_created_at),
        "enrollmentExpiresAt": ts(router.enrollment_expires_at),
        "enrollmentJwt": router.enrollment_jwt,
        "enrollmentToken": router.enrollment_token,
    }


def _optional(router: RouterBase) -> dict[str, Any]:
    """``configs`` and ``ctrlChanListeners`` when they hold anything (newer specs' fields, left
    out when empty by Go's omitempty; OpenZiti v1.6.0 has neither)."""
    out: dict[str, Any] = {}
    if router.configs:
        out["configs"] = list(router.configs)
    if router.ctrl_chan_listeners:
        out["ctrlChanListeners"] = router.ctrl_chan_listeners
    return out


def edge_router_state(fleet: Fleet, router: EdgeRouter) -> dict[str, Any]:
    """What the router's control connection says of it: ``isOnline``, ``syncStatus``, and, while
    it is online, the ``hostname``, ``supportedProtocols`` and ``versionInfo`` of its hello (else
    the hostname and protocols last reported, and no version)."""
    presence = fleet.presence(router.id)
    if presence is None:
        return {
            "hostname": router.hostname,
            "isOnline": False,
            "supportedProtocols": dict(router.supported_protocols),
            "syncStatus": fleet.sync_status(router.id),
            "versionInfo": EMPTY_VERSION.as_wire(),
        }
    return {
        "hostname": presence.hostname,
        "isOnline": True,
        "supportedProtocols": dict(presence.protocols),
        "syncStatus": presence.sync_status,
        "versionInfo": presence.version.as_wire(),
    }


def render_edge_router(ctrl: Controller, router: EdgeRouter) -> dict[str, Any]:
    out = base(router, "edge-router-policies")
    out.update(
        {
            "appData": router.app_data,
            "certPem": router.cert_pem,
            "cost": router.cost,
            "disabled": router.disabled,
            "fingerprint": router.fingerprint or "",  # OpenZiti: stringz.OrEmpty
            "isTunnelerEnabled": router.is_tunneler_enabled,
            "isVerified": router.is_verified,
            "name": router.name,
            "noTraversal": router.no_traversal,
            "roleAttributes": router.role_attributes,
            "unverifiedCertPem": router.unverified_cert_pem,
            "unverifiedFingerprint": router.unverified_fingerprint,
        }
    )
    out.update(edge_router_state(ctrl.managers.fleet, router))
    out.update(_enrollment(router))
    out.update(_optional(router))
    return out


def render_router(ctrl: Controller, router: Router) -> dict[str, Any]:
    """``routerDetail``; both ``/routers`` and ``/transit-routers`` link to ``./transit-routers/<id>``."""
    out = base(router)
    out.update(
        {
            "cost": router.cost,
            "disabled": router.disabled,
            "fingerprint": router.fingerprint,
            "isOnline": False,
            "isVerified": router.is_verified,
            "name": router.name,
            "noTraversal": router.no_traversal,
            "unverifiedCertPem": router.unverified_cert_pem,
            "unverifiedFingerprint": router.unverified_fingerprint,
        }
    )
    out.update(_enrollment(router))
    out.update(_optional(router))
    return out


def edge_router_symbols(fleet: Fleet) -> SymbolTable:
    """The filterable fields of edge routers; ``isOnline`` asks the fleet, and so do OpenZiti's
    ``connected`` and ``online`` (true while the control connection is up, as ``isOnline``)."""
    online = Symbol(SymbolType.BOOL, lambda r: fleet.is_online(r.id))
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda r: r.id),
            "name": Symbol(SymbolType.STRING, lambda r: r.name),
            "roleAttributes": Symbol(SymbolType.STRING, lambda r: r.role_attributes, is_set=True),
            "isOnline": online,
            "connected": online,
            "online": online,
            "isVerified": Symbol(SymbolType.BOOL, lambda r: r.is_verified),
            "isTunnelerEnabled": Symbol(SymbolType.BOOL, lambda r: r.is_tunneler_enabled),
            "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
            "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
            "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
            "fingerprint": Symbol(SymbolType.STRING, lambda r: r.fingerprint),
            "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
        },
        tags_getter=lambda r: r.tags,
    )


ROUTER_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda r: r.id),
        "name": Symbol(SymbolType.STRING, lambda r: r.name),
        "fingerprint": Symbol(SymbolType.STRING, lambda r: r.fingerprint),
        "isOnline": Symbol(SymbolType.BOOL, lambda r: False),
        "isVerified": Symbol(SymbolType.BOOL, lambda r: r.is_verified),
        "cost": Symbol(SymbolType.NUMBER, lambda r: r.cost),
        "noTraversal": Symbol(SymbolType.BOOL, lambda r: r.no_traversal),
        "disabled": Symbol(SymbolType.BOOL, lambda r: r.disabled),
        "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda r: r.updated_at),
    },
    tags_getter=lambda r: r.tags,
)
