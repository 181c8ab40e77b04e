"""``/cas``: the standard family pattern, plus ``POST /cas/{id}/verify`` and ``GET /cas/{id}/jwt``.

A CA is created unverified. Its creator proves possession of its key by posting, as
``text/plain``, a certificate the CA signed whose common name is the CA's ``verificationToken``;
only a verified CA serves enrollment and login. ``/jwt`` answers the CA's enrollment JWT
(``application/jwt``, no envelope).
"""

from __future__ import annotations

from typing import Any

import falcon

from api.http import empty, read_body
from api.resources import Family, FamilyCollection, FamilyItem, Mode, model_fields, view_family
from api.routing import Routes
from api.schemas.cas import CaCreate, CaPatch, CaUpdate, external_id_claim
from api.wire import WireModel
from engine.entities.trust import Ca
from engine.managers.cas import CaManager


def ca_fields(model: WireModel, mode: Mode) -> dict[str, Any]:
    if isinstance(model, CaPatch):
        fields = {k: v for k, v in model.fields_set().items() if v is not None}
        if "external_id_claim" in fields:
            fields["external_id_claim"] = external_id_claim(model.external_id_claim, only_set=True)
        return fields
    assert isinstance(model, (CaCreate, CaUpdate))
    fields = model_fields(model, mode, Ca)
    fields["external_id_claim"] = external_id_claim(model.external_id_claim)
    return fields


class CaItem(FamilyItem[Ca]):
    def __init__(self, family: Family[Ca], manager: CaManager) -> None:
        super().__init__(family)
        self.manager = manager

    def on_post_verify(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Verify a CA with a certificate it signed whose CN is its verification token (text/plain PEM)."""
        self.manager.require(id)
        body = read_body(req, req.context.max_body_bytes).decode("utf-8", "replace")
        self.manager.verify(id, body)
        empty(resp)

    def on_get_jwt(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """The CA's enrollment JWT, as ``application/jwt``."""
        resp.content_type = "application/jwt"
        resp.text = self.manager.jwt(id)


def register(routes: Routes) -> None:
    manager = routes.managers.cas
    family = view_family(
        routes.views.cas,
        manager,
        create_model=CaCreate,
        update_model=CaUpdate,
        patch_model=CaPatch,
        to_fields=ca_fields,
    )
    item = CaItem(family, manager)
    routes.management("/cas", FamilyCollection(family))
    routes.management("/cas/{id}", item)
    routes.management("/cas/{id}/verify", item, suffix="verify")
    routes.management("/cas/{id}/jwt", item, suffix="jwt")
