"""``/identities`` (CRUD, sub-lists, disable/enable, service configs, policy advice), ``/identity-types``,
``/identity-role-attributes``."""

from __future__ import annotations

from typing import Any

import falcon
from pydantic import ValidationError

from api.controller import Controller
from api.errors import field_error_from_validation
from api.http import LOOP_READS, created, empty, list_response, ok, read_body, read_model
from api.middleware import ADMIN
from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.role_filter import RoleAttributes, role_ids
from api.routing import Routes
from api.schemas.identities import (
    SERVICE_CONFIG_LIST,
    DisableParams,
    IdentityCreate,
    IdentityPatch,
    IdentityUpdate,
    enrollment_request,
    identity_type_symbols,
    identity_types,
    render_identity_type,
    render_service_config,
    type_id_of,
)
from api.wire import WireModel, ref
from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.errors import CouldNotParseBodyError, NotFoundError
from engine.managers.identities import IdentityManager
from engine.managers.registry import Managers

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
    def __init__(self, family: Family[Identity], manager: IdentityManager) -> None:
        super().__init__(family)
        self.manager = manager

    def on_post_disable(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        model = read_model(req, DisableParams)
        self.manager.disable(id, model.duration_minutes)
        empty(resp)

    def on_post_enable(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.enable(id)
        empty(resp)


class IdentityServiceConfigs:
    """``/identities/{id}/service-configs``: the identity's service-config overrides.

    OpenZiti (``routes/identity_router.go``): the list is every pair, unpaged (``limit`` is the
    count); POST assigns and DELETE removes pairs (a DELETE without pairs removes them all), both 200.
    """

    auth = ADMIN

    def __init__(self, manager: IdentityManager) -> None:
        self.manager = manager

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        rows = [render_service_config(s, c) for s, c in self.manager.service_configs(id)]
        count = len(rows)
        ok(
            resp,
            rows,
            {"filterableFields": [], "pagination": {"limit": count, "offset": 0, "totalCount": count}},
        )

    def on_post(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        self.manager.assign_service_configs(id, _service_config_pairs(req, required=True))
        empty(resp)

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        self.manager.require(id)
        self.manager.remove_service_configs(id, _service_config_pairs(req, required=False))
        empty(resp)


def _service_config_pairs(req: falcon.Request, *, required: bool) -> list[tuple[str, str]]:
    """The ``serviceConfigsAssignList`` body as (service id, config id) pairs."""
    data = read_body(req, req.context.max_body_bytes)
    if not data.strip():
        if required:
            raise CouldNotParseBodyError(reason="a request body is required")
        return []
    try:
        items = SERVICE_CONFIG_LIST.validate_json(data)
    except ValidationError as ex:
        raise field_error_from_validation(ex) from None
    return [(item.service_id, item.config_id) for item in items]


class PolicyAdvice:
    """Analyse whether an identity can reach a service and through which edge routers."""

    auth = ADMIN
    loop_methods = LOOP_READS

    def __init__(self, managers: Managers) -> None:
        self.access = managers.access
        self.edge_routers = managers.edge_routers
        self.fleet = managers.fleet

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str, service_id: str) -> None:
        identity, service, advice = self.access.advice(id, service_id)
        common = [
            {**(ref(router) or {}), "isOnline": self.fleet.is_online(router.id)}
            for router in self.edge_routers.get_many(advice.common_router_ids)
        ]
        data: dict[str, Any] = {
            "commonRouters": common or None,
            "identity": ref(identity),
            "identityId": identity.id,
            "service": ref(service),
            "serviceId": service.id,
        }
        # OpenZiti's PolicyAdvice marks these omitempty: false and 0 are left out.
        optional = {
            "isDialAllowed": advice.is_dial_allowed,
            "isBindAllowed": advice.is_bind_allowed,
            "identityRouterCount": advice.identity_router_count,
            "serviceRouterCount": advice.service_router_count,
        }
        data.update({k: v for k, v in optional.items() if v})
        ok(resp, data)


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
    views = routes.views
    manager = routes.managers.identities
    access = routes.managers.access
    family = view_family(
        views.identities,
        manager,
        create_model=IdentityCreate,
        update_model=IdentityUpdate,
        patch_model=IdentityPatch,
        to_fields=identity_fields,
        role_ids=lambda req: role_ids(req, access, Identity),
    )
    item = IdentityItem(family, manager)
    routes.management("/identities", IdentityCollection(family, ctrl, manager))
    routes.management("/identities/{id}", item)
    for suffix in ("disable", "enable"):
        routes.management(f"/identities/{{id}}/{suffix}", item, suffix=suffix)
    routes.mount_sublists(views.identities)
    routes.management("/identities/{id}/service-configs", IdentityServiceConfigs(manager))
    routes.management("/identities/{id}/policy-advice/{service_id}", PolicyAdvice(routes.managers))
    routes.management("/identity-types", IdentityTypeCollection())
    routes.management("/identity-types/{id}", IdentityTypeItem())
    routes.management("/identity-role-attributes", RoleAttributes(access, Identity))
