"""``/authenticators`` (admin): updb and cert credentials of identities."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.entities.identities import Identity
from engine.entities.routers import EdgeRouter
from engine.ports import UnitOfWork
from tests.api.certs import ThirdPartyCa, csr_pem, enroll_ott, verified_ca
from tests.conftest import Api


def new_identity(api: Api, name: str, **extra: Any) -> str:
    return api.create("/identities", {"name": name, "isAdmin": False, "type": "User", **extra})


def updb(api: Api, identity_id: str, username: str, password: str) -> str:
    body = {"identityId": identity_id, "method": "updb", "username": username, "password": password}
    return api.create("/authenticators", body)


def self_signed_pem(common_name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode("ascii")


def sha1_fingerprint(pem: str) -> str:
    der = x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)
    return hashlib.sha1(der, usedforsecurity=False).hexdigest()


def error_of(result: Any) -> dict[str, Any]:
    return dict(result.json["error"])


def login_status(api: Api, username: str, password: str) -> int:
    result = api.client.simulate_post(
        "/edge/management/v1/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )
    return int(result.status_code)


# -- create / read ---------------------------------------------------------------------------------
def test_updb_authenticator_is_created_and_read_without_the_password(api: Api) -> None:
    identity_id = new_identity(api, "ann")
    result = api.post(
        "/authenticators",
        json={"identityId": identity_id, "method": "updb", "username": "ann-login", "password": "ann-secret"},
    )
    assert result.status_code == 201
    authenticator_id = result.json["data"]["id"]
    assert result.json["data"]["_links"] == {"self": {"href": f"./authenticators/{authenticator_id}"}}

    data = api.get(f"/authenticators/{authenticator_id}").json["data"]
    assert data["method"] == "updb"
    assert data["username"] == "ann-login"
    assert data["identityId"] == identity_id
    assert data["identity"]["id"] == identity_id
    assert data["identity"]["name"] == "ann"
    assert data["identity"]["entity"] == "identities"
    assert data["_links"]["identities"] == {"href": f"./identities/{identity_id}"}
    assert not {"password", "passwordHash", "salt"} & set(data)
    assert "ann-secret" not in str(data)
    summary = api.get(f"/identities/{identity_id}").json["data"]["authenticators"]
    assert summary == {"updb": {"id": authenticator_id, "username": "ann-login"}}


def test_created_credentials_log_in(api: Api) -> None:
    updb(api, new_identity(api, "bob"), "bob-login", "bob-secret")
    assert api.login("bob-login", "bob-secret")
    assert login_status(api, "bob-login", "wrong-secret") == 401


def test_cert_authenticator_gets_the_sha1_fingerprint(api: Api) -> None:
    identity_id = new_identity(api, "device")
    pem = self_signed_pem("device")
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": pem}
    )
    data = api.get(f"/authenticators/{authenticator_id}").json["data"]
    assert data["method"] == "cert"
    assert data["certPem"] == pem
    assert data["fingerprint"] == sha1_fingerprint(pem)
    assert "username" not in data
    listed = api.get("/authenticators", params={"filter": f'certFingerprint = "{sha1_fingerprint(pem)}"'})
    assert [a["id"] for a in listed.json["data"]] == [authenticator_id]


@pytest.mark.parametrize("missing", ["identityId", "method"])
def test_create_requires_identity_and_method(api: Api, missing: str) -> None:
    body = {
        "identityId": new_identity(api, "x"),
        "method": "updb",
        "username": "xuser",
        "password": "xpassword",
    }
    del body[missing]
    result = api.post("/authenticators", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == missing


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"method": "magic"}, "method"),
        ({"identityId": "no-such-identity"}, "identityId"),
        ({"username": None}, "username"),
        ({"password": None}, "password"),
        ({"username": "abc"}, "username"),
        ({"username": "u" * 101}, "username"),
        ({"password": "abcd"}, "password"),
        ({"password": "p" * 101}, "password"),
        ({"method": "cert"}, "certPem"),
        ({"method": "cert", "certPem": "not a certificate"}, "certPem"),
    ],
)
def test_create_validates_fields(api: Api, changes: dict[str, Any], field: str) -> None:
    body: dict[str, Any] = {
        "identityId": new_identity(api, "v"),
        "method": "updb",
        "username": "vuser",
        "password": "vpassword",
    }
    body.update(changes)
    body = {k: v for k, v in body.items() if v is not None}
    result = api.post("/authenticators", json=body)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == field


def test_one_authenticator_per_method_per_identity(api: Api) -> None:
    identity_id = new_identity(api, "one")
    updb(api, identity_id, "one-login", "one-secret")
    result = api.post(
        "/authenticators",
        json={"identityId": identity_id, "method": "updb", "username": "two-login", "password": "two-secret"},
    )
    assert result.status_code == 409
    assert error_of(result)["code"] == "MAX_AUTHENTICATOR_METHODS_REACHED"
    cert = api.post(
        "/authenticators",
        json={"identityId": identity_id, "method": "cert", "certPem": self_signed_pem("one")},
    )
    assert cert.status_code == 201


def test_usernames_are_unique(api: Api) -> None:
    updb(api, new_identity(api, "first"), "shared-login", "secret-1")
    result = api.post(
        "/authenticators",
        json={
            "identityId": new_identity(api, "second"),
            "method": "updb",
            "username": "shared-login",
            "password": "secret-2",
        },
    )
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == "username"


# -- replace / patch -------------------------------------------------------------------------------
def test_put_replaces_username_and_password(api: Api) -> None:
    authenticator_id = updb(api, new_identity(api, "carl"), "carl-login", "carl-secret")
    result = api.put(
        f"/authenticators/{authenticator_id}", json={"username": "carl-new", "password": "carl-new-secret"}
    )
    assert result.status_code == 200
    assert result.json["data"] == {}
    assert login_status(api, "carl-login", "carl-secret") == 401
    assert api.login("carl-new", "carl-new-secret")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"password": "long-enough"}, "username"),
        ({"username": "someone"}, "password"),
        ({"username": "abc", "password": "long-enough"}, "username"),
        ({"username": "someone", "password": "abcd"}, "password"),
    ],
)
def test_put_validates_username_and_password(api: Api, body: dict[str, Any], field: str) -> None:
    authenticator_id = updb(api, new_identity(api, "dora"), "dora-login", "dora-secret")
    result = api.put(f"/authenticators/{authenticator_id}", json=body)
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == field


def test_patch_changes_only_what_is_sent(api: Api) -> None:
    authenticator_id = updb(api, new_identity(api, "eve"), "eve-login", "eve-secret")
    assert api.patch(f"/authenticators/{authenticator_id}", json={"password": "eve-other"}).status_code == 200
    assert api.login("eve-login", "eve-other")
    assert api.patch(f"/authenticators/{authenticator_id}", json={"tags": {"k": "v"}}).status_code == 200
    data = api.get(f"/authenticators/{authenticator_id}").json["data"]
    assert data["username"] == "eve-login"
    assert data["tags"] == {"k": "v"}
    short = api.patch(f"/authenticators/{authenticator_id}", json={"username": "ev"})
    assert short.status_code == 400
    assert error_of(short)["cause"]["field"] == "username"


def test_cert_authenticators_take_no_username_or_password(api: Api) -> None:
    identity_id = new_identity(api, "certy")
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": self_signed_pem("certy")}
    )
    result = api.patch(f"/authenticators/{authenticator_id}", json={"password": "some-secret"})
    assert result.status_code == 409
    assert error_of(result)["code"] == "CAN_NOT_UPDATE_AUTHENTICATOR"


# -- delete, lists, 404s, authorization --------------------------------------------------------------
def test_delete_removes_it_and_ends_its_sessions(api: Api) -> None:
    authenticator_id = updb(api, new_identity(api, "fay"), "fay-login", "fay-secret")
    token = api.login("fay-login", "fay-secret")
    result = api.delete(f"/authenticators/{authenticator_id}")
    assert result.status_code == 200
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 404
    assert api.get("/current-identity", token=token).status_code == 401
    assert login_status(api, "fay-login", "fay-secret") == 401


def test_list_filters_and_pages(api: Api) -> None:
    gus = new_identity(api, "gus")
    updb(api, gus, "gus-login", "gus-secret")
    api.create("/authenticators", {"identityId": gus, "method": "cert", "certPem": self_signed_pem("gus")})
    updb(api, new_identity(api, "hal"), "hal-login", "hal-secret")

    by_identity = api.get("/authenticators", params={"filter": f'identityId = "{gus}"'}).json["data"]
    assert sorted(a["method"] for a in by_identity) == ["cert", "updb"]
    by_method = api.get(
        "/authenticators", params={"filter": 'method = "updb" and username contains "-login"'}
    )
    assert sorted(a["username"] for a in by_method.json["data"]) == ["gus-login", "hal-login"]
    paged = api.get("/authenticators", params={"limit": 1})
    assert len(paged.json["data"]) == 1
    assert paged.json["meta"]["pagination"]["totalCount"] == 4  # the default admin's included
    assert "method" in paged.json["meta"]["filterableFields"]


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "DELETE"])
def test_unknown_authenticator_is_404(api: Api, method: str) -> None:
    body = {"username": "someone", "password": "long-enough"} if method in ("PUT", "PATCH") else None
    result = api.request(method, "/authenticators/nope", json=body)
    assert result.status_code == 404
    assert error_of(result)["code"] == "NOT_FOUND"


def test_non_admins_get_401(api: Api) -> None:
    updb(api, new_identity(api, "ivy"), "ivy-login", "ivy-secret")
    token = api.login("ivy-login", "ivy-secret")
    result = api.get("/authenticators", token=token)
    assert result.status_code == 401
    assert error_of(result)["code"] == "UNAUTHORIZED"


def test_router_identities_get_no_authenticators(api: Api) -> None:
    env = api.ctrl.env
    now = env.clock.now()
    uow = UnitOfWork(env.store)
    uow.put(
        EdgeRouter(id="er-auth", created_at=now, updated_at=now, name="er-auth", is_tunneler_enabled=True)
    )
    uow.put(Identity(id="er-auth", created_at=now, updated_at=now, name="er-auth", type_id="Router"))
    env.commit(uow)
    result = api.post(
        "/authenticators",
        json={
            "identityId": "er-auth",
            "method": "updb",
            "username": "router-login",
            "password": "router-secret",
        },
    )
    assert result.status_code == 400
    assert error_of(result)["cause"]["field"] == "identityId"


# -- re-enroll ---------------------------------------------------------------------------------------
def _future(hours: int = 2) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def _re_enroll(api: Api, authenticator_id: str, expires_at: str | None = None) -> Any:
    body = {} if expires_at is None else {"expiresAt": expires_at}
    return api.post(f"/authenticators/{authenticator_id}/re-enroll", json=body)


def _enrollment_of(api: Api, result: Any) -> dict[str, Any]:
    assert result.status_code == 201, result.text
    enrollment_id = result.json["data"]["id"]
    assert result.json["data"]["_links"] == {"self": {"href": f"./enrollments/{enrollment_id}"}}
    return dict(api.get(f"/enrollments/{enrollment_id}").json["data"])


def test_re_enroll_updb_keeps_the_username_and_removes_the_authenticator(api: Api) -> None:
    identity_id = new_identity(api, "jan")
    authenticator_id = updb(api, identity_id, "jan-login", "jan-secret")
    token = api.login("jan-login", "jan-secret")
    expires_at = _future()

    enrollment = _enrollment_of(api, _re_enroll(api, authenticator_id, expires_at))
    assert enrollment["method"] == "updb"
    assert enrollment["username"] == "jan-login"
    assert enrollment["identityId"] == identity_id
    wanted = datetime.fromisoformat(expires_at)
    assert abs(datetime.fromisoformat(enrollment["expiresAt"]) - wanted) < timedelta(milliseconds=1)
    assert enrollment["jwt"]
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 404
    assert login_status(api, "jan-login", "jan-secret") == 401
    assert api.get("/current-api-session", token=token).status_code == 401


def test_re_enroll_network_cert_becomes_ott(api: Api) -> None:
    device = enroll_ott(api, "kim")
    authenticator_id = api.get(
        "/authenticators", params={"filter": f'identityId = "{device.identity_id}"'}
    ).json["data"][0]["id"]
    enrollment = _enrollment_of(api, _re_enroll(api, authenticator_id, _future()))
    assert enrollment["method"] == "ott"
    assert enrollment["caId"] is None
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 404
    # the identity can enroll again with the new token
    again = api.client.simulate_post(
        "/edge/client/v1/enroll/ott", json={"token": enrollment["token"], "clientCsr": csr_pem()}
    )
    assert again.status_code == 200, again.text


@pytest.mark.parametrize("verified", [True, False])
def test_re_enroll_third_party_cert_becomes_ottca(api: Api, verified: bool) -> None:
    acme = ThirdPartyCa("Re-enroll CA")
    if verified:
        ca_id = verified_ca(api, acme)
    else:
        ca_id = api.create(
            "/cas",
            {
                "name": "unverified",
                "certPem": acme.pem,
                "isAuthEnabled": False,
                "isAutoCaEnrollmentEnabled": False,
                "isOttCaEnrollmentEnabled": True,
                "identityRoles": [],
            },
        )
    leaf, _ = acme.issue("lee")
    identity_id = new_identity(api, "lee")
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": leaf}
    )
    enrollment = _enrollment_of(api, _re_enroll(api, authenticator_id, _future()))
    assert enrollment["method"] == "ottca"
    assert enrollment["caId"] == ca_id
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 404


def test_re_enroll_cert_of_an_unknown_issuer_becomes_ott(api: Api) -> None:
    identity_id = new_identity(api, "mo")
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": self_signed_pem("mo")}
    )
    assert _enrollment_of(api, _re_enroll(api, authenticator_id, _future()))["method"] == "ott"


def test_re_enroll_refuses_a_second_enrollment_of_the_same_method(api: Api) -> None:
    identity_id = api.create(
        "/identities", {"name": "ned", "isAdmin": False, "type": "User", "enrollment": {"ott": True}}
    )
    authenticator_id = api.create(
        "/authenticators", {"identityId": identity_id, "method": "cert", "certPem": self_signed_pem("ned")}
    )
    result = _re_enroll(api, authenticator_id, _future())
    assert result.status_code == 409
    assert error_of(result)["code"] == "ENROLLMENT_EXISTS"
    assert error_of(result)["cause"]["field"] == "method"
    assert error_of(result)["cause"]["value"] == "ott"
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 200


@pytest.mark.parametrize("expires_at", ["2001-01-01T00:00:00Z", None, "not a date"])
def test_re_enroll_validates_expires_at(api: Api, expires_at: str | None) -> None:
    authenticator_id = updb(api, new_identity(api, "oli"), "oli-login", "oli-secret")
    result = _re_enroll(api, authenticator_id, expires_at)
    assert result.status_code == 400
    assert error_of(result)["code"] == "COULD_NOT_VALIDATE"
    assert error_of(result)["cause"]["field"] == "expiresAt"
    assert api.get(f"/authenticators/{authenticator_id}").status_code == 200


def test_re_enroll_unknown_authenticator_is_404(api: Api) -> None:
    result = _re_enroll(api, "nope", _future())
    assert result.status_code == 404
    assert error_of(result)["code"] == "NOT_FOUND"
