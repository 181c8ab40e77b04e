"""``/routers`` and ``/transit-routers``: one resource on both paths, as in OpenZiti."""

from __future__ import annotations

from typing import Any

from api.resources import FamilyCollection, FamilyItem, Mode, model_fields, mount, view_family
from api.routing import Routes
from api.schemas.routers import RouterCreate, RouterPatch, RouterUpdate
from api.wire import WireModel, require_field
from engine.entities.routers import Router


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    assert isinstance(model, RouterCreate)
    if mode != "patch":
        require_field(model.name, "name")
    return model_fields(model, mode, Router)


def register(routes: Routes) -> None:
    views = routes.views
    family = view_family(
        views.routers,
        routes.managers.routers,
        entity="transit-routers",
        create_model=RouterCreate,
        update_model=RouterUpdate,
        patch_model=RouterPatch,
        to_fields=_fields,
    )
    mount(routes, family)
    # ``/routers`` is the same resource; OpenZiti links both to ``./transit-routers/<id>``.
    routes.management("/routers", FamilyCollection(family))
    routes.management("/routers/{id}", FamilyItem(family))
