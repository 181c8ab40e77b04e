"""``ott`` enrollment through ``/enroll`` (legacy PEM bodies, ``genericEnroll`` JSON) and ``/enroll/ott``,
and hostile input on every enrollment endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from api.settings import Settings
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from tests.api.certs import (
    Key,
    ThirdPartyCa,
    admin_api,
    csr_pem,
    load_chain,
    mbedtls_csr_pem,
    new_key,
    sha1_fingerprint,
    split_chain,
    tampered_csr_pem,
    tls,
    unique,
    verified_ca,
)
from tests.api.conftest import shared_admin_api
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

PEM = "application/x-pem-file"


api = shared_admin_api("enroll-ott")


@pytest.fixture(scope="module")
def key() -> Key:
    """One device key for the module's CSRs (every enrollment gets a fresh identity, so no coupling)."""
    return new_key()


def ott_identity(api: Api) -> tuple[str, str]:
    """A new identity with an ``ott`` enrollment: (identity id, token)."""
    identity_id = api.create(
        "/identities",
        {"name": unique("device"), "type": "User", "isAdmin": False, "enrollment": {"ott": True}},
    )
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"]
    return identity_id, str(token)


def enroll(
    api: Api,
    token: str | None,
    body: str | bytes | None,
    *,
    content_type: str | None = "text/plain",
    accept: str | None = None,
    method: str | None = "ott",
    path: str = CLIENT + "/enroll",
    **kwargs: Any,
) -> falcon.testing.Result:
    """``POST /enroll?method=&token=`` without a session (enrollment needs none)."""
    params = {k: v for k, v in (("method", method), ("token", token)) if v is not None}
    headers = {k: v for k, v in (("Content-Type", content_type), ("Accept", accept)) if v is not None}
    return api.client.simulate_post(path, params=params, headers=headers, body=body, **kwargs)


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def assert_issued_to(api: Api, identity_id: str, chain_pem: str) -> None:
    """The chain is leaf + our intermediate, the leaf is a clientAuth cert for the identity, and the
    identity now holds a cert authenticator for it and no enrollment."""
    chain = load_chain(chain_pem)
    intermediate = api.ctrl.pki.intermediate_cert
    assert len(chain) == 2
    assert chain[1] == intermediate
    chain[0].verify_directly_issued_by(intermediate)
    cn = chain[0].subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert cn == identity_id
    eku = chain[0].extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["authenticators"]["cert"]["fingerprint"] == sha1_fingerprint(chain_pem)
    assert data["enrollment"] == {}


# -- success ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        (CLIENT + "/enroll", "text/plain"),
        (CLIENT + "/enroll", "application/x-pem-file"),
        (CLIENT + "/enroll", "application/pkcs7"),
        (CLIENT + "/enroll", "text/plain; charset=utf-8"),
        ("/enroll", "text/plain"),
        ("/edge/v1/enroll", "application/x-pem-file"),
    ],
)
def test_legacy_pem_csr_enrolls(api: Api, key: Key, path: str, content_type: str) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key), content_type=content_type, path=path)

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/json"
    assert set(result.json["data"]) == {"cert"}
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_issued_certificate_logs_in(api: Api, key: Key) -> None:
    _, token = ott_identity(api)
    chain = enroll(api, token, csr_pem(key)).json["data"]["cert"]

    login = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(*split_chain(chain))
    )

    assert login.status_code == 200, login.text


@pytest.mark.parametrize(
    "accept",
    [
        None,
        "application/json",
        "*/*",
        "text/html, */*;q=0.1",
        "text/plain, application/json",
        "application/x-pem-file;q=1, application/json;q=0.5",
    ],
)
def test_json_whenever_the_client_accepts_it(api: Api, key: Key, accept: str | None) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key), accept=accept)

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/json"
    assert result.json["meta"] is not None
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


@pytest.mark.parametrize(
    ("content_type", "body_of"),
    [
        ("text/plain", lambda csr: csr),
        ("application/json", lambda csr: {"clientCsr": csr}),
    ],
)
def test_pem_answer_when_the_client_asks_for_pem(api: Api, key: Key, content_type: str, body_of: Any) -> None:
    identity_id, token = ott_identity(api)
    body = body_of(csr_pem(key))

    result = api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "ott", "token": token},
        headers={"Accept": PEM, "Content-Type": content_type},
        **({"json": body} if isinstance(body, dict) else {"body": body}),
    )

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == PEM
    assert result.text.startswith("-----BEGIN CERTIFICATE-----")
    assert_issued_to(api, identity_id, result.text)


@pytest.mark.parametrize("route", ["legacy", "generic", "typed"])
def test_unacceptable_accept_is_415_and_keeps_the_token(api: Api, key: Key, route: str) -> None:
    identity_id, token = ott_identity(api)
    headers = {"Accept": "image/png"}
    if route == "legacy":
        result = enroll(api, token, csr_pem(key), accept="image/png")
    elif route == "generic":
        result = api.client.simulate_post(
            CLIENT + "/enroll", params={"token": token}, headers=headers, json={"clientCsr": csr_pem(key)}
        )
    else:
        result = api.client.simulate_post(
            CLIENT + "/enroll/ott", headers=headers, json={"token": token, "clientCsr": csr_pem(key)}
        )

    assert result.status_code == 415
    assert error(result)["code"] == "UNSUPPORTED_MEDIA"
    assert api.get(f"/identities/{identity_id}").json["data"]["authenticators"] == {}
    assert enroll(api, token, csr_pem(key)).status_code == 200


def test_generic_json_body_enrolls(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "ott", "token": token},
        headers={"Accept": "application/json"},
        json={"clientCsr": csr_pem(key)},
    )

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/json"
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_typed_route_enrolls(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = api.client.simulate_post(
        CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr_pem(key)}
    )

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_without_method_the_tokens_own_method_is_used(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key), method=None)

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_uppercase_token_is_the_same_token(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token.upper(), csr_pem(key))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_mbedtls_csr_enrolls(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, mbedtls_csr_pem(key, sub=identity_id))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


def test_csr_subject_is_replaced_by_the_identity_id(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key, cn="someone-else"))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, result.json["data"]["cert"])


# -- token failures ---------------------------------------------------------------------------------
def test_a_token_works_once(api: Api, key: Key) -> None:
    _, token = ott_identity(api)
    assert enroll(api, token, csr_pem(key)).status_code == 200

    again = enroll(api, token, csr_pem(key))
    typed = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr_pem(key)})

    for result in (again, typed):
        assert result.status_code == 400
        assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


def test_a_token_works_once_even_concurrently(api: Api, key: Key) -> None:
    from concurrent.futures import ThreadPoolExecutor

    identity_id, token = ott_identity(api)
    csrs = [csr_pem(key) for _ in range(8)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda csr: enroll(api, token, csr), csrs))

    statuses = sorted(r.status_code for r in results)
    assert statuses == [200] + [400] * 7, [r.text for r in results]
    assert {error(r)["code"] for r in results if r.status_code == 400} == {"INVALID_ENROLLMENT_TOKEN"}
    [winner] = [r for r in results if r.status_code == 200]
    assert_issued_to(api, identity_id, winner.json["data"]["cert"])


@pytest.mark.parametrize(
    "token", [None, "", "not-a-uuid", "7d3f2a4e-0000-4000-8000-000000000000", "x" * 5000]
)
def test_missing_malformed_or_unknown_token(api: Api, key: Key, token: str | None) -> None:
    result = enroll(api, token, csr_pem(key))
    typed = api.client.simulate_post(
        CLIENT + "/enroll/ott", json={"token": token or "", "clientCsr": csr_pem(key)}
    )

    for answer in (result, typed):
        assert answer.status_code == 400
        assert error(answer)["code"] == "INVALID_ENROLLMENT_TOKEN"


def test_expired_token(settings: Settings, key: Key) -> None:
    clock = FixedClock(datetime.now(UTC))
    app = open_app(settings, clock=clock)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        identity_id, token = ott_identity(api)
        clock.advance(app.ctrl.managers.enrollment_settings.identity_duration + timedelta(seconds=1))
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)

        result = enroll(api, token, csr_pem(key))
        typed = api.client.simulate_post(
            CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr_pem(key)}
        )

        for answer in (result, typed):
            assert answer.status_code == 400
            assert error(answer)["code"] == "ENROLLMENT_EXPIRED"
        assert api.get(f"/identities/{identity_id}").json["data"]["authenticators"] == {}
    finally:
        app.ctrl.env.store.close()


@pytest.mark.parametrize("method", ["ottca", "updb", "erott", "bogus"])
def test_method_other_than_the_tokens(api: Api, key: Key, method: str) -> None:
    _, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key), method=method)

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLL_METHOD"
    assert error(result)["cause"]["field"] == "method"


@pytest.mark.parametrize("route", ["ottca", "updb"])
def test_ott_token_on_another_methods_route(api: Api, key: Key, route: str) -> None:
    _, token = ott_identity(api)
    if route == "updb":
        result = api.client.simulate_post(
            CLIENT + "/enroll/updb", params={"token": token}, json={"password": "Secret-123!"}
        )
    else:
        result = api.client.simulate_post(CLIENT + "/enroll/ottca", json={"token": token})

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLL_METHOD"


def test_router_token_with_method_ott(api: Api, key: Key) -> None:
    router_id = api.create("/edge-routers", {"name": unique("er")})
    token = api.get(f"/edge-routers/{router_id}").json["data"]["enrollmentToken"]

    result = enroll(api, token, csr_pem(key), method="ott")

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLL_METHOD"


def test_identity_already_holding_a_certificate(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)
    assert enroll(api, token, csr_pem(key)).status_code == 200
    enrollment_id = api.create(
        "/enrollments",
        {
            "method": "ott",
            "identityId": identity_id,
            "expiresAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        },
    )
    second = api.get(f"/enrollments/{enrollment_id}").json["data"]["token"]

    result = enroll(api, second, csr_pem(key))

    assert result.status_code == 409
    assert error(result)["code"] == "ENROLLMENT_IDENTITY_ALREADY_ENROLLED"


def test_deleted_identity_token(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)
    assert api.delete(f"/identities/{identity_id}").status_code == 200

    result = enroll(api, token, csr_pem(key))

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


# -- CSR failures -----------------------------------------------------------------------------------
BAD_CSRS = {
    "garbage": "this is not a csr",
    "garbage-pem": "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n",
    "binary": "\x00\x01\x02\xff\xfe",
    "certificate": ThirdPartyCa.__name__,  # replaced by a certificate PEM in the test
    "tampered": "tampered",  # replaced by a CSR with a bad self-signature
}


@pytest.mark.parametrize("kind", list(BAD_CSRS))
@pytest.mark.parametrize("route", ["legacy", "generic", "typed"])
def test_unusable_csr(api: Api, key: Key, kind: str, route: str) -> None:
    identity_id, token = ott_identity(api)
    csr = BAD_CSRS[kind]
    if kind == "certificate":
        csr = ThirdPartyCa().pem
    elif kind == "tampered":
        csr = tampered_csr_pem(key)

    if route == "legacy":
        result = enroll(api, token, csr)
    elif route == "generic":
        result = api.client.simulate_post(
            CLIENT + "/enroll", params={"token": token}, json={"clientCsr": csr}
        )
    else:
        result = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr})

    assert result.status_code == 400, result.text
    assert error(result)["code"] == "COULD_NOT_PROCESS_CSR"
    assert api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"] == token


@pytest.mark.parametrize("route", ["legacy", "generic", "generic-null", "typed"])
def test_empty_csr(api: Api, route: str) -> None:
    identity_id, token = ott_identity(api)

    if route == "legacy":
        result = enroll(api, token, "")
    elif route == "generic":
        result = api.client.simulate_post(
            CLIENT + "/enroll", params={"token": token}, json={"clientCsr": " "}
        )
    elif route == "generic-null":
        result = api.client.simulate_post(CLIENT + "/enroll", params={"token": token}, json={"name": "x"})
    else:
        result = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": ""})

    assert result.status_code == 400, result.text
    assert error(result)["code"] == "MISSING_OR_INVALID_CSR"
    assert api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"] == token


def test_typed_route_requires_token_and_csr(api: Api, key: Key) -> None:
    _, token = ott_identity(api)

    no_csr = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token})
    no_token = api.client.simulate_post(CLIENT + "/enroll/ott", json={"clientCsr": csr_pem(key)})

    assert no_csr.status_code == 400
    assert error(no_csr)["code"] == "COULD_NOT_VALIDATE"
    assert error(no_csr)["cause"]["field"] == "clientCsr"
    assert no_token.status_code == 400
    assert error(no_token)["cause"]["field"] == "token"


# -- refresh ----------------------------------------------------------------------------------------
def test_refresh_replaces_the_token(api: Api, key: Key) -> None:
    identity_id, old = ott_identity(api)
    summary = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]
    expires = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    refreshed = api.post(f"/enrollments/{summary['id']}/refresh", json={"expiresAt": expires})

    assert refreshed.status_code == 200, refreshed.text
    after = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]
    assert after["jwt"] != summary["jwt"]
    assert after["token"] != old
    stale = enroll(api, old, csr_pem(key))
    assert stale.status_code == 400
    assert error(stale)["code"] == "INVALID_ENROLLMENT_TOKEN"
    fresh = enroll(api, after["token"], csr_pem(key))
    assert fresh.status_code == 200, fresh.text
    assert_issued_to(api, identity_id, fresh.json["data"]["cert"])


# -- hostile input on every enrollment endpoint ------------------------------------------------------
@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, pki_template: Path) -> Iterator[dict[str, Any]]:
    """One app shared by the robustness cases, with a token of every kind and a CA that allows
    every enrollment, so that hostile bodies reach the deep end of each method."""
    api = admin_api(tmp_path_factory.mktemp("hostile"), pki_template)
    try:
        third = ThirdPartyCa()
        ca_id = verified_ca(api, third, isAutoCaEnrollmentEnabled=True, isOttCaEnrollmentEnabled=True)
        tokens: dict[str, str] = {}
        for method, enrollment in (("ott", True), ("ottca", ca_id), ("updb", "hostile-user")):
            identity_id = api.create(
                "/identities",
                {"name": f"h-{method}", "type": "User", "isAdmin": False, "enrollment": {method: enrollment}},
            )
            tokens[method] = api.get(f"/identities/{identity_id}").json["data"]["enrollment"][method]["token"]
        for collection, method in (("edge-routers", "erott"), ("transit-routers", "trott")):
            router_id = api.create(f"/{collection}", {"name": f"h-{method}"})
            tokens[method] = api.get(f"/{collection}/{router_id}").json["data"]["enrollmentToken"]
        yield {"api": api, "tokens": tokens, "cert": third.issue("hostile-device")[0], "ca_id": ca_id}
    finally:
        api.app.ctrl.env.store.close()


HOSTILE_BODIES: dict[str, bytes] = {
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "utf16": "-----BEGIN CERTIFICATE REQUEST-----".encode("utf-16"),
    "nul": b"\x00" * 64,
    "huge": b"A" * 600_000,
    "too-large": b"B" * (1024 * 1024 + 1),
    "json-garbage": b"{",
    "json-array": b"[1, 2]",
    "json-null": b"null",
    "json-number": b"1e999999",
    "json-deep": b"[" * 5000 + b"]" * 5000,
    "json-types": (
        b'{"name": 5, "clientCsr": [], "serverCertCsr": {}, "certCsr": true, "username": 1,'
        b' "password": [], "token": 7, "serverCsr": null}'
    ),
    "json-strings": (
        b'{"name": "\\u0000\\ud800", "clientCsr": "\\u0000", "serverCertCsr": "x", "certCsr": "y",'
        b' "username": "\\u0000\\u0000\\u0000\\u0000", "password": "\\u0000\\u0000\\u0000\\u0000\\u0000",'
        b' "serverCsr": "z", "token": "\\u0000"}'
    ),
    "json-huge-values": b'{"name": "' + b"n" * 500_000 + b'", "password": "' + b"p" * 5000 + b'"}',
    "pem-garbage": b"-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n",
    "pem-two-blocks": (b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" * 2),
}
CONTENT_TYPES = [
    None,
    "text/plain",
    "application/json",
    "application/x-pem-file",
    "application/pkcs7",
    "image/png",
]


def _hostile_requests(tokens: dict[str, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, query) of every enrollment operation, with good, bad and absent tokens."""
    for method in (None, "ott", "ottca", "updb", "ca", "erott", "trott", "bogus", "\x00"):
        for token in {tokens.get(method or "ott"), "not-a-uuid", None}:
            query = {k: v for k, v in (("method", method), ("token", token)) if v is not None}
            yield "/enroll", query
    for route in ("ott", "ottca", "ca", "erott", "extend/router"):
        yield f"/enroll/{route}", {}
    yield "/enroll/updb", {"token": tokens["updb"]}


@pytest.mark.parametrize("body_name", list(HOSTILE_BODIES))
def test_hostile_bodies_never_get_a_500(hostile: dict[str, Any], body_name: str) -> None:
    api: Api = hostile["api"]
    body = HOSTILE_BODIES[body_name]
    for path, query in _hostile_requests(hostile["tokens"]):
        for content_type in CONTENT_TYPES:
            for extras in ({}, tls(hostile["cert"])):
                headers = {"Content-Type": content_type} if content_type else {}
                result = api.client.simulate_post(
                    CLIENT + path, params=query, headers=headers, body=body, extras=extras
                )
                what = f"{path} {query} {content_type} {body_name}: {result.status_code} {result.text[:300]}"
                assert result.status_code < 500, what
                if result.status_code >= 400:
                    assert result.json["error"]["code"], what
                    assert b"p" * 100 not in result.content, what


@pytest.mark.parametrize("body_name", list(HOSTILE_BODIES))
def test_hostile_ca_verification_never_gets_a_500(hostile: dict[str, Any], body_name: str) -> None:
    api: Api = hostile["api"]
    ca_id = api.create(
        "/cas",
        {
            "name": f"unverified-{body_name}",
            "certPem": ThirdPartyCa().pem,
            "isAuthEnabled": False,
            "isAutoCaEnrollmentEnabled": False,
            "isOttCaEnrollmentEnabled": False,
            "identityRoles": [],
        },
    )
    for content_type in CONTENT_TYPES:
        headers = {"Content-Type": content_type} if content_type else {}
        for id in (ca_id, hostile["ca_id"], "nope", "\x00" * 3):
            result = api.post(f"/cas/{id}/verify", body=HOSTILE_BODIES[body_name], headers=headers)
            what = f"{id} {content_type} {body_name}: {result.status_code} {result.text[:300]}"
            assert 400 <= result.status_code < 500, what
            assert result.json["error"]["code"], what
