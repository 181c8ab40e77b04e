"""Certificate authorities: create from a CA certificate, replace/patch, delete cascades."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from engine.entities.identities import Authenticator, Enrollment, Identity
from engine.entities.trust import Ca
from engine.ports import UnitOfWork
from tests.conftest import Api, open_app

Key = ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key: Key, issuer: str, issuer_key: Key, *, ca: bool) -> x509.Certificate:
    now = datetime.now(UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Pki:
    """A third-party CA, a leaf it issued, another CA's leaf and a plain (non-CA) certificate."""

    def __init__(self) -> None:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        other_key = ec.generate_private_key(ec.SECP256R1())
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        self.ca_pem = _pem(_cert("Third Party CA", ca_key, "Third Party CA", ca_key, ca=True))
        self.other_ca_pem = _pem(_cert("Other CA", other_key, "Other CA", other_key, ca=True))
        self.leaf_pem = _pem(_cert("device-1", leaf_key, "Third Party CA", ca_key, ca=False))
        self.foreign_leaf_pem = _pem(_cert("device-2", leaf_key, "Other CA", other_key, ca=False))
        # Same issuer name as the CA but signed by another key: not issued by the CA.
        self.forged_leaf_pem = _pem(_cert("device-3", leaf_key, "Third Party CA", other_key, ca=False))
        self.plain_pem = _pem(_cert("not-a-ca", leaf_key, "not-a-ca", leaf_key, ca=False))


@pytest.fixture(scope="module")
def pki() -> Pki:
    return Pki()


def _body(pki: Pki, **extra: Any) -> dict[str, Any]:
    return {
        "name": "third-party",
        "certPem": pki.ca_pem,
        "identityRoles": ["partner"],
        "isAuthEnabled": True,
        "isAutoCaEnrollmentEnabled": True,
        "isOttCaEnrollmentEnabled": False,
        **extra,
    }


def _get(api: Api, id: str) -> dict[str, Any]:
    result = api.get(f"/cas/{id}")
    assert result.status_code == 200, result.text
    return dict(result.json["data"])


def test_create_and_read(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki))

    data = _get(api, id)

    cert = x509.load_pem_x509_certificate(pki.ca_pem.encode())
    assert data["name"] == "third-party"
    assert data["certPem"] == pki.ca_pem
    assert data["fingerprint"] == cert.fingerprint(hashes.SHA1()).hex()
    assert data["isVerified"] is False
    assert len(data["verificationToken"]) == 36
    assert data["identityRoles"] == ["partner"]
    assert data["identityNameFormat"] == "[caName]-[commonName]"
    assert data["isAuthEnabled"] is True
    assert data["isAutoCaEnrollmentEnabled"] is True
    assert data["isOttCaEnrollmentEnabled"] is False
    assert "externalIdClaim" not in data  # optional and unset: left out (omitempty)
    assert data["_links"]["self"]["href"] == f"./cas/{id}"
    assert data["_links"]["verify"]["href"] == f"./cas/{id}/verify"
    assert data["_links"]["jwt"]["href"] == f"./cas/{id}/jwt"


def test_create_with_optional_fields(api: Api, pki: Pki) -> None:
    claim = {
        "index": 0,
        "location": "SAN_URI",
        "matcher": "SCHEME",
        "matcherCriteria": "spiffe",
        "parser": "NONE",
        "parserCriteria": None,
    }

    id = api.create("/cas", _body(pki, identityNameFormat="[commonName]", externalIdClaim=claim))

    data = _get(api, id)
    assert data["identityNameFormat"] == "[commonName]"
    assert data["externalIdClaim"] == claim


@pytest.mark.parametrize(
    "missing",
    [
        "name",
        "certPem",
        "identityRoles",
        "isAuthEnabled",
        "isAutoCaEnrollmentEnabled",
        "isOttCaEnrollmentEnabled",
    ],
)
def test_create_required_fields(api: Api, pki: Pki, missing: str) -> None:
    body = {k: v for k, v in _body(pki).items() if k != missing}

    result = api.post("/cas", json=body)

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == missing


def test_non_ca_certificate_is_refused(api: Api, pki: Pki) -> None:
    result = api.post("/cas", json=_body(pki, certPem=pki.plain_pem))

    assert result.status_code == 400
    assert result.json["error"]["code"] == "CERTIFICATE_IS_NOT_CA"


def test_unparsable_certificate_is_refused(api: Api, pki: Pki) -> None:
    result = api.post(
        "/cas", json=_body(pki, certPem="-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    )

    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    assert result.json["error"]["cause"]["field"] == "certPem"


def test_same_certificate_twice_is_refused(api: Api, pki: Pki) -> None:
    first = api.create("/cas", _body(pki))

    result = api.post("/cas", json=_body(pki, name="again"))

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "certPem"
    assert result.json["error"]["cause"]["reason"] == f"certificate already used as CA {first}"


def test_duplicate_name_is_refused(api: Api, pki: Pki) -> None:
    api.create("/cas", _body(pki))

    result = api.post("/cas", json=_body(pki, certPem=pki.other_ca_pem))

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_invalid_external_id_claim_is_refused(api: Api, pki: Pki) -> None:
    claim = {
        "index": 0,
        "location": "EVERYWHERE",
        "matcher": "ALL",
        "matcherCriteria": None,
        "parser": "NONE",
        "parserCriteria": None,
    }

    result = api.post("/cas", json=_body(pki, externalIdClaim=claim))

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "externalIdClaim.location"


def test_replace(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki, tags={"a": "b"}))
    before = _get(api, id)

    result = api.put(
        f"/cas/{id}",
        json={
            "name": "renamed",
            "identityRoles": [],
            "isAuthEnabled": False,
            "isAutoCaEnrollmentEnabled": False,
            "isOttCaEnrollmentEnabled": True,
            "identityNameFormat": "[caId]-[commonName]",
            "certPem": pki.other_ca_pem,
        },
    )

    assert result.status_code == 200, result.text
    data = _get(api, id)
    assert data["name"] == "renamed"
    assert data["identityRoles"] == []
    assert data["isAuthEnabled"] is False
    assert data["isOttCaEnrollmentEnabled"] is True
    assert data["identityNameFormat"] == "[caId]-[commonName]"
    assert data["tags"] == {}
    assert data["certPem"] == pki.ca_pem
    assert data["fingerprint"] == before["fingerprint"]
    assert data["verificationToken"] == before["verificationToken"]
    assert "jwt" not in data["_links"]


def test_replace_requires_identity_name_format(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki))
    body = {k: v for k, v in _body(pki).items() if k != "certPem"}

    result = api.put(f"/cas/{id}", json=body)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "identityNameFormat"


def test_patch(api: Api, pki: Pki) -> None:
    claim = {
        "index": 0,
        "location": "COMMON_NAME",
        "matcher": "ALL",
        "matcherCriteria": None,
        "parser": "NONE",
        "parserCriteria": None,
    }
    id = api.create("/cas", _body(pki, externalIdClaim=claim))

    result = api.patch(
        f"/cas/{id}",
        json={"isAuthEnabled": False, "externalIdClaim": {"matcher": "PREFIX", "matcherCriteria": "x-"}},
    )

    assert result.status_code == 200
    data = _get(api, id)
    assert data["isAuthEnabled"] is False
    assert data["name"] == "third-party"
    assert data["externalIdClaim"] == {**claim, "matcher": "PREFIX", "matcherCriteria": "x-"}


# OpenZiti's store keeps a string list as the keys of a bucket: sorted, without duplicates.
def test_identity_roles_are_kept_sorted_without_duplicates(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki, identityRoles=["west", "east", "west", "Central"]))

    created = _get(api, id)["identityRoles"]
    listed = api.get("/cas", params={"filter": f'id = "{id}"'}).json["data"][0]["identityRoles"]

    assert created == ["Central", "east", "west"]
    assert listed == ["Central", "east", "west"]


def test_identity_roles_are_sorted_on_replace_and_patch(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki))
    replacement = {k: v for k, v in _body(pki).items() if k != "certPem"}
    replacement.update(identityRoles=["b", "a", "b"], identityNameFormat="[commonName]")

    assert api.put(f"/cas/{id}", json=replacement).status_code == 200
    replaced = _get(api, id)["identityRoles"]
    assert api.patch(f"/cas/{id}", json={"identityRoles": ["z", "é", "z", "Z"]}).status_code == 200
    patched = _get(api, id)["identityRoles"]
    assert api.patch(f"/cas/{id}", json={"name": "other-name"}).status_code == 200
    untouched = _get(api, id)["identityRoles"]

    assert replaced == ["a", "b"]
    assert patched == ["Z", "z", "é"]  # byte order
    assert untouched == ["Z", "z", "é"]


def _identity(env: Any, id: str) -> None:
    now = env.clock.now()
    uow = UnitOfWork(env.store)
    uow.put(Identity(id=id, created_at=now, updated_at=now, name=id))
    env.commit(uow)


def _cert_authenticator(env: Any, id: str, identity_id: str, pem: str) -> None:
    now = env.clock.now()
    uow = UnitOfWork(env.store)
    uow.put(
        Authenticator(
            id=id,
            created_at=now,
            updated_at=now,
            identity_id=identity_id,
            method="cert",
            cert_pem=pem,
            fingerprint=id,
        )
    )
    env.commit(uow)


def test_delete_removes_issued_authenticators_and_ottca_enrollments(api: Api, pki: Pki) -> None:
    ca_id = api.create("/cas", _body(pki))
    env = api.ctrl.env
    _identity(env, "i1")
    _cert_authenticator(env, "issued", "i1", pki.leaf_pem)
    _cert_authenticator(env, "foreign", "i1", pki.foreign_leaf_pem)
    _cert_authenticator(env, "forged", "i1", pki.forged_leaf_pem)
    now = env.clock.now()
    uow = UnitOfWork(env.store)
    uow.put(
        Enrollment(
            id="e1",
            created_at=now,
            updated_at=now,
            identity_id="i1",
            method="ottca",
            token="t1",
            expires_at=now + timedelta(hours=1),
            ca_id=ca_id,
        )
    )
    env.commit(uow)

    result = api.delete(f"/cas/{ca_id}")

    assert result.status_code == 200
    assert api.get(f"/cas/{ca_id}").status_code == 404
    assert env.store.get(Authenticator, "issued") is None
    assert env.store.get(Authenticator, "foreign") is not None
    assert env.store.get(Authenticator, "forged") is not None
    assert env.store.get(Enrollment, "e1") is None


def test_unknown_ids_answer_404(api: Api, pki: Pki) -> None:
    assert api.get("/cas/nope").status_code == 404
    assert api.patch("/cas/nope", json={"name": "x"}).status_code == 404
    assert api.delete("/cas/nope").status_code == 404


def test_list_filter(api: Api, pki: Pki) -> None:
    id = api.create("/cas", _body(pki))
    api.create("/cas", _body(pki, name="other", certPem=pki.other_ca_pem, isAuthEnabled=False))

    result = api.get("/cas", params={"filter": "isAuthEnabled = true"})

    assert [d["id"] for d in result.json["data"]] == [id]
    assert "fingerprint" in result.json["meta"]["filterableFields"]


@pytest.mark.durable
def test_cas_survive_a_restart(api: Api, app: Any, settings: Any, pki: Pki) -> None:
    id = api.create("/cas", _body(pki))
    app.ctrl.env.store.close()

    reopened = open_app(settings, durable=True)
    try:
        ca = reopened.ctrl.env.store.get(Ca, id)
        assert ca is not None
        assert ca.cert_pem == pki.ca_pem
        assert ca.is_verified is False
    finally:
        reopened.ctrl.env.store.close()


def test_a_claim_patched_onto_a_ca_without_one_is_rendered_whole(api: Api, pki: Any) -> None:
    id = api.create("/cas", _body(pki))

    assert api.patch(f"/cas/{id}", json={"externalIdClaim": {"index": 1}}).status_code == 200

    assert _get(api, id)["externalIdClaim"] == {
        "index": 1,
        "location": None,
        "matcher": None,
        "matcherCriteria": None,
        "parser": None,
        "parserCriteria": None,
    }
