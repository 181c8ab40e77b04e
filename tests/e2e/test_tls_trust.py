"""The listener's TLS trust follows the CAs in the store, with no restart (tls-notes.md §4-§6).

A client certificate from a third-party CA is refused in the handshake until the CA is created,
verified and auth-enabled; then ``method=cert`` works over real mutual TLS; after the CA is deleted
new connections are refused again. TLS 1.2-only clients connect.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.api.certs import ThirdPartyCa, ca_body, csr_pem, key_pem, new_key
from tests.e2e.server import CLIENT, HOST, MGMT, SAN, Server, running

pytestmark = pytest.mark.e2e

#: What a refused handshake looks like to requests: TLS 1.2 fails in the handshake (SSLError); in
#: TLS 1.3 the client finishes first and meets the server's alert on its first read.
REFUSED = (requests.exceptions.SSLError, requests.exceptions.ConnectionError)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("tls-trust") / "home", env=SAN)


@pytest.fixture(scope="module")
def admin(server: Server) -> str:
    return server.login()


def write_pair(directory: Path, name: str, cert_pem: str, key: Any) -> tuple[str, str]:
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_text(cert_pem)
    key_file.write_text(key_pem(key))
    key_file.chmod(0o600)
    return str(cert_file), str(key_file)


def cert_login(server: Server, pair: tuple[str, str]) -> requests.Response:
    """``method=cert`` on a new connection (a fresh session: no kept-alive connection is reused)."""
    with server.session(cert=pair) as fresh:
        return fresh.post(
            f"{server.url}{CLIENT}/authenticate", params={"method": "cert"}, json={}, timeout=10
        )


def tls12_handshake_refused(server: Server, pair: tuple[str, str]) -> bool:
    """Whether a TLS 1.2 handshake presenting ``pair`` fails (in TLS 1.2 the server's verdict on the
    client certificate is part of the handshake, so no HTTP is involved)."""
    ctx = tls12_context(server, pair)
    with socket.create_connection((HOST, server.port), timeout=10) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=HOST):
                return False
        except (ssl.SSLError, ConnectionError):
            return True


def assert_refused(server: Server, pair: tuple[str, str]) -> None:
    """Refused in the TLS layer, while the server itself keeps answering."""
    with pytest.raises(REFUSED):
        cert_login(server, pair)
    assert tls12_handshake_refused(server, pair)
    assert server.call("GET", "/version").status_code == 200


def admin_call(
    server: Server, token: str, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> requests.Response:
    return server.call(method, MGMT + path, token, headers, **kwargs)


def verify_ca(server: Server, admin: str, ca_id: str, acme: ThirdPartyCa) -> requests.Response:
    """``POST /cas/{id}/verify`` with a certificate whose CN is the CA's verification token."""
    token = admin_call(server, admin, "GET", f"/cas/{ca_id}").json()["data"]["verificationToken"]
    return admin_call(
        server,
        admin,
        "POST",
        f"/cas/{ca_id}/verify",
        data=acme.verification_cert(token),
        headers={"content-type": "text/plain"},
    )


def test_third_party_ca_trust_follows_verify_and_delete(server: Server, admin: str, tmp_path: Path) -> None:
    acme = ThirdPartyCa("E2E Partner CA")
    leaf, key = acme.issue("partner-device")
    pair = write_pair(tmp_path, "partner", leaf, key)

    assert_refused(server, pair)

    created = admin_call(server, admin, "POST", "/cas", json=ca_body(acme, "partner"))
    assert created.status_code == 201, created.text
    ca_id = created.json()["data"]["id"]
    assert_refused(server, pair)  # created, not yet verified: still not trusted

    verified = verify_ca(server, admin, ca_id, acme)
    assert verified.status_code == 200, verified.text
    identity = admin_call(
        server, admin, "POST", "/identities", json={"name": "partner", "type": "User", "isAdmin": False}
    )
    identity_id = identity.json()["data"]["id"]
    authenticator = admin_call(
        server,
        admin,
        "POST",
        "/authenticators",
        json={"identityId": identity_id, "method": "cert", "certPem": leaf},
    )
    assert authenticator.status_code == 201, authenticator.text

    assert not tls12_handshake_refused(server, pair)  # no restart
    login = cert_login(server, pair)
    assert login.status_code == 200, login.text
    assert login.json()["data"]["identityId"] == identity_id
    assert login.headers["zt-session"] == login.json()["data"]["token"]

    assert admin_call(server, admin, "DELETE", f"/cas/{ca_id}").status_code == 200
    assert_refused(server, pair)


def test_auth_disabled_ca_is_not_trusted_in_the_handshake(server: Server, admin: str, tmp_path: Path) -> None:
    acme = ThirdPartyCa("E2E Disabled CA")
    leaf, key = acme.issue("quiet-device")
    pair = write_pair(tmp_path, "quiet", leaf, key)
    created = admin_call(server, admin, "POST", "/cas", json=ca_body(acme, "quiet", isAuthEnabled=False))
    ca_id = created.json()["data"]["id"]
    verify_ca(server, admin, ca_id, acme)
    assert_refused(server, pair)
    assert (
        admin_call(server, admin, "PATCH", f"/cas/{ca_id}", json={"isAuthEnabled": True}).status_code == 200
    )
    assert cert_login(server, pair).status_code == 401  # trusted now, but no authenticator: the app says no


def enroll_over_tls(server: Server, admin: str, name: str, tmp_path: Path) -> tuple[str, tuple[str, str]]:
    created = admin_call(
        server,
        admin,
        "POST",
        "/identities",
        json={"name": name, "type": "User", "isAdmin": False, "enrollment": {"ott": True}},
    )
    identity_id = created.json()["data"]["id"]
    ott = admin_call(server, admin, "GET", f"/identities/{identity_id}").json()["data"]["enrollment"]["ott"]
    key = new_key()
    enrolled = server.call(
        "POST", f"{CLIENT}/enroll/ott", json={"token": ott["token"], "clientCsr": csr_pem(key)}
    )
    assert enrolled.status_code == 200, enrolled.text
    return identity_id, write_pair(tmp_path, name, enrolled.json()["data"]["cert"], key)


def test_network_cert_logs_in_over_mutual_tls(server: Server, admin: str, tmp_path: Path) -> None:
    identity_id, pair = enroll_over_tls(server, admin, "e2e-device", tmp_path)
    login = cert_login(server, pair)
    assert login.status_code == 200, login.text
    assert login.json()["data"]["identityId"] == identity_id
    assert login.json()["data"]["isCertExtendable"] is True


def tls12_context(server: Server, pair: tuple[str, str] | None = None) -> ssl.SSLContext:
    return server.tls_context(pair, maximum_version=ssl.TLSVersion.TLSv1_2)


def tls12_request(
    server: Server, ctx: ssl.SSLContext, method: str, path: str, body: Any = None
) -> tuple[int, Any, str]:
    """One request over a TLS 1.2 connection: (status, JSON body, negotiated version)."""
    conn = http.client.HTTPSConnection(HOST, server.port, context=ctx, timeout=10)
    try:
        payload = None if body is None else json.dumps(body)
        headers = {} if body is None else {"content-type": "application/json"}
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        version = conn.sock.version() if conn.sock is not None else ""
        return response.status, json.loads(response.read() or b"null"), str(version)
    finally:
        conn.close()


def test_tls12_only_clients_connect_with_and_without_a_certificate(
    server: Server, admin: str, tmp_path: Path
) -> None:
    status, body, version = tls12_request(server, tls12_context(server), "GET", "/version")
    assert (status, version) == (200, "TLSv1.2")
    assert body["data"]["apiVersions"]

    identity_id, pair = enroll_over_tls(server, admin, "tls12-device", tmp_path)
    status, body, version = tls12_request(
        server, tls12_context(server, pair), "POST", f"{CLIENT}/authenticate?method=cert", {}
    )
    assert (status, version) == (200, "TLSv1.2")
    assert body["data"]["identityId"] == identity_id

    stranger, key = ThirdPartyCa("E2E Stranger CA").issue("stranger")
    refused = tls12_context(server, write_pair(tmp_path, "stranger", stranger, key))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls12_request(server, refused, "GET", "/version")


def test_certificate_extension_over_mutual_tls(server: Server, admin: str, tmp_path: Path) -> None:
    """``extend`` reads the client certificate of the real handshake."""
    _, pair = enroll_over_tls(server, admin, "rolling-device", tmp_path)
    with server.session(cert=pair) as device:
        login = device.post(
            f"{server.url}{CLIENT}/authenticate", params={"method": "cert"}, json={}, timeout=10
        )
        device.headers["zt-session"] = login.json()["data"]["token"]
        authenticator_id = device.get(
            f"{server.url}{CLIENT}/current-identity/authenticators", timeout=10
        ).json()["data"][0]["id"]
        key = new_key()
        base = f"{server.url}{CLIENT}/current-identity/authenticators/{authenticator_id}"
        extended = device.post(f"{base}/extend", json={"clientCertCsr": csr_pem(key)}, timeout=10)
        assert extended.status_code == 200, extended.text
        new_chain = extended.json()["data"]["clientCert"]
        verified = device.post(f"{base}/extend-verify", json={"clientCert": new_chain}, timeout=10)
        assert verified.status_code == 200, verified.text
    assert cert_login(server, write_pair(tmp_path, "rolled", new_chain, key)).status_code == 200
    assert cert_login(server, pair).status_code == 401
