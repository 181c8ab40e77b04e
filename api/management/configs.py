"""``/configs``: CRUD, and ``/configs/{id}/services`` (the services that use a config)."""

from __future__ import annotations

import falcon

from api.http import list_response
from api.resources import Family, FamilyCollection, FamilyItem
from api.routing import Routes
from api.schemas.configs import ConfigCreate, ConfigPatch, ConfigUpdate, render_config
from api.schemas.services import service_renderer
from engine.entities.services import Config, ConfigType, Service
from engine.ports import Store
from engine.query import Symbol, SymbolTable, SymbolType


def config_symbols(store: Store) -> SymbolTable:
    """Filterable config fields; ``type``/``configTypeId`` is the type id, ``configType`` its name."""

    def type_name(config: Config) -> str | None:
        config_type = store.get(ConfigType, config.config_type_id)
        return config_type.name if config_type else None

    return SymbolTable(
        {
            "id": Symbol(SymbolType.STRING, lambda c: c.id),
            "name": Symbol(SymbolType.STRING, lambda c: c.name),
            "type": Symbol(SymbolType.STRING, lambda c: c.config_type_id),
            "configTypeId": Symbol(SymbolType.STRING, lambda c: c.config_type_id),
            "configType": Symbol(SymbolType.STRING, type_name),
            "createdAt": Symbol(SymbolType.DATETIME, lambda c: c.created_at),
            "updatedAt": Symbol(SymbolType.DATETIME, lambda c: c.updated_at),
        },
        tags_getter=lambda c: c.tags,
    )


class ConfigItem(FamilyItem[Config]):
    def on_get_services(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        from api.management.services import service_symbols

        config = self.family.manager.require(id)
        ctrl = self.family.extra["ctrl"]
        services = [s for s in ctrl.env.store.all(Service) if config.id in s.configs]
        list_response(req, resp, services, service_symbols(), service_renderer(ctrl, req))


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    family: Family[Config] = Family(
        entity="configs",
        manager=routes.managers.configs,
        render=lambda config: render_config(ctrl, config),
        symbols=config_symbols(ctrl.env.store),
        create_model=ConfigCreate,
        update_model=ConfigUpdate,
        patch_model=ConfigPatch,
        extra={"ctrl": ctrl},
    )
    item = ConfigItem(family)
    routes.management("/configs", FamilyCollection(family))
    routes.management("/configs/{id}", item)
    routes.management("/configs/{id}/services", item, suffix="services")
