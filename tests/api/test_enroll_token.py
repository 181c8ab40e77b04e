"""``POST /enroll/token``: an external identity provider's JWT (``Authorization: Bearer``) creates its
identity, with a certificate from our CA when a CSR comes along, or for token (ext-jwt) logins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from engine.testing import FixedClock
from tests.api.certs import Key, csr_pem, load_chain, new_key, sha1_fingerprint, split_chain, tls, unique
from tests.api.jwt_helpers import Jwks, Signer, make_cert_signer, open_admin_api
from tests.conftest import CLIENT, Api

ISSUER_HEADER = "ziti-token-issuer-id"


@pytest.fixture(scope="module")
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, pki_template: Path, clock: FixedClock) -> Iterator[Api]:
    admin = open_admin_api(tmp_path_factory.mktemp("enroll-token"), pki_template, clock)
    yield admin
    admin.app.ctrl.env.store.close()


@pytest.fixture(scope="module")
def jwks() -> Iterator[Jwks]:
    served = Jwks()
    served.thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    served.thread.join(timeout=5)


@pytest.fixture(scope="module")
def key() -> Key:
    """One device key for the module's CSRs (each enrollment creates its own identity)."""
    return new_key()


def cert_signer(api: Api, clock: FixedClock, **fields: Any) -> Signer:
    """A certificate signer that allows enrollment to a certificate (unless ``fields`` say otherwise)."""
    return make_cert_signer(api, clock, **{"enrollToCertEnabled": True, **fields})


def token_signer(api: Api, clock: FixedClock, **fields: Any) -> Signer:
    """A signer that allows enrollment to tokens; its tokens name identities by ``externalId``."""
    return make_cert_signer(api, clock, **{"enrollToTokenEnabled": True, "useExternalId": True, **fields})


def enroll(
    api: Api,
    *tokens: str,
    body: Any = None,
    issuer_id: str | None = None,
    raw: str | None = None,
) -> falcon.testing.Result:
    """``POST /enroll/token`` without a session; ``body`` as JSON, or ``raw`` text."""
    headers = {"Authorization": ", ".join(f"Bearer {t}" for t in tokens)} if tokens else {}
    if issuer_id is not None:
        headers[ISSUER_HEADER] = issuer_id
    if raw is not None:
        headers["Content-Type"] = "application/json"
        return api.client.simulate_post(CLIENT + "/enroll/token", headers=headers, body=raw)
    return api.client.simulate_post(CLIENT + "/enroll/token", headers=headers, json=body)


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def identity_by_external_id(api: Api, external_id: str) -> dict[str, Any] | None:
    found = api.get("/identities", params={"filter": f'externalId = "{external_id}"'}).json["data"]
    return dict(found[0]) if found else None


def assert_refused(result: falcon.testing.Result, status: int, code: str, external_id: str, api: Api) -> None:
    """The enrollment was refused with ``status``/``code`` and created no identity."""
    assert result.status_code == status, result.text
    assert error(result)["code"] == code
    assert identity_by_external_id(api, external_id) is None


# -- enrollment to a certificate -------------------------------------------------------------------
def test_a_token_and_a_csr_enroll_to_a_certificate(api: Api, clock: FixedClock, key: Key) -> None:
    signer = cert_signer(api, clock)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)})

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/json"
    data = result.json["data"]
    assert set(data) == {"cert", "ca"}
    assert data["ca"] == api.ctrl.pki.ca_bundle_pem()
    chain = load_chain(data["cert"])
    assert chain[1] == api.ctrl.pki.intermediate_cert
    identity = identity_by_external_id(api, sub)
    assert identity is not None
    assert chain[0].subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == identity["id"]
    assert identity["name"] == sub
    assert identity["roleAttributes"] == []
    assert identity["authPolicyId"] == "default"
    assert identity["typeId"] == "Default"
    cert = identity["authenticators"]["cert"]
    assert cert["fingerprint"] == sha1_fingerprint(data["cert"])
    authenticator = api.get(f"/authenticators/{cert['id']}").json["data"]
    assert authenticator["isIssuedByNetwork"] is True


def test_the_issued_certificate_logs_in(api: Api, clock: FixedClock, key: Key) -> None:
    signer = cert_signer(api, clock)
    sub = unique("subject")
    chain = enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)}).json["data"]["cert"]

    login = api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(*split_chain(chain))
    )

    assert login.status_code == 200, login.text
    assert login.json["data"]["identity"]["name"] == sub


def test_a_jwks_signers_token_enrolls(api: Api, clock: FixedClock, jwks: Jwks, key: Key) -> None:
    signing_key = ec.generate_private_key(ec.SECP256R1())
    path = f"/{unique('jwks')}.json"
    jwks.publish(path, ("key-1", signing_key))
    signer = Signer(
        api, clock, signing_key, "key-1", "ES256", jwksEndpoint=jwks.url(path), enrollToCertEnabled=True
    )
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)})

    assert result.status_code == 200, result.text
    assert identity_by_external_id(api, sub) is not None


@pytest.mark.parametrize(
    ("attribute_claim", "expected"),
    [
        (["sales", "emea", "", "sales"], ["emea", "sales"]),
        ("emea", ["emea"]),
        ("", []),
    ],
)
def test_the_signers_selectors_name_the_identity_and_its_attributes(
    api: Api, clock: FixedClock, key: Key, attribute_claim: Any, expected: list[str]
) -> None:
    signer = cert_signer(
        api,
        clock,
        claimsProperty="/user/id",
        enrollNameClaimsSelector="preferred_username",
        enrollAttributeClaimsSelector="/groups",
    )
    person, name = unique("person-id"), unique("person")

    result = enroll(
        api,
        signer.token(unique("sub"), user={"id": person}, preferred_username=name, groups=attribute_claim),
        body={"clientCsr": csr_pem(key)},
    )

    assert result.status_code == 200, result.text
    identity = identity_by_external_id(api, person)
    assert identity is not None
    assert identity["name"] == name
    assert identity["roleAttributes"] == expected


def test_selectors_are_json_pointers_with_escapes_and_array_indexes(api: Api, clock: FixedClock) -> None:
    signer = token_signer(api, clock, claimsProperty="/ids/1", enrollNameClaimsSelector="/profile/a~1b~0c")
    person, name = unique("person-id"), unique("person")

    result = enroll(api, signer.token(unique("sub"), ids=["first", person], profile={"a/b~c": name}))

    assert result.status_code == 200, result.text
    identity = identity_by_external_id(api, person)
    assert identity is not None
    assert identity["name"] == name


def test_the_identity_gets_the_signers_enrollment_auth_policy(api: Api, clock: FixedClock, key: Key) -> None:
    policy = api.create(
        "/auth-policies",
        {"name": unique("certs-only"), "primary": {"cert": {"allowed": True}}, "secondary": {}},
    )
    signer = cert_signer(api, clock, enrollAuthPolicyId=policy)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)})

    assert result.status_code == 200, result.text
    identity = identity_by_external_id(api, sub)
    assert identity is not None
    assert identity["authPolicyId"] == policy


# -- enrollment to tokens ----------------------------------------------------------------------------
@pytest.mark.parametrize("body", [None, {}, {"clientCsr": None}])
def test_a_token_alone_enrolls_an_identity_that_logs_in_with_its_tokens(
    api: Api, clock: FixedClock, body: Any
) -> None:
    signer = token_signer(api, clock)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body=body)

    assert result.status_code == 200, result.text
    assert result.json["data"] == {}
    identity = identity_by_external_id(api, sub)
    assert identity is not None
    assert identity["authenticators"] == {}
    login = api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "ext-jwt"},
        headers={"Authorization": f"Bearer {signer.token(sub)}"},
        json={},
    )
    assert login.status_code == 200, login.text
    assert login.json["data"]["identityId"] == identity["id"]


# -- which token ---------------------------------------------------------------------------------------
def test_the_issuer_header_names_the_signer_to_check_with(api: Api, clock: FixedClock) -> None:
    signer = token_signer(api, clock)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), issuer_id=signer.id)

    assert result.status_code == 200, result.text
    assert identity_by_external_id(api, sub) is not None


@pytest.mark.parametrize("case", ["unknown", "disabled", "another signer"])
def test_a_header_naming_no_usable_signer_for_the_token_is_refused(
    api: Api, clock: FixedClock, case: str
) -> None:
    signer = token_signer(api, clock)
    other = token_signer(api, clock, enabled=case != "disabled")
    named = {"unknown": "no-such-signer", "disabled": other.id, "another signer": other.id}[case]
    sub = unique("subject")

    result = enroll(api, signer.token(sub), issuer_id=named)

    assert_refused(result, 400, "INVALID_ENROLLMENT_TOKEN", sub, api)


def test_a_header_naming_a_signer_with_the_same_keys_but_another_issuer_is_refused(
    api: Api, clock: FixedClock, jwks: Jwks
) -> None:
    signing_key = ec.generate_private_key(ec.SECP256R1())
    path = f"/{unique('jwks')}.json"
    jwks.publish(path, ("key-1", signing_key))
    fields = {"jwksEndpoint": jwks.url(path), "enrollToTokenEnabled": True, "useExternalId": True}
    issuer = Signer(api, clock, signing_key, "key-1", "ES256", **fields)
    lookalike = Signer(api, clock, signing_key, "key-1", "ES256", **fields)
    sub = unique("subject")

    result = enroll(api, issuer.token(sub), issuer_id=lookalike.id)

    assert_refused(result, 400, "INVALID_ENROLLMENT_TOKEN", sub, api)


def test_the_first_valid_bearer_token_is_used(api: Api, clock: FixedClock) -> None:
    signer = token_signer(api, clock)
    sub = unique("subject")
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    result = enroll(api, signer.token(unique("forged"), key=stranger), signer.token(sub))

    assert result.status_code == 200, result.text
    assert identity_by_external_id(api, sub) is not None


# -- invalid tokens --------------------------------------------------------------------------------------
def test_no_bearer_token_is_an_invalid_enrollment_token(api: Api) -> None:
    result = api.client.simulate_post(CLIENT + "/enroll/token", json={})

    assert result.status_code == 400
    assert error(result)["code"] == "INVALID_ENROLLMENT_TOKEN"


@pytest.mark.parametrize(
    "case",
    ["malformed", "wrong key", "expired", "not yet valid", "unknown issuer", "wrong audience", "no kid"],
)
def test_invalid_tokens_are_refused(api: Api, clock: FixedClock, case: str) -> None:
    signer = token_signer(api, clock)
    sub = unique("subject")
    now = int(clock.now().timestamp())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = {
        "malformed": lambda: "not-a-jwt",
        "wrong key": lambda: signer.token(sub, key=stranger),
        "expired": lambda: signer.token(sub, exp=now - 1),
        "not yet valid": lambda: signer.token(sub, nbf=now + 60),
        "unknown issuer": lambda: signer.token(sub, iss="https://nobody.example.test"),
        "wrong audience": lambda: signer.token(sub, aud="someone-else"),
        "no kid": lambda: signer.token(sub, kid=None),
    }[case]()

    assert_refused(enroll(api, token), 400, "INVALID_ENROLLMENT_TOKEN", sub, api)


def test_a_disabled_signers_token_is_refused(api: Api, clock: FixedClock) -> None:
    signer = token_signer(api, clock, enabled=False)
    sub = unique("subject")

    assert_refused(enroll(api, signer.token(sub)), 400, "INVALID_ENROLLMENT_TOKEN", sub, api)


@pytest.mark.parametrize(
    ("fields", "claims"),
    [
        ({"enrollNameClaimsSelector": "missing-name"}, {}),
        ({"enrollNameClaimsSelector": "number"}, {"number": 7}),
        ({"enrollNameClaimsSelector": "name"}, {"name": ""}),
        ({"claimsProperty": "missing-id"}, {}),
        ({"claimsProperty": "number"}, {"number": 7}),
        ({"claimsProperty": "id"}, {"id": ""}),
        ({"enrollAttributeClaimsSelector": "missing-groups"}, {}),
        ({"enrollAttributeClaimsSelector": "number"}, {"number": 7}),
        ({"enrollAttributeClaimsSelector": "groups"}, {"groups": ["ok", 7]}),
    ],
)
def test_claims_the_selectors_can_not_use_make_the_token_invalid(
    api: Api, clock: FixedClock, fields: dict[str, Any], claims: dict[str, Any]
) -> None:
    signer = token_signer(api, clock, **fields)
    sub = unique("subject")

    result = enroll(api, signer.token(sub, **claims))

    assert_refused(result, 400, "INVALID_ENROLLMENT_TOKEN", sub, api)
    assert api.get("/identities", params={"filter": f'name = "{sub}"'}).json["data"] == []


# -- refusals -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("second", ["certificate", "token"])
def test_an_external_id_enrolls_once(api: Api, clock: FixedClock, key: Key, second: str) -> None:
    signer = make_cert_signer(api, clock, enrollToCertEnabled=True, enrollToTokenEnabled=True)
    sub = unique("subject")
    assert enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)}).status_code == 200
    body = {"clientCsr": csr_pem(key)} if second == "certificate" else {}

    result = enroll(api, signer.token(sub), body=body)

    assert result.status_code == 409, result.text
    assert error(result)["code"] == "ENROLLMENT_IDENTITY_ALREADY_ENROLLED"


@pytest.mark.parametrize(
    ("fields", "certificate"),
    [
        ({"enrollToCertEnabled": False, "enrollToTokenEnabled": True}, True),
        ({"enrollToCertEnabled": True, "enrollToTokenEnabled": False}, False),
    ],
)
def test_a_signer_allows_only_its_kinds_of_enrollment(
    api: Api, clock: FixedClock, key: Key, fields: dict[str, Any], certificate: bool
) -> None:
    signer = make_cert_signer(api, clock, **fields)
    sub = unique("subject")
    body = {"clientCsr": csr_pem(key)} if certificate else {}

    assert_refused(enroll(api, signer.token(sub), body=body), 409, "INVALID_ENROLLMENT_NOT_ALLOWED", sub, api)


def test_an_enrollment_policy_that_no_longer_allows_certificates_refuses(
    api: Api, clock: FixedClock, key: Key
) -> None:
    policy = api.create(
        "/auth-policies",
        {"name": unique("certs-then-not"), "primary": {"cert": {"allowed": True}}, "secondary": {}},
    )
    signer = cert_signer(api, clock, enrollAuthPolicyId=policy)
    patched = api.patch(f"/auth-policies/{policy}", json={"primary": {"cert": {"allowed": False}}})
    assert patched.status_code == 200, patched.text
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body={"clientCsr": csr_pem(key)})

    assert_refused(result, 409, "INVALID_ENROLLMENT_NOT_ALLOWED", sub, api)


@pytest.mark.parametrize("case", ["ext-jwt disallowed", "another signer allowed"])
def test_an_enrollment_policy_must_allow_the_signers_tokens(api: Api, clock: FixedClock, case: str) -> None:
    policy = api.create("/auth-policies", {"name": unique("tokens"), "primary": {}, "secondary": {}})
    signer = token_signer(api, clock, enrollAuthPolicyId=policy)
    if case == "ext-jwt disallowed":
        change: dict[str, Any] = {"allowed": False}
    else:
        change = {"allowed": True, "allowedSigners": [make_cert_signer(api, clock).id]}
    assert api.patch(f"/auth-policies/{policy}", json={"primary": {"extJwt": change}}).status_code == 200
    sub = unique("subject")

    assert_refused(enroll(api, signer.token(sub)), 409, "INVALID_ENROLLMENT_NOT_ALLOWED", sub, api)


def test_a_policy_listing_the_signer_allows_its_tokens(api: Api, clock: FixedClock) -> None:
    policy = api.create("/auth-policies", {"name": unique("listed"), "primary": {}, "secondary": {}})
    signer = token_signer(api, clock, enrollAuthPolicyId=policy)
    listed = {"primary": {"extJwt": {"allowed": True, "allowedSigners": [signer.id]}}}
    assert api.patch(f"/auth-policies/{policy}", json=listed).status_code == 200
    sub = unique("subject")

    assert enroll(api, signer.token(sub)).status_code == 200


@pytest.mark.parametrize("csr", ["not a csr", "   "])
def test_a_csr_that_can_not_be_signed_is_refused(api: Api, clock: FixedClock, csr: str) -> None:
    signer = cert_signer(api, clock)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), body={"clientCsr": csr})

    assert_refused(result, 400, "COULD_NOT_PROCESS_CSR", sub, api)
    assert error(result)["cause"]["field"] == "clientCsr"


def test_a_name_already_taken_is_refused(api: Api, clock: FixedClock) -> None:
    taken = unique("taken")
    api.create("/identities", {"name": taken, "type": "User", "isAdmin": False})
    signer = token_signer(api, clock, enrollNameClaimsSelector="name")
    sub = unique("subject")

    result = enroll(api, signer.token(sub, name=taken))

    assert_refused(result, 400, "COULD_NOT_VALIDATE", sub, api)
    assert error(result)["cause"]["field"] == "name"


def test_attributes_with_a_role_prefix_are_refused(api: Api, clock: FixedClock) -> None:
    signer = token_signer(api, clock, enrollAttributeClaimsSelector="groups")
    sub = unique("subject")

    result = enroll(api, signer.token(sub, groups=["ok", "#all"]))

    assert_refused(result, 400, "COULD_NOT_VALIDATE", sub, api)
    assert error(result)["cause"]["field"] == "roleAttributes"


@pytest.mark.parametrize(
    ("raw", "code", "field"),
    [('{"clientCsr": 5}', "COULD_NOT_VALIDATE", "clientCsr"), ("{", "COULD_NOT_PARSE_BODY", None)],
)
def test_a_body_that_is_not_a_token_enrollment_request_is_refused(
    api: Api, clock: FixedClock, raw: str, code: str, field: str | None
) -> None:
    signer = cert_signer(api, clock)
    sub = unique("subject")

    result = enroll(api, signer.token(sub), raw=raw)

    assert_refused(result, 400, code, sub, api)
    assert error(result)["cause"].get("field") == field


def test_the_certificate_is_a_client_certificate(api: Api, clock: FixedClock, key: Key) -> None:
    signer = cert_signer(api, clock)

    data = enroll(api, signer.token(unique("subject")), body={"clientCsr": csr_pem(key)}).json["data"]

    leaf = load_chain(data["cert"])[0]
    usage = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH in usage
