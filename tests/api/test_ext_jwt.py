"""``POST /authenticate?method=ext-jwt``: JWTs of external identity providers, from a certificate
signer and from a JWKS signer served on 127.0.0.1; the client's signer list; an auth policy's
secondary external JWT."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from engine.testing import FixedClock
from pki import JwksVerifier
from tests.api.certs import unique
from tests.api.jwt_helpers import AUDIENCE, Jwks, Signer, make_cert_signer, open_admin_api, self_signed
from tests.conftest import CLIENT, MGMT, Api


@pytest.fixture(scope="module")
def jwks() -> Iterator[Jwks]:
    served = Jwks()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    served.thread.join(timeout=5)


@pytest.fixture(scope="module")
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin = open_admin_api(tmp_path_factory.mktemp("ext-jwt"), pki_template, clock)
    yield admin
    admin.app.ctrl.env.store.close()


@pytest.fixture
def cert_signer(api: Api, clock: FixedClock) -> Signer:
    return make_cert_signer(api, clock)


@pytest.fixture
def jwks_signer(api: Api, clock: FixedClock, jwks: Jwks) -> Signer:
    key = ec.generate_private_key(ec.SECP256R1())
    path = f"/{unique('jwks')}.json"
    jwks.publish(path, ("key-1", key))
    signer = Signer(api, clock, key, "key-1", "ES256", jwksEndpoint=jwks.url(path))
    signer.path = path  # type: ignore[attr-defined]
    return signer


def identity(api: Api, **extra: Any) -> str:
    return api.create("/identities", {"name": unique("person"), "isAdmin": False, "type": "User", **extra})


def ext_login(api: Api, *tokens: str, base: str = CLIENT) -> Any:
    headers = {"Authorization": ", ".join(f"Bearer {t}" for t in tokens)} if tokens else {}
    return api.client.simulate_post(
        base + "/authenticate", params={"method": "ext-jwt"}, headers=headers, json={}
    )


def error(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def challenge(result: Any) -> dict[str, str]:
    value = result.headers["www-authenticate"]
    assert value.startswith("Bearer ")
    params: dict[str, str] = {}
    for part in value[len("Bearer ") :].split('" '):
        name, _, raw = part.partition("=")
        params[name.strip()] = raw.strip('"')
    return params


# -- logging in -----------------------------------------------------------------------------------
@pytest.mark.parametrize("base", [CLIENT, MGMT])
def test_a_certificate_signers_token_logs_in(api: Api, cert_signer: Signer, base: str) -> None:
    person = identity(api)

    result = ext_login(api, cert_signer.token(person), base=base)

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["identityId"] == person
    assert data["authenticatorId"] == f"extJwtId:{cert_signer.id}"
    assert result.headers["zt-session"] == data["token"]
    current = api.get("/current-identity", token=data["token"], base=base).json["data"]
    assert current["id"] == person


def test_a_jwks_signers_token_logs_in_and_the_jwks_is_cached(
    api: Api, jwks: Jwks, jwks_signer: Signer
) -> None:
    person = identity(api)

    first = ext_login(api, jwks_signer.token(person))
    second = ext_login(api, jwks_signer.token(person))

    assert (first.status_code, second.status_code) == (200, 200)
    assert jwks.fetches[jwks_signer.path] == 1  # type: ignore[attr-defined]


def test_an_unknown_kid_refetches_the_jwks(api: Api, jwks: Jwks, jwks_signer: Signer) -> None:
    person = identity(api)
    assert ext_login(api, jwks_signer.token(person)).status_code == 200
    rotated = ec.generate_private_key(ec.SECP256R1())
    jwks.publish(jwks_signer.path, ("key-2", rotated))  # type: ignore[attr-defined]

    result = ext_login(api, jwks_signer.token(person, kid="key-2", key=rotated))

    assert result.status_code == 200
    assert jwks.fetches[jwks_signer.path] == 2  # type: ignore[attr-defined]


def test_an_unreachable_jwks_refuses_the_login(api: Api, clock: FixedClock) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    signer = Signer(api, clock, key, "k", "ES256", jwksEndpoint="http://127.0.0.1:9/jwks.json")

    result = ext_login(api, signer.token(identity(api)))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_a_custom_claims_property_names_the_identity(api: Api, clock: FixedClock) -> None:
    signer = make_cert_signer(api, clock, claimsProperty="/ziti/id")
    person = identity(api)

    ok = ext_login(api, signer.token("someone-else", ziti={"id": person}))
    missing = ext_login(api, signer.token(person))

    assert ok.status_code == 200
    assert ok.json["data"]["identityId"] == person
    assert missing.status_code == 401


def test_use_external_id_matches_the_identitys_external_id(api: Api, clock: FixedClock) -> None:
    signer = make_cert_signer(api, clock, useExternalId=True)
    external = unique("alice@example.test")
    person = identity(api, externalId=external)

    by_external_id = ext_login(api, signer.token(external))
    by_id = ext_login(api, signer.token(person))

    assert by_external_id.status_code == 200
    assert by_external_id.json["data"]["identityId"] == person
    assert by_id.status_code == 401


def test_a_certificate_signer_without_a_kid_uses_the_certificates_fingerprint(
    api: Api, clock: FixedClock
) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = self_signed(key, "idp")
    cert = x509.load_pem_x509_certificate(pem.encode())
    fingerprint = cert.fingerprint(hashes.SHA1()).hex()  # OpenZiti's fingerprint
    signer = Signer(api, clock, key, fingerprint, "RS256", certPem=pem)

    assert ext_login(api, signer.token(identity(api))).status_code == 200


# -- refusals -------------------------------------------------------------------------------------
def test_no_bearer_token_is_a_missing_challenge(api: Api, cert_signer: Signer) -> None:
    result = ext_login(api)

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    params = challenge(result)
    assert params["realm"] == "openziti-primary-ext-jwt"
    assert params["error"] == "missing"
    assert cert_signer.id in params["id"].split("|")
    assert cert_signer.issuer in params["issuer"].split("|")


@pytest.mark.parametrize(
    "case",
    [
        "wrong issuer",
        "wrong audience",
        "no kid",
        "wrong kid",
        "wrong key",
        "not yet valid",
        "unknown identity",
        "garbage",
    ],
)
def test_invalid_tokens_are_refused(api: Api, cert_signer: Signer, case: str) -> None:
    person = identity(api)
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(cert_signer.clock.now().timestamp())
    token = {
        "wrong issuer": lambda: cert_signer.token(person, iss="https://elsewhere.example.test"),
        "wrong audience": lambda: cert_signer.token(person, aud="someone-else"),
        "no kid": lambda: cert_signer.token(person, kid=None),
        "wrong kid": lambda: cert_signer.token(person, kid="other-kid"),
        "wrong key": lambda: cert_signer.token(person, key=other_key),
        "not yet valid": lambda: cert_signer.token(person, nbf=now + 600),
        "unknown identity": lambda: cert_signer.token("no-such-identity"),
        "garbage": lambda: "not.a.jwt",
    }[case]()

    result = ext_login(api, token)

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    # a token that does not parse as a JWT, or that no enabled signer issued, is no candidate:
    # "missing" (auth_headers_legacy_test.go, GetExternalTokenForExtJwtSigner)
    assert challenge(result)["error"] == ("missing" if case in ("garbage", "wrong issuer") else "invalid")


def test_an_expired_token_is_an_expired_challenge(api: Api, cert_signer: Signer) -> None:
    now = int(cert_signer.clock.now().timestamp())

    result = ext_login(api, cert_signer.token(identity(api), exp=now - 60))

    assert result.status_code == 401
    assert challenge(result)["error"] == "expired"


def test_a_disabled_signer_is_refused_and_not_named(api: Api, cert_signer: Signer) -> None:
    api.patch(f"/external-jwt-signers/{cert_signer.id}", json={"enabled": False})

    result = ext_login(api, cert_signer.token(identity(api)))

    assert result.status_code == 401
    assert cert_signer.id not in challenge(result)["id"].split("|")


def test_an_hmac_token_keyed_with_the_public_certificate_is_refused(api: Api, cert_signer: Signer) -> None:
    public = cert_signer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(cert_signer.clock.now().timestamp())
    payload = {"iss": cert_signer.issuer, "sub": identity(api), "aud": AUDIENCE, "exp": now + 300}
    forged = _hs256(payload, public, cert_signer.kid)

    assert ext_login(api, forged).status_code == 401


def _hs256(payload: dict[str, Any], secret: bytes, kid: str) -> str:
    """An HS256 JWS built by hand (pyjwt refuses a PEM as an HMAC key)."""
    import base64
    import hashlib
    import hmac

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = (
        b64(json.dumps({"alg": "HS256", "kid": kid}).encode()) + "." + b64(json.dumps(payload).encode())
    )
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + b64(signature)


def test_a_disabled_identity_is_refused(api: Api, cert_signer: Signer) -> None:
    person = identity(api)
    api.post(f"/identities/{person}/disable", json={"durationMinutes": 0})

    result = ext_login(api, cert_signer.token(person))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_an_auth_policy_without_ext_jwt_refuses_it(api: Api, cert_signer: Signer) -> None:
    policy = api.create(
        "/auth-policies",
        {"name": unique("no-jwt"), "primary": {"extJwt": {"allowed": False}}, "secondary": {}},
    )
    person = identity(api, authPolicyId=policy)

    result = ext_login(api, cert_signer.token(person))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_allowed_signers_limit_which_signers_log_in(
    api: Api, cert_signer: Signer, jwks_signer: Signer
) -> None:
    policy = api.create(
        "/auth-policies",
        {
            "name": unique("one-signer"),
            "primary": {"extJwt": {"allowed": True, "allowedSigners": [jwks_signer.id]}},
            "secondary": {},
        },
    )
    person = identity(api, authPolicyId=policy)

    assert ext_login(api, cert_signer.token(person)).status_code == 401
    assert ext_login(api, jwks_signer.token(person)).status_code == 200


def test_the_second_bearer_token_is_tried_too(api: Api, cert_signer: Signer) -> None:
    person = identity(api)

    result = ext_login(api, "not.a.jwt", cert_signer.token(person))

    assert result.status_code == 200


# -- the client's list of signers ------------------------------------------------------------------
def test_the_client_lists_enabled_signers_without_a_session(api: Api, clock: FixedClock) -> None:
    shown = make_cert_signer(
        api,
        clock,
        externalAuthUrl="https://login.example.test/auth",
        clientId="ziti-client",
        scopes=["openid", "email"],
    )
    hidden = make_cert_signer(api, clock, enabled=False)

    result = api.client.simulate_get(CLIENT + "/external-jwt-signers", params={"limit": "500"})

    assert result.status_code == 200
    rows = {row["id"]: row for row in result.json["data"]}
    assert hidden.id not in rows
    row = rows[shown.id]
    assert row["externalAuthUrl"] == "https://login.example.test/auth"
    assert row["clientId"] == "ziti-client"
    assert row["scopes"] == ["openid", "email"]
    assert row["audience"] == AUDIENCE
    assert row["targetToken"] == "ACCESS"
    assert {"certPem", "issuer", "jwksEndpoint", "kid"}.isdisjoint(row)
    assert result.json["meta"]["pagination"]["totalCount"] == len(rows)


def test_the_client_list_filters(api: Api, cert_signer: Signer) -> None:
    result = api.client.simulate_get(
        CLIENT + "/external-jwt-signers", params={"filter": f'id = "{cert_signer.id}"'}
    )

    assert [row["id"] for row in result.json["data"]] == [cert_signer.id]


# -- a secondary external JWT ----------------------------------------------------------------------
def test_a_required_secondary_signer_must_be_presented_on_every_request(api: Api, clock: FixedClock) -> None:
    signer = make_cert_signer(api, clock, externalAuthUrl="https://login.example.test/auth")
    policy = api.create(
        "/auth-policies",
        {"name": unique("2fa-jwt"), "primary": {}, "secondary": {"requireExtJwtSigner": signer.id}},
    )
    person = identity(api, authPolicyId=policy)
    username = unique("u")
    api.create(
        "/authenticators",
        {"identityId": person, "method": "updb", "username": username, "password": "pass-word-1"},
    )

    login = api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": "pass-word-1"},
    ).json["data"]

    [query] = login["authQueries"]
    assert query["typeId"] == "EXT-JWT"
    assert query["httpUrl"] == "https://login.example.test/auth"
    assert query["id"] == signer.id
    assert login["isMfaRequired"] is False
    token = login["token"]
    bare = api.get("/current-identity", token=token, base=CLIENT)
    assert bare.status_code == 401
    assert challenge(bare)["realm"] == "openziti-secondary-ext-jwt"
    with_jwt = api.get(
        "/current-identity",
        token=token,
        base=CLIENT,
        headers={"Authorization": f"Bearer {signer.token(person)}"},
    )
    assert with_jwt.status_code == 200
    someone_else = api.get(
        "/current-identity",
        token=token,
        base=CLIENT,
        headers={"Authorization": f"Bearer {signer.token(identity(api))}"},
    )
    assert someone_else.status_code == 401
    current = api.get("/current-api-session", token=token, base=CLIENT).json["data"]
    assert [q["typeId"] for q in current["authQueries"]] == ["EXT-JWT"]


@pytest.mark.parametrize("claim", ["exp", "nbf"])
def test_a_signed_token_with_an_absurd_numeric_date_is_refused(
    api: Api, cert_signer: Signer, claim: str
) -> None:
    """A properly signed token whose ``exp``/``nbf`` overflows a float is invalid, never a 500."""
    person = identity(api)
    result = ext_login(api, cert_signer.token(person, **{claim: 10**400}))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"


def test_a_deeply_nested_bearer_token_is_no_candidate(api: Api) -> None:
    """A token whose header or payload nests deeper than a JSON parser's stack is a missing one."""
    nested = base64.urlsafe_b64encode(("[" * 4000 + "]" * 4000).encode()).rstrip(b"=").decode()
    header = base64.urlsafe_b64encode(b'{"alg":"RS256","kid":"k"}').rstrip(b"=").decode()
    result = ext_login(api, f"{header}.{nested}.sig", f"{nested}.{nested}.sig")

    assert result.status_code == 401
    assert challenge(result)["error"] == "missing"


def test_challenge_parameters_are_quoted_strings() -> None:
    """An issuer holding ``"`` or ``\\`` is escaped in the challenge (RFC 7235 quoted-string)."""
    from datetime import UTC, datetime

    from engine.entities.trust import ExternalJwtSigner
    from engine.managers.authentication.ext_jwt import REALM_PRIMARY
    from engine.managers.authentication.ext_jwt import challenge as make_challenge

    now = datetime(2026, 1, 1, tzinfo=UTC)
    signer = ExternalJwtSigner(
        id="s1", created_at=now, updated_at=now, name="odd", issuer='https://idp.test/"a\\b'
    )

    value = make_challenge(REALM_PRIMARY, "missing", [signer])

    assert 'issuer="https://idp.test/\\"a\\\\b"' in value
    assert 'id="s1"' in value


# -- the times a token must carry -------------------------------------------------------------------
def test_a_token_without_exp_is_refused(api: Api, cert_signer: Signer) -> None:
    """A token that never expires is no credential (OpenZiti accepts one: docs/api.md §12.7)."""
    result = ext_login(api, cert_signer.token(identity(api), exp=None))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert challenge(result)["error"] == "invalid"


@pytest.mark.parametrize("claim", ["iat", "nbf"])
def test_a_token_from_the_future_is_refused(api: Api, cert_signer: Signer, claim: str) -> None:
    future: dict[str, Any] = {claim: int(cert_signer.clock.now().timestamp()) + 600}

    result = ext_login(api, cert_signer.token(identity(api), **future))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert challenge(result)["error"] == "invalid"


@pytest.mark.parametrize("claim", ["iat", "nbf"])
def test_a_little_clock_skew_is_tolerated(api: Api, cert_signer: Signer, claim: str) -> None:
    """An identity provider's clock a few seconds ahead of the controller's still logs in."""
    ahead: dict[str, Any] = {claim: int(cert_signer.clock.now().timestamp()) + 10}

    result = ext_login(api, cert_signer.token(identity(api), **ahead))

    assert result.status_code == 200, result.text


@pytest.mark.parametrize("value", ["soon", None, True, [1], float("nan"), float("inf")])
def test_an_exp_that_is_no_number_is_refused(api: Api, cert_signer: Signer, value: Any) -> None:
    """An ``exp`` of ``NaN`` or ``Infinity`` would never pass; neither is JSON (some parsers read
    them), so such a token is no candidate at all (``missing``)."""
    result = ext_login(api, _signed(cert_signer, identity(api), exp=value))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert challenge(result)["error"] == ("missing" if isinstance(value, float) else "invalid")


def _signed(signer: Signer, sub: str, **claims: Any) -> str:
    """A token of ``signer`` with ``claims`` as given (``Signer.token`` drops None values)."""
    now = int(signer.clock.now().timestamp())
    payload = {"iss": signer.issuer, "sub": sub, "aud": AUDIENCE, "iat": now, **claims}
    return jwt.encode(payload, signer.key, algorithm=signer.alg, headers={"kid": signer.kid})


def _secondary_session(api: Api, clock: FixedClock) -> tuple[Signer, str, str]:
    """A cert signer required as a secondary factor, an identity under it, and its API session."""
    signer = make_cert_signer(api, clock, externalAuthUrl="https://login.example.test/auth")
    policy = api.create(
        "/auth-policies",
        {"name": unique("2fa-jwt"), "primary": {}, "secondary": {"requireExtJwtSigner": signer.id}},
    )
    person = identity(api, authPolicyId=policy)
    username = unique("u")
    api.create(
        "/authenticators",
        {"identityId": person, "method": "updb", "username": username, "password": "pass-word-1"},
    )
    login = api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": "pass-word-1"},
    )
    assert login.status_code == 200, login.text
    return signer, person, str(login.json["data"]["token"])


def test_a_secondary_token_without_exp_is_refused(api: Api, clock: FixedClock) -> None:
    signer, person, session = _secondary_session(api, clock)

    def current(token: str) -> Any:
        return api.get(
            "/current-identity", token=session, base=CLIENT, headers={"Authorization": f"Bearer {token}"}
        )

    forever = current(signer.token(person, exp=None))
    expiring = current(signer.token(person))

    assert forever.status_code == 401
    assert challenge(forever)["realm"] == "openziti-secondary-ext-jwt"
    assert challenge(forever)["error"] == "invalid"
    assert expiring.status_code == 200


# -- fetching a JWKS -----------------------------------------------------------------------------------
def test_a_redirecting_jwks_endpoint_is_not_followed(api: Api, clock: FixedClock, jwks: Jwks) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    real = f"/{unique('jwks')}.json"
    moved = f"/{unique('moved')}.json"
    jwks.publish(real, ("key-1", key))
    jwks.redirects[moved] = jwks.url(real)
    signer = Signer(api, clock, key, "key-1", "ES256", jwksEndpoint=jwks.url(moved))

    result = ext_login(api, signer.token(identity(api)))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert jwks.fetches[moved] == 1
    assert real not in jwks.fetches


@pytest.fixture(scope="module")
def strict_api(
    tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock
) -> Iterator[Api]:
    """An app whose signers may name loopback endpoints but whose verifier (the default one)
    refuses to fetch from loopback: as after an endpoint was set while loopback was allowed, or a
    host name that resolves to loopback only when the keys are fetched."""
    admin = open_admin_api(
        tmp_path_factory.mktemp("ext-jwt-strict"), pki_template, clock, verifier=JwksVerifier()
    )
    yield admin
    admin.app.ctrl.env.store.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_loopback_jwks_endpoint_is_not_fetched_when_loopback_is_not_allowed(
    strict_api: Api, clock: FixedClock, jwks: Jwks, host: str
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    path = f"/{unique('jwks')}.json"
    jwks.publish(path, ("key-1", key))
    endpoint = jwks.url(path).replace("127.0.0.1", host)
    signer = Signer(strict_api, clock, key, "key-1", "ES256", jwksEndpoint=endpoint)

    result = ext_login(strict_api, signer.token(identity(strict_api)))

    assert result.status_code == 401
    assert error(result)["code"] == "INVALID_AUTH"
    assert path not in jwks.fetches


def test_logins_with_unknown_kids_fetch_the_jwks_at_a_bounded_rate(
    tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock, jwks: Jwks
) -> None:
    """However many logins name keys the JWKS does not have, the controller fetches it at most
    once per interval (an hour here: the test never waits for it)."""
    verifier = JwksVerifier(min_refetch=3600.0, allow_loopback=True)
    admin = open_admin_api(tmp_path_factory.mktemp("ext-jwt-rate"), pki_template, clock, verifier=verifier)
    try:
        key = ec.generate_private_key(ec.SECP256R1())
        path = f"/{unique('jwks')}.json"
        jwks.publish(path, ("key-1", key))
        signer = Signer(admin, clock, key, "key-1", "ES256", jwksEndpoint=jwks.url(path))
        person = identity(admin)

        known = ext_login(admin, signer.token(person))
        unknown = [ext_login(admin, signer.token(person, kid=f"guess-{n}")).status_code for n in range(5)]

        assert known.status_code == 200
        assert unknown == [401] * 5
        assert jwks.fetches[path] == 1
    finally:
        admin.app.ctrl.env.store.close()
