"""Informational operations: version, capabilities, protocols, API specs, CA certificates."""

from __future__ import annotations

import platform
from datetime import UTC, datetime
from typing import Any

import falcon

from api.controller import CLIENT_BASE, FABRIC_BASE, MANAGEMENT_BASE, Controller
from api.http import LOOP_READS, ok
from api.middleware import NONE
from api.routing import Route, Routes
from engine.entities.controllers import ControllerMember
from engine.errors import NotFoundError

BUILD_DATE = datetime(2026, 11, 22, tzinfo=UTC)
#: Every capability value OpenZiti knows (``/enumerated-capabilities``).
KNOWN_CAPABILITIES = ["OIDC_AUTH", "OIDC_AUTH_WITH_CSR", "HA_CONTROLLER"]
#: What ``/version`` advertises: the OIDC provider at ``/oidc`` (``api/oidc.py``).
CAPABILITIES = ["OIDC_AUTH"]
#: Advertised too when the network has several controllers (docs/api.md §9): each verifies the
#: others' OIDC tokens, and routers verify them alone, so a client may move between them.
HA_CAPABILITY = "HA_CONTROLLER"
#: Where the OIDC provider is (``/version``'s ``edge-oidc``, as OpenZiti lists it: the bare base URL).
OIDC_PATH = "/oidc"


def version_document(ctrl: Controller) -> dict[str, Any]:
    base = ctrl.base_url

    def entry(path: str) -> dict[str, Any]:
        return {"v1": {"apiBaseUrls": [base + path], "path": path, "version": "v1"}}

    return {
        "apiVersions": {
            "edge": entry(CLIENT_BASE),
            "edge-client": entry(CLIENT_BASE),
            "edge-management": entry(MANAGEMENT_BASE),
            "edge-oidc": {"v1": {"apiBaseUrls": [base], "path": OIDC_PATH, "version": "v1"}},
            "fabric": entry(FABRIC_BASE),
        },
        "buildDate": BUILD_DATE.strftime("%Y-%m-%d %H:%M:%S"),
        "capabilities": [*CAPABILITIES, *([HA_CAPABILITY] if several_controllers(ctrl) else [])],
        "revision": f"trellis-{ctrl.version_trellis}",
        "runtimeVersion": f"python{platform.python_version()}",
        "version": ctrl.version,
    }


def several_controllers(ctrl: Controller) -> bool:
    """Whether the network has more than one controller (their durable records, online or not)."""
    return len(ctrl.env.store.all(ControllerMember)) > 1


class VersionResource:
    auth = NONE
    loop_methods = LOOP_READS

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, version_document(self.ctrl))


class CapabilitiesResource:
    auth = NONE
    loop_methods = LOOP_READS

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, list(KNOWN_CAPABILITIES))


class ProtocolsResource:
    auth = NONE
    loop_methods = LOOP_READS

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, {"https": {"address": self.ctrl.settings.advertised_address}})


#: Whether this process can take writes (``HealthChecksResource``).
HEALTH_PATH = "/trellis/health-checks"


class HealthChecksResource:
    """``/trellis/health-checks``: whether this process can take writes, for load balancers and
    monitoring.

    OpenZiti's controller serves ``/health-checks`` (its ``health-checks`` API binding) as
    ``{"data": {"healthy": ..., "checks": [{"id", "healthy", "lastCheckTime", ...}]}, "meta": {}}``.
    Trellis answers in that form under a path of its own, so nothing OpenZiti serves (nor its
    ``/version``) changes. The checks are the store's (``health()``): with PostgreSQL, whether the
    database can be reached and this process has not fallen behind its change log; otherwise
    whether the last batch was made durable. Unlike OpenZiti's, the answer is 503 when a check
    fails, so a load balancer can send writes elsewhere (reads from memory go on meanwhile).
    ``?type=short`` keeps each check's ``id`` and ``healthy`` only, as OpenZiti's does. No
    authentication: it shows no data, only whether writes are taken."""

    auth = NONE
    loop_methods = LOOP_READS

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def checks(self) -> list[dict[str, Any]]:
        health = getattr(self.ctrl.env.store, "health", None)
        return list(health()) if callable(health) else []

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        found = self.checks()
        if req.get_param("type") == "short":
            found = [{"id": c["id"], "healthy": c["healthy"]} for c in found]
        healthy = all(c["healthy"] for c in found)
        resp.status = falcon.HTTP_200 if healthy else falcon.HTTP_503
        resp.media = {"data": {"healthy": healthy, "checks": found}, "meta": {}}
        resp.set_header("Cache-Control", "no-store")


SPEC_IDS = {"client": "edge-client", "management": "edge-management", "fabric": "fabric"}
SPEC_NAMES = {"client": "edge-client.yml", "management": "edge-management.yml", "fabric": "fabric.yml"}


class SpecsResource:
    """``/specs``, ``/specs/{id}``, ``/specs/{id}/spec`` and ``{base}/swagger.json``."""

    auth = NONE

    def __init__(self, ctrl: Controller, api: str, routes: list[Route]) -> None:
        self.ctrl = ctrl
        self.api = api
        self.routes = routes  # the table registration fills; read when a spec is asked for

    def _entity(self) -> dict[str, Any]:
        spec_id = SPEC_IDS[self.api]
        stamp = BUILD_DATE.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return {
            "_links": {"self": {"href": f"./specs/{spec_id}"}, "spec": {"href": f"./specs/{spec_id}/spec"}},
            "createdAt": stamp,
            "id": spec_id,
            "name": SPEC_NAMES[self.api],
            "tags": {},
            "updatedAt": stamp,
        }

    def _document(self) -> dict[str, Any]:
        from api.spec import build_spec

        return build_spec(self.ctrl, self.api, self.routes)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        ok(resp, [self._entity()], {"pagination": {"limit": 10, "offset": 0, "totalCount": 1}})

    def on_get_item(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        if id != SPEC_IDS[self.api]:
            raise NotFoundError()
        ok(resp, self._entity())

    def on_get_body(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        if id != SPEC_IDS[self.api]:
            raise NotFoundError()
        ok(resp, self._document())

    def on_get_swagger(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = self._document()


class CaCertsResource:
    """``/.well-known/est/cacerts``: base64 PKCS#7 certs-only of the controller's CA chain."""

    auth = NONE

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "application/pkcs7-mime"
        resp.set_header("Content-Transfer-Encoding", "base64")
        resp.text = self.ctrl.pki.ca_certificates_pkcs7_b64()


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    version = VersionResource(ctrl)
    for path in ("/", "/version"):
        routes.raw(path, version)
    cacerts = CaCertsResource(ctrl)
    routes.raw("/.well-known/est/cacerts", cacerts)
    for api in ("client", "management"):
        routes.add(api, "", version)
        routes.add(api, "/version", version)
        routes.add(api, "/enumerated-capabilities", CapabilitiesResource())
        routes.add(api, "/.well-known/est/cacerts", cacerts)
        specs = SpecsResource(ctrl, api, routes.table)
        routes.add(api, "/specs", specs)
        routes.add(api, "/specs/{id}", specs, suffix="item")
        routes.add(api, "/specs/{id}/spec", specs, suffix="body")
        routes.add(api, "/swagger.json", specs, suffix="swagger")
    # the fabric API's description (OpenZiti's fabric API has no /specs of its own)
    routes.add("fabric", "/swagger.json", SpecsResource(ctrl, "fabric", routes.table), suffix="swagger")
    routes.client("/protocols", ProtocolsResource(ctrl))
    # Trellis's own, not OpenZiti's: a path outside /edge, /fabric and /.well-known is the client
    # API's (the request middleware puts the client base before it, as OpenZiti's default handler
    # takes it), so this is where /trellis/health-checks arrives; mounted raw, in no spec.
    routes.raw(CLIENT_BASE + HEALTH_PATH, HealthChecksResource(ctrl))
