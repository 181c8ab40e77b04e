"""``ott`` enrollment through ``/enroll`` (legacy PEM bodies, ``genericEnroll`` JSON) and ``/enroll/ott``,
and hostile input on every enrollment endpoint.

Seed document 1: the certificate comes back as PEM text, and an unknown (or used) token is 404
``INVALID_ENROLLMENT_TOKEN``. A client that prefers JSON (the C SDK's ``Accept:
application/json``) gets ``{"data": {"cert"}}``; one that cannot take JSON gets errors with 406.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from controller.settings import Settings
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


def cert_of(result: falcon.testing.Result) -> str:
    """The chain an ``ott`` enrollment answered: PEM text, or ``data.cert`` of a JSON answer."""
    if result.headers["content-type"] == PEM:
        return result.text
    assert result.headers["content-type"] == "application/json", result.headers
    return str(result.json["data"]["cert"])


def assert_not_found(result: falcon.testing.Result) -> None:
    """The seed's 404 for an unknown or used token, with OpenZiti's code."""
    assert result.status_code == 404, result.text
    assert result.headers["content-type"] == "application/json"
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


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
    assert result.headers["content-type"] == PEM  # the seed's PEM text; no Accept, no preference
    assert result.text.startswith("-----BEGIN CERTIFICATE-----")
    assert_issued_to(api, identity_id, result.text)


def test_issued_certificate_logs_in(api: Api, key: Key) -> None:
    _, token = ott_identity(api)
    chain = cert_of(enroll(api, token, csr_pem(key)))

    login = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(*split_chain(chain))
    )

    assert login.status_code == 200, login.text


@pytest.mark.parametrize(
    ("accept", "answer"),
    [
        (None, PEM),  # the Go SDK and the ziti CLI send no Accept
        ("*/*", PEM),
        ("*", PEM),  # old Java clients
        ("application/*", PEM),
        ("text/html, */*;q=0.1", PEM),
        ("application/json, application/x-pem-file", PEM),
        ("application/x-pem-file;q=1, application/json;q=0.5", PEM),
        ("application/json;q=0, */*", PEM),
        ("application/json", "application/json"),  # the C SDK (and the Python SDK on it)
        ("application/json; charset=utf-8", "application/json"),
        ("text/plain, application/json", "application/json"),
        ("application/json, */*", "application/json"),  # named beats a wildcard at the same q
        ("application/x-pem-file;q=0.4, application/json", "application/json"),
        ("application/x-pem-file;q=0, */*", "application/json"),
    ],
)
def test_pem_unless_the_client_prefers_json(api: Api, key: Key, accept: str | None, answer: str) -> None:
    identity_id, token = ott_identity(api)

    legacy = enroll(api, token, csr_pem(key), accept=accept)
    assert legacy.status_code == 200, legacy.text
    assert legacy.headers["content-type"] == answer
    if answer == PEM:
        assert legacy.text.startswith("-----BEGIN CERTIFICATE-----")
    else:
        assert set(legacy.json["data"]) == {"cert"}
        assert legacy.json["meta"] is not None
    assert_issued_to(api, identity_id, cert_of(legacy))

    # the spec's JSON body is answered JSON unless PEM is preferred, as OpenZiti v1.6.0 does
    identity_id, token = ott_identity(api)
    headers = {"Accept": accept} if accept is not None else {}
    typed = api.client.simulate_post(
        CLIENT + "/enroll/ott", headers=headers, json={"token": token, "clientCsr": csr_pem(key)}
    )
    assert typed.status_code == 200, typed.text
    pem_preferred = accept in (
        "application/x-pem-file;q=1, application/json;q=0.5",
        "application/json;q=0, */*",
    )
    assert typed.headers["content-type"] == (PEM if pem_preferred else "application/json")
    assert_issued_to(api, identity_id, cert_of(typed))


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


def _ott_request(api: Api, route: str, token: str, csr: str, accept: str) -> falcon.testing.Result:
    headers = {"Accept": accept}
    if route == "legacy":
        return enroll(api, token, csr, accept=accept)
    if route == "generic":
        return api.client.simulate_post(
            CLIENT + "/enroll", params={"token": token}, headers=headers, json={"clientCsr": csr}
        )
    return api.client.simulate_post(
        CLIENT + "/enroll/ott", headers=headers, json={"token": token, "clientCsr": csr}
    )


@pytest.mark.parametrize(
    "accept", ["image/png", "text/plain", "application/json;q=0, application/x-pem-file;q=0"]
)
@pytest.mark.parametrize("route", ["legacy", "generic", "typed"])
def test_unacceptable_accept_is_406_and_keeps_the_token(api: Api, key: Key, route: str, accept: str) -> None:
    """Nothing the client takes can be answered (neither PEM nor JSON): 406 before the token is
    spent (OpenZiti's content negotiation; its legacy path said 415 ``UNSUPPORTED_MEDIA``)."""
    identity_id, token = ott_identity(api)

    result = _ott_request(api, route, token, csr_pem(key), accept)

    assert result.status_code == 406, result.text
    assert error(result)["code"] == "COULD_NOT_VALIDATE"
    assert error(result)["cause"]["field"] == "Accept"
    assert PEM in error(result)["cause"]["reason"]
    assert api.get(f"/identities/{identity_id}").json["data"]["authenticators"] == {}
    assert enroll(api, token, csr_pem(key)).status_code == 200


@pytest.mark.parametrize("route", ["legacy", "generic", "typed"])
def test_errors_for_a_pem_only_client_are_406(api: Api, key: Key, route: str) -> None:
    """A client that accepts only ``application/x-pem-file`` enrolls as PEM; an error cannot be
    given to it as PEM, so it gets 406 (the body still names the error)."""
    identity_id, token = ott_identity(api)

    bad_csr = _ott_request(api, route, token, "not a csr", PEM)
    assert bad_csr.status_code == 406, bad_csr.text
    assert bad_csr.headers["content-type"] == "application/json"
    assert error(bad_csr)["code"] == "COULD_NOT_PROCESS_CSR"
    assert api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"] == token

    issued = _ott_request(api, route, token, csr_pem(key), PEM)
    assert issued.status_code == 200, issued.text
    assert issued.headers["content-type"] == PEM
    assert_issued_to(api, identity_id, issued.text)

    used = _ott_request(api, route, token, csr_pem(key), PEM)
    assert used.status_code == 406, used.text
    assert error(used)["code"] == "INVALID_ENROLLMENT_TOKEN"
    unknown = _ott_request(api, route, "7d3f2a4e-0000-4000-8000-000000000000", csr_pem(key), PEM)
    assert unknown.status_code == 406, unknown.text
    assert error(unknown)["code"] == "INVALID_ENROLLMENT_TOKEN"


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
    assert result.headers["content-type"] == "application/json"  # as OpenZiti v1.6.0
    assert_issued_to(api, identity_id, cert_of(result))


@pytest.mark.parametrize("content_type", ["application/x-pem-file", "text/plain"])
def test_typed_route_takes_the_seeds_query_token_and_pem_csr(api: Api, key: Key, content_type: str) -> None:
    """Seed document 1: ``?token=`` (uuid) and a PEM CSR; the answer is the PEM certificate."""
    identity_id, token = ott_identity(api)

    result = enroll(
        api, token, csr_pem(key), content_type=content_type, method=None, path=CLIENT + "/enroll/ott"
    )

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == PEM
    assert_issued_to(api, identity_id, result.text)
    assert_not_found(enroll(api, token, csr_pem(key), method=None, path=CLIENT + "/enroll/ott"))


def test_typed_route_takes_a_query_token_with_a_json_body(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = api.client.simulate_post(
        CLIENT + "/enroll/ott", params={"token": token}, json={"clientCsr": csr_pem(key)}
    )

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, cert_of(result))


def test_without_method_the_tokens_own_method_is_used(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key), method=None)

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, cert_of(result))


def test_uppercase_token_is_the_same_token(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token.upper(), csr_pem(key))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, cert_of(result))


def test_mbedtls_csr_enrolls(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, mbedtls_csr_pem(key, sub=identity_id))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, cert_of(result))


def test_csr_subject_is_replaced_by_the_identity_id(api: Api, key: Key) -> None:
    identity_id, token = ott_identity(api)

    result = enroll(api, token, csr_pem(key, cn="someone-else"))

    assert result.status_code == 200, result.text
    assert_issued_to(api, identity_id, cert_of(result))


# -- token failures ---------------------------------------------------------------------------------
def test_a_token_works_once(api: Api, key: Key) -> None:
    _, token = ott_identity(api)
    assert enroll(api, token, csr_pem(key)).status_code == 200

    again = enroll(api, token, csr_pem(key))
    no_method = enroll(api, token, csr_pem(key), method=None)
    as_json = enroll(api, token, csr_pem(key), accept="application/json")
    typed = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr_pem(key)})

    for result in (again, no_method, as_json, typed):
        assert_not_found(result)


def test_a_token_works_once_even_concurrently(api: Api, key: Key) -> None:
    from concurrent.futures import ThreadPoolExecutor

    identity_id, token = ott_identity(api)
    csrs = [csr_pem(key) for _ in range(8)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda csr: enroll(api, token, csr), csrs))

    statuses = sorted(r.status_code for r in results)
    assert statuses == [200] + [404] * 7, [r.text for r in results]
    assert {error(r)["code"] for r in results if r.status_code == 404} == {"INVALID_ENROLLMENT_TOKEN"}
    [winner] = [r for r in results if r.status_code == 200]
    assert_issued_to(api, identity_id, cert_of(winner))


@pytest.mark.parametrize("token", [None, "", "not-a-uuid", "x" * 5000])
def test_missing_or_malformed_token(api: Api, key: Key, token: str | None) -> None:
    """Not a UUID (``format: uuid``): a bad request, not an unknown token."""
    result = enroll(api, token, csr_pem(key))
    typed = api.client.simulate_post(
        CLIENT + "/enroll/ott", json={"token": token or "", "clientCsr": csr_pem(key)}
    )

    for answer in (result, typed):
        assert answer.status_code == 400
        assert error(answer)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize("method", ["ott", None])
def test_unknown_token_is_404(api: Api, key: Key, method: str | None) -> None:
    unknown = "7d3f2a4e-0000-4000-8000-000000000000"

    legacy = enroll(api, unknown, csr_pem(key), method=method)
    generic = api.client.simulate_post(
        CLIENT + "/enroll",
        params={k: v for k, v in (("method", method), ("token", unknown)) if v},
        json={"clientCsr": csr_pem(key)},
    )
    typed = api.client.simulate_post(
        CLIENT + "/enroll/ott", json={"token": unknown, "clientCsr": csr_pem(key)}
    )

    for answer in (legacy, generic, typed):
        assert_not_found(answer)


@pytest.mark.parametrize("method", ["ottca", "erott", "trott"])
def test_unknown_token_of_other_methods_stays_400(api: Api, key: Key, method: str) -> None:
    """The seed lists no 404 for ottca and router enrollment: OpenZiti's 400 stays."""
    result = enroll(api, "7d3f2a4e-0000-4000-8000-000000000000", "{}", method=method, content_type=None)

    assert result.status_code == 400, result.text
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


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

    assert_not_found(result)


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
    assert_not_found(stale)
    fresh = enroll(api, after["token"], csr_pem(key))
    assert fresh.status_code == 200, fresh.text
    assert_issued_to(api, identity_id, cert_of(fresh))


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
