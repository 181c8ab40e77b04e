"""Client certificates over real mutual TLS: asked for, never judged in the handshake (docs/architecture.md).

As OpenZiti's controller (Go's ``tls.RequestClientCert``), the listener lets a client certificate
of any issuer through the handshake and the application refuses an untrusted one with an HTTP
answer in OpenZiti's error envelope: 401 ``INVALID_AUTH`` for ``method=cert`` (unknown CA,
unverified CA, deleted CA -- on a kept-alive connection and a new one --, self-signed, forged
issuer), 401 ``UNAUTHORIZED`` for certificate and router extension, 400
``CERT_FAILED_VALIDATION`` / ``CERTIFICATE_FAILED_VALIDATION`` for CA and OTT-CA enrollment.
Trusted certificates log in, extend and enroll; TLS 1.2-only clients connect. A client that
presents a certificate still proves it holds its key (the TLS CertificateVerify), so every path
checks the chain's signatures: certificates that only copy a trusted issuer's name are refused.
"""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.api.certs import Key, ThirdPartyCa, ca_body, csr_pem, key_pem, new_key, pem, san_csr_pem
from tests.e2e.server import CLIENT, HOST, MGMT, SAN, Server, running

pytestmark = pytest.mark.e2e

JSON_HEADERS = {"content-type": "application/json", "accept": "application/json"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from running(tmp_path_factory.mktemp("tls-trust") / "home", env=SAN)


@pytest.fixture(scope="module")
def admin(server: Server) -> str:
    return server.login()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls-trust-certs")


# -- helpers -------------------------------------------------------------------------------------


def write_pair(directory: Path, name: str, cert_pem: str, key: Key) -> tuple[str, str]:
    cert_file, key_file = directory / f"{name}.pem", directory / f"{name}.key"
    cert_file.write_text(cert_pem)
    key_file.write_text(key_pem(key))
    key_file.chmod(0o600)
    return str(cert_file), str(key_file)


@dataclass
class Answer:
    status: int
    body: Any
    tls_version: str


class Connection:
    """One HTTP/1.1 connection over TLS, presenting ``pair`` (if given); kept alive between calls."""

    def __init__(self, server: Server, pair: tuple[str, str] | None, *, tls12: bool = False) -> None:
        ctx = server.tls_context(pair, maximum_version=ssl.TLSVersion.TLSv1_2 if tls12 else None)
        self.conn = http.client.HTTPSConnection(HOST, server.port, context=ctx, timeout=10)

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> Answer:
        headers = dict(JSON_HEADERS)
        if token:
            headers["zt-session"] = token
        payload = None if body is None else json.dumps(body)
        self.conn.request(method, path, body=payload, headers=headers)
        response = self.conn.getresponse()
        data = response.read()
        version = self.conn.sock.version() if self.conn.sock is not None else ""
        return Answer(response.status, json.loads(data) if data else None, str(version))

    @property
    def socket(self) -> object:
        return self.conn.sock

    def close(self) -> None:
        self.conn.close()


def once(
    server: Server,
    pair: tuple[str, str] | None,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = None,
    tls12: bool = False,
) -> Answer:
    """One request on a new connection."""
    conn = Connection(server, pair, tls12=tls12)
    try:
        return conn.call(method, path, body, token)
    finally:
        conn.close()


def cert_login(server: Server, pair: tuple[str, str], *, tls12: bool = False) -> Answer:
    return once(server, pair, "POST", f"{CLIENT}/authenticate?method=cert", {}, tls12=tls12)


def assert_error(answer: Answer, status: int, code: str) -> None:
    """An HTTP answer (not a dropped connection) carrying OpenZiti's error envelope."""
    assert answer.status == status, answer.body
    assert answer.body["error"]["code"] == code, answer.body
    assert answer.body["error"]["message"]
    assert answer.body["error"]["requestId"]
    assert answer.body["meta"] == {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}


def assert_invalid_auth(server: Server, pair: tuple[str, str]) -> None:
    """``method=cert`` is a 401 ``INVALID_AUTH`` over TLS 1.3 and 1.2, and the same connection
    serves what needs no certificate."""
    for tls12 in (False, True):
        conn = Connection(server, pair, tls12=tls12)
        try:
            assert_error(conn.call("POST", f"{CLIENT}/authenticate?method=cert", {}), 401, "INVALID_AUTH")
            assert conn.call("GET", "/version").status == 200
        finally:
            conn.close()


def admin_call(
    server: Server, token: str, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> requests.Response:
    return server.call(method, MGMT + path, token, headers, **kwargs)


def verify_ca(server: Server, admin: str, ca_id: str, ca: ThirdPartyCa) -> None:
    """``POST /cas/{id}/verify`` with a certificate whose CN is the CA's verification token."""
    token = admin_call(server, admin, "GET", f"/cas/{ca_id}").json()["data"]["verificationToken"]
    verified = admin_call(
        server,
        admin,
        "POST",
        f"/cas/{ca_id}/verify",
        data=ca.verification_cert(token),
        headers={"content-type": "text/plain"},
    )
    assert verified.status_code == 200, verified.text


def create_ca(server: Server, admin: str, ca: ThirdPartyCa, name: str, **flags: Any) -> str:
    created = admin_call(server, admin, "POST", "/cas", json=ca_body(ca, name, **flags))
    assert created.status_code == 201, created.text
    return str(created.json()["data"]["id"])


def verified_ca(server: Server, admin: str, ca: ThirdPartyCa, name: str, **flags: Any) -> str:
    ca_id = create_ca(server, admin, ca, name, **flags)
    verify_ca(server, admin, ca_id, ca)
    return ca_id


def create(server: Server, admin: str, path: str, body: dict[str, Any]) -> str:
    created = admin_call(server, admin, "POST", path, json=body)
    assert created.status_code == 201, created.text
    return str(created.json()["data"]["id"])


def new_identity(server: Server, admin: str, name: str, **fields: Any) -> str:
    return create(server, admin, "/identities", {"name": name, "type": "User", "isAdmin": False, **fields})


def cert_authenticator(server: Server, admin: str, identity_id: str, leaf: str) -> None:
    create(server, admin, "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": leaf})


def enroll_over_tls(server: Server, admin: str, name: str, directory: Path) -> tuple[str, tuple[str, str]]:
    """A new identity enrolled with ``ott``: (its id, its certificate chain and key as files)."""
    identity_id = new_identity(server, admin, name, enrollment={"ott": True})
    ott = admin_call(server, admin, "GET", f"/identities/{identity_id}").json()["data"]["enrollment"]["ott"]
    key = new_key()
    enrolled = server.call(
        "POST",
        f"{CLIENT}/enroll/ott",
        json={"token": ott["token"], "clientCsr": csr_pem(key)},
        headers={"accept": "application/json"},
    )
    assert enrolled.status_code == 200, enrolled.text
    return identity_id, write_pair(directory, name, enrolled.json()["data"]["cert"], key)


def leaf_signed_by(
    issuer_name: x509.Name, signer: Key, cn: str, *, is_ca: bool = False, key: Key | None = None
) -> tuple[str, Key]:
    """A certificate naming ``issuer_name`` as its issuer, signed by ``signer`` (any key)."""
    leaf_key = key if key is not None else new_key()
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(issuer_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if not is_ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return pem(builder.sign(signer, hashes.SHA256())), leaf_key


def self_signed(cn: str) -> tuple[str, Key]:
    key = new_key()
    return leaf_signed_by(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]), key, cn, key=key)


def issuer_of(chain_file: str) -> x509.Name:
    return x509.load_pem_x509_certificate(Path(chain_file).read_bytes()).issuer


# -- cert login ----------------------------------------------------------------------------------


def test_third_party_ca_unknown_unverified_trusted_then_deleted(
    server: Server, admin: str, files: Path
) -> None:
    acme = ThirdPartyCa("E2E Partner CA")
    leaf, key = acme.issue("partner-device")
    pair = write_pair(files, "partner", leaf, key)

    assert_invalid_auth(server, pair)  # a CA the controller has never heard of

    ca_id = create_ca(server, admin, acme, "partner")
    identity_id = new_identity(server, admin, "partner")
    assert_invalid_auth(server, pair)  # created, not yet verified: still not trusted

    verify_ca(server, admin, ca_id, acme)
    cert_authenticator(server, admin, identity_id, leaf)
    for tls12 in (False, True):  # no restart
        login = cert_login(server, pair, tls12=tls12)
        assert login.status == 200, login.body
        assert login.body["data"]["identityId"] == identity_id

    kept = Connection(server, pair)
    try:
        first = kept.call("POST", f"{CLIENT}/authenticate?method=cert", {})
        assert first.status == 200, first.body
        connection = kept.socket
        assert admin_call(server, admin, "DELETE", f"/cas/{ca_id}").status_code == 200
        again = kept.call("POST", f"{CLIENT}/authenticate?method=cert", {})
        assert kept.socket is connection  # the same kept-alive connection, trusted at its handshake
        assert_error(again, 401, "INVALID_AUTH")
    finally:
        kept.close()
    assert_invalid_auth(server, pair)  # and on new connections


def test_a_chain_through_an_intermediate_the_client_sends(server: Server, admin: str, files: Path) -> None:
    """The worker hands over the chain as sent: an intermediate the controller never stored."""
    root = ThirdPartyCa("E2E Root CA")
    intermediate_pem, intermediate_key = leaf_signed_by(
        root.cert.subject, root.key, "E2E Issuing CA", is_ca=True
    )
    intermediate = x509.load_pem_x509_certificate(intermediate_pem.encode())
    leaf, key = leaf_signed_by(intermediate.subject, intermediate_key, "branch-device")
    identity_id = new_identity(server, admin, "branch-device")
    verified_ca(server, admin, root, "e2e-root")
    cert_authenticator(server, admin, identity_id, leaf)

    login = cert_login(server, write_pair(files, "branch", leaf + intermediate_pem, key))
    assert login.status == 200, login.body
    assert login.body["data"]["identityId"] == identity_id
    assert_invalid_auth(server, write_pair(files, "branch-alone", leaf, key))  # the link is missing


def test_auth_disabled_ca_gets_401(server: Server, admin: str, files: Path) -> None:
    acme = ThirdPartyCa("E2E Disabled CA")
    leaf, key = acme.issue("quiet-device")
    pair = write_pair(files, "quiet", leaf, key)
    ca_id = verified_ca(server, admin, acme, "quiet", isAuthEnabled=False)
    cert_authenticator(server, admin, new_identity(server, admin, "quiet"), leaf)
    assert_invalid_auth(server, pair)
    patched = admin_call(server, admin, "PATCH", f"/cas/{ca_id}", json={"isAuthEnabled": True})
    assert patched.status_code == 200
    assert cert_login(server, pair).status == 200


def test_self_signed_certificate_gets_401(server: Server, files: Path) -> None:
    leaf, key = self_signed("lonely-device")
    assert_invalid_auth(server, write_pair(files, "self-signed", leaf, key))


def test_forged_issuers_get_401(server: Server, admin: str, files: Path) -> None:
    """Certificates that name a trusted issuer but were signed by another key."""
    _, genuine = enroll_over_tls(server, admin, "forgery-template", files)
    ours = issuer_of(genuine[0])  # our signing CA's name
    forged, key = leaf_signed_by(ours, new_key(), "forgery-template")
    assert_invalid_auth(server, write_pair(files, "forged-ours", forged, key))

    # A CA whose certificates name their identity (externalIdClaim): any certificate it signs logs in.
    claims = ThirdPartyCa("E2E Claims CA")
    claim = {
        "index": 0,
        "location": "COMMON_NAME",
        "matcher": "ALL",
        "matcherCriteria": "",
        "parser": "NONE",
        "parserCriteria": "",
    }
    verified_ca(server, admin, claims, "claims", externalIdClaim=claim)
    identity_id = new_identity(server, admin, "claimed", externalId="victim")
    real, real_key = claims.issue("victim")
    login = cert_login(server, write_pair(files, "victim", real, real_key))
    assert login.status == 200, login.body
    assert login.body["data"]["identityId"] == identity_id

    impostor = ThirdPartyCa("E2E Claims CA")  # the same name, another key
    assert impostor.cert.subject == claims.cert.subject
    fake, fake_key = impostor.issue("victim")
    assert_invalid_auth(server, write_pair(files, "fake-victim", fake, fake_key))
    # ... also when it sends its own look-alike CA certificate along
    assert_invalid_auth(server, write_pair(files, "fake-victim-chain", fake + impostor.pem, fake_key))
    # ... or a look-alike intermediate "issued" by the real CA
    fake_ca_pem, fake_ca_key = leaf_signed_by(
        claims.cert.subject, new_key(), "E2E Claims Issuing", is_ca=True
    )
    fake_ca = x509.load_pem_x509_certificate(fake_ca_pem.encode())
    via, via_key = leaf_signed_by(fake_ca.subject, fake_ca_key, "victim")
    assert_invalid_auth(server, write_pair(files, "fake-victim-via", via + fake_ca_pem, via_key))


def test_network_cert_logs_in_over_mutual_tls(server: Server, admin: str, files: Path) -> None:
    identity_id, pair = enroll_over_tls(server, admin, "e2e-device", files)
    login = cert_login(server, pair)
    assert login.status == 200, login.body
    assert login.body["data"]["identityId"] == identity_id
    assert login.body["data"]["isCertExtendable"] is True


def test_tls12_only_clients_connect_with_and_without_a_certificate(
    server: Server, admin: str, files: Path
) -> None:
    plain = once(server, None, "GET", "/version", tls12=True)
    assert (plain.status, plain.tls_version) == (200, "TLSv1.2")
    assert plain.body["data"]["apiVersions"]

    identity_id, pair = enroll_over_tls(server, admin, "tls12-device", files)
    login = cert_login(server, pair, tls12=True)
    assert (login.status, login.tls_version) == (200, "TLSv1.2")
    assert login.body["data"]["identityId"] == identity_id

    stranger, key = ThirdPartyCa("E2E Stranger CA").issue("stranger")
    refused = cert_login(server, write_pair(files, "stranger", stranger, key), tls12=True)
    assert refused.tls_version == "TLSv1.2"
    assert_error(refused, 401, "INVALID_AUTH")


# -- the other operations that need a certificate --------------------------------------------------


def test_certificate_extension_over_mutual_tls(server: Server, admin: str, files: Path) -> None:
    """``extend`` reads the client certificate of the real handshake; an untrusted one is a 401."""
    _, pair = enroll_over_tls(server, admin, "rolling-device", files)
    login = cert_login(server, pair)
    token = login.body["data"]["token"]
    listed = once(server, pair, "GET", f"{CLIENT}/current-identity/authenticators", token=token)
    base = f"{CLIENT}/current-identity/authenticators/{listed.body['data'][0]['id']}"
    body = {"clientCertCsr": csr_pem(new_key())}

    stranger, stranger_key = ThirdPartyCa("E2E Extend Stranger CA").issue("rolling-device")
    forged, forged_key = leaf_signed_by(issuer_of(pair[0]), new_key(), "rolling-device")
    for name, leaf, key in (("x-stranger", stranger, stranger_key), ("x-forged", forged, forged_key)):
        refused = once(
            server, write_pair(files, name, leaf, key), "POST", f"{base}/extend", body, token=token
        )
        assert_error(refused, 401, "UNAUTHORIZED")

    key = new_key()
    device = Connection(server, pair)
    try:
        extended = device.call("POST", f"{base}/extend", {"clientCertCsr": csr_pem(key)}, token)
        assert extended.status == 200, extended.body
        new_chain = extended.body["data"]["clientCert"]
        verified = device.call("POST", f"{base}/extend-verify", {"clientCert": new_chain}, token)
        assert verified.status == 200, verified.body
    finally:
        device.close()
    assert cert_login(server, write_pair(files, "rolled", new_chain, key)).status == 200
    assert_error(cert_login(server, pair), 401, "INVALID_AUTH")


def test_router_extension_needs_the_routers_certificate(server: Server, admin: str, files: Path) -> None:
    router_id = create(server, admin, "/edge-routers", {"name": "e2e-router"})
    token = admin_call(server, admin, "GET", f"/edge-routers/{router_id}").json()["data"]["enrollmentToken"]
    server_key, client_key = new_key(), new_key()

    def csrs() -> dict[str, str]:
        return {
            "serverCertCsr": san_csr_pem(server_key, router_id, dns=("localhost",), ips=("127.0.0.1",)),
            "certCsr": csr_pem(client_key, router_id),
        }

    enrolled = once(server, None, "POST", f"{CLIENT}/enroll?method=erott&token={token}", csrs())
    assert enrolled.status == 200, enrolled.body
    pair = write_pair(files, "router", enrolled.body["data"]["cert"], client_key)

    path = f"{CLIENT}/enroll/extend/router"
    stranger, stranger_key = ThirdPartyCa("E2E Router Stranger CA").issue(router_id)
    forged, forged_key = leaf_signed_by(issuer_of(pair[0]), new_key(), router_id, key=client_key)
    self_made, self_key = self_signed(router_id)
    for name, leaf, key in (("r-stranger", stranger, stranger_key), ("r-forged", forged, forged_key)):
        assert_error(
            once(server, write_pair(files, name, leaf, key), "POST", path, csrs()), 401, "UNAUTHORIZED"
        )
    assert_error(
        once(server, write_pair(files, "r-self", self_made, self_key), "POST", path, csrs()),
        401,
        "UNAUTHORIZED",
    )

    extended = once(server, pair, "POST", path, csrs())
    assert extended.status == 200, extended.body
    assert extended.body["data"]["cert"]
    assert extended.body["data"]["serverCert"]


def test_ca_enrollment_with_untrusted_certificates(server: Server, admin: str, files: Path) -> None:
    acme = ThirdPartyCa("E2E Auto CA")
    verified_ca(server, admin, acme, "auto", isAuthEnabled=False, isAutoCaEnrollmentEnabled=True)
    unverified = ThirdPartyCa("E2E Auto Unverified CA")
    create_ca(server, admin, unverified, "auto-unverified", isAutoCaEnrollmentEnabled=True)
    path = f"{CLIENT}/enroll/ca"

    def identities() -> set[str]:
        listed = admin_call(server, admin, "GET", "/identities", params={"limit": 500})
        return {i["id"] for i in listed.json()["data"]}

    before = identities()
    cases = {
        "ca-stranger": ThirdPartyCa("E2E Auto Stranger CA").issue("auto-1"),
        "ca-unverified": unverified.issue("auto-2"),
        "ca-forged": ThirdPartyCa("E2E Auto CA").issue("auto-3"),  # the same name, another key
        "ca-self": self_signed("auto-4"),
    }
    for name, (leaf, key) in cases.items():
        answer = once(server, write_pair(files, name, leaf, key), "POST", path, {"name": name})
        assert_error(answer, 400, "CERT_FAILED_VALIDATION")
    assert identities() == before

    leaf, key = acme.issue("auto-ok")
    enrolled = once(server, write_pair(files, "ca-ok", leaf, key), "POST", path, {"name": "auto-ok"})
    assert enrolled.status == 200, enrolled.body


def test_ottca_enrollment_with_untrusted_certificates(server: Server, admin: str, files: Path) -> None:
    acme = ThirdPartyCa("E2E OttCa CA")
    ca_id = verified_ca(server, admin, acme, "ottca", isOttCaEnrollmentEnabled=True)
    identity_id = new_identity(server, admin, "ottca-device", enrollment={"ottca": ca_id})
    detail = admin_call(server, admin, "GET", f"/identities/{identity_id}").json()["data"]
    token = detail["enrollment"]["ottca"]["token"]
    path = f"{CLIENT}/enroll/ottca"

    for name, (leaf, key) in {
        "ottca-stranger": ThirdPartyCa("E2E OttCa Stranger CA").issue("device"),
        "ottca-forged": ThirdPartyCa("E2E OttCa CA").issue("device"),
        "ottca-self": self_signed("device"),
    }.items():
        answer = once(server, write_pair(files, name, leaf, key), "POST", path, {"token": token})
        assert_error(answer, 400, "CERTIFICATE_FAILED_VALIDATION")

    leaf, key = acme.issue("device")
    enrolled = once(server, write_pair(files, "ottca-ok", leaf, key), "POST", path, {"token": token})
    assert enrolled.status == 200, enrolled.body
