"""Terminator wire shapes: request models, the management detail and the client's limited detail.

management.yml ``terminatorCreate`` / ``terminatorUpdate`` / ``terminatorPatch`` /
``terminatorDetail``; client.yml's terminator carries only the common fields, ``serviceId``,
``service``, ``routerId`` and ``identity``. The wire ``identity`` is the terminator's instance id.
The client list filters and sorts on those fields only (:data:`CLIENT_TERMINATOR_FIELDS`): any
other symbol is refused as unknown (400 ``INVALID_FILTER`` / ``INVALID_SORT_IDENTIFIER``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from api.schemas.routers import RouterCost
from api.wire import Tags, WireModel, base, link, one_of, ref
from engine.entities import Entity
from engine.entities.services import Terminator
from engine.managers.terminators import PRECEDENCES, TerminatorManager
from engine.query import Symbol, SymbolTable, SymbolType

#: A router reference names the router store's kind: OpenZiti links it to ``./transit-routers/<id>``.
ROUTER_REF_ENTITY = "transit-routers"


def _base64(value: str) -> str:
    """``identitySecret`` is ``format: byte``: standard base64, as go-swagger decodes it."""
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise PydanticCustomError("base64", "identitySecret in body must be of type byte") from None
    return value


Precedence = Annotated[str, AfterValidator(one_of("precedence", PRECEDENCES))]
Secret = Annotated[str, AfterValidator(_base64)]


class TerminatorCreate(WireModel):
    service: str
    router: str
    address: str
    binding: str
    cost: RouterCost | None = None
    precedence: Precedence | None = None
    identity: str | None = None
    identity_secret: Secret | None = None
    tags: Tags = None


class TerminatorUpdate(WireModel):
    service: str
    router: str
    address: str
    binding: str
    cost: RouterCost | None = None
    precedence: Precedence | None = None
    tags: Tags = None


class TerminatorPatch(WireModel):
    service: str | None = None
    router: str | None = None
    address: str | None = None
    binding: str | None = None
    cost: RouterCost | None = None
    precedence: Precedence | None = None
    tags: Tags = None


#: Wire name -> entity field, for the request models above.
WIRE_FIELDS = {
    "service": "service_id",
    "router": "router_id",
    "identity": "instance_id",
    "identity_secret": "instance_secret",
}


def _missing_ref(entity: str, id: str) -> dict[str, Any]:
    return {"_links": {"self": link(entity, id)}, "entity": entity, "id": id, "name": ""}


def _router_ref(router: Entity | None, router_id: str) -> dict[str, Any]:
    if router is None:
        return _missing_ref(ROUTER_REF_ENTITY, router_id)
    return {
        "_links": {"self": link(ROUTER_REF_ENTITY, router.id)},
        "entity": ROUTER_REF_ENTITY,
        "id": router.id,
        "name": getattr(router, "name", ""),
    }


def render_terminator(
    terminator: Terminator,
    service_of: Callable[[Terminator], Entity | None],
    router_of: Callable[[Terminator], Entity | None],
    dynamic_cost: int = 0,
) -> dict[str, Any]:
    """``terminatorDetail``. ``dynamicCost`` is the cost the routing strategy adds at run time;
    without routers reporting circuits it stays 0."""
    out = base(terminator)
    out.update(
        {
            "address": terminator.address,
            "binding": terminator.binding,
            "cost": terminator.cost,
            "dynamicCost": dynamic_cost,
            "identity": terminator.instance_id,
            "precedence": terminator.precedence,
            "router": _router_ref(router_of(terminator), terminator.router_id),
            "routerId": terminator.router_id,
            "service": ref(service_of(terminator)) or _missing_ref("services", terminator.service_id),
            "serviceId": terminator.service_id,
        }
    )
    return out


def render_client_terminator(
    terminator: Terminator, service_of: Callable[[Terminator], Entity | None]
) -> dict[str, Any]:
    """The client API's limited terminator detail."""
    out = base(terminator)
    out.update(
        {
            "identity": terminator.instance_id,
            "routerId": terminator.router_id,
            "service": ref(service_of(terminator)) or _missing_ref("services", terminator.service_id),
            "serviceId": terminator.service_id,
        }
    )
    return out


def _terminator_symbols(terminators: TerminatorManager, controller_id: str) -> dict[str, Symbol]:
    def source_ctrl(terminator: Terminator) -> str:
        """OpenZiti's ``sourceCtrl``: the controller that made it from a router's request (an
        SDK's bind, a router's hosting: those name their hosting identity), "" for an
        administrator's."""
        return controller_id if terminator.identity else ""

    def service_name(terminator: Terminator) -> str | None:
        service = terminators.service_of(terminator)
        return service.name if service is not None else None

    def router_name(terminator: Terminator) -> str | None:
        router = terminators.router_of(terminator)
        return router.name if router is not None else None

    return {
        "id": Symbol(SymbolType.STRING, lambda t: t.id),
        "service": Symbol(SymbolType.STRING, lambda t: t.service_id),
        "service.name": Symbol(SymbolType.STRING, service_name),
        "router": Symbol(SymbolType.STRING, lambda t: t.router_id),
        "router.name": Symbol(SymbolType.STRING, router_name),
        "binding": Symbol(SymbolType.STRING, lambda t: t.binding),
        "address": Symbol(SymbolType.STRING, lambda t: t.address),
        "identity": Symbol(SymbolType.STRING, lambda t: t.instance_id),
        "instanceId": Symbol(SymbolType.STRING, lambda t: t.instance_id),
        "cost": Symbol(SymbolType.NUMBER, lambda t: t.cost),
        "precedence": Symbol(SymbolType.STRING, lambda t: t.precedence),
        "hostId": Symbol(SymbolType.STRING, lambda t: t.host_id),
        "sourceCtrl": Symbol(SymbolType.STRING, source_ctrl),
        "createdAt": Symbol(SymbolType.DATETIME, lambda t: t.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda t: t.updated_at),
    }


def terminator_symbols(terminators: TerminatorManager, *, controller_id: str) -> SymbolTable:
    """Filterable terminator fields (OpenZiti's terminator store symbols; ``service`` and
    ``router`` are ids, ``service.name`` and ``router.name`` the referenced names, ``sourceCtrl``
    ``controller_id`` or "")."""
    return SymbolTable(_terminator_symbols(terminators, controller_id), tags_getter=lambda t: t.tags)


#: What the client's limited detail shows, so all a client may filter and sort on: a filter on a
#: field it cannot see (``address``, ``binding``, ``cost``, ``precedence``, ``hostId``, the
#: router's name) would read the hidden value one guess at a time. ``service`` / ``router`` /
#: ``identity`` / ``instanceId`` are ``serviceId`` / ``routerId`` / ``identity`` under their store
#: names; ``service.name`` is the shown service reference's name. ``sourceCtrl`` is not shown
#: but tells nothing hidden: it is "" or the controller's id, which the client's ``/controllers``
#: shows.
CLIENT_TERMINATOR_FIELDS = (
    "id",
    "createdAt",
    "updatedAt",
    "service",
    "service.name",
    "router",
    "identity",
    "instanceId",
    "sourceCtrl",
)


def client_terminator_symbols(terminators: TerminatorManager, *, controller_id: str) -> SymbolTable:
    """The filterable fields of the client API's terminator list (``tags.*`` included: shown)."""
    every = _terminator_symbols(terminators, controller_id)
    return SymbolTable({name: every[name] for name in CLIENT_TERMINATOR_FIELDS}, tags_getter=lambda t: t.tags)
