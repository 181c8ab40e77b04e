"""Every answer carries ``X-Content-Type-Options: nosniff`` and ``Cache-Control: no-store`` (with
``Pragma: no-cache``): those carrying tokens, secrets or keys above all (logins, the current API
session, enrollment certificates, MFA secrets, enrollment JWTs, session certificates), and, so that
no new endpoint can be missed, every other answer too, errors included (``api/middleware.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon.testing
import pytest

from tests.api.certs import csr_pem, enroll_ott, new_key, tls_chain, unique
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, MGMT, Api

SECURE = {"x-content-type-options": "nosniff", "cache-control": "no-store", "pragma": "no-cache"}


def assert_secure(result: falcon.testing.Result) -> None:
    got = {name: result.headers.get(name) for name in SECURE}
    assert got == SECURE, (result.status_code, result.headers)


def _ott_token(api: Api) -> tuple[str, str]:
    identity_id = api.create(
        "/identities", {"name": unique("hdr"), "type": "User", "isAdmin": False, "enrollment": {"ott": True}}
    )
    return identity_id, str(api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"])


def _cert_session(api: Api) -> tuple[str, str, dict[str, Any]]:
    """A cert-authenticated client session of a new identity: (zt-session token, its cert
    authenticator's id, the TLS extras presenting the certificate)."""
    device = enroll_ott(api, unique("hdr-device"))
    extras = tls_chain(device.chain)
    login = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=extras
    )
    assert login.status_code == 200, login.text
    listed = api.get(
        "/authenticators", params={"filter": f'identityId = "{device.identity_id}" and method = "cert"'}
    )
    return str(login.json["data"]["token"]), str(listed.json["data"][0]["id"]), extras


# Each case: what it is -> a request made with the logged-in admin ``api``; all must be marked.
CASES: dict[str, Callable[[Api], falcon.testing.Result]] = {
    "password login (token in body and zt-session header)": lambda api: api.client.simulate_post(
        MGMT + "/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
    ),
    "client password login": lambda api: api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": ADMIN_PASSWORD},
    ),
    "failed login (401)": lambda api: api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": ADMIN_USER, "password": "wrong"},
    ),
    "current API session": lambda api: api.get("/current-api-session"),
    "client current API session": lambda api: api.get("/current-api-session", base=CLIENT),
    "identity with its enrollment JWT": lambda api: api.get(f"/identities/{_ott_token(api)[0]}"),
    "enrollments list (tokens, JWTs)": lambda api: api.get("/enrollments"),
    "edge router with its enrollment JWT": lambda api: api.get(
        f"/edge-routers/{api.create('/edge-routers', {'name': unique('er')})}"
    ),
    "network JWTs": lambda api: api.client.simulate_get(CLIENT + "/network-jwts"),
    "ott enrollment, PEM certificate": lambda api: api.client.simulate_post(
        CLIENT + "/enroll/ott", json={"token": _ott_token(api)[1], "clientCsr": csr_pem(new_key())}
    ),
    "ott enrollment, JSON certificate": lambda api: api.client.simulate_post(
        CLIENT + "/enroll",
        params={"method": "ott", "token": _ott_token(api)[1]},
        headers={"Content-Type": "text/plain", "Accept": "application/json"},
        body=csr_pem(new_key()),
    ),
    "enrollment error (404)": lambda api: api.client.simulate_post(
        CLIENT + "/enroll/ott",
        json={"token": "7d3f2a4e-0000-4000-8000-000000000000", "clientCsr": csr_pem(new_key())},
    ),
    "enrollment refused for a PEM-only client (406)": lambda api: api.client.simulate_post(
        CLIENT + "/enroll/updb",
        params={"token": "7d3f2a4e-0000-4000-8000-000000000000"},
        json={"password": "Secret-123!"},
        headers={"Accept": "application/x-pem-file"},
    ),
    "MFA enrollment start": lambda api: api.post("/current-identity/mfa", base=CLIENT, json={}),
    "MFA enrollment detail (secret, recovery codes)": lambda api: (
        api.post("/current-identity/mfa", base=CLIENT, json={}),
        api.get("/current-identity/mfa", base=CLIENT),
    )[1],
    "session certificate (ephemeral, from a CSR)": lambda api: api.client.simulate_post(
        CLIENT + "/current-api-session/certificates",
        json={"csr": csr_pem(new_key())},
        headers={"zt-session": (session := _cert_session(api))[0]},
        extras=session[2],
    ),
    "version (public)": lambda api: api.client.simulate_get("/version"),
    "CA bundle (public)": lambda api: api.client.simulate_get("/.well-known/est/cacerts"),
    "management list": lambda api: api.get("/services"),
    "no session (401)": lambda api: api.client.simulate_get(MGMT + "/identities"),
    "unknown route (404)": lambda api: api.get("/no-such-thing"),
    "bad body (400)": lambda api: api.post(
        "/services", body="{", headers={"Content-Type": "application/json"}
    ),
}


#: The status each case answers (so that each reaches what it is meant to).
STATUS = {
    "failed login (401)": 401,
    "enrollment error (404)": 404,
    "enrollment refused for a PEM-only client (406)": 406,
    "MFA enrollment start": 201,
    "session certificate (ephemeral, from a CSR)": 201,
    "no session (401)": 401,
    "unknown route (404)": 404,
    "bad body (400)": 400,
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_answer_is_marked_no_store_and_nosniff(api: Api, case: str) -> None:
    result = CASES[case](api)

    assert result.status_code == STATUS.get(case, 200), result.text
    assert_secure(result)


def test_extend_and_logout_answers_are_marked(api: Api) -> None:
    session_token, authenticator_id, extras = _cert_session(api)
    extended = api.client.simulate_post(
        f"{CLIENT}/current-identity/authenticators/{authenticator_id}/extend",
        json={"clientCertCsr": csr_pem(new_key())},
        headers={"zt-session": session_token},
        extras=extras,
    )
    logout = api.client.simulate_delete(
        CLIENT + "/current-api-session", headers={"zt-session": session_token}
    )

    assert extended.status_code == 200, extended.text
    assert "clientCert" in extended.json["data"]
    assert logout.status_code == 200, logout.text
    for result in (extended, logout):
        assert_secure(result)
