"""``POST /authenticate?method=cert``: our CA's and verified third-party CAs' client certificates.

The client chain arrives as the serving worker reports a TLS handshake (``tls(...)`` extras) or,
from a configured proxy address, in the ``X-Client-CertPem`` header. Every refusal of a
certificate is 401 ``INVALID_AUTH`` (OpenZiti's ``authenticator_mod_cert.go``).
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from tests.api.certs import (
    NetworkCert,
    ThirdPartyCa,
    csr_pem,
    enroll_ott,
    first_pem,
    split_pems,
    tls_chain,
    verified_ca,
)
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api, open_app

PROXY_HEADER = "X-Client-CertPem"


@pytest.fixture(scope="module")
def acme() -> ThirdPartyCa:
    return ThirdPartyCa("Acme Root CA")


def cert_login(api: Api, *chain: str, base: str = CLIENT, **kwargs: Any) -> Any:
    """``method=cert`` with ``chain`` (PEM, leaf first) as the TLS client chain; no session header."""
    extras = tls_chain(*chain) if chain else {}
    return api.client.simulate_post(
        base + "/authenticate", params={"method": "cert"}, json={}, extras=extras, **kwargs
    )


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def third_party_authenticator(api: Api, name: str, cert_pem: str) -> tuple[str, str]:
    """A new identity with a cert authenticator for ``cert_pem``: (identity id, authenticator id)."""
    identity_id = api.create("/identities", {"name": name, "type": "User", "isAdmin": False})
    body = {"identityId": identity_id, "method": "cert", "certPem": cert_pem}
    return identity_id, api.create("/authenticators", body)


def cert_authenticator_id(api: Api, identity_id: str) -> str:
    listed = api.get(
        "/authenticators", params={"filter": f'identityId = "{identity_id}" and method = "cert"'}
    )
    return str(listed.json["data"][0]["id"])


def with_policy(api: Api, identity_id: str, cert_rules: dict[str, Any]) -> None:
    policy = api.create(
        "/auth-policies", {"name": f"policy-{identity_id}", "primary": {"cert": cert_rules}, "secondary": {}}
    )
    assert api.patch(f"/identities/{identity_id}", json={"authPolicyId": policy}).status_code == 200


@pytest.fixture
def device(api: Api) -> NetworkCert:
    return enroll_ott(api, "device")


# -- our CA ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT, ""])
def test_network_cert_logs_in_on_every_base(api: Api, device: NetworkCert, base: str) -> None:
    result = cert_login(api, device.chain, base=base)
    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert result.headers["zt-session"] == data["token"]
    assert data["identityId"] == device.identity_id
    assert data["authenticatorId"] == cert_authenticator_id(api, device.identity_id)
    assert data["isCertExtendable"] is True
    assert "isCertExtendRequested" not in data
    assert "ziti-authenticator-extend-requested" not in result.headers
    me = api.get("/current-identity", token=data["token"], base=CLIENT)
    assert me.json["data"]["id"] == device.identity_id


def test_the_leaf_alone_is_enough(api: Api, device: NetworkCert) -> None:
    assert cert_login(api, device.leaf).status_code == 200


def test_no_certificate_is_invalid_auth(api: Api, device: NetworkCert) -> None:
    result = cert_login(api)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_unknown_cert_of_our_ca_is_invalid_auth(api: Api, device: NetworkCert, authority: Any) -> None:
    issued = authority.sign_csr(
        csr_pem(), profile="client", common_name="stranger", validity=timedelta(days=1), now=datetime.now(UTC)
    )
    result = cert_login(api, issued.chain_pem)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_an_untrusted_chain_is_invalid_auth_even_with_a_known_fingerprint(
    api: Api, device: NetworkCert, acme: ThirdPartyCa
) -> None:
    """A self-issued certificate registered as an authenticator proves nothing without a trusted CA."""
    rogue, _ = acme.issue("rogue")  # Acme is not a CA of this controller
    third_party_authenticator(api, "rogue", rogue)
    result = cert_login(api, rogue)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_a_password_body_does_not_matter_for_cert_login(api: Api, device: NetworkCert) -> None:
    result = api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "cert"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
    )
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_disabled_identity_is_refused(api: Api, device: NetworkCert) -> None:
    assert (
        api.post(f"/identities/{device.identity_id}/disable", json={"durationMinutes": 0}).status_code == 200
    )
    result = cert_login(api, device.chain)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert api.post(f"/identities/{device.identity_id}/enable").status_code == 200
    assert cert_login(api, device.chain).status_code == 200


def test_auth_policy_can_forbid_cert_login(api: Api, device: NetworkCert) -> None:
    with_policy(api, device.identity_id, {"allowed": False, "allowExpiredCerts": True})
    result = cert_login(api, device.chain)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def _expired_network_cert(api: Api, authority: Any) -> tuple[str, str]:
    """An identity with a cert authenticator for a certificate our CA issued that expired yesterday."""
    now = datetime.now(UTC)
    issued = authority.sign_csr(
        csr_pem(),
        profile="client",
        common_name="old",
        validity=timedelta(days=1),
        now=now - timedelta(days=3),
    )
    identity_id, _ = third_party_authenticator(api, "old-device", issued.pem)
    return identity_id, issued.chain_pem


def test_expired_cert_is_refused_unless_the_policy_allows_it(api: Api, authority: Any) -> None:
    identity_id, chain = _expired_network_cert(api, authority)
    with_policy(api, identity_id, {"allowed": True, "allowExpiredCerts": False})
    refused = cert_login(api, chain)
    assert refused.status_code == 401
    assert error(refused)["code"] == "INVALID_AUTH"

    policy = api.get(f"/identities/{identity_id}").json["data"]["authPolicyId"]
    assert (
        api.patch(
            f"/auth-policies/{policy}", json={"primary": {"cert": {"allowExpiredCerts": True}}}
        ).status_code
        == 200
    )
    allowed = cert_login(api, chain)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json["data"]["identityId"] == identity_id


def test_default_policy_allows_expired_certs(api: Api, authority: Any) -> None:
    """OpenZiti's default auth policy has ``primary.cert.allowExpiredCerts: true``."""
    _, chain = _expired_network_cert(api, authority)
    assert cert_login(api, chain).status_code == 200


# -- third-party CAs -------------------------------------------------------------------------------
def test_verified_auth_enabled_ca_cert_logs_in(api: Api, acme: ThirdPartyCa) -> None:
    verified_ca(api, acme)
    leaf, _ = acme.issue("partner-device")
    identity_id, authenticator_id = third_party_authenticator(api, "partner", leaf)
    assert api.get(f"/authenticators/{authenticator_id}").json["data"]["isIssuedByNetwork"] is False

    result = cert_login(api, leaf, base=MGMT)
    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["identityId"] == identity_id
    assert data["authenticatorId"] == authenticator_id
    assert data["isCertExtendable"] is False


def test_unverified_ca_cert_is_refused(api: Api, acme: ThirdPartyCa) -> None:
    api.create(
        "/cas",
        {
            "name": "pending",
            "certPem": acme.pem,
            "isAuthEnabled": True,
            "isAutoCaEnrollmentEnabled": False,
            "isOttCaEnrollmentEnabled": False,
            "identityRoles": [],
        },
    )
    leaf, _ = acme.issue("early-device")
    third_party_authenticator(api, "early", leaf)
    result = cert_login(api, leaf)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_auth_disabled_ca_cert_is_refused(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = verified_ca(api, acme, isAuthEnabled=False)
    leaf, _ = acme.issue("no-auth-device")
    third_party_authenticator(api, "no-auth", leaf)
    assert cert_login(api, leaf).status_code == 401
    assert api.patch(f"/cas/{ca_id}", json={"isAuthEnabled": True}).status_code == 200
    assert cert_login(api, leaf).status_code == 200
    assert api.patch(f"/cas/{ca_id}", json={"isAuthEnabled": False}).status_code == 200
    result = cert_login(api, leaf)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_deleting_the_ca_refuses_its_certs_at_once_and_removes_the_authenticator(
    api: Api, acme: ThirdPartyCa
) -> None:
    ca_id = verified_ca(api, acme)
    leaf, _ = acme.issue("doomed-device")
    _, authenticator_id = third_party_authenticator(api, "doomed", leaf)
    token = cert_login(api, leaf).json["data"]["token"]

    assert api.delete(f"/cas/{ca_id}").status_code == 200
    result = cert_login(api, leaf)
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 404
    assert api.get("/current-api-session", token=token, base=CLIENT).status_code == 401


def test_expired_third_party_cert_follows_the_policy(api: Api, acme: ThirdPartyCa) -> None:
    verified_ca(api, acme)
    now = datetime.now(UTC)
    leaf, _ = acme.issue("stale", not_before=now - timedelta(days=10), not_after=now - timedelta(days=1))
    identity_id, _ = third_party_authenticator(api, "stale", leaf)
    with_policy(api, identity_id, {"allowed": True, "allowExpiredCerts": False})
    assert cert_login(api, leaf).status_code == 401
    not_yet, _ = acme.issue("future", not_before=now + timedelta(days=1), not_after=now + timedelta(days=10))
    future_identity, _ = third_party_authenticator(api, "future", not_yet)
    with_policy(api, future_identity, {"allowed": True, "allowExpiredCerts": False})
    assert cert_login(api, not_yet).status_code == 401


def test_external_id_claim_names_the_identity_without_an_authenticator(api: Api, acme: ThirdPartyCa) -> None:
    claim = {
        "index": 0,
        "location": "SAN_URI",
        "matcher": "SCHEME",
        "matcherCriteria": "spiffe",
        "parser": "NONE",
        "parserCriteria": None,
    }
    verified_ca(api, acme, externalIdClaim=claim)
    identity_id = api.create(
        "/identities",
        {"name": "spiffe-device", "type": "User", "isAdmin": False, "externalId": "spiffe://acme/d1"},
    )
    leaf, _ = acme.issue("d1", uris=("spiffe://acme/d1",))
    result = cert_login(api, leaf)
    assert result.status_code == 200, result.text
    assert result.json["data"]["identityId"] == identity_id
    assert result.json["data"]["authenticatorId"] == "internal"
    unknown, _ = acme.issue("d2", uris=("spiffe://acme/d2",))
    assert cert_login(api, unknown).status_code == 401
    no_claim, _ = acme.issue("d3")
    assert cert_login(api, no_claim).status_code == 401


def test_deleting_the_ca_ends_sessions_opened_by_its_external_id_claim(api: Api) -> None:
    ca = ThirdPartyCa(name="claims-ca")
    claim = {
        "index": 0,
        "location": "COMMON_NAME",
        "matcher": "ALL",
        "matcherCriteria": "",
        "parser": "NONE",
        "parserCriteria": "",
    }
    ca_id = verified_ca(api, ca, name="claims-ca", externalIdClaim=claim)
    api.create("/identities", {"name": "by-claim", "type": "User", "isAdmin": False, "externalId": "claimed"})
    leaf, _ = ca.issue("claimed")
    token = cert_login(api, leaf).json["data"]["token"]
    assert api.get("/current-identity", token=token).status_code == 200

    assert api.delete(f"/cas/{ca_id}").status_code == 200

    assert api.get("/current-identity", token=token).status_code == 401
    assert cert_login(api, leaf).status_code == 401


# -- the proxy header ------------------------------------------------------------------------------
@pytest.fixture
def proxied(home: Path) -> Iterator[Api]:
    """An app that believes ``X-Client-CertPem`` from 127.0.0.1 (TestClient's address)."""
    application = open_app(Settings(home=home, cert_proxies=("127.0.0.1",)))
    create_default_admin(application.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    client = Api(application)
    client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
    yield client
    application.ctrl.env.store.close()


def b64_der(chain: str) -> str:
    return base64.b64encode(ssl.PEM_cert_to_DER_cert(first_pem(chain))).decode("ascii")


def header_login(api: Api, value: str, **kwargs: Any) -> Any:
    return api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, headers={PROXY_HEADER: value}, **kwargs
    )


def test_proxy_header_with_base64_der_is_accepted_from_a_trusted_proxy(proxied: Api) -> None:
    device = enroll_ott(proxied, "proxied-device")
    result = header_login(proxied, b64_der(device.chain))
    assert result.status_code == 200, result.text
    assert result.json["data"]["identityId"] == device.identity_id


def test_proxy_header_with_url_encoded_pem_is_accepted(proxied: Api) -> None:
    device = enroll_ott(proxied, "nginx-device")
    result = header_login(proxied, quote(device.chain, safe=""))
    assert result.status_code == 200, result.text
    assert result.json["data"]["identityId"] == device.identity_id


def test_proxy_header_with_concatenated_der_chain_is_accepted(proxied: Api) -> None:
    """OpenZiti parses the header with ``x509.ParseCertificates``: DER certificates back to back."""
    device = enroll_ott(proxied, "chained-device")
    der = b"".join(ssl.PEM_cert_to_DER_cert(block) for block in split_pems(device.chain))
    result = header_login(proxied, base64.b64encode(der).decode("ascii"))
    assert result.status_code == 200, result.text


def test_proxy_header_wins_over_the_tls_chain_from_a_trusted_proxy(proxied: Api) -> None:
    """Behind a proxy the TLS peer is the proxy; the header names the client."""
    device = enroll_ott(proxied, "behind-proxy")
    other = enroll_ott(proxied, "the-proxy")
    result = header_login(proxied, b64_der(device.chain), extras=tls_chain(other.chain))
    assert result.json["data"]["identityId"] == device.identity_id


def test_proxy_header_is_ignored_from_other_addresses(proxied: Api) -> None:
    device = enroll_ott(proxied, "spoofed")
    result = header_login(proxied, b64_der(device.chain), remote_addr="192.0.2.7")
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_proxy_header_is_ignored_without_configured_proxies(api: Api, device: NetworkCert) -> None:
    result = header_login(api, b64_der(device.chain))
    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    with_tls = header_login(api, "garbage!", extras=tls_chain(device.chain))
    assert with_tls.status_code == 200  # the handshake's chain is used, the header ignored


def test_cidr_proxies_are_matched(home: Path) -> None:
    application = open_app(Settings(home=home, cert_proxies=("10.0.0.0/8", "127.0.0.0/30")))
    try:
        create_default_admin(application.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        client = Api(application)
        client.token = client.login(ADMIN_USER, ADMIN_PASSWORD)
        device = enroll_ott(client, "cidr-device")
        assert header_login(client, b64_der(device.chain), remote_addr="10.1.2.3").status_code == 200
        assert header_login(client, b64_der(device.chain), remote_addr="127.0.0.2").status_code == 200
        assert header_login(client, b64_der(device.chain), remote_addr="127.0.0.9").status_code == 401
    finally:
        application.ctrl.env.store.close()


@pytest.mark.parametrize(
    "value",
    [
        "not base64 at all!",
        base64.b64encode(b"hello, not a certificate").decode("ascii"),
        quote("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", safe=""),
        "-----BEGIN CERTIFICATE-----",
        "%ZZ%",
    ],
)
def test_garbage_proxy_header_from_a_trusted_proxy_is_400(proxied: Api, value: str) -> None:
    result = header_login(proxied, value)
    assert result.status_code == 400, result.text
    assert error(result)["code"] == "INVALID_CLIENT_CERT"
