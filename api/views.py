"""One view per entity kind, shared by both APIs (docs/architecture.md §3).

A :class:`View` is what the API shows of a kind: its filterable fields (the ZitiQL symbols of its
lists), its renderer, and its sub-lists (``/<kind>/{id}/<path>``: entities of another kind, found by
a manager and shown by that kind's own view). :class:`Views` builds every kind's view over one
controller; resource modules take their views from it and never from one another.

Services are seen by an identity: :class:`ServiceView` renders ``permissions``, the ``config`` map
(by config type name, for the config types asked for on the request or at login, with the
identity's service-config overrides) and, on the client API, ``postureQueries``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import falcon
import orjson

from api.controller import Controller
from api.http import Loaded, list_response
from api.middleware import ADMIN
from api.schemas.auth_policies import AUTH_POLICY_SYMBOLS, render_auth_policy
from api.schemas.authenticators import authenticator_symbols, render_authenticator
from api.schemas.cas import CA_SYMBOLS, render_ca
from api.schemas.configs import CONFIG_TYPE_SYMBOLS, config_symbols, render_config, render_config_type
from api.schemas.enrollments import enrollment_symbols, render_enrollment
from api.schemas.external_jwt_signers import EXTERNAL_JWT_SIGNER_SYMBOLS, render_external_jwt_signer
from api.schemas.identities import identity_form, identity_symbols, render_identity
from api.schemas.policies import (
    EDGE_ROUTER_POLICY_SYMBOLS,
    SERVICE_EDGE_ROUTER_POLICY_SYMBOLS,
    render_edge_router_policy,
    render_service_edge_router_policy,
    render_service_policy,
    service_policy_symbols,
)
from api.schemas.posture import render_policy_posture, render_posture_queries
from api.schemas.posture_checks import POSTURE_CHECK_SYMBOLS, render_posture_check
from api.schemas.routers import ROUTER_SYMBOLS, edge_router_symbols, render_edge_router, render_router
from api.schemas.services import SERVICE_SYMBOLS, render_service, service_form, service_permissions
from api.wire import Forms
from engine.entities import Entity
from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy, ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.routers import EdgeRouter, Router
from engine.entities.services import Config, ConfigType, Service
from engine.entities.trust import AuthPolicy, Ca, ExternalJwtSigner
from engine.errors import FieldError, NotFoundError
from engine.managers.access import Grant
from engine.managers.posture import PolicyPosture
from engine.managers.registry import Managers
from engine.memo import PerObject
from engine.query import SymbolTable

E = TypeVar("E", bound=Entity)
Render = Callable[[Any], dict[str, Any]]
#: A sub-list's entities for the parent id and the request (404 when the parent is missing).
Query = Callable[[str, falcon.Request], Iterable[Entity]]


@dataclass(frozen=True)
class SubList:
    """``/<kind>/{id}/<path>``: entities of ``kind`` related to one entity, shown by their view."""

    path: str
    kind: type[Entity]
    query: Query


class View(Generic[E]):
    """How one entity kind is filtered and rendered, and which sub-lists it has."""

    def __init__(
        self,
        kind: type[E],
        symbols: SymbolTable,
        render: Callable[[E], dict[str, Any]],
        sublists: Sequence[SubList] = (),
    ) -> None:
        self.kind = kind
        self.symbols = symbols
        self.render = render
        self.sublists = tuple(sublists)

    def renderer(self, req: falcon.Request) -> Callable[[E], dict[str, Any]]:
        """The renderer for this request (most kinds render the same for every request)."""
        return self.render


def config_types_asked(req: falcon.Request) -> list[str] | None:
    """The request's ``configTypes`` (repeated and/or comma separated), or None when absent."""
    raw = req.params.get("configTypes")
    if not raw:
        return None
    values = [raw] if isinstance(raw, str) else list(raw)
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


class ServiceRenderer:
    """Services as one identity sees them, for one request. A list hands it the page first
    (:meth:`prepare`), so the policy engine and the posture data are asked once for the whole
    page, not once per service from each of many request threads (they would queue on its lock)."""

    def __init__(
        self,
        managers: Managers,
        identity: Identity,
        wanted: frozenset[str],
        posture: Callable[[Mapping[str, Grant]], dict[str, list[PolicyPosture]]] | None = None,
        form: Callable[[Service], dict[str, Any]] = service_form,
        encoded: EncodedServices | None = None,
    ) -> None:
        self.managers = managers
        self.identity = identity
        self.wanted = wanted
        self.posture = posture
        self.form = form
        #: where :meth:`encode` keeps services' JSON (None: encoded afresh each time)
        self.encoded = encoded
        self._grants: dict[str, Grant] = {}
        self._queries: dict[str, list[PolicyPosture]] = {}
        #: each policy's posture as rendered for this request (shared by the services it grants)
        self._postures: PerObject[PolicyPosture, dict[str, Any]] = PerObject(render_policy_posture, 1024)

    def prepare(self, services: Sequence[Service]) -> None:
        missing = [s.id for s in services if s.id not in self._grants]
        grants = self.managers.access.grants(self.identity.id, missing)
        self._grants.update(grants)
        if self.posture is not None:
            self._queries.update(self.posture(grants))

    def __call__(self, service: Service) -> dict[str, Any]:
        if service.id not in self._grants:
            self.prepare([service])
        grant = self._grants[service.id]
        overrides = self.identity.service_configs.get(service.id)
        out = render_service(
            service,
            config=self.managers.services.config_map(service, self.wanted, overrides),
            permissions=service_permissions(grant.permissions),
            form=self.form,
        )
        if self.posture is not None:
            out["postureQueries"] = render_posture_queries(self._queries[service.id], self._postures)
        return out

    def encode(self, service: Service) -> bytes:
        """``orjson.dumps(self(service))``, kept (:class:`EncodedServices`) when every value it
        is made of is known: the service object, the config data objects by type name, the
        permissions and, on the client API, postureQueries of policies that check nothing."""
        if self.encoded is None:
            return orjson.dumps(self(service))
        grant = self._grants.get(service.id)
        if grant is None:
            self.prepare([service])
            grant = self._grants[service.id]
        posture: tuple[tuple[str, str, bool], ...] | None = None
        if self.posture is not None:
            shown = []
            for policy in self._queries[service.id]:
                if policy.queries:  # evaluated checks: rendered afresh
                    return orjson.dumps(self(service))
                shown.append((policy.policy_id, policy.policy_type, policy.is_passing))
            posture = tuple(shown)
        entries = (
            self.managers.services.config_entries(
                service, self.wanted, self.identity.service_configs.get(service.id)
            )
            if self.wanted
            else ()
        )
        return self.encoded.get(service, entries, grant.permissions, posture, self)


#: How many services' encoded forms :class:`EncodedServices` keeps (then it starts afresh).
ENCODED_KEPT = 8192


class EncodedServices:
    """Services' ``serviceDetail`` as JSON bytes, kept by what each is made of: the service
    object (entities are immutable: a change is a new object), each config's type name and data
    object, the permissions and the posture policies (id, type, passing; none with checks). A
    changed service, config, config type name, grant or policy makes another key, so nothing is
    ever invalidated: a stale entry is simply not asked for again (and goes when the memo is
    full). The objects of a key are held beside its answer, so that their ids are not reused.
    Thread-safe in that concurrent callers at worst encode the same service twice."""

    __slots__ = ("_kept", "_most")

    def __init__(self, kept: int = ENCODED_KEPT) -> None:
        self._most = kept
        self._kept: dict[tuple[Any, ...], tuple[tuple[Any, ...], bytes]] = {}

    def get(
        self,
        service: Service,
        entries: Sequence[tuple[str, dict[str, Any]]],
        permissions: tuple[str, ...],
        posture: tuple[tuple[str, str, bool], ...] | None,
        render: Callable[[Service], dict[str, Any]],
    ) -> bytes:
        if entries:
            configs = tuple([(name, id(data)) for name, data in entries])
            held: tuple[Any, ...] = (service, *[data for _, data in entries])
        else:
            configs, held = (), (service,)
        # While an entry is kept, so are the objects whose ids its key holds: no other object
        # can have those ids, so an equal key means the same objects (checked for the service).
        key = (id(service), configs, permissions, posture)
        kept = self._kept.get(key)
        if kept is not None and kept[0][0] is service:
            return kept[1]
        encoded = orjson.dumps(render(service))
        if len(self._kept) >= self._most:
            self._kept.clear()
        self._kept[key] = (held, encoded)
        return encoded


class ServiceView(View[Service]):
    """Services as an identity sees them (OpenZiti's ``ServiceDetail`` for an identity)."""

    def __init__(self, managers: Managers) -> None:
        super().__init__(Service, SERVICE_SYMBOLS, self._unseen)
        self.managers = managers
        self.forms = Forms(service_form)
        self.encoded = EncodedServices()

    def _unseen(self, service: Service) -> dict[str, Any]:
        return render_service(service, permissions=service_permissions(()), form=self.forms)

    def _wanted(self, req: falcon.Request) -> frozenset[str]:
        """Config type ids for ``config``: asked on the request, else at login (names, ids or all)."""
        asked = config_types_asked(req)
        if asked is None:
            session = req.context.session
            asked = list(session.config_types) if session is not None else []
        return self.managers.services.wanted_config_types(asked)

    def _as_identity(self, req: falcon.Request) -> Identity:
        """``asIdentity`` (id or name; management only) or the caller."""
        wanted = req.get_param("asIdentity")
        if not wanted:
            identity: Identity = req.context.identity
            return identity
        found = self.managers.identities.by_id_or_name(wanted)
        if found is None:
            raise NotFoundError(field="asIdentity", value=wanted, reason="identity not found")
        return found

    def renderer(self, req: falcon.Request) -> Callable[[Service], dict[str, Any]]:
        """Management: the permissions and overrides of the caller or of ``asIdentity``."""
        return ServiceRenderer(
            self.managers, self._as_identity(req), self._wanted(req), form=self.forms, encoded=self.encoded
        )

    def client_renderer(self, req: falcon.Request) -> Callable[[Service], dict[str, Any]]:
        """Client API: the caller's permissions and overrides, and its ``postureQueries``."""
        identity: Identity = req.context.identity
        session_id: str = req.context.session.id
        queries = self.managers.posture.service_queries_for(identity.id, session_id)
        return ServiceRenderer(self.managers, identity, self._wanted(req), queries, self.forms, self.encoded)

    def visible(self, identity: Identity, service_id: str) -> Service:
        """The service if the identity may Dial or Bind it; else 404 (docs/policy.md §5.1)."""
        return self.managers.access.service_for_identity(identity.id, service_id)[0]

    def for_identity(self, identity: Identity) -> Loaded[Service]:
        """The services the identity may Dial or Bind (the client API never lists as an admin),
        loaded as a list needs them."""
        access = self.managers.access
        return Loaded(access.service_ids_of_identity(identity.id), access.services)


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
    """A sub-list resource: the related entities, paged and filtered like their kind's own list."""

    auth = ADMIN

    def __init__(self, view: View[Any], query: Query) -> None:
        self.view = view
        self.query = query

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        items = self.query(id, req)
        list_response(req, resp, items, self.view.symbols, self.view.renderer(req))


class Views:
    """Every kind's view over one controller (cheap to build: symbols and renderers)."""

    def __init__(self, ctrl: Controller) -> None:
        m = ctrl.managers
        access = m.access

        def owned(parent: Callable[[str], Any], items: Callable[[str], Iterable[Entity]]) -> Query:
            """Items of a parent that must exist (404 otherwise)."""

            def query(id: str, req: falcon.Request) -> Iterable[Entity]:
                parent(id)
                return items(id)

            return query

        def policies(kind: type[Entity], policy_kind: type[Entity]) -> Query:
            return lambda id, req: access.policies_of(kind, id, policy_kind)

        def members(policy_kind: type[Entity], member_kind: type[Entity], lenient: bool = False) -> SubList:
            """A policy's members; ``lenient`` (service policies only): an empty list for a policy
            that does not exist (seed 001 lists no 404 there, and OpenZiti answers 200)."""

            def query(id: str, req: falcon.Request) -> Iterable[Entity]:
                if lenient and m.service_policies.get(id) is None:
                    return []
                return access.members_of(policy_kind, id, member_kind)

            return SubList(member_kind.ENTITY, member_kind, query)

        self.services = ServiceView(m)
        self.services.sublists = (
            SubList("configs", Config, lambda id, req: m.services.configs_of(id)),
            SubList(
                "identities", Identity, lambda id, req: access.identities_of_service(id, policy_type(req))
            ),
            SubList("edge-routers", EdgeRouter, lambda id, req: access.edge_routers_of_service(id)),
            SubList("service-policies", ServicePolicy, policies(Service, ServicePolicy)),
            SubList(
                "service-edge-router-policies",
                ServiceEdgeRouterPolicy,
                policies(Service, ServiceEdgeRouterPolicy),
            ),
        )
        self.identities: View[Identity] = View(
            Identity,
            identity_symbols(ctrl),
            functools.partial(render_identity, ctrl, form=Forms(identity_form)),
            (
                SubList(
                    "services", Service, lambda id, req: access.services_of_identity(id, policy_type(req))
                ),
                SubList("edge-routers", EdgeRouter, lambda id, req: access.edge_routers_of_identity(id)),
                SubList("service-policies", ServicePolicy, policies(Identity, ServicePolicy)),
                SubList("edge-router-policies", EdgeRouterPolicy, policies(Identity, EdgeRouterPolicy)),
                SubList(
                    "authenticators",
                    Authenticator,
                    owned(m.identities.require, m.authenticators.for_identity),
                ),
                SubList("enrollments", Enrollment, owned(m.identities.require, m.enrollments.for_identity)),
            ),
        )
        self.edge_routers: View[EdgeRouter] = View(
            EdgeRouter,
            edge_router_symbols(m.fleet),
            lambda e: render_edge_router(ctrl, e),
            (
                SubList("identities", Identity, lambda id, req: access.identities_of_edge_router(id)),
                SubList("services", Service, lambda id, req: access.services_of_edge_router(id)),
                SubList("edge-router-policies", EdgeRouterPolicy, policies(EdgeRouter, EdgeRouterPolicy)),
                SubList(
                    "service-edge-router-policies",
                    ServiceEdgeRouterPolicy,
                    policies(EdgeRouter, ServiceEdgeRouterPolicy),
                ),
            ),
        )
        self.routers: View[Router] = View(Router, ROUTER_SYMBOLS, lambda e: render_router(ctrl, e))
        self.service_policies: View[ServicePolicy] = View(
            ServicePolicy,
            service_policy_symbols(access, identities=self.identities.symbols, services=SERVICE_SYMBOLS),
            lambda e: render_service_policy(ctrl, e),
            tuple(members(ServicePolicy, k, lenient=True) for k in (Identity, Service, PostureCheck)),
        )
        self.edge_router_policies: View[EdgeRouterPolicy] = View(
            EdgeRouterPolicy,
            EDGE_ROUTER_POLICY_SYMBOLS,
            lambda e: render_edge_router_policy(ctrl, e),
            tuple(members(EdgeRouterPolicy, k) for k in (Identity, EdgeRouter)),
        )
        self.service_edge_router_policies: View[ServiceEdgeRouterPolicy] = View(
            ServiceEdgeRouterPolicy,
            SERVICE_EDGE_ROUTER_POLICY_SYMBOLS,
            lambda e: render_service_edge_router_policy(ctrl, e),
            tuple(members(ServiceEdgeRouterPolicy, k) for k in (Service, EdgeRouter)),
        )
        self.posture_checks: View[PostureCheck] = View(
            PostureCheck, POSTURE_CHECK_SYMBOLS, lambda e: render_posture_check(ctrl, e)
        )
        self.configs: View[Config] = View(
            Config,
            config_symbols(m.config_types),
            lambda e: render_config(ctrl, e),
            (SubList("services", Service, owned(m.configs.require, m.services.using_config)),),
        )
        self.config_types: View[ConfigType] = View(
            ConfigType,
            CONFIG_TYPE_SYMBOLS,
            render_config_type,
            # seed 001 lists no 404 here, and OpenZiti answers an unknown type's configs empty
            (SubList("configs", Config, lambda id, req: m.configs.of_type(id)),),
        )
        self.authenticators: View[Authenticator] = View(
            Authenticator, authenticator_symbols(), lambda e: render_authenticator(ctrl, e)
        )
        self.enrollments: View[Enrollment] = View(
            Enrollment, enrollment_symbols(), lambda e: render_enrollment(ctrl, e)
        )
        self.cas: View[Ca] = View(Ca, CA_SYMBOLS, render_ca)
        self.auth_policies: View[AuthPolicy] = View(AuthPolicy, AUTH_POLICY_SYMBOLS, render_auth_policy)
        self.external_jwt_signers: View[ExternalJwtSigner] = View(
            ExternalJwtSigner, EXTERNAL_JWT_SIGNER_SYMBOLS, render_external_jwt_signer
        )

    def all(self) -> list[View[Any]]:
        return [v for v in vars(self).values() if isinstance(v, View)]

    def of(self, kind: type[E]) -> View[E]:
        for view in self.all():
            if view.kind is kind:
                return view
        raise KeyError(kind.__name__)
