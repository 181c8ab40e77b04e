"""``/services`` (management): CRUD, the service sub-lists and ``/service-role-attributes``.

The list takes ``roleFilter``/``roleSemantic`` and ``configTypes``; ``asIdentity`` (id or name)
shows the permissions and service-config overrides of another identity (the caller's otherwise).
The ``config`` map holds the configs of the types asked for (``configTypes`` on the request, else
at authentication), keyed by config type name (:class:`api.views.ServiceView`).
"""

from __future__ import annotations

from api.resources import FamilyCollection, FamilyItem, view_family
from api.role_filter import RoleAttributes, role_ids
from api.routing import Routes
from api.schemas.services import ServiceCreate, ServicePatch, ServiceUpdate
from engine.entities.services import Service


def register(routes: Routes) -> None:
    views = routes.views
    manager = routes.managers.services
    access = routes.managers.access
    family = view_family(
        views.services,
        manager,
        create_model=ServiceCreate,
        update_model=ServiceUpdate,
        patch_model=ServicePatch,
        role_ids=lambda req: role_ids(req, access, Service),
    )
    routes.management("/services", FamilyCollection(family))
    routes.management("/services/{id}", FamilyItem(family))
    routes.mount_sublists(views.services)
    routes.management("/service-role-attributes", RoleAttributes(access, Service))
