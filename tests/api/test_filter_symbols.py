"""Issue 24: the filter symbols OpenZiti v1.6.0 offers on its lists work in Trellis too.

Each symbol is listed in ``meta.filterableFields`` and filters: a filter naming it matches what it
should and not the rest. (Client lists offer only fields their entries show, or values the
caller knows: ``tests/api/test_client_list_symbols.py``.)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.entities.routers import EdgeRouter
from tests.api.certs import csr_pem, unique
from tests.api.conftest import shared_admin_api
from tests.api.policy_helpers import put
from tests.api.session_helpers import (
    client_get,
    client_post,
    edge_router,
    edge_router_policy,
    posture_check,
    service,
    service_edge_router_policy,
    service_policy,
    user,
    world,
)
from tests.conftest import CLIENT, MGMT, Api

api = shared_admin_api("filter-symbols")


def listed(api: Api, path: str, expression: str, *, token: str | None = None, base: str = MGMT) -> Any:
    result = api.get(path, token=token, base=base, params={"filter": expression, "limit": "-1"})
    assert result.status_code == 200, result.text
    return result.json


def ids(api: Api, path: str, expression: str, **kwargs: Any) -> set[str]:
    body = listed(api, path, expression, **kwargs)
    data = body["data"]
    rows = data["edgeRouters"] if isinstance(data, dict) else data
    return {row["id"] for row in rows}


def fields(api: Api, path: str, **kwargs: Any) -> list[str]:
    return list(listed(api, path, "true", **kwargs)["meta"]["filterableFields"])


# == isSystem and tags, on every entity list =======================================================
MANAGEMENT_LISTS = [
    "/identities",
    "/identity-types",
    "/services",
    "/edge-routers",
    "/routers",
    "/transit-routers",
    "/service-policies",
    "/edge-router-policies",
    "/service-edge-router-policies",
    "/posture-checks",
    "/posture-check-types",
    "/configs",
    "/config-types",
    "/cas",
    "/auth-policies",
    "/external-jwt-signers",
    "/terminators",
    "/api-sessions",
    "/sessions",
    "/enrollments",
    "/authenticators",
    "/controllers",
]


@pytest.mark.parametrize("path", MANAGEMENT_LISTS)
def test_every_entity_list_lists_is_system_and_tags(api: Api, path: str) -> None:
    listed_fields = fields(api, path)

    assert {"isSystem", "tags"} <= set(listed_fields)
    assert listed_fields == sorted(listed_fields)


@pytest.mark.parametrize("path", [p for p in MANAGEMENT_LISTS if p != "/edge-router-policies"])
def test_is_system_is_false_for_a_kind_without_system_entities(api: Api, path: str) -> None:
    every = listed(api, path, "true")["meta"]["pagination"]["totalCount"]

    system = listed(api, path, "isSystem = true")["meta"]["pagination"]["totalCount"]
    others = listed(api, path, "isSystem = false")["meta"]["pagination"]["totalCount"]

    assert (system, others) == (0, every)


def test_is_system_tells_system_edge_router_policies_apart(api: Api) -> None:
    api.create("/edge-routers", {"name": unique("er"), "isTunnelerEnabled": True})  # has a system policy
    mine = edge_router_policy(api, ["#x"], ["#y"])

    system = ids(api, "/edge-router-policies", "isSystem = true")
    others = ids(api, "/edge-router-policies", "isSystem = false")

    assert system
    assert mine not in system
    assert mine in others
    assert not system & others


def test_tags_is_listed_but_only_a_tags_key_filters(api: Api) -> None:
    tagged = api.create(
        "/services", {"name": unique("svc"), "encryptionRequired": True, "tags": {"env": "prod"}}
    )

    by_key = ids(api, "/services", 'tags.env = "prod"')
    bare = api.get("/services", params={"filter": 'tags = "prod"'})

    assert tagged in by_key
    assert bare.status_code == 400
    assert bare.json["error"]["code"] == "INVALID_FILTER"


# == edge routers: connected and online ============================================================
@dataclasses.dataclass
class Routers:
    person: Any
    service: str
    online: str
    offline: str
    erp: str
    serp: str


@pytest.fixture(scope="module")
def routers(api: Api) -> Routers:
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    online = edge_router(api, role)
    offline = edge_router(api, role, online=False)
    # an offline router an identity may use must be verified to be listed to it
    router = api.app.ctrl.env.store.get(EdgeRouter, offline)
    put(api.app, dataclasses.replace(router, is_verified=True))
    service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    erp = edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    serp = service_edge_router_policy(api, [f"#{role}"], [f"#{role}"])
    return Routers(person, svc, online, offline, erp, serp)


def router_lists(r: Routers) -> list[str]:
    return [
        "/edge-routers",
        f"/identities/{r.person.id}/edge-routers",
        f"/services/{r.service}/edge-routers",
        f"/edge-router-policies/{r.erp}/edge-routers",
        f"/service-edge-router-policies/{r.serp}/edge-routers",
    ]


@pytest.mark.parametrize("symbol", ["connected", "online", "isOnline"])
@pytest.mark.parametrize("which", range(5), ids=["all", "identity", "service", "erp", "serp"])
def test_edge_router_lists_filter_on_connected_and_online(
    api: Api, routers: Routers, symbol: str, which: int
) -> None:
    path = router_lists(routers)[which]
    pair = f'id in ["{routers.online}", "{routers.offline}"]'

    up = ids(api, path, f"{symbol} = true and {pair}")
    down = ids(api, path, f"{symbol} = false and {pair}")

    assert (up, down) == ({routers.online}, {routers.offline})
    assert symbol in fields(api, path)


@pytest.mark.parametrize("symbol", ["connected", "online"])
def test_own_edge_routers_filter_on_connected_and_online(api: Api, routers: Routers, symbol: str) -> None:
    token = routers.person.token

    up = ids(api, "/current-identity/edge-routers", f"{symbol} = true", token=token, base=CLIENT)
    down = ids(api, "/current-identity/edge-routers", f"not {symbol}", token=token, base=CLIENT)

    assert (up, down) == ({routers.online}, {routers.offline})
    assert symbol in fields(api, "/current-identity/edge-routers", token=token, base=CLIENT)


# == service policies: identities and services =====================================================
def test_service_policies_filter_on_the_identities_and_services_they_select(api: Api) -> None:
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    other_svc = service(api)
    policy = service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    by_id = service_policy(api, "Bind", [f"@{person.id}"], [f"@{other_svc}"])

    assert ids(api, "/service-policies", f'anyOf(identities) = "{person.id}"') == {policy, by_id}
    assert ids(api, "/service-policies", f'anyOf(services) = "{svc}"') >= {policy}
    assert by_id not in ids(api, "/service-policies", f'anyOf(services) = "{svc}"')
    assert ids(api, "/service-policies", f'anyOf(services) in ["{other_svc}", "none"]') >= {by_id}
    pair = f'id in ["{policy}", "{by_id}"]'
    assert ids(api, "/service-policies", f"count(identities) = 1 and count(services) = 1 and {pair}") == {
        policy,
        by_id,
    }
    assert ids(api, "/service-policies", f'anyOf(identities) = "{unique("nobody")}"') == set()
    assert {"identities", "services"} <= set(fields(api, "/service-policies"))


def test_service_policy_members_follow_role_attribute_changes(api: Api) -> None:
    role = unique("r")
    person = user(api)
    policy = service_policy(api, "Dial", [f"#{role}"], ["#all"])
    selects = f'anyOf(identities) = "{person.id}"'
    before = ids(api, "/service-policies", selects)

    api.patch(f"/identities/{person.id}", json={"roleAttributes": [role]})

    assert policy not in before
    assert policy in ids(api, "/service-policies", selects)
    assert ids(api, "/service-policies", f'isEmpty(services) and id = "{policy}"') == set()


def test_service_policies_filter_on_their_members_fields(api: Api) -> None:
    role = unique("r")
    person = user(api, role)
    svc = service(api, role)
    policy = service_policy(api, "Dial", [f"#{role}"], [f"#{role}"])
    svc_name = api.get(f"/services/{svc}").json["data"]["name"]
    mine = f'id = "{policy}"'

    assert ids(api, "/service-policies", f'not isEmpty(from identities where name = "{person.name}")') == {
        policy
    }
    assert ids(
        api, "/service-policies", f'count(from services where name = "{svc_name}") = 1 and {mine}'
    ) == {policy}
    assert ids(api, "/service-policies", f"isEmpty(from identities where isAdmin = true) and {mine}") == {
        policy
    }
    assert (
        ids(api, "/service-policies", f'isEmpty(from services where name = "{svc_name}") and {mine}') == set()
    )


def test_service_policy_member_sets_are_no_sort_fields(api: Api) -> None:
    result = api.get("/service-policies", params={"sort": "identities asc"})

    assert result.status_code == 400
    assert result.json["error"]["code"] == "INVALID_SORT_IDENTIFIER"


# == posture checks: promptOnUnlock and promptOnWake ===============================================
def test_posture_checks_filter_on_the_mfa_prompts(api: Api) -> None:
    role = unique("r")
    mfa = posture_check(api, "MFA", role, promptOnUnlock=True, promptOnWake=False, timeoutSeconds=60)
    domain = posture_check(api, "DOMAIN", role, domains=["example.com"])
    mine = f'anyOf(roleAttributes) = "{role}"'

    assert ids(api, "/posture-checks", f"promptOnUnlock = true and {mine}") == {mfa}
    assert ids(api, "/posture-checks", f"promptOnWake = false and {mine}") == {mfa}
    assert ids(api, "/posture-checks", f"promptOnWake = true and {mine}") == set()
    # OpenZiti keeps them on MFA checks only: the others have none
    assert ids(api, "/posture-checks", f"promptOnUnlock = null and promptOnWake = null and {mine}") == {
        domain
    }
    assert {"promptOnUnlock", "promptOnWake"} <= set(fields(api, "/posture-checks"))


# == auth policies =================================================================================
POLICY = {
    "primary": {
        "cert": {"allowed": False, "allowExpiredCerts": False},
        "extJwt": {"allowed": False, "allowedSigners": []},
        "updb": {
            "allowed": False,
            "minPasswordLength": 11,
            "requireSpecialChar": True,
            "requireNumberChar": True,
            "requireMixedCase": True,
            "maxAttempts": 4,
            "lockoutDurationMinutes": 10,
        },
    },
    "secondary": {"requireTotp": True, "requireExtJwtSigner": None},
}


@pytest.mark.parametrize(
    ("symbol", "mine", "default"),
    [
        ("primary.cert.allowed", "false", "true"),
        ("primary.cert.allowExpiredCerts", "false", "true"),
        ("primary.extJwt.allowed", "false", "true"),
        ("primary.updb.allowed", "false", "true"),
        ("primary.updb.maxAttempts", "4", "0"),
        ("primary.updb.minPasswordLength", "11", "5"),
        ("primary.updb.requireMixedCase", "true", "false"),
        ("primary.updb.requireNumberChar", "true", "false"),
        ("primary.updb.requireSpecialChar", "true", "false"),
        ("secondary.requireTotp", "true", "false"),
    ],
)
def test_auth_policies_filter_on_their_primary_and_secondary_fields(
    api: Api, symbol: str, mine: str, default: str
) -> None:
    policy = api.create("/auth-policies", {"name": unique("ap"), **POLICY})
    both = f'id in ["{policy}", "default"]'

    assert ids(api, "/auth-policies", f"{symbol} = {mine} and {both}") == {policy}
    assert ids(api, "/auth-policies", f"{symbol} = {default} and {both}") == {"default"}
    assert symbol in fields(api, "/auth-policies")


def test_auth_policies_filter_on_the_required_signer(api: Api) -> None:
    signer = api.create(
        "/external-jwt-signers",
        {
            "name": unique("idp"),
            "issuer": f"https://{unique('idp')}.example.com",
            "audience": "ziti",
            "enabled": True,
            "jwksEndpoint": "https://idp.example.com/jwks",
        },
    )
    body = {**POLICY, "secondary": {"requireTotp": False, "requireExtJwtSigner": signer}}
    policy = api.create("/auth-policies", {"name": unique("ap"), **body})
    both = f'id in ["{policy}", "default"]'

    assert ids(api, "/auth-policies", f'secondary.requireExtJwtSigner = "{signer}" and {both}') == {policy}
    assert ids(api, "/auth-policies", f"secondary.requireExtJwtSigner = null and {both}") == {"default"}
    assert "secondary.requireExtJwtSigner" in fields(api, "/auth-policies")


# == external JWT signers: scopes ==================================================================
@pytest.mark.parametrize("base", [MGMT, CLIENT])
def test_external_jwt_signers_filter_on_their_scopes(api: Api, base: str) -> None:
    name = unique("idp")
    signer = api.create(
        "/external-jwt-signers",
        {
            "name": name,
            "issuer": f"https://{name}.example.com",
            "audience": "ziti",
            "enabled": True,
            "jwksEndpoint": "https://idp.example.com/jwks",
            "externalAuthUrl": "https://idp.example.com/auth",
            "clientId": "ziti-client",
            "scopes": ["openid", name],
        },
    )
    token = user(api).token if base == CLIENT else None

    assert ids(api, "/external-jwt-signers", f'anyOf(scopes) = "{name}"', token=token, base=base) == {signer}
    assert ids(api, "/external-jwt-signers", f'anyOf(scopes) = "{name}x"', token=token, base=base) == set()
    assert "scopes" in fields(api, "/external-jwt-signers", token=token, base=base)


# == terminators: sourceCtrl =======================================================================
def test_terminators_filter_on_the_controller_that_made_them(api: Api) -> None:
    w = world(api)
    controller = api.get("/controllers").json["data"][0]["id"]
    made = api.create(
        "/terminators",
        {"service": w.service, "router": w.router, "binding": "transport", "address": "tcp:x:1"},
    )
    hosted = api.app.ctrl.managers.terminators.create(
        {
            "service_id": w.service,
            "router_id": w.router,
            "binding": "edge",
            "address": "hosted",
            "identity": w.user.id,
            "host_id": "a-session",
        }
    ).id
    of_service = f'service = "{w.service}"'

    for path in ("/terminators", f"/services/{w.service}/terminators"):
        assert ids(api, path, f'sourceCtrl = "" and {of_service}') == {made}
        assert ids(api, path, f'sourceCtrl = "{controller}" and {of_service}') == {hosted}
        assert "sourceCtrl" in fields(api, path)
    client = f"/services/{w.service}/terminators"
    assert ids(api, client, f'sourceCtrl = "{controller}"', token=w.user.token, base=CLIENT) == {hosted}
    assert ids(api, client, 'sourceCtrl = ""', token=w.user.token, base=CLIENT) == {made}


# == API sessions: authenticator and lastActivityAt ================================================
def test_api_sessions_filter_on_their_authenticator_and_last_activity(api: Api) -> None:
    person = user(api)
    session = client_get(api, "/current-api-session", person.token).json["data"]
    authenticator = session["authenticatorId"]
    last = session["lastActivityAt"]

    assert ids(api, "/api-sessions", f'authenticator = "{authenticator}"') == {session["id"]}
    assert ids(api, "/api-sessions", f'authenticator = "{unique("none")}"') == set()
    after = f'lastActivityAt >= datetime({last}) and identity = "{person.id}"'
    assert ids(api, "/api-sessions", after) == {session["id"]}
    assert (
        ids(
            api,
            "/api-sessions",
            f'lastActivityAt < datetime(2000-01-01T00:00:00Z) and identity = "{person.id}"',
        )
        == set()
    )
    assert {"authenticator", "lastActivityAt"} <= set(fields(api, "/api-sessions"))
    assert "token" not in fields(api, "/api-sessions")


# == enrollments: edgeRouter and transitRouter =====================================================
def test_enrollments_of_identities_name_no_router(api: Api) -> None:
    identity = api.create(
        "/identities",
        {"name": unique("dev"), "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
    )
    router = edge_router(api, online=False)
    of_identity = f'identity = "{identity}"'

    for symbol in ("edgeRouter", "transitRouter"):
        assert len(ids(api, "/enrollments", f"{symbol} = null and {of_identity}")) == 1
        assert ids(api, "/enrollments", f'{symbol} = "{router}"') == set()
        assert symbol in fields(api, "/enrollments")


# == controllers: certPem ==========================================================================
@pytest.mark.parametrize("base", [MGMT, CLIENT])
def test_controllers_filter_on_their_certificate(api: Api, base: str) -> None:
    token = user(api).token if base == CLIENT else None
    [controller] = listed(api, "/controllers", "true", token=token, base=base)["data"]

    assert controller["certPem"]
    assert ids(api, "/controllers", 'certPem contains "BEGIN CERTIFICATE"', token=token, base=base) == {
        controller["id"]
    }
    assert ids(api, "/controllers", 'certPem = "not a certificate"', token=token, base=base) == set()
    assert "certPem" in fields(api, "/controllers", token=token, base=base)


# == the current API session's certificates: apiSession ============================================
def test_session_certificates_filter_on_their_api_session(api: Api) -> None:
    person = user(api)
    created = client_post(api, "/current-api-session/certificates", person.token, json={"csr": csr_pem()})
    assert created.status_code == 201, created.text
    own = client_get(api, "/current-api-session", person.token).json["data"]["id"]
    path = "/current-api-session/certificates"

    assert ids(api, path, f'apiSession = "{own}"', token=person.token, base=CLIENT) == {
        created.json["data"]["id"]
    }
    assert ids(api, path, f'apiSession = "{unique("other")}"', token=person.token, base=CLIENT) == set()
    assert "apiSession" in fields(api, path, token=person.token, base=CLIENT)
