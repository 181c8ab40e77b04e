"""A presented client certificate's purpose, on every operation.

The listener no longer judges client certificates in the handshake (``controller.tls``); the chain check
in ``pki`` decides, as OpenZiti's controller does: enrolment (``/enroll/ca``, ``/enroll/ottca``)
and certificate extension need a chain fit for TLS client authentication (a leaf, and CAs on its
path, whose extendedKeyUsage, where present, lists clientAuth or anyExtendedKeyUsage: OpenZiti's
``ExtKeyUsageClientAuth``), while ``method=cert`` login and a CA's proof take any purpose
(``ExtKeyUsageAny``). A leaf with a critical extension we do not handle is refused everywhere (Go's
``Verify``). A refused certificate gets the answer of any untrusted one: 401 ``INVALID_AUTH`` for
``method=cert``, 400 ``CERT_FAILED_VALIDATION`` for ``/enroll/ca``, 400
``CERTIFICATE_FAILED_VALIDATION`` for ``/enroll/ottca``, 401 ``UNAUTHORIZED`` for certificate and
router extension.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.entities.identities import Authenticator
from engine.entities.routers import EdgeRouter
from engine.ports import UnitOfWork
from tests.api.certs import (
    Key,
    ThirdPartyCa,
    csr_pem,
    new_key,
    pem,
    san_csr_pem,
    sha1_fingerprint,
    tls,
    unique,
    verified_ca,
)
from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, Api

CLIENT_AUTH = ExtendedKeyUsageOID.CLIENT_AUTH
SERVER_AUTH = ExtendedKeyUsageOID.SERVER_AUTH
#: A private-enterprise OID no verifier knows.
UNKNOWN = x509.ObjectIdentifier("1.3.6.1.4.1.55555.1.1")

api = shared_admin_api("client-cert-purpose")

Issuer = tuple[x509.Certificate, Key]


# -- certificates -----------------------------------------------------------------------------------
def certificate(
    cn: str,
    issuer: Issuer,
    *,
    usages: Sequence[x509.ObjectIdentifier] | None = (CLIENT_AUTH,),
    is_ca: bool = False,
    critical_unknown: bool = False,
    key: Key | None = None,
) -> tuple[x509.Certificate, Key]:
    """A certificate for ``cn`` signed by ``issuer``: extendedKeyUsage ``usages`` (none when None),
    a CA (with keyCertSign) when ``is_ca``, plus a critical unknown extension when asked."""
    subject_key = key if key is not None else new_key()
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(issuer[0].subject)
        .public_key(subject_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if is_ca:
        usage = x509.KeyUsage(True, False, False, False, False, True, True, False, False)
        builder = builder.add_extension(usage, critical=True)
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if critical_unknown:
        builder = builder.add_extension(x509.UnrecognizedExtension(UNKNOWN, b"\x05\x00"), critical=True)
    return builder.sign(issuer[1], hashes.SHA256()), subject_key


def third_party(ca: ThirdPartyCa) -> Issuer:
    return ca.cert, ca.key


@pytest.fixture(scope="module")
def ours(pki_template: Path) -> Issuer:
    """Our signing CA (the shared app's PKI is a copy of the session's)."""
    key = serialization.load_pem_private_key((pki_template / "intermediate-ca.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert = x509.load_pem_x509_certificate((pki_template / "intermediate-ca.pem").read_bytes())
    return cert, key


#: How a third-party chain can be unfit for client authentication: (chain builder's name, reason).
UNFIT = ["server-auth-leaf", "server-auth-intermediate", "critical-unknown-extension"]


def chain_of(kind: str, ca: ThirdPartyCa, cn: str) -> list[str]:
    """A chain (PEM, leaf first) of ``ca`` for ``cn``: ``fit`` (clientAuth through an intermediate
    without extendedKeyUsage) or one of :data:`UNFIT`."""
    intermediate_usages = (SERVER_AUTH,) if kind == "server-auth-intermediate" else None
    intermediate = certificate(f"{cn} issuing CA", third_party(ca), usages=intermediate_usages, is_ca=True)
    leaf, _ = certificate(
        cn,
        intermediate,
        usages=(SERVER_AUTH,) if kind == "server-auth-leaf" else (CLIENT_AUTH,),
        critical_unknown=kind == "critical-unknown-extension",
    )
    return [pem(leaf), pem(intermediate[0])]


# -- requests ---------------------------------------------------------------------------------------
def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def cert_login(api: Api, chain: Sequence[str]) -> falcon.testing.Result:
    return api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(*chain)
    )


def cert_authenticator(api: Api, name: str, leaf: str) -> tuple[str, str]:
    """A new identity (``name`` made unique) with a cert authenticator for ``leaf``: (identity, authenticator)."""
    identity_id = api.create("/identities", {"name": unique(name), "type": "User", "isAdmin": False})
    body = {"identityId": identity_id, "method": "cert", "certPem": leaf}
    return identity_id, api.create("/authenticators", body)


def put(api: Api, entity: Any) -> None:
    """Write ``entity`` straight to the store (a record the API would not make as it is)."""
    uow = UnitOfWork(api.ctrl.env.store)
    uow.put(entity)
    api.ctrl.env.commit(uow)


# -- login ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", UNFIT)
def test_login_takes_a_chain_for_any_purpose_but_not_an_unknown_critical_extension(
    api: Api, kind: str
) -> None:
    """OpenZiti's login verifies with ``ExtKeyUsageAny`` (``authenticator_mod_cert.go``): a
    certificate for another purpose logs in; Go's ``Verify`` always refuses an unhandled
    critical extension."""
    acme = ThirdPartyCa(unique("Acme Root CA"))
    verified_ca(api, acme, name=unique("acme"))
    fit, other = chain_of("fit", acme, "fit-device"), chain_of(kind, acme, "other-device")
    cert_authenticator(api, "fit", fit[0])
    cert_authenticator(api, "other", other[0])

    assert cert_login(api, fit).status_code == 200
    result = cert_login(api, other)

    if kind == "critical-unknown-extension":
        assert result.status_code == 401, result.text
        assert error(result)["code"] == "INVALID_AUTH"
    else:
        assert result.status_code == 200, result.text


@pytest.mark.parametrize(
    "usages",
    [
        (SERVER_AUTH,),
        (ExtendedKeyUsageOID.EMAIL_PROTECTION, SERVER_AUTH),
        (SERVER_AUTH, CLIENT_AUTH),
        (ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,),
        None,
    ],
    ids=["server-auth", "email-and-server", "server-and-client", "any", "no-eku"],
)
def test_login_with_a_certificate_of_our_ca_takes_any_extended_key_usage(
    api: Api, ours: Issuer, usages: tuple[x509.ObjectIdentifier, ...] | None
) -> None:
    leaf, _ = certificate("device", ours, usages=usages)
    cert_authenticator(api, "ours", pem(leaf))

    result = cert_login(api, [pem(leaf), pem(ours[0])])

    assert result.status_code == 200, result.text


def test_a_ca_whose_extended_key_usage_excludes_client_auth_is_verified_and_logs_in(api: Api) -> None:
    """The CA's proof of possession and its certificates' logins take any purpose (OpenZiti's
    ``VerifyCert`` and login verify with ``ExtKeyUsageAny``); its enrolments do not (below)."""
    server_only = ThirdPartyCa(unique("Server-only CA"))
    server_only.cert, _ = certificate(
        server_only.name, third_party(server_only), usages=(SERVER_AUTH,), is_ca=True, key=server_only.key
    )
    verified_ca(api, server_only, name=unique("server-only"))
    leaf, _ = certificate("device", third_party(server_only))
    cert_authenticator(api, "server-only", pem(leaf))

    result = cert_login(api, [pem(leaf)])

    assert result.status_code == 200, result.text


# -- CA auto-enrollment and OTT CA enrollment -------------------------------------------------------
@pytest.mark.parametrize("kind", UNFIT)
def test_ca_auto_enrollment_refuses_a_chain_unfit_for_client_auth(api: Api, kind: str) -> None:
    acme = ThirdPartyCa(unique("Acme Root CA"))
    verified_ca(api, acme, name=unique("acme"), isAutoCaEnrollmentEnabled=True)

    refused = api.client.simulate_post(
        CLIENT + "/enroll/ca", extras=tls(*chain_of(kind, acme, unique("unfit")))
    )
    enrolled = api.client.simulate_post(
        CLIENT + "/enroll/ca", extras=tls(*chain_of("fit", acme, unique("fit")))
    )

    assert refused.status_code == 400, refused.text
    assert error(refused)["code"] == "CERT_FAILED_VALIDATION"
    assert enrolled.status_code == 200, enrolled.text


@pytest.mark.parametrize("kind", UNFIT)
def test_ottca_enrollment_refuses_a_chain_unfit_for_client_auth(api: Api, kind: str) -> None:
    acme = ThirdPartyCa(unique("Acme Root CA"))
    ca_id = verified_ca(api, acme, name=unique("acme"), isOttCaEnrollmentEnabled=True)
    identity_id = api.create(
        "/identities",
        {"name": unique("device"), "type": "User", "isAdmin": False, "enrollment": {"ottca": ca_id}},
    )
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ottca"]["token"]

    def enroll(chain: list[str]) -> falcon.testing.Result:
        return api.client.simulate_post(CLIENT + "/enroll/ottca", json={"token": token}, extras=tls(*chain))

    refused = enroll(chain_of(kind, acme, "unfit"))
    enrolled = enroll(chain_of("fit", acme, "fit"))

    assert refused.status_code == 400, refused.text
    assert error(refused)["code"] == "CERTIFICATE_FAILED_VALIDATION"
    assert enrolled.status_code == 200, enrolled.text


# -- certificate and router extension ---------------------------------------------------------------
# Every certificate our CA issues lists clientAuth, so a cert authenticator or a router holding one
# without it is a record no current path makes (an older controller's, a hand-edited one): it is
# written straight to the store here, and the chain check is what keeps its certificate out.
def test_certificate_extension_refuses_a_certificate_of_ours_without_client_auth(
    api: Api, ours: Issuer
) -> None:
    username, password = unique("extender"), "Extender-password-1"
    identity_id = api.create("/identities", {"name": username, "type": "User", "isAdmin": False})
    body = {"identityId": identity_id, "method": "updb", "username": username, "password": password}
    api.create("/authenticators", body)
    session = api.login(username, password, base=CLIENT)
    leaf, _ = certificate("extender", ours, usages=(SERVER_AUTH,))
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": pem(leaf)}
    )
    record = api.ctrl.env.store.get(Authenticator, authenticator_id)
    assert record is not None
    put(api, dataclasses.replace(record, is_issued_by_network=True))

    result = api.post(
        f"/current-identity/authenticators/{authenticator_id}/extend",
        token=session,
        base=CLIENT,
        json={"clientCertCsr": csr_pem()},
        extras=tls(pem(leaf), pem(ours[0])),
    )

    assert result.status_code == 401, result.text
    assert error(result)["code"] == "UNAUTHORIZED"


def test_router_extension_refuses_a_certificate_of_ours_without_client_auth(api: Api, ours: Issuer) -> None:
    keys = new_key(), new_key()
    router_id = api.create("/edge-routers", {"name": unique("er")})
    token = api.get(f"/edge-routers/{router_id}").json["data"]["enrollmentToken"]
    csrs = {
        "serverCertCsr": san_csr_pem(keys[0], router_id, dns=("er.example.com",)),
        "certCsr": csr_pem(keys[1]),
    }
    enrolled = api.client.simulate_post(
        CLIENT + "/enroll", params={"method": "erott", "token": token}, json=csrs
    )
    assert enrolled.status_code == 200, enrolled.text
    leaf, _ = certificate(router_id, ours, usages=(SERVER_AUTH,))
    router = api.ctrl.env.store.get(EdgeRouter, router_id)
    assert router is not None
    put(api, dataclasses.replace(router, fingerprint=sha1_fingerprint(pem(leaf))))

    result = api.client.simulate_post(
        CLIENT + "/enroll/extend/router", json=csrs, extras=tls(pem(leaf), pem(ours[0]))
    )

    assert result.status_code == 401, result.text
    assert error(result)["code"] == "UNAUTHORIZED"
