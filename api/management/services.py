"""``/services`` (management): CRUD, ``/services/{id}/configs``, ``/service-role-attributes``.

The list takes ``roleFilter``/``roleSemantic`` and ``configTypes``; the detail's ``config`` map
holds the data of the service's configs whose types were requested (``configTypes`` on the list,
else the types chosen at authentication). The caller is an administrator, so ``permissions`` is
``["Bind", "Dial"]`` as in OpenZiti.
"""

from __future__ import annotations

from collections.abc import Iterable

import falcon

from api.http import list_response, ok
from api.management.configs import config_symbols
from api.resources import Family, FamilyCollection, FamilyItem
from api.role_filter import RoleAttributes, role_filtered
from api.routing import Routes
from api.schemas.configs import render_config
from api.schemas.services import (
    ServiceCreate,
    ServicePatch,
    ServiceUpdate,
    render_service,
    service_renderer,
)
from engine.entities.services import Config, Service
from engine.query import Symbol, SymbolTable, SymbolType


def service_symbols() -> SymbolTable:
    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda s: s.id),
            "name": Symbol(SymbolType.STRING, lambda s: s.name),
            "roleAttributes": Symbol(SymbolType.STRING, lambda s: s.role_attributes, is_set=True),
            "configs": Symbol(SymbolType.STRING, lambda s: s.configs, is_set=True),
            "terminatorStrategy": Symbol(SymbolType.STRING, lambda s: s.terminator_strategy),
            "encryptionRequired": Symbol(SymbolType.BOOL, lambda s: s.encryption_required),
            "createdAt": Symbol(SymbolType.DATETIME, lambda s: s.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda s: s.updated_at),
        },
        tags_getter=lambda s: s.tags,
    )


class ServiceCollection(FamilyCollection[Service]):
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        fam = self.family
        ctrl = fam.extra["ctrl"]
        items: Iterable[Service] = role_filtered(req, fam.manager.list(), ctrl.access, Service)
        list_response(req, resp, items, fam.symbols, service_renderer(fam.extra["ctrl"], req))


class ServiceItem(FamilyItem[Service]):
    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        service = self.family.manager.require(id)
        ok(resp, service_renderer(self.family.extra["ctrl"], req)(service))

    def on_get_configs(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        service = self.family.manager.require(id)
        ctrl = self.family.extra["ctrl"]
        store = ctrl.env.store
        configs = [c for c in (store.get(Config, cid) for cid in service.configs) if c is not None]
        list_response(req, resp, configs, config_symbols(store), lambda config: render_config(ctrl, config))


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    manager = routes.managers.services
    family: Family[Service] = Family(
        entity="services",
        manager=manager,
        render=lambda service: render_service(ctrl, service),
        symbols=service_symbols(),
        create_model=ServiceCreate,
        update_model=ServiceUpdate,
        patch_model=ServicePatch,
        extra={"ctrl": ctrl},
    )
    item = ServiceItem(family)
    routes.management("/services", ServiceCollection(family))
    routes.management("/services/{id}", item)
    routes.management("/services/{id}/configs", item, suffix="configs")
    routes.management("/service-role-attributes", RoleAttributes(ctrl.access, Service))
