"""Regressions found by running schemathesis with OpenZiti's own client and management specs
against a real server: answers that were 5xx or missed fields the spec requires."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import rsa

from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.api.jwt_helpers import self_signed
from tests.api.session_helpers import client_get, user
from tests.conftest import CLIENT, Api

api = shared_admin_api("issue7-fuzz")


def test_current_identity_carries_edge_router_connection_status(api: Api) -> None:
    """``identityDetail`` requires ``edgeRouterConnectionStatus``; without a router connection it
    is "offline", in step with ``hasEdgeRouterConnection``."""
    person = user(api)

    data = client_get(api, "/current-identity", person.token).json["data"]

    assert data["edgeRouterConnectionStatus"] == "offline"
    assert data["hasEdgeRouterConnection"] is False


def test_management_identity_carries_edge_router_connection_status(api: Api) -> None:
    person = user(api)

    data = api.get(f"/identities/{person.id}").json["data"]

    assert data["edgeRouterConnectionStatus"] == "offline"


def test_identity_detail_carries_permissions(api: Api) -> None:
    """``identityDetail`` requires ``permissions`` (fine-grained admin permissions): none here."""
    person = user(api)

    current = client_get(api, "/current-identity", person.token).json["data"]
    managed = api.get(f"/identities/{person.id}").json["data"]

    assert current["permissions"] == []
    assert managed["permissions"] == []


def test_auth_policy_without_allowed_signers_renders_an_empty_list(api: Api) -> None:
    """The default policy stores no signer list; OpenZiti renders ``allowedSigners`` as [], never
    null (``authPolicyPrimaryExtJwt.allowedSigners`` is an array)."""
    listed = api.get("/auth-policies", params={"filter": 'id = "default"'}).json["data"]
    detail = api.get("/auth-policies/default").json["data"]

    assert detail["primary"]["extJwt"] == {"allowed": True, "allowedSigners": []}
    assert listed[0]["primary"]["extJwt"]["allowedSigners"] == []


def test_auth_policy_patched_to_null_signers_renders_an_empty_list(api: Api) -> None:
    created = api.post(
        "/auth-policies",
        json={
            "name": unique("ap"),
            "primary": {
                "cert": {"allowed": True, "allowExpiredCerts": True},
                "extJwt": {"allowed": True, "allowedSigners": []},
                "updb": {"allowed": True, "minPasswordLength": 5, "maxAttempts": 0},
            },
            "secondary": {"requireTotp": False},
        },
    )
    policy_id = created.json["data"]["id"]

    patched = api.patch(f"/auth-policies/{policy_id}", json={"primary": {"extJwt": {"allowedSigners": None}}})

    assert patched.status_code == 200
    assert api.get(f"/auth-policies/{policy_id}").json["data"]["primary"]["extJwt"]["allowedSigners"] == []


def _sendable(headers: dict[str, str]) -> bool:
    """PEP 3333: a WSGI server sends latin-1 text on one line (else the worker fails with a 500)."""
    for value in headers.values():
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            return False
        if "\r" in value or "\n" in value:
            return False
    return True


def test_challenge_naming_an_issuer_beyond_latin1_can_be_sent(api: Api) -> None:
    """An issuer with a character beyond latin-1 and a line break reaches the ``WWW-Authenticate``
    challenge of a failed ext-jwt login: it goes as UTF-8 bytes, the break as a blank (as Go's
    ``net/http`` writes it), not as a header the serving worker cannot encode."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer = f"https://{unique('idp')}.example.test/\U0003c88b\nx"
    api.create(
        "/external-jwt-signers",
        {
            "name": unique("signer"),
            "issuer": issuer,
            "audience": "aud",
            "enabled": True,
            "certPem": self_signed(key, "idp"),
            "kid": unique("kid"),
        },
    )

    result = api.client.simulate_post(CLIENT + "/authenticate", params={"method": "ext-jwt"}, json={})

    assert result.status_code == 401
    assert result.json["error"]["code"] == "INVALID_AUTH"
    assert _sendable(dict(result.headers))
    challenge = result.headers["www-authenticate"].encode("latin-1").decode("utf-8")
    assert issuer.replace("\n", " ") in challenge
