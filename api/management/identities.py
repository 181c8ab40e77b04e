"""``/identities`` (CRUD, sub-lists, disable/enable), ``/identity-types``, ``/identity-role-attributes``."""

from __future__ import annotations

from typing import Any

import falcon

from api.controller import Controller
from api.http import created, empty, list_response, ok, read_model
from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields
from api.role_filter import RoleAttributes, role_filtered
from api.routing import Routes
from api.schemas.authenticators import authenticator_symbols, render_authenticator
from api.schemas.enrollments import enrollment_symbols, render_enrollment
from api.schemas.identities import (
    DisableParams,
    IdentityCreate,
    IdentityPatch,
    IdentityUpdate,
    enrollment_request,
    identity_symbols,
    identity_type_symbols,
    identity_types,
    render_identity,
    render_identity_type,
    type_id_of,
)
from api.wire import WireModel
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.errors import NotFoundError
from engine.managers.identities import IdentityManager

#: Fields a PUT resets to an empty value when the body leaves them out or sends null.
_EMPTY_MAPS = ("app_data", "tags", "service_hosting_costs", "service_hosting_precedences")


def identity_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    """Manager fields from an identity body: ``type`` becomes ``type_id``, blanks are normalised."""
    fields = model_fields(model, mode, Identity)
    fields.pop("enrollment", None)
    if "type" in fields:
        fields["type_id"] = type_id_of(fields.pop("type"))
    if "auth_policy_id" in fields and not (fields["auth_policy_id"] or "").strip():
        fields["auth_policy_id"] = DEFAULT_AUTH_POLICY_ID
    if "external_id" in fields and not (fields["external_id"] or "").strip():
        fields["external_id"] = None
    for name in (*_EMPTY_MAPS, "role_attributes"):
        if name in fields and fields[name] is None:
            fields[name] = [] if name == "role_attributes" else {}
    return fields


class IdentityCollection(FamilyCollection[Identity]):
    def __init__(self, family: Family[Identity], ctrl: Controller, manager: IdentityManager) -> None:
        super().__init__(family)
        self.ctrl = ctrl
        self.manager = manager

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        model = read_model(req, IdentityCreate)
        identity = self.manager.create_with_enrollments(
            identity_fields(model, "create"),
            enrollment_request(model),
            self.ctrl.managers.enrollment_settings,
        )
        created(resp, "identities", identity.id)


class IdentityItem(FamilyItem[Identity]):
    def __init__(self, family: Family[Identity], ctrl: Controller, manager: IdentityManager) -> None:
        super().__init__(family)
        self.ctrl = ctrl
        self.manager = manager
        self.authenticators = ctrl.managers.authenticators
        self.enrollments = ctrl.managers.enrollments
        self._authenticator_symbols = authenticator_symbols()
        self._enrollment_symbols = enrollment_symbols()

    def on_get_authenticators(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        items = self.authenticators.for_identity(id)
        list_response(
            req, resp, items, self._authenticator_symbols, lambda a: render_authenticator(self.ctrl, a)
        )

    def on_get_enrollments(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        items = self.enrollments.for_identity(id)
        list_response(req, resp, items, self._enrollment_symbols, lambda e: render_enrollment(self.ctrl, e))

    def on_post_disable(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        model = read_model(req, DisableParams)
        self.manager.disable(id, model.duration_minutes)
        empty(resp)

    def on_post_enable(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.enable(id)
        empty(resp)


class IdentityTypeCollection:
    def __init__(self) -> None:
        self.symbols = identity_type_symbols()

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        list_response(req, resp, identity_types(), self.symbols, render_identity_type)


class IdentityTypeItem:
    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        for row in identity_types():
            if row.id == id:
                ok(resp, render_identity_type(row))
                return
        raise NotFoundError()


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    manager = routes.managers.identities
    family = Family(
        entity="identities",
        manager=manager,
        render=lambda i: render_identity(ctrl, i),
        symbols=identity_symbols(ctrl),
        create_model=IdentityCreate,
        update_model=IdentityUpdate,
        patch_model=IdentityPatch,
        to_fields=identity_fields,
        list_items=lambda req: role_filtered(req, manager.list(), ctrl.access, Identity),
    )
    item = IdentityItem(family, ctrl, manager)
    routes.management("/identities", IdentityCollection(family, ctrl, manager))
    routes.management("/identities/{id}", item)
    for suffix in ("authenticators", "enrollments", "disable", "enable"):
        routes.management(f"/identities/{{id}}/{suffix}", item, suffix=suffix)
    routes.management("/identity-types", IdentityTypeCollection())
    routes.management("/identity-types/{id}", IdentityTypeItem())
    routes.management("/identity-role-attributes", RoleAttributes(ctrl.access, Identity))
