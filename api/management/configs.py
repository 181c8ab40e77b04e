"""``/configs``: CRUD, and ``/configs/{id}/services`` (the services that use a config)."""

from __future__ import annotations

from api.resources import FamilyCollection, FamilyItem, view_family
from api.routing import Routes
from api.schemas.configs import ConfigCreate, ConfigPatch, ConfigUpdate


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.configs,
        routes.managers.configs,
        create_model=ConfigCreate,
        update_model=ConfigUpdate,
        patch_model=ConfigPatch,
    )
    routes.management("/configs", FamilyCollection(family))
    routes.management("/configs/{id}", FamilyItem(family))
    routes.mount_sublists(views.configs)
