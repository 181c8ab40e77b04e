"""The authorisation matrix (issue 8): every operation of the spec Trellis serves, called without a
token and as a non-admin identity.

- Management API: every operation is 401 ``UNAUTHORIZED`` without a token and for a non-admin,
  except OpenZiti's public operations (``security: []`` in its spec: version, specs, authenticate,
  cacerts, capabilities, network JWTs) and the current-identity / current-API-session operations,
  which any authenticated identity may call (seed 001: "admin access applies to every management
  operation except where the summary names the current identity").
- Client API: every operation but the public ones (those above, enrollment, the external JWT
  signer list, protocols) is 401 without a token; replacing, patching and deleting a service
  there is for administrators only (seed 000).

Path parameters are real ids (the non-admin may even read the service used), so a 404 can never
hide a missing check: authorisation is decided before existence and before the body is read
(every body sent is an empty object, which would otherwise be a 400).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest

from tests.api.certs import ThirdPartyCa, ca_body, csr_pem, unique
from tests.api.conftest import shared_admin_api
from tests.api.session_helpers import World, client_get, dial, posture_check, world
from tests.conftest import CLIENT, MGMT, Api

api = shared_admin_api("authorisation-matrix")

#: OpenZiti's operations without security, on both APIs (plus the served spec's own swagger.json).
PUBLIC_BOTH = {
    ("get", "/"),
    ("get", "/.well-known/est/cacerts"),
    ("post", "/authenticate"),
    ("get", "/enumerated-capabilities"),
    ("get", "/network-jwts"),
    ("get", "/specs"),
    ("get", "/specs/{id}"),
    ("get", "/specs/{id}/spec"),
    ("get", "/version"),
    ("get", "/swagger.json"),
}
PUBLIC = {
    "management": PUBLIC_BOTH,
    "client": PUBLIC_BOTH
    | {("get", "/external-jwt-signers"), ("get", "/protocols"), ("get", "/enroll/jwks")}
    | {
        ("post", path)
        for path in (
            "/enroll",
            "/enroll/ca",
            "/enroll/challenge",
            "/enroll/erott",
            "/enroll/extend/router",
            "/enroll/ott",
            "/enroll/ottca",
            "/enroll/token",
            "/enroll/updb",
        )
    },
}
#: Operations on the current identity and API session: any authenticated identity's.
CURRENT = ("/current-identity", "/current-api-session", "/authenticate/")
#: Client operations for administrators only (seed 000: the management operations on services).
CLIENT_ADMIN_ONLY = {("put", "/services/{id}"), ("patch", "/services/{id}"), ("delete", "/services/{id}")}
BASES = {"management": MGMT, "client": CLIENT}
_PARAM = re.compile(r"{(\w+)}")


@dataclass(frozen=True)
class Operation:
    api: str
    verb: str
    template: str

    def __str__(self) -> str:
        return f"{self.verb.upper()} {BASES[self.api]}{self.template}"


def served_operations(api: Api, which: str) -> list[Operation]:
    """Every operation of the spec the app serves for ``which`` API."""
    spec = api.get("/swagger.json", base=BASES[which], token="")
    assert spec.status_code == 200, spec.text
    return [
        Operation(which, verb, template)
        for template, operations in spec.json["paths"].items()
        for verb in operations
    ]


@dataclass
class Fixture:
    """A network with one entity of every kind, the non-admin who uses it and its ids."""

    person: World
    session_id: str
    ids: dict[str, str]


@pytest.fixture(scope="module")
def network(api: Api) -> Fixture:
    person = world(api)
    session_id = str(dial(api, person.user.token, person.service).json["data"]["id"])
    config_type = api.create("/config-types", {"name": unique("ct")})
    api.create("/configs", {"name": unique("cfg"), "configTypeId": config_type, "data": {}})
    api.create(
        "/identities",
        {"name": unique("ott"), "type": "Default", "isAdmin": False, "enrollment": {"ott": True}},
    )
    api.create("/cas", ca_body(ThirdPartyCa("Matrix Root CA"), unique("ca")))
    api.create(
        "/external-jwt-signers",
        {
            "name": unique("signer"),
            "issuer": unique("https://idp.example.test/"),
            "audience": "ziti",
            "enabled": True,
            "jwksEndpoint": "https://idp.example.test/jwks",
            "claimsProperty": "sub",
            "useExternalId": False,
        },
    )
    posture_check(api, "MFA")
    router = api.create("/transit-routers", {"name": unique("router")})
    api.create(
        "/terminators",
        {"service": person.service, "router": router, "address": "tcp:127.0.0.1:1", "binding": "transport"},
    )
    api.post("/current-api-session/certificates", token=person.user.token, json={"csr": csr_pem()})
    ids = {"service_id": person.service}
    return Fixture(person, session_id, ids)


def first_id(api: Api, which: str, collection: str, token: str | None) -> str:
    """The id of the first entity listed at ``collection`` (as admin, or as ``token``)."""
    listed = api.get(collection, base=BASES[which], token=token)
    rows = listed.json["data"] if listed.status_code == 200 else []
    return str(rows[0]["id"]) if rows else "no-such-id"


def real_path(api: Api, net: Fixture, op: Operation) -> str:
    """``op``'s path with every parameter an id that exists."""
    path = op.template
    for name in _PARAM.findall(op.template):
        if name in net.ids:
            value = net.ids[name]
        elif op.api == "client" and op.template.startswith("/services/"):
            value = net.person.service
        elif op.template.startswith("/sessions/"):
            value = net.session_id
        else:
            collection = op.template.split("/{" + name + "}")[0]
            token = net.person.user.token if collection.startswith(CURRENT) else None
            value = first_id(api, op.api, collection, token)
        path = path.replace("{" + name + "}", value)
    return path


def call(api: Api, op: Operation, path: str, token: str) -> Any:
    kwargs: dict[str, Any] = {"base": BASES[op.api], "token": token}
    if op.verb in ("post", "put", "patch"):
        kwargs["json"] = {}
    return api.request(op.verb.upper(), path, **kwargs)


def refusals(api: Api, net: Fixture, ops: list[Operation], token: str) -> list[str]:
    """The operations of ``ops`` that were not refused with 401 UNAUTHORIZED for ``token``."""
    leaks = []
    for op in ops:
        result = call(api, op, real_path(api, net, op), token)
        code = result.json.get("error", {}).get("code") if result.status_code >= 400 else None
        if (result.status_code, code) != (401, "UNAUTHORIZED"):
            leaks.append(f"{op}: {result.status_code} {result.text[:120]}")
    return leaks


def protected(ops: list[Operation]) -> list[Operation]:
    return [op for op in ops if (op.verb, op.template) not in PUBLIC[op.api]]


def admin_only(ops: list[Operation]) -> list[Operation]:
    return [op for op in protected(ops) if not op.template.startswith(CURRENT)]


def alive(api: Api, token: str) -> bool:
    return bool(client_get(api, "/current-identity", token).status_code == 200)


@pytest.mark.parametrize("which", ["management", "client"])
def test_every_protected_operation_without_a_token_is_unauthorized(
    api: Api, network: Fixture, which: str
) -> None:
    ops = protected(served_operations(api, which))

    leaks = refusals(api, network, ops, token="")

    assert len(ops) > 20
    assert leaks == []


def test_every_admin_operation_of_the_management_api_is_unauthorized_for_a_non_admin(
    api: Api, network: Fixture
) -> None:
    ops = admin_only(served_operations(api, "management"))
    token = network.person.user.token

    leaks = refusals(api, network, ops, token)

    assert len(ops) > 150
    assert leaks == []
    assert alive(api, token)  # every 401 was the check, not a dead session


def test_the_client_api_changes_services_for_administrators_only(api: Api, network: Fixture) -> None:
    token = network.person.user.token
    ops = [op for op in served_operations(api, "client") if (op.verb, op.template) in CLIENT_ADMIN_ONLY]
    readable = client_get(api, f"/services/{network.person.service}", token)

    leaks = refusals(api, network, ops, token)

    assert readable.status_code == 200  # the non-admin sees the service it is refused to change
    assert len(ops) == len(CLIENT_ADMIN_ONLY)
    assert leaks == []
    assert alive(api, token)


def test_the_current_identity_operations_are_served_to_a_non_admin(api: Api, network: Fixture) -> None:
    token = network.person.user.token

    for path in ("/current-identity", "/current-api-session", "/current-identity/authenticators"):
        result = api.get(path, token=token)
        assert result.status_code == 200, f"{path}: {result.text}"


@pytest.mark.parametrize("which", ["management", "client"])
def test_the_served_spec_marks_exactly_the_public_operations_open(api: Api, which: str) -> None:
    spec = api.get("/swagger.json", base=BASES[which], token="").json

    open_ops = {
        (verb, template)
        for template, operations in spec["paths"].items()
        for verb, operation in operations.items()
        if operation["security"] == []
    }

    assert open_ops == PUBLIC[which]
