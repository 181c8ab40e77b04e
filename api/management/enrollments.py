"""``/enrollments``: list, create, read, delete, and ``POST /enrollments/{id}/refresh``."""

from __future__ import annotations

import falcon

from api.http import ok, read_model
from api.resources import Family, FamilyCollection, FamilyItem, view_family
from api.routing import Routes
from api.schemas.enrollments import EnrollmentCreate, EnrollmentRefresh
from engine.entities.identities import Enrollment
from engine.managers.enrollments import EnrollmentManager


class EnrollmentItem(FamilyItem[Enrollment]):
    def __init__(self, family: Family[Enrollment], manager: EnrollmentManager) -> None:
        super().__init__(family)
        self.manager = manager

    def on_post_refresh(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """200 with a create envelope ``{_links, id}`` (the spec's refreshEnrollment response)."""
        self.manager.require(id)
        model = read_model(req, EnrollmentRefresh)
        enrollment = self.manager.refresh(id, model.expires_at)
        ok(resp, {"_links": {"self": {"href": f"./enrollments/{enrollment.id}"}}, "id": enrollment.id})


def register(routes: Routes) -> None:
    manager = routes.managers.enrollments
    family = view_family(routes.views.enrollments, manager, create_model=EnrollmentCreate)
    item = EnrollmentItem(family, manager)
    routes.management("/enrollments", FamilyCollection(family))
    routes.management("/enrollments/{id}", item)
    routes.management("/enrollments/{id}/refresh", item, suffix="refresh")
