"""``/posture-checks``, ``/posture-check-types`` and ``/posture-check-role-attributes``.

The body of a posture check is polymorphic on ``typeId``: the request is read once, ``typeId``
picks the model (create and patch require it; a replace without it keeps the stored type), and
the model validates the type's fields.
"""

from __future__ import annotations

from typing import Any

import falcon
import orjson
from pydantic import ValidationError

from api.errors import field_error_from_validation
from api.http import created, empty, index_fields, list_response, ok, read_body
from api.resources import whole_collection
from api.role_filter import RoleAttributes, role_ids
from api.routing import Routes
from api.schemas.posture_checks import (
    MODELS,
    POSTURE_CHECK_TYPE_SYMBOLS,
    render_posture_check_type,
    type_details,
)
from api.views import View
from api.wire import WireModel
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID
from engine.entities.posture import PostureCheck
from engine.errors import CouldNotParseBodyError, FieldError, NotFoundError
from engine.managers.access import AccessManager
from engine.managers.auth_policies import AuthPolicyManager
from engine.managers.posture_checks import (
    BUILTIN_TYPES,
    DETAILS_PATCH,
    PostureCheckManager,
    PostureCheckType,
    check_type_id,
)
from engine.ports import Clock


def _read_json(req: falcon.Request) -> tuple[bytes, dict[str, Any]]:
    data = read_body(req, req.context.max_body_bytes)
    if not data.strip():
        raise CouldNotParseBodyError(reason="a request body is required")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as ex:
        raise CouldNotParseBodyError(reason=str(ex)) from None
    if not isinstance(doc, dict):
        raise CouldNotParseBodyError(reason="the request body must be a JSON object")
    return data, doc


def _validate(model: type[WireModel], data: bytes) -> Any:
    try:
        return model.model_validate_json(data)
    except ValidationError as ex:
        raise field_error_from_validation(ex) from None


def _type_of(doc: dict[str, Any], *, required: bool) -> str | None:
    if "typeId" not in doc or doc["typeId"] is None:
        if required:
            raise FieldError("typeId", "typeId in body is required")
        return None
    return check_type_id(doc["typeId"])


def _header(model: WireModel, names: tuple[str, ...], *, only_set: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(model, name)
        if only_set and (name not in model.model_fields_set or value is None):
            continue
        out[name] = value
    return out


class PostureCheckCollection:
    def __init__(self, manager: PostureCheckManager, access: AccessManager, view: View[PostureCheck]) -> None:
        self.manager = manager
        self.access = access
        self.view = view
        self.fields = index_fields(PostureCheck, view.symbols)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        keep = role_ids(req, self.access, PostureCheck)
        items = whole_collection(self.manager, self.fields, keep)
        list_response(req, resp, items, self.view.symbols, self.view.renderer(req))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        data, doc = _read_json(req)
        type_id = _type_of(doc, required=True)
        assert type_id is not None
        model = _validate(MODELS[type_id][0], data)
        fields = {
            "name": model.name,
            "type_id": type_id,
            "role_attributes": list(model.role_attributes or []),
            "tags": dict(model.tags or {}),
            "details": type_details(model, type_id),
        }
        entity = self.manager.create(fields)
        created(resp, "posture-checks", entity.id)


class PostureCheckItem:
    def __init__(self, manager: PostureCheckManager, view: View[PostureCheck]) -> None:
        self.manager = manager
        self.view = view

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        ok(resp, self.view.renderer(req)(self.manager.require(id)))

    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        data, doc = _read_json(req)
        current = self.manager.require(id)
        type_id = _type_of(doc, required=False) or current.type_id
        model = _validate(MODELS[type_id][1], data)
        fields = {
            "name": model.name,
            "type_id": type_id,
            "role_attributes": list(model.role_attributes or []),
            "tags": dict(model.tags or {}),
            "details": type_details(model, type_id),
        }
        self.manager.update(id, fields)
        empty(resp)

    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        data, doc = _read_json(req)
        self.manager.require(id)
        type_id = _type_of(doc, required=True)
        assert type_id is not None
        model = _validate(MODELS[type_id][2], data)
        fields = _header(model, ("name", "role_attributes", "tags"), only_set=True)
        fields["type_id"] = type_id
        fields[DETAILS_PATCH] = type_details(model, type_id, only_set=True)
        self.manager.update(id, fields)
        empty(resp)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.delete(id)
        empty(resp)


# -- posture check types ----------------------------------------------------------------------
class PostureCheckTypes:
    """The built-in types; their timestamps are those of the controller's first start."""

    def __init__(self, auth_policies: AuthPolicyManager, clock: Clock) -> None:
        self.auth_policies = auth_policies
        self.clock = clock

    def types(self) -> list[PostureCheckType]:
        default = self.auth_policies.get(DEFAULT_AUTH_POLICY_ID)
        when = default.created_at if default is not None else self.clock.now()
        return [
            PostureCheckType(id=type_id, created_at=when, updated_at=when, name=name, operating_systems=oses)
            for type_id, name, oses in BUILTIN_TYPES
        ]

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        list_response(req, resp, self.types(), POSTURE_CHECK_TYPE_SYMBOLS, render_posture_check_type)

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        for check_type in self.types():
            if check_type.id == id:
                ok(resp, render_posture_check_type(check_type))
                return
        raise NotFoundError()


def register(routes: Routes) -> None:
    managers = routes.managers
    manager = managers.posture_checks
    view = routes.views.posture_checks
    routes.management("/posture-checks", PostureCheckCollection(manager, managers.access, view))
    routes.management("/posture-checks/{id}", PostureCheckItem(manager, view))
    types = PostureCheckTypes(managers.auth_policies, managers.env.clock)
    routes.management("/posture-check-types", types)
    routes.management("/posture-check-types/{id}", types, suffix="item")
    routes.management("/posture-check-role-attributes", RoleAttributes(managers.access, PostureCheck))
