"""``/authenticators`` (admin): CRUD, ``re-enroll`` (back to an enrollment) and ``request-extend``."""

from __future__ import annotations

from typing import Any

import falcon

from api.controller import Controller
from api.http import created, empty, read_model
from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.authenticators import (
    AuthenticatorCreate,
    AuthenticatorPatch,
    AuthenticatorUpdate,
    ReEnroll,
    RequestExtend,
)
from api.wire import WireModel
from engine.entities.identities import Authenticator
from engine.managers.authenticators import AuthenticatorManager


def authenticator_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    """Manager fields (the engine parses a certificate through the CA port)."""
    if mode != "create":
        fields = model_fields(model, mode, Authenticator)
        if mode == "update" and fields.get("tags") is None:
            fields["tags"] = {}
        return fields
    return {k: v for k, v in model.all_fields().items() if v is not None}


class AuthenticatorItem(FamilyItem[Authenticator]):
    body_models = {"post_re_enroll": ReEnroll, "post_request_extend": RequestExtend}

    def __init__(
        self, family: Family[Authenticator], ctrl: Controller, manager: AuthenticatorManager
    ) -> None:
        super().__init__(family)
        self.ctrl = ctrl
        self.manager = manager

    def on_post_re_enroll(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Replace the authenticator by an enrollment of the same kind (201 with the enrollment's id)."""
        self.manager.require(id)
        model = read_model(req, ReEnroll)
        enrollment = self.manager.re_enroll(id, model.expires_at, self.ctrl.managers.enrollment_settings)
        created(resp, "enrollments", enrollment.id)

    def on_post_request_extend(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Ask the identity to extend (``rollKeys``: and re-key) its certificate."""
        self.manager.require(id)
        model = read_model(req, RequestExtend, allow_empty=True)
        self.manager.request_extend(id, roll_keys=bool(model.roll_keys))
        empty(resp)


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    manager = routes.managers.authenticators
    family = view_family(
        routes.views.authenticators,
        manager,
        create_model=AuthenticatorCreate,
        update_model=AuthenticatorUpdate,
        patch_model=AuthenticatorPatch,
        to_fields=authenticator_fields,
    )
    item = AuthenticatorItem(family, ctrl, manager)
    routes.management("/authenticators", FamilyCollection(family))
    routes.management("/authenticators/{id}", item)
    routes.management("/authenticators/{id}/re-enroll", item, suffix="re_enroll")
    routes.management("/authenticators/{id}/request-extend", item, suffix="request_extend")
