"""``GET /controllers`` on both APIs: this controller as the cluster's one member.

The client API sees only the ``edge-client`` addresses and no ``ctrlAddress`` (OpenZiti's
``MapControllerToClientRestModel``). ``createdAt`` is the controller's first start (the built-in
``default`` auth policy's creation), ``lastJoinedAt``/``updatedAt`` this process's start.

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
        ctrl = self.ctrl
        default = ctrl.managers.auth_policies.get(DEFAULT_AUTH_POLICY_ID)
        created_at = default.created_at if default is not None else self.started_at
        addresses = {"edge-client": [{"url": ctrl.base_url + CLIENT_BASE, "version": "v1"}]}
        if not client:
            addresses["edge-management"] = [{"url": ctrl.base_url + MANAGEMENT_BASE, "version": "v1"}]
        pki = ctrl.pki
        return ControllerInfo(
            id=ctrl.instance_id,
            created_at=created_at,
            updated_at=self.started_at,
            name=ctrl.instance_id,
            ctrl_address=None if client else f"tls:{ctrl.settings.advertised_ctrl_address}",
            api_addresses=addresses,
            cert_pem=pki.server_cert_pem if pki is not None else "",
            fingerprint=pki.server_fingerprint if pki is not None else "",
            last_joined_at=self.started_at,
        )

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        client = req.path.startswith(CLIENT_BASE)
        list_response(req, resp, [self.info(client)], SYMBOLS, render_controller)


def register(routes: Routes) -> None:
    started_at = routes.ctrl.env.clock.now()
    routes.client("/controllers", ControllerCollection(routes.ctrl, started_at, auth=SESSION))
    routes.management("/controllers", ControllerCollection(routes.ctrl, started_at, auth=ADMIN))
