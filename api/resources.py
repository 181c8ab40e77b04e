"""The standard family pattern as Falcon resources: list, create, read, replace, patch, delete.

A family module describes itself with a :class:`Family` (its manager, wire models, renderer and
filterable symbols) and mounts ``FamilyCollection`` / ``FamilyItem`` with :func:`mount`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import falcon

from api.http import (
    LOOP_READS,
    Indexed,
    bounded_list,
    created,
    empty,
    index_fields,
    list_response,
    ok,
    read_model,
)
from api.middleware import ADMIN
from api.routing import Routes
from api.views import View
from api.wire import WireModel
from engine.entities import Entity
from engine.managers._base import EntityManager
from engine.query import SymbolTable

E = TypeVar("E", bound=Entity)

Mode = str  # "create" | "update" | "patch"


def entity_defaults(kind: type[Entity]) -> dict[str, Any]:
    """Each field's default value (a PUT resets omitted optional fields to these)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def model_fields(model: WireModel, mode: Mode, kind: type[Entity]) -> dict[str, Any]:
    """Manager fields from a request model, by the OpenZiti rules for each mode.

    create: every field given (absent ones take the entity's defaults);
    update (PUT): every field, absent or null ones reset to the defaults;
    patch: only fields present in the body with a non-null value.
    """
    if mode == "patch":
        return {k: v for k, v in model.fields_set().items() if v is not None}
    values = model.all_fields()
    if mode == "create":
        return {k: v for k, v in values.items() if v is not None}
    defaults = entity_defaults(kind)
    return {
        k: (defaults.get(k) if v is None else v) for k, v in values.items() if v is not None or k in defaults
    }


@dataclass
class Family(Generic[E]):
    entity: str
    manager: EntityManager[E]
    render: Callable[[E], dict[str, Any]]
    symbols: SymbolTable
    create_model: type[WireModel] | None = None
    update_model: type[WireModel] | None = None
    patch_model: type[WireModel] | None = None
    #: Converts a request model into manager fields; defaults to :func:`model_fields`.
    to_fields: Callable[[WireModel, Mode], dict[str, Any]] | None = None
    #: Items for the list before filtering; defaults to the kind's whole collection, filtered
    #: through the store's indexes.
    list_items: Callable[[falcon.Request], Iterable[E]] | None = None
    #: The ids a request's ``roleFilter`` keeps of the whole collection (None: no role filter).
    role_ids: Callable[[falcon.Request], Collection[str] | None] | None = None
    #: A renderer chosen per request (a view's ``renderer``); defaults to ``render``.
    renderer: Callable[[falcon.Request], Callable[[E], dict[str, Any]]] | None = None
    auth: str = ADMIN
    deletable: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def fields(self, model: WireModel, mode: Mode) -> dict[str, Any]:
        if self.to_fields is not None:
            return self.to_fields(model, mode)
        return model_fields(model, mode, self.manager.kind)

    def render_for(self, req: falcon.Request) -> Callable[[E], dict[str, Any]]:
        return self.renderer(req) if self.renderer is not None else self.render


def _drop_responder(resource: object, name: str) -> None:
    """Hide a responder so Falcon answers 405 with a truthful ``Allow`` header."""
    setattr(resource, name, None)


def refusal(responder: Callable[..., None]) -> Callable[..., None]:
    """Mark a responder that only refuses (an explained 405 where Falcon's own would say
    nothing): it is no operation the API serves (:func:`has_responder`)."""
    responder.refuses = True  # type: ignore[attr-defined]
    return responder


def has_responder(resource: object, name: str) -> bool:
    """Whether ``resource`` serves ``name`` (``on_get``, ...): a responder not marked :func:`refusal`."""
    responder = getattr(resource, name, None)
    return callable(responder) and not getattr(responder, "refuses", False)


def whole_collection(
    manager: EntityManager[E], fields: Mapping[str, str], keep: Collection[str] | None = None
) -> Indexed[E]:
    """A manager's kind's whole collection (as ``manager.list()``), for a list read through the
    store's indexes; ``fields`` from :func:`~api.http.index_fields`."""
    return Indexed(manager.list_index(), fields, keep)


class FamilyCollection(Generic[E]):
    def __init__(self, family: Family[E]) -> None:
        self.family = family
        self.auth = family.auth
        self.fields = index_fields(family.manager.kind, family.symbols)
        if family.create_model is None:
            _drop_responder(self, "on_post")

    def runs_on_loop(self, method: str, query_string: str) -> bool:
        """A list of the whole collection, bounded (:func:`~api.http.bounded_list`), runs on the
        server's event loop; any other, and a create, on a pool thread."""
        fam = self.family
        if method != "GET" or fam.list_items is not None:
            return False
        index = fam.manager.list_index()
        return bounded_list(query_string, fam.symbols, index, self.fields)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        fam = self.family
        items: Iterable[E] | Indexed[E]
        if fam.list_items is not None:
            items = fam.list_items(req)
        else:
            keep = fam.role_ids(req) if fam.role_ids is not None else None
            items = whole_collection(fam.manager, self.fields, keep)
        list_response(req, resp, items, fam.symbols, fam.render_for(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        fam = self.family
        assert fam.create_model is not None
        model = read_model(req, fam.create_model)
        entity = fam.manager.create(fam.fields(model, "create"))
        created(resp, fam.entity, entity.id)


class FamilyItem(Generic[E]):
    loop_methods = LOOP_READS

    def __init__(self, family: Family[E]) -> None:
        self.family = family
        self.auth = family.auth
        if family.update_model is None:
            _drop_responder(self, "on_put")
        if family.patch_model is None:
            _drop_responder(self, "on_patch")
        if not family.deletable:
            _drop_responder(self, "on_delete")

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, self.family.render_for(req)(self.family.manager.require(id)))

    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self._update(req, resp, id, self.family.update_model, "update")

    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self._update(req, resp, id, self.family.patch_model, "patch")

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.family.manager.delete(id)
        empty(resp)

    def _update(
        self,
        req: falcon.Request,
        resp: falcon.Response,
        id: str,
        model_type: type[WireModel] | None,
        mode: Mode,
    ) -> None:
        assert model_type is not None
        model = read_model(req, model_type)
        self.family.manager.update(id, self.family.fields(model, mode))
        empty(resp)


def view_family(
    view: View[E], manager: EntityManager[E], *, entity: str | None = None, **options: Any
) -> Family[E]:
    """A family rendered and filtered by ``view`` (its path is the view kind's entity name)."""
    return Family(
        entity=entity or view.kind.ENTITY,
        manager=manager,
        render=view.render,
        symbols=view.symbols,
        renderer=view.renderer,
        **options,
    )


def mount(routes: Routes, family: Family[Any], *, api: str = "management") -> None:
    """Mount the collection at ``/<entity>`` and the item at ``/<entity>/{id}``."""
    routes.add(api, f"/{family.entity}", FamilyCollection(family))
    routes.add(api, f"/{family.entity}/{{id}}", FamilyItem(family))
