"""``/terminators`` (management CRUD) and ``/services/{id}/terminators`` on both APIs.

The management list of a service's terminators needs an existing service; the client list needs
a service the caller may Dial or Bind (OpenZiti's ``listClientTerminators``), else 404.
"""

from __future__ import annotations

from typing import Any

import falcon

from api.http import list_response
from api.middleware import ADMIN, SESSION
from api.resources import Family, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.terminators import (
    WIRE_FIELDS,
    TerminatorCreate,
    TerminatorPatch,
    TerminatorUpdate,
    client_terminator_symbols,
    render_client_terminator,
    render_terminator,
    terminator_symbols,
)
from api.wire import WireModel
from engine.entities.services import Terminator
from engine.managers.terminators import TerminatorManager
from engine.query import SymbolTable


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    values = model_fields(model, mode, Terminator)
    return {WIRE_FIELDS.get(k, k): v for k, v in values.items()}


class ServiceTerminators:
    """``GET /services/{id}/terminators``: the management view, or the client's limited one."""

    def __init__(self, manager: TerminatorManager, symbols: SymbolTable, *, client: bool) -> None:
        self.manager = manager
        self.symbols = symbols
        self.client = client
        self.auth = SESSION if client else ADMIN

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        manager = self.manager
        if self.client:
            items = manager.of_service_for_identity(req.context.identity.id, id)
            list_response(
                req, resp, items, self.symbols, lambda t: render_client_terminator(t, manager.service_of)
            )
        else:
            items = manager.of_service(id)
            list_response(
                req,
                resp,
                items,
                self.symbols,
                lambda t: render_terminator(t, manager.service_of, manager.router_of),
            )


def register(routes: Routes) -> None:
    manager = routes.managers.terminators
    symbols = terminator_symbols(manager, controller_id=routes.ctrl.instance_id)
    mount(
        routes,
        Family(
            entity="terminators",
            manager=manager,
            render=lambda t: render_terminator(t, manager.service_of, manager.router_of),
            symbols=symbols,
            create_model=TerminatorCreate,
            update_model=TerminatorUpdate,
            patch_model=TerminatorPatch,
            to_fields=_fields,
        ),
    )
    routes.management("/services/{id}/terminators", ServiceTerminators(manager, symbols, client=False))
    # only the fields the client detail shows
    client_symbols = client_terminator_symbols(manager, controller_id=routes.ctrl.instance_id)
    routes.client("/services/{id}/terminators", ServiceTerminators(manager, client_symbols, client=True))
