"""``GET /controllers`` on both APIs: every controller of the network.

This controller first, then every other controller a live process serves on the same database
(each process says what its controller is through the fleet, ``engine.managers.fleet``:
:meth:`~engine.managers.fleet.Fleet.set_member`). A controller whose processes have all stopped
is no longer listed (OpenZiti lists a cluster member that is away with ``isOnline`` false).

The client API sees only the ``edge-client`` addresses and no ``ctrlAddress`` (OpenZiti's
``MapControllerToClientRestModel``). ``createdAt`` is the first controller's first start (the
built-in ``default`` auth policy's creation) and, for another, when it joined;
``lastJoinedAt``/``updatedAt`` the start of the process that says it (the first of a controller's).

Any authenticated identity lists it on the client API (OpenZiti's ``IsAuthenticated``); on the
management API it is for administrators, as seed 001 says of every management operation but the
current identity's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import falcon

from api.controller import CLIENT_BASE, MANAGEMENT_BASE, Controller
from api.http import list_response
from api.middleware import ADMIN, SESSION
from api.routing import Routes
from api.wire import base, ts
from engine.entities import Entity
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID
from engine.query import Symbol, SymbolTable, SymbolType


@dataclass(kw_only=True)
class ControllerInfo(Entity):
    """The controller as a listable entity; built per request, never stored."""

    ENTITY = "controllers"

    name: str
    ctrl_address: str | None
    api_addresses: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    cert_pem: str = ""
    fingerprint: str = ""
    is_online: bool = True
    last_joined_at: datetime


SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
        "certPem": Symbol(SymbolType.STRING, lambda e: e.cert_pem),
        "ctrlAddress": Symbol(SymbolType.STRING, lambda e: e.ctrl_address),
        "fingerprint": Symbol(SymbolType.STRING, lambda e: e.fingerprint),
        "isOnline": Symbol(SymbolType.BOOL, lambda e: e.is_online),
        "lastJoinedAt": Symbol(SymbolType.DATETIME, lambda e: e.last_joined_at),
    },
    tags_getter=lambda e: e.tags,
)


def render_controller(info: ControllerInfo) -> dict[str, Any]:
    """``controllerDetail``."""
    out = base(info)
    out.update(
        {
            "apiAddresses": info.api_addresses,
            "certPem": info.cert_pem,
            "ctrlAddress": info.ctrl_address,
            "fingerprint": info.fingerprint,
            "isOnline": info.is_online,
            "lastJoinedAt": ts(info.last_joined_at),
            "name": info.name,
        }
    )
    return out


class ControllerCollection:
    def __init__(self, ctrl: Controller, started_at: datetime, *, auth: str) -> None:
        self.ctrl = ctrl
        self.started_at = started_at
        self.auth = auth

    def info(self, client: bool) -> ControllerInfo:
        """This controller."""
        ctrl = self.ctrl
        default = ctrl.managers.auth_policies.get(DEFAULT_AUTH_POLICY_ID)
        first = ctrl.controller_id == ctrl.instance_id
        created_at = default.created_at if default is not None and first else self.started_at
        return _info(member(ctrl, self.started_at), created_at, client)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        client = req.path.startswith(CLIENT_BASE)
        listed = [self.info(client)]
        for other in self.ctrl.managers.fleet.peers():
            try:
                listed.append(_info(other, None, client))
            except (KeyError, TypeError, ValueError):  # a process of another version: left out
                continue
        list_response(req, resp, listed, SYMBOLS, render_controller)


def member(ctrl: Controller, started_at: datetime) -> dict[str, Any]:
    """What this controller says of itself to the network's other processes (JSON)."""
    pki = ctrl.pki
    return {
        "id": ctrl.controller_id,
        "name": ctrl.controller_id,
        "ctrlAddress": f"tls:{ctrl.settings.advertised_ctrl_address}",
        "apiAddresses": {
            "edge-client": [{"url": ctrl.base_url + CLIENT_BASE, "version": "v1"}],
            "edge-management": [{"url": ctrl.base_url + MANAGEMENT_BASE, "version": "v1"}],
        },
        "certPem": pki.server_cert_pem if pki is not None else "",
        "fingerprint": pki.server_fingerprint if pki is not None else "",
        "joinedAt": started_at.isoformat(),
    }


def _info(shared: dict[str, Any], created_at: datetime | None, client: bool) -> ControllerInfo:
    joined_at = datetime.fromisoformat(str(shared["joinedAt"]))
    addresses = {str(k): list(v) for k, v in dict(shared.get("apiAddresses") or {}).items()}
    if client:  # the client API shows clients where to log in, not where to manage
        addresses = {k: v for k, v in addresses.items() if k == "edge-client"}
    return ControllerInfo(
        id=str(shared["id"]),
        created_at=created_at or joined_at,
        updated_at=joined_at,
        name=str(shared.get("name") or shared["id"]),
        ctrl_address=None if client else str(shared.get("ctrlAddress") or "") or None,
        api_addresses=addresses,
        cert_pem=str(shared.get("certPem") or ""),
        fingerprint=str(shared.get("fingerprint") or ""),
        last_joined_at=joined_at,
    )


def register(routes: Routes) -> None:
    started_at = routes.ctrl.env.clock.now()
    routes.ctrl.managers.fleet.set_member(member(routes.ctrl, started_at))
    routes.client("/controllers", ControllerCollection(routes.ctrl, started_at, auth=SESSION))
    routes.management("/controllers", ControllerCollection(routes.ctrl, started_at, auth=ADMIN))
