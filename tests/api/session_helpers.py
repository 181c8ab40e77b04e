"""Builders for the session, posture and client edge router tests: users that log in on the
client API, services, policies and edge routers with listeners. Builders never assert."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engine.entities.routers import EdgeRouter
from engine.managers.fleet import VersionInfo
from tests.api.certs import unique
from tests.api.policy_helpers import put
from tests.conftest import CLIENT, Api

PASSWORD = "Correct-Horse-42"


@dataclass
class User:
    id: str
    name: str
    token: str


def user(api: Api, *attributes: str, admin: bool = False) -> User:
    """A new identity with ``attributes``, enrolled with a password and logged in on the client API."""
    name = unique("user")
    identity_id = api.create(
        "/identities",
        {
            "name": name,
            "type": "User",
            "isAdmin": admin,
            "roleAttributes": list(attributes),
            "enrollment": {"updb": name},
        },
    )
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["updb"]["token"]
    api.client.simulate_post(CLIENT + "/enroll/updb", params={"token": token}, json={"password": PASSWORD})
    return User(identity_id, name, api.login(name, PASSWORD, base=CLIENT))


def service(api: Api, *attributes: str) -> str:
    return api.create(
        "/services", {"name": unique("svc"), "encryptionRequired": True, "roleAttributes": list(attributes)}
    )


def service_policy(
    api: Api,
    policy_type: str,
    identity_roles: list[str],
    service_roles: list[str],
    posture_check_roles: list[str] | None = None,
    semantic: str = "AllOf",
) -> str:
    return api.create(
        "/service-policies",
        {
            "name": unique(f"sp-{policy_type.lower()}"),
            "type": policy_type,
            "semantic": semantic,
            "identityRoles": identity_roles,
            "serviceRoles": service_roles,
            "postureCheckRoles": posture_check_roles or [],
        },
    )


def edge_router_policy(api: Api, identity_roles: list[str], router_roles: list[str]) -> str:
    return api.create(
        "/edge-router-policies",
        {
            "name": unique("erp"),
            "semantic": "AnyOf",
            "identityRoles": identity_roles,
            "edgeRouterRoles": router_roles,
        },
    )


def service_edge_router_policy(api: Api, service_roles: list[str], router_roles: list[str]) -> str:
    return api.create(
        "/service-edge-router-policies",
        {
            "name": unique("serp"),
            "semantic": "AnyOf",
            "serviceRoles": service_roles,
            "edgeRouterRoles": router_roles,
        },
    )


def edge_router(
    api: Api, *attributes: str, verified: bool = True, name: str | None = None, online: bool | None = None
) -> str:
    """An edge router that enrolled: verified, with a hostname and a TLS listener; ``online``
    (by default when verified): the fleet records it connected and synchronised, as the control
    listener does after a router's hello (tests/api/test_control_plane.py runs a real one)."""
    router_id = api.create(
        "/edge-routers", {"name": name or unique("er"), "roleAttributes": list(attributes), "cost": 7}
    )
    router = api.app.ctrl.env.store.get(EdgeRouter, router_id)
    host = f"{router.name}.example.test"
    protocols = {"tls": f"tls://{host}:3022"}
    put(
        api.app,
        dataclasses.replace(router, is_verified=verified, hostname=host, supported_protocols=protocols),
    )
    if verified if online is None else online:
        fleet = api.app.ctrl.managers.fleet
        presence = fleet.connect(
            router_id,
            name=router.name,
            fingerprint="",
            hostname=host,
            protocols=protocols,
            link_listener="",
            version=VersionInfo("v1.0.0", "abc", "2024-01-01", "linux", "amd64"),
            tunneler=False,
        )
        fleet.mark_synced(router_id, presence.connection)
    return router_id


def posture_check(api: Api, type_id: str, *attributes: str, **fields: Any) -> str:
    return api.create(
        "/posture-checks",
        {"name": unique(type_id.lower()), "typeId": type_id, "roleAttributes": list(attributes), **fields},
    )


@dataclass
class World:
    """One user who may dial one service through one edge router."""

    user: User
    service: str
    router: str
    dial_policy: str


def world(api: Api, *, bind: bool = False) -> World:
    """A user, a service, a Dial policy (and a Bind one with ``bind``), and a router both reach."""
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    router = edge_router(api, role)
    dial = service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    if bind:
        service_policy(api, "Bind", [f"#{role}"], [f"#{role}"])
    edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    return World(person, svc, router, dial)


def client_post(api: Api, path: str, token: str, **kwargs: Any) -> Any:
    return api.post(path, token=token, base=CLIENT, **kwargs)


def client_get(api: Api, path: str, token: str, **kwargs: Any) -> Any:
    return api.get(path, token=token, base=CLIENT, **kwargs)


def client_delete(api: Api, path: str, token: str, **kwargs: Any) -> Any:
    return api.delete(path, token=token, base=CLIENT, **kwargs)


def dial(api: Api, token: str, service_id: str, session_type: str | None = "Dial") -> Any:
    body: dict[str, Any] = {"serviceId": service_id}
    if session_type is not None:
        body["type"] = session_type
    return client_post(api, "/sessions", token, json=body)
