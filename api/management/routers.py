"""``/routers`` and ``/transit-routers``: one resource on both paths, as in OpenZiti."""

from __future__ import annotations

from typing import Any

from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields, mount
from api.routing import Routes
from api.schemas.routers import RouterCreate, RouterPatch, RouterUpdate, render_router
from api.wire import WireModel, require_field
from engine.entities.routers import Router
from engine.query import Symbol, SymbolTable, SymbolType

SYMBOLS = SymbolTable(
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


def _fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    assert isinstance(model, RouterCreate)
    if mode != "patch":
        require_field(model.name, "name")
    return model_fields(model, mode, Router)


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    family = Family(
        entity="transit-routers",
        manager=routes.managers.routers,
        render=lambda r: render_router(ctrl, r),
        symbols=SYMBOLS,
        create_model=RouterCreate,
        update_model=RouterUpdate,
        patch_model=RouterPatch,
        to_fields=_fields,
    )
    mount(routes, family)
    # ``/routers`` is the same resource; OpenZiti links both to ``./transit-routers/<id>``.
    routes.management("/routers", FamilyCollection(family))
    routes.management("/routers/{id}", FamilyItem(family))
