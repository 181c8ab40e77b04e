"""Router enrollment: edge (``erott``) and transit (``trott``) routers, certificate extension
(``/enroll/extend/router``) and ``POST /edge-routers/{id}/re-enroll``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import falcon.testing
import jwt
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import (
    Key,
    ThirdPartyCa,
    csr_pem,
    enroll_ott,
    load_chain,
    new_key,
    san_csr_pem,
    sha1_fingerprint,
    split_chain,
    tls,
    unique,
)
from tests.api.conftest import shared_admin_api
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

SANS = {"dns": ("er1.example.com", "localhost"), "ips": ("10.0.0.7", "127.0.0.1")}
ALGORITHMS = ["RS256", "ES256", "ES384", "ES512"]


api = shared_admin_api("enroll-routers")


@pytest.fixture(scope="module")
def keys() -> tuple[Key, Key]:
    """A router's (server, client) keys, shared by the module's routers (each test has its own)."""
    return new_key(), new_key()


def new_router(
    api: Api, collection: str = "edge-routers", name: str = "er1", **extra: Any
) -> tuple[str, str]:
    """A new router (``name`` made unique): (id, enrollment token)."""
    router_id = api.create(f"/{collection}", {"name": unique(name), **extra})
    return router_id, str(api.get(f"/{collection}/{router_id}").json["data"]["enrollmentToken"])


def csrs(keys: tuple[Key, Key], router_id: str = "router") -> dict[str, str]:
    server_key, client_key = keys
    return {
        "serverCertCsr": san_csr_pem(server_key, router_id, **SANS),
        "certCsr": csr_pem(client_key, router_id),
    }


def enroll(
    api: Api, token: str | None, body: dict[str, Any], *, method: str | None = "erott"
) -> falcon.testing.Result:
    params = {k: v for k, v in (("method", method), ("token", token)) if v is not None}
    return api.client.simulate_post(CLIENT + "/enroll", params=params, json=body)


def extend(api: Api, chain: tuple[str, ...], body: dict[str, Any]) -> falcon.testing.Result:
    extras = tls(*chain) if chain else {}
    return api.client.simulate_post(CLIENT + "/enroll/extend/router", json=body, extras=extras)


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def cn_of(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def assert_router_certificates(api: Api, router_id: str, data: dict[str, Any]) -> None:
    """``cert`` (client) and ``serverCert`` are leaf + our intermediate for the router; ``ca`` our CAs."""
    intermediate = api.ctrl.pki.intermediate_cert
    client, server = load_chain(data["cert"]), load_chain(data["serverCert"])
    for chain in (client, server):
        assert chain[1:] == [intermediate]
        chain[0].verify_directly_issued_by(intermediate)
        assert cn_of(chain[0]) == router_id
    assert (
        ExtendedKeyUsageOID.CLIENT_AUTH
        in client[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    )
    server_eku = server[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in server_eku
    sans = server[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(SANS["dns"])
    assert sorted(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)) == sorted(SANS["ips"])
    assert set(load_chain(data["ca"])) == {api.ctrl.pki.root_cert, intermediate}


# -- edge routers -----------------------------------------------------------------------------------
def test_edge_router_exposes_its_enrollment_jwt(api: Api) -> None:
    router_id, token = new_router(api)

    data = api.get(f"/edge-routers/{router_id}").json["data"]

    claims = jwt.decode(data["enrollmentJwt"], options={"verify_signature": False})
    assert claims["em"] == "erott"
    assert claims["sub"] == router_id
    assert claims["jti"] == token == data["enrollmentToken"]
    verified = jwt.decode(
        data["enrollmentJwt"],
        api.ctrl.pki.server_cert.public_key(),
        algorithms=ALGORITHMS,
        options={"verify_aud": False},
    )
    assert verified == claims


@pytest.mark.parametrize("method", ["erott", None])
def test_edge_router_enrolls(api: Api, keys: tuple[Key, Key], method: str | None) -> None:
    router_id, token = new_router(api)

    result = enroll(api, token, csrs(keys, router_id), method=method)

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert set(data) == {"ca", "cert", "serverCert"}
    assert all(data.values())
    assert_router_certificates(api, router_id, data)
    router = api.get(f"/edge-routers/{router_id}").json["data"]
    assert router["isVerified"] is True
    assert router["fingerprint"] == sha1_fingerprint(data["cert"])
    for field in ("enrollmentJwt", "enrollmentToken", "enrollmentCreatedAt", "enrollmentExpiresAt"):
        assert field not in router, field  # null: left out, as Go's omitempty


def test_edge_router_typed_route(api: Api, keys: tuple[Key, Key]) -> None:
    router_id, token = new_router(api)
    body = csrs(keys, router_id)

    result = api.client.simulate_post(
        CLIENT + "/enroll/erott",
        json={"token": token, "serverCsr": body["serverCertCsr"], "clientCsr": body["certCsr"]},
    )

    assert result.status_code == 200, result.text
    assert_router_certificates(api, router_id, result.json["data"])
    assert api.get(f"/edge-routers/{router_id}").json["data"]["isVerified"] is True


def test_client_csr_under_its_genericenroll_name(api: Api, keys: tuple[Key, Key]) -> None:
    router_id, token = new_router(api)
    body = csrs(keys, router_id)

    result = enroll(api, token, {"serverCertCsr": body["serverCertCsr"], "clientCsr": body["certCsr"]})

    assert result.status_code == 200, result.text
    assert_router_certificates(api, router_id, result.json["data"])


# -- transit routers --------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["trott", None])
def test_transit_router_enrolls(api: Api, keys: tuple[Key, Key], method: str | None) -> None:
    router_id, token = new_router(api, "transit-routers", "tr1")
    claims = jwt.decode(
        api.get(f"/transit-routers/{router_id}").json["data"]["enrollmentJwt"],
        options={"verify_signature": False},
    )

    result = enroll(api, token, csrs(keys, router_id), method=method)

    assert (claims["em"], claims["sub"], claims["jti"]) == ("trott", router_id, token)
    assert result.status_code == 200, result.text
    assert_router_certificates(api, router_id, result.json["data"])
    router = api.get(f"/transit-routers/{router_id}").json["data"]
    assert router["isVerified"] is True
    assert router["fingerprint"] == sha1_fingerprint(result.json["data"]["cert"])
    assert "enrollmentToken" not in router


def test_router_token_with_the_other_routers_method(api: Api, keys: tuple[Key, Key]) -> None:
    _, edge = new_router(api)
    _, transit = new_router(api, "transit-routers", "tr1")

    for token, method in ((edge, "trott"), (transit, "erott"), (edge, "ott")):
        result = enroll(api, token, csrs(keys), method=method)
        assert result.status_code == 400, method
        assert error(result)["code"] == "INVALID_ENROLL_METHOD", method


# -- failures ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("missing", ["serverCertCsr", "certCsr"])
@pytest.mark.parametrize("how", ["absent", "empty", "blank"])
@pytest.mark.parametrize("method", ["erott", "trott"])
def test_missing_csr(api: Api, keys: tuple[Key, Key], method: str, how: str, missing: str) -> None:
    collection = "edge-routers" if method == "erott" else "transit-routers"
    router_id, token = new_router(api, collection)
    body: dict[str, Any] = csrs(keys, router_id)
    if how == "absent":
        del body[missing]
    else:
        body[missing] = "" if how == "empty" else "  \n"

    result = enroll(api, token, body, method=method)

    assert result.status_code == 400
    assert error(result)["code"] == "MISSING_OR_INVALID_CSR"
    assert error(result)["cause"]["field"] == missing
    assert api.get(f"/{collection}/{router_id}").json["data"]["enrollmentToken"] == token


@pytest.mark.parametrize("bad", ["serverCertCsr", "certCsr"])
def test_unusable_csr(api: Api, keys: tuple[Key, Key], bad: str) -> None:
    router_id, token = new_router(api)
    body = {
        **csrs(keys, router_id),
        bad: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----",
    }

    result = enroll(api, token, body)

    assert result.status_code == 400
    assert error(result)["code"] == "COULD_NOT_PROCESS_CSR"
    assert api.get(f"/edge-routers/{router_id}").json["data"]["isVerified"] is False


def test_legacy_pem_body_is_not_enough_for_a_router(api: Api, keys: tuple[Key, Key]) -> None:
    _, token = new_router(api)

    result = api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "erott", "token": token},
        headers={"Content-Type": "text/plain"},
        body=csr_pem(keys[1]),
    )

    assert result.status_code == 400
    assert error(result)["code"] == "MISSING_OR_INVALID_CSR"


@pytest.mark.parametrize("collection", ["edge-routers", "transit-routers"])
def test_token_works_once(api: Api, keys: tuple[Key, Key], collection: str) -> None:
    router_id, token = new_router(api, collection)
    assert enroll(api, token, csrs(keys, router_id), method=None).status_code == 200

    again = enroll(api, token, csrs(keys, router_id), method=None)
    typed = api.client.simulate_post(
        CLIENT + "/enroll/erott", json={"token": token, "serverCsr": "x", "clientCsr": "y"}
    )

    legacy = enroll(
        api, token, csrs(keys, router_id), method="erott" if collection == "edge-routers" else "trott"
    )

    # A router's used token stays 400 (the seed lists no 404 for router enrollment) ...
    for result in (typed, legacy):
        assert result.status_code == 400
        assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"
    # ... but without a method nothing says it was a router's: OpenZiti then takes ott, whose
    # unknown token is the seed's 404.
    assert again.status_code == 404
    assert error(again)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize("token", [None, "nope", "7d3f2a4e-0000-4000-8000-000000000000"])
def test_bad_token(api: Api, keys: tuple[Key, Key], token: str | None) -> None:
    result = enroll(api, token, csrs(keys))

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


def test_expired_token(settings: Settings, keys: tuple[Key, Key]) -> None:
    clock = FixedClock(datetime.now(UTC))
    app = open_app(settings, clock=clock)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        edge_id, edge = new_router(api)
        transit_id, transit = new_router(api, "transit-routers", "tr1")
        clock.advance(app.ctrl.managers.enrollment_settings.router_duration + timedelta(seconds=1))

        results = [
            enroll(api, edge, csrs(keys, edge_id)),
            enroll(api, transit, csrs(keys, transit_id), method="trott"),
            api.client.simulate_post(
                CLIENT + "/enroll/erott",
                json={"token": edge, "serverCsr": csrs(keys)["serverCertCsr"], "clientCsr": csr_pem(keys[1])},
            ),
        ]

        for result in results:
            assert result.status_code == 400
            assert error(result)["code"] == "ENROLLMENT_EXPIRED"
    finally:
        app.ctrl.env.store.close()


# -- extension --------------------------------------------------------------------------------------
@pytest.fixture
def enrolled(api: Api, keys: tuple[Key, Key]) -> tuple[str, str]:
    """An enrolled edge router: (id, client certificate chain)."""
    router_id, token = new_router(api, roleAttributes=["east"], isTunnelerEnabled=True, cost=7)
    result = enroll(api, token, csrs(keys, router_id))
    return router_id, str(result.json["data"]["cert"])


@pytest.mark.parametrize("send_chain", [False, True], ids=["leaf", "chain"])
def test_extend_issues_new_certificates(
    api: Api, keys: tuple[Key, Key], enrolled: tuple[str, str], send_chain: bool
) -> None:
    router_id, old_chain = enrolled
    presented = tuple(split_chain(old_chain)) if send_chain else (split_chain(old_chain)[0],)
    new_keys = (new_key(), new_key())

    result = extend(api, presented, csrs(new_keys, router_id))

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["cert"]
    assert data["serverCert"]
    assert_router_certificates(api, router_id, data)
    assert data["cert"] != old_chain
    router = api.get(f"/edge-routers/{router_id}").json["data"]
    assert router["fingerprint"] == sha1_fingerprint(data["cert"])
    assert router["isVerified"] is True
    old = extend(api, presented, csrs(keys, router_id))
    assert old.status_code == 401
    assert error(old)["code"] == "UNAUTHORIZED"
    new = extend(api, (split_chain(data["cert"])[0],), csrs(keys, router_id))
    assert new.status_code == 200, new.text


def test_extend_transit_router(api: Api, keys: tuple[Key, Key]) -> None:
    router_id, token = new_router(api, "transit-routers", "tr1")
    chain = enroll(api, token, csrs(keys, router_id), method="trott").json["data"]["cert"]

    result = extend(api, (split_chain(chain)[0],), csrs(keys, router_id))

    assert result.status_code == 200, result.text
    assert api.get(f"/transit-routers/{router_id}").json["data"]["fingerprint"] == sha1_fingerprint(
        result.json["data"]["cert"]
    )


def test_extend_needs_a_routers_certificate(
    api: Api, keys: tuple[Key, Key], enrolled: tuple[str, str]
) -> None:
    router_id, _ = enrolled
    identity_cert = enroll_ott(api, unique("not-a-router")).leaf
    third_party = ThirdPartyCa().issue(router_id)[0]

    for presented in ((), (identity_cert,), (third_party,)):
        result = extend(api, presented, csrs(keys, router_id))
        assert result.status_code == 401, presented
        assert error(result)["code"] == "UNAUTHORIZED"


def test_extend_requires_both_csrs(api: Api, keys: tuple[Key, Key], enrolled: tuple[str, str]) -> None:
    router_id, chain = enrolled
    leaf = (split_chain(chain)[0],)

    for missing in ("certCsr", "serverCertCsr"):
        body = {k: v for k, v in csrs(keys, router_id).items() if k != missing}
        result = extend(api, leaf, body)
        assert result.status_code == 400
        assert error(result)["code"] == "COULD_NOT_VALIDATE"
        assert error(result)["cause"]["field"] == missing
    bad = extend(api, leaf, {**csrs(keys, router_id), "certCsr": "garbage"})
    assert bad.status_code == 400
    assert error(bad)["code"] == "COULD_NOT_PROCESS_CSR"
    assert extend(api, leaf, csrs(keys, router_id)).status_code == 200


def test_extend_of_an_unverified_router(api: Api, keys: tuple[Key, Key], enrolled: tuple[str, str]) -> None:
    router_id, chain = enrolled
    assert api.post(f"/edge-routers/{router_id}/re-enroll").status_code == 200

    result = extend(api, (split_chain(chain)[0],), csrs(keys, router_id))

    assert result.status_code == 401


# -- re-enroll --------------------------------------------------------------------------------------
def test_re_enroll(api: Api, keys: tuple[Key, Key], enrolled: tuple[str, str]) -> None:
    router_id, _ = enrolled
    before = api.get(f"/edge-routers/{router_id}").json["data"]

    result = api.post(f"/edge-routers/{router_id}/re-enroll")

    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    after = api.get(f"/edge-routers/{router_id}").json["data"]
    assert after["isVerified"] is False
    assert after["fingerprint"] == ""
    assert after["certPem"] is None
    claims = jwt.decode(after["enrollmentJwt"], options={"verify_signature": False})
    assert (claims["em"], claims["sub"], claims["jti"]) == ("erott", router_id, after["enrollmentToken"])
    for field in ("name", "roleAttributes", "isTunnelerEnabled", "cost", "noTraversal", "disabled", "tags"):
        assert after[field] == before[field], field
    new = enroll(api, after["enrollmentToken"], csrs(keys, router_id))
    assert new.status_code == 200, new.text
    assert api.get(f"/edge-routers/{router_id}").json["data"]["isVerified"] is True


def test_re_enroll_refuses_the_previous_token(api: Api, keys: tuple[Key, Key]) -> None:
    router_id, old = new_router(api)
    assert api.post(f"/edge-routers/{router_id}/re-enroll").status_code == 200

    result = enroll(api, old, csrs(keys, router_id))

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


def test_re_enroll_unknown_router_and_non_admin(api: Api) -> None:
    assert api.post("/edge-routers/nope/re-enroll").status_code == 404
    router_id, _ = new_router(api)
    assert api.post(f"/edge-routers/{router_id}/re-enroll", token="").status_code == 401
