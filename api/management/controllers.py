"""``GET /controllers`` on both APIs: every controller of the network, online or not.

Each controller is a durable member of the network: a record it writes when a process of it starts
(:func:`join`, ``engine.managers.controllers``), kept when it stops, until an operator removes it
(``trellis controller remove``). ``isOnline`` is whether a live process serves it now: each process
says what its controller is through the fleet (``engine.managers.fleet``:
:meth:`~engine.managers.fleet.Fleet.set_member`), as OpenZiti lists a cluster member that is away
with ``isOnline`` false. This controller comes first, then the others by id; a live controller
without a record yet (a process of an older Trellis) is listed from what it shares.

The client API sees only the ``edge-client`` addresses and no ``ctrlAddress`` (OpenZiti's
``MapControllerToClientRestModel``). ``createdAt`` is when the controller first joined (for the
first controller, the network's creation: the built-in ``default`` auth policy's);
``lastJoinedAt`` when a process of it last started.

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
from engine.entities.controllers import ControllerMember
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID
from engine.managers.controllers import Joining
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

    def listing(self, client: bool) -> list[ControllerInfo]:
        """Every controller: this one, then the others by id (records and live ones alike)."""
        ctrl = self.ctrl
        own_id = ctrl.controller_id
        live = {own_id: member(ctrl, self.started_at)}
        for other in ctrl.managers.fleet.peers():
            if isinstance(other.get("id"), str):
                live.setdefault(other["id"], other)
        records = {record.id: record for record in ctrl.managers.controllers.list()}
        listed: list[ControllerInfo] = []
        for id in [own_id, *sorted((live.keys() | records.keys()) - {own_id})]:
            record = records.get(id)
            if record is not None:
                listed.append(_from_record(record, id in live, client))
                continue
            try:
                created_at = _created_at(ctrl, self.started_at) if id == own_id else None
                listed.append(_info(live[id], created_at, client))
            except (KeyError, TypeError, ValueError):  # a process of another version: left out
                continue
        return listed

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        client = req.path.startswith(CLIENT_BASE)
        list_response(req, resp, self.listing(client), SYMBOLS, render_controller)


def _created_at(ctrl: Controller, started_at: datetime) -> datetime:
    """When this controller joined: the network's creation for the first controller (the
    built-in ``default`` auth policy's), else ``started_at``."""
    default = ctrl.managers.auth_policies.get(DEFAULT_AUTH_POLICY_ID)
    first = ctrl.controller_id == ctrl.instance_id
    return default.created_at if default is not None and first else started_at


def joining(ctrl: Controller, started_at: datetime | None = None) -> Joining:
    """What this controller writes in its record when a process of it starts (:func:`join`)."""
    shared = member(ctrl, started_at or ctrl.env.clock.now())
    return Joining(
        id=shared["id"],
        name=shared["name"],
        ctrl_address=shared["ctrlAddress"],
        api_addresses=shared["apiAddresses"],
        cert_pem=shared["certPem"],
        fingerprint=shared["fingerprint"],
        joined_at=started_at,
        created_at=_created_at(ctrl, ctrl.env.clock.now()),
    )


def join(ctrl: Controller) -> ControllerMember:
    """Write this controller's record (``trellis serve``, in every process as it starts)."""
    return ctrl.managers.controllers.join(joining(ctrl))


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


def _from_record(record: ControllerMember, online: bool, client: bool) -> ControllerInfo:
    addresses = {k: list(v) for k, v in record.api_addresses.items()}
    if client:
        addresses = {k: v for k, v in addresses.items() if k == "edge-client"}
    return ControllerInfo(
        id=record.id,
        created_at=record.created_at,
        updated_at=record.updated_at,
        tags=dict(record.tags),
        name=record.name,
        ctrl_address=None if client else record.ctrl_address or None,
        api_addresses=addresses,
        cert_pem=record.cert_pem,
        fingerprint=record.fingerprint,
        is_online=online,
        last_joined_at=record.last_joined_at,
    )


def register(routes: Routes) -> None:
    started_at = routes.ctrl.env.clock.now()
    routes.ctrl.managers.fleet.set_member(member(routes.ctrl, started_at))
    routes.client("/controllers", ControllerCollection(routes.ctrl, started_at, auth=SESSION))
    routes.management("/controllers", ControllerCollection(routes.ctrl, started_at, auth=ADMIN))
