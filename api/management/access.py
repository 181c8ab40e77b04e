"""Access listings backed by the policy engine (issue 3): who reaches what, through which policies.

* ``/identities/{id}/services`` (``policyType`` dial|bind), ``/edge-routers``, ``/service-policies``,
  ``/edge-router-policies`` and ``/policy-advice/{serviceId}``;
* ``/services/{id}/identities`` (``policyType``), ``/edge-routers``, ``/service-policies``,
  ``/service-edge-router-policies``;
* ``/edge-routers/{id}/identities``, ``/services``, ``/edge-router-policies``,
  ``/service-edge-router-policies``;
* the members of each policy: ``/service-policies/{id}/identities|services|posture-checks``,
  ``/edge-router-policies/{id}/identities|edge-routers``,
  ``/service-edge-router-policies/{id}/services|edge-routers``.

Every list pages and filters like the family's own list (same symbols, same renderer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import falcon

from api.controller import Controller
from api.http import list_response, ok
from api.management import edge_router_policies, edge_routers, posture_checks, service_edge_router_policies
from api.management import service_policies as service_policy_module
from api.management.services import service_symbols
from api.middleware import ADMIN
from api.routing import Routes
from api.schemas.identities import identity_symbols, render_identity
from api.schemas.policies import (
    render_edge_router_policy,
    render_service_edge_router_policy,
    render_service_policy,
)
from api.schemas.posture_checks import render_posture_check
from api.schemas.routers import render_edge_router
from api.schemas.services import service_renderer
from api.wire import ref
from engine.entities import Entity
from engine.entities.identities import Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter
from engine.entities.services import Service
from engine.errors import FieldError
from engine.query import SymbolTable


@dataclass(frozen=True)
class View:
    """How one entity kind is listed: its symbols and a renderer for the request."""

    symbols: SymbolTable
    renderer: Callable[[Controller, falcon.Request], Callable[[Any], dict[str, Any]]]


def _views(ctrl: Controller) -> dict[type[Entity], View]:
    return {
        Identity: View(identity_symbols(ctrl), lambda c, r: lambda e: render_identity(c, e)),
        Service: View(service_symbols(), service_renderer),
        EdgeRouter: View(edge_routers.SYMBOLS, lambda c, r: lambda e: render_edge_router(c, e)),
        PostureCheck: View(posture_checks.SYMBOLS, lambda c, r: lambda e: render_posture_check(c, e)),
        ServicePolicy: View(
            service_policy_module.SYMBOLS, lambda c, r: lambda e: render_service_policy(c, e)
        ),
        EdgeRouterPolicy: View(
            edge_router_policies.SYMBOLS, lambda c, r: lambda e: render_edge_router_policy(c, e)
        ),
        ServiceEdgeRouterPolicy: View(
            service_edge_router_policies.SYMBOLS,
            lambda c, r: lambda e: render_service_edge_router_policy(c, e),
        ),
    }


def policy_type(req: falcon.Request) -> str | None:
    """The ``policyType`` parameter (dial or bind, any case) as ``Dial``/``Bind``, or None."""
    raw = req.get_param("policyType")
    if raw is None or raw == "":
        return None
    folded = raw.lower()
    if folded not in ("dial", "bind"):
        raise FieldError("policyType", "policyType must be one of [dial bind]", raw)
    return "Dial" if folded == "dial" else "Bind"


class Listing:
    """A sub-list of one entity: ``query(id, req)`` gives the entities to page and filter."""

    auth = ADMIN

    def __init__(
        self, ctrl: Controller, view: View, query: Callable[[str, falcon.Request], Iterable[Entity]]
    ) -> None:
        self.ctrl = ctrl
        self.view = view
        self.query = query

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        items = self.query(id, req)
        list_response(req, resp, items, self.view.symbols, self.view.renderer(self.ctrl, req))


class PolicyAdvice:
    """Analyse whether an identity can reach a service and through which edge routers."""

    auth = ADMIN

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str, service_id: str) -> None:
        identity, service, advice = self.ctrl.access.advice(id, service_id)
        store = self.ctrl.env.store
        common = []
        for router_id in advice.common_router_ids:
            router = store.get(EdgeRouter, router_id)
            if router is not None:
                common.append({**(ref(router) or {}), "isOnline": False})
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


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    access = ctrl.access
    views = _views(ctrl)

    def add(
        template: str, kind: type[Entity], query: Callable[[str, falcon.Request], Iterable[Entity]]
    ) -> None:
        routes.management(template, Listing(ctrl, views[kind], query))

    add("/identities/{id}/services", Service, lambda i, r: access.services_of_identity(i, policy_type(r)))
    add("/identities/{id}/edge-routers", EdgeRouter, lambda i, r: access.edge_routers_of_identity(i))
    add(
        "/identities/{id}/service-policies",
        ServicePolicy,
        lambda i, r: access.policies_of(Identity, i, ServicePolicy),
    )
    add(
        "/identities/{id}/edge-router-policies",
        EdgeRouterPolicy,
        lambda i, r: access.policies_of(Identity, i, EdgeRouterPolicy),
    )
    routes.management("/identities/{id}/policy-advice/{service_id}", PolicyAdvice(ctrl))

    add("/services/{id}/identities", Identity, lambda i, r: access.identities_of_service(i, policy_type(r)))
    add("/services/{id}/edge-routers", EdgeRouter, lambda i, r: access.edge_routers_of_service(i))
    add(
        "/services/{id}/service-policies",
        ServicePolicy,
        lambda i, r: access.policies_of(Service, i, ServicePolicy),
    )
    add(
        "/services/{id}/service-edge-router-policies",
        ServiceEdgeRouterPolicy,
        lambda i, r: access.policies_of(Service, i, ServiceEdgeRouterPolicy),
    )

    add("/edge-routers/{id}/identities", Identity, lambda i, r: access.identities_of_edge_router(i))
    add("/edge-routers/{id}/services", Service, lambda i, r: access.services_of_edge_router(i))
    add(
        "/edge-routers/{id}/edge-router-policies",
        EdgeRouterPolicy,
        lambda i, r: access.policies_of(EdgeRouter, i, EdgeRouterPolicy),
    )
    add(
        "/edge-routers/{id}/service-edge-router-policies",
        ServiceEdgeRouterPolicy,
        lambda i, r: access.policies_of(EdgeRouter, i, ServiceEdgeRouterPolicy),
    )

    members = {
        ServicePolicy: ("service-policies", (Identity, Service, PostureCheck)),
        EdgeRouterPolicy: ("edge-router-policies", (Identity, EdgeRouter)),
        ServiceEdgeRouterPolicy: ("service-edge-router-policies", (Service, EdgeRouter)),
    }
    for policy_kind, (path, member_kinds) in members.items():
        for member_kind in member_kinds:
            add(
                f"/{path}/{{id}}/{member_kind.ENTITY}",
                member_kind,
                lambda i, r, p=policy_kind, m=member_kind: access.members_of(p, i, m),  # type: ignore[misc]
            )
