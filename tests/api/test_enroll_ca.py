"""CA auto-enrollment: a certificate from a verified third-party CA with ``isAutoCaEnrollmentEnabled``
creates its own identity (``POST /enroll/ca``, ``POST /enroll?method=ca``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import falcon.testing
import pytest

from tests.api.certs import ThirdPartyCa, enroll_ott, sha1_fingerprint, tls, unique, verified_ca
from tests.api.conftest import shared_admin_api
from tests.conftest import CLIENT, Api

SPIFFE_CLAIM = {
    "location": "SAN_URI",
    "matcher": "SCHEME",
    "matcherCriteria": "spiffe",
    "parser": "NONE",
    "parserCriteria": "",
    "index": 0,
}


api = shared_admin_api("enroll-ca")


def auto_ca(api: Api, ca: ThirdPartyCa, name: str = "acme", **flags: Any) -> str:
    """A verified CA allowing auto-enrollment (and cert login), roles ``a`` and ``b``; its name is
    ``name`` made unique, read it back with :func:`ca_name`."""
    body = {
        "isAutoCaEnrollmentEnabled": True,
        "identityRoles": ["a", "b"],
        "identityNameFormat": "[caName]-[commonName]",
        **flags,
    }
    return verified_ca(api, ca, name=unique(name), **body)


def ca_name(api: Api, ca_id: str) -> str:
    return str(api.get(f"/cas/{ca_id}").json["data"]["name"])


def enroll_ca(
    api: Api, chain: tuple[str, ...], *, route: str = "typed", name: str | None = None
) -> falcon.testing.Result:
    """``typed``: ``/enroll/ca`` (``{name}`` when given); ``legacy``: ``/enroll?method=ca`` with an
    empty body and no content type; ``generic``: ``/enroll?method=ca`` with JSON ``{name}``."""
    extras = tls(*chain) if chain else {}
    if route == "typed":
        kwargs: dict[str, Any] = {"json": {"name": name}} if name is not None else {}
        return api.client.simulate_post(CLIENT + "/enroll/ca", extras=extras, **kwargs)
    if route == "legacy":
        return api.client.simulate_post(CLIENT + "/enroll", params={"method": "ca"}, extras=extras)
    return api.client.simulate_post(
        CLIENT + "/enroll", params={"method": "ca"}, json={"name": name}, extras=extras
    )


def error(result: falcon.testing.Result) -> dict[str, Any]:
    return dict(result.json["error"])


def identities_named(api: Api, name: str) -> list[dict[str, Any]]:
    return list(api.get("/identities", params={"filter": f'name = "{name}"'}).json["data"])


def cert_login(api: Api, cert: str) -> falcon.testing.Result:
    return api.client.simulate_post(
        CLIENT + "/authenticate", params={"method": "cert"}, json={}, extras=tls(cert)
    )


# -- success ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["typed", "legacy", "generic"])
def test_a_ca_certificate_creates_its_identity(api: Api, acme: ThirdPartyCa, route: str) -> None:
    ca_id = auto_ca(api, acme)
    cert, _ = acme.issue("sensor-9")

    result = enroll_ca(api, (cert,), route=route)

    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/json"
    assert result.json["data"] == {}
    [identity] = identities_named(api, f"{ca_name(api, ca_id)}-sensor-9")
    assert sorted(identity["roleAttributes"]) == ["a", "b"]
    assert identity["isAdmin"] is False
    assert identity["authenticators"]["cert"]["fingerprint"] == sha1_fingerprint(cert)
    assert identity["externalId"] is None
    authenticators = api.get("/authenticators", params={"filter": f'identity = "{identity["id"]}"'}).json[
        "data"
    ]
    [authenticator] = authenticators
    assert authenticator["certPem"].strip() == cert.strip()
    assert authenticator["isIssuedByNetwork"] is False
    login = cert_login(api, cert)
    assert login.status_code == 200, login.text
    assert login.json["data"]["identity"]["id"] == identity["id"]


@pytest.mark.parametrize("route", ["typed", "generic"])
def test_requested_name(api: Api, acme: ThirdPartyCa, route: str) -> None:
    auto_ca(api, acme, identityNameFormat="[requestedName]")
    cert, _ = acme.issue("sensor-9")

    name = unique("kiosk")

    result = enroll_ca(api, (cert,), route=route, name=name)

    assert result.status_code == 200, result.text
    assert len(identities_named(api, name)) == 1


def test_without_a_requested_name_the_identity_id_is_used(api: Api, acme: ThirdPartyCa) -> None:
    prefix = unique("dev")
    auto_ca(api, acme, identityNameFormat=f"{prefix}/[requestedName]")
    cert, _ = acme.issue("sensor-9")

    result = enroll_ca(api, (cert,))

    assert result.status_code == 200, result.text
    found = api.get("/identities", params={"filter": f'name contains "{prefix}/"'}).json["data"]
    assert [i["name"] for i in found] == [f"{prefix}/{found[0]['id']}"]


def test_every_placeholder(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = auto_ca(
        api, acme, identityNameFormat="[caId]/[caName]/[commonName]/[requestedName]/[identityId]/[x]"
    )
    cert, _ = acme.issue("[identityId]")

    result = enroll_ca(api, (cert,), name="[caName]")

    assert result.status_code == 200, result.text
    found = api.get("/identities", params={"filter": f'name contains "{ca_id}/"'}).json["data"]
    name = ca_name(api, ca_id)
    assert [i["name"] for i in found] == [f"{ca_id}/{name}/[identityId]/[caName]/{found[0]['id']}/[x]"]


def test_name_collision_gets_a_suffix(api: Api, acme: ThirdPartyCa) -> None:
    name = ca_name(api, auto_ca(api, acme))
    for _ in range(3):
        assert enroll_ca(api, (acme.issue("twin")[0],)).status_code == 200

    found = api.get("/identities", params={"filter": f'name contains "{name}-twin"'}).json["data"]

    assert sorted(i["name"] for i in found) == [f"{name}-twin", f"{name}-twin000001", f"{name}-twin000002"]


def test_the_first_matching_ca_among_several(api: Api, acme: ThirdPartyCa, other: ThirdPartyCa) -> None:
    auto_ca(api, acme, identityRoles=["acme"])
    other_id = auto_ca(api, other, name="other", identityRoles=["other"])

    result = enroll_ca(api, (other.issue("dev")[0],))

    assert result.status_code == 200, result.text
    [identity] = identities_named(api, f"{ca_name(api, other_id)}-dev")
    assert identity["roleAttributes"] == ["other"]


# -- failures ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["typed", "legacy"])
def test_the_same_certificate_twice(api: Api, acme: ThirdPartyCa, route: str) -> None:
    ca_id = auto_ca(api, acme)
    cert, _ = acme.issue("sensor-9")
    assert enroll_ca(api, (cert,)).status_code == 200

    result = enroll_ca(api, (cert,), route=route)

    assert result.status_code == 409
    assert error(result)["code"] == "CERT_IN_USE"
    assert len(identities_named(api, f"{ca_name(api, ca_id)}-sensor-9")) == 1


def test_the_same_certificate_concurrently(api: Api, acme: ThirdPartyCa) -> None:
    from concurrent.futures import ThreadPoolExecutor

    ca_id = auto_ca(api, acme)
    cert, _ = acme.issue("racer")

    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda _: enroll_ca(api, (cert,)), range(6)))

    assert sorted(r.status_code for r in results) == [200] + [409] * 5, [r.text for r in results]
    assert len(identities_named(api, f"{ca_name(api, ca_id)}-racer")) == 1


def test_no_ca_at_all(fresh: Api, acme: ThirdPartyCa) -> None:
    result = enroll_ca(fresh, (acme.issue("x")[0],))

    assert result.status_code == 400
    assert error(result)["code"] == "ENROLLMENT_NO_VALID_CAS"


def test_no_ca_allows_auto_enrollment(fresh: Api, acme: ThirdPartyCa) -> None:
    auto_ca(fresh, acme, isAutoCaEnrollmentEnabled=False)

    result = enroll_ca(fresh, (acme.issue("x")[0],), route="legacy")

    assert result.status_code == 400
    assert error(result)["code"] == "ENROLLMENT_NO_VALID_CAS"


def test_unverified_ca_is_not_used(fresh: Api, acme: ThirdPartyCa, other: ThirdPartyCa) -> None:
    fresh.create(
        "/cas",
        {
            "name": "unverified",
            "certPem": acme.pem,
            "isAuthEnabled": True,
            "isAutoCaEnrollmentEnabled": True,
            "isOttCaEnrollmentEnabled": False,
            "identityRoles": [],
        },
    )
    cert, _ = acme.issue("x")

    alone = enroll_ca(fresh, (cert,))
    auto_ca(fresh, other, name="other")
    beside_a_verified_one = enroll_ca(fresh, (cert,))

    assert alone.status_code == 400
    assert error(alone)["code"] == "ENROLLMENT_NO_VALID_CAS"
    assert beside_a_verified_one.status_code == 400
    assert error(beside_a_verified_one)["code"] == "CERT_FAILED_VALIDATION"


def test_no_client_certificate(api: Api, acme: ThirdPartyCa) -> None:
    auto_ca(api, acme)

    for route in ("typed", "legacy", "generic"):
        result = enroll_ca(api, (), route=route)
        assert result.status_code == 400, route
        assert error(result)["code"] == "CERT_FAILED_VALIDATION", route


@pytest.mark.parametrize("kind", ["other-ca", "ours", "expired", "not-yet-valid"])
def test_certificates_that_are_refused(api: Api, acme: ThirdPartyCa, other: ThirdPartyCa, kind: str) -> None:
    auto_ca(api, acme)
    now = datetime.now(UTC)
    if kind == "other-ca":
        cert = other.issue("x")[0]
    elif kind == "ours":
        cert = enroll_ott(api, unique("network-device")).leaf
    elif kind == "expired":
        cert = acme.issue("x", not_before=now - timedelta(days=9), not_after=now - timedelta(days=1))[0]
    else:
        cert = acme.issue("x", not_before=now + timedelta(days=1), not_after=now + timedelta(days=9))[0]

    result = enroll_ca(api, (cert,))

    assert result.status_code == 400
    assert error(result)["code"] == "CERT_FAILED_VALIDATION"


def test_a_token_is_not_needed_nor_looked_at(api: Api, acme: ThirdPartyCa) -> None:
    auto_ca(api, acme)

    result = api.client.simulate_post(
        CLIENT + "/enroll", params={"method": "ca", "token": "garbage"}, extras=tls(acme.issue("tok")[0])
    )

    assert result.status_code == 200, result.text


# -- external id claims -----------------------------------------------------------------------------
def test_external_id_claim(api: Api, acme: ThirdPartyCa) -> None:
    ca_id = auto_ca(api, acme, externalIdClaim=SPIFFE_CLAIM)
    uri = f"spiffe://example.org/{unique('device')}"
    cert, _ = acme.issue("dev-7", uris=("https://example.org/x", uri))

    result = enroll_ca(api, (cert,))

    assert result.status_code == 200, result.text
    [identity] = identities_named(api, f"{ca_name(api, ca_id)}-dev-7")
    assert identity["externalId"] == uri
    assert identity["authenticators"] == {}
    login = cert_login(api, cert)
    assert login.status_code == 200, login.text
    assert login.json["data"]["identity"]["id"] == identity["id"]
    # The claim, not the certificate, names the identity: another certificate with it logs in too.
    renewed, _ = acme.issue("dev-7-renewed", uris=(uri,))
    assert cert_login(api, renewed).json["data"]["identity"]["id"] == identity["id"]


def test_missing_claim(api: Api, acme: ThirdPartyCa) -> None:
    name = ca_name(api, auto_ca(api, acme, externalIdClaim=SPIFFE_CLAIM))

    no_uri = enroll_ca(api, (acme.issue("plain")[0],))
    other_scheme = enroll_ca(api, (acme.issue("https", uris=("https://example.org/7",))[0],))

    for result in (no_uri, other_scheme):
        assert result.status_code == 400
        assert error(result)["code"] == "MISSING_CERT_CLAIM"
    assert api.get("/identities", params={"filter": f'name contains "{name}"'}).json["data"] == []


def test_claim_index_out_of_range(api: Api, acme: ThirdPartyCa) -> None:
    auto_ca(api, acme, externalIdClaim={**SPIFFE_CLAIM, "index": 1})

    result = enroll_ca(api, (acme.issue("one", uris=("spiffe://example.org/1",))[0],))

    assert result.status_code == 400
    assert error(result)["code"] == "MISSING_CERT_CLAIM"


def test_claim_of_another_identity(api: Api, acme: ThirdPartyCa) -> None:
    auto_ca(api, acme, externalIdClaim=SPIFFE_CLAIM)
    uri = f"spiffe://example.org/{unique('device')}"
    assert enroll_ca(api, (acme.issue("a", uris=(uri,))[0],)).status_code == 200

    result = enroll_ca(api, (acme.issue("b", uris=(uri,))[0],))

    assert result.status_code == 409
    assert error(result)["code"] == "CERT_IN_USE"


@pytest.mark.parametrize(
    ("claim", "cert_args", "expected"),
    [
        ({"location": "COMMON_NAME", "matcher": "ALL"}, {"cn": "user-42"}, "user-42"),
        (
            {"location": "COMMON_NAME", "matcher": "PREFIX", "matcherCriteria": "user-"},
            {"cn": "user-42"},
            "42",
        ),
        (
            {"location": "SAN_EMAIL", "matcher": "SUFFIX", "matcherCriteria": "@example.org"},
            {"emails": ("ann@example.org",)},
            "ann",
        ),
        (
            {"location": "SAN_URI", "matcher": "ALL", "parser": "SPLIT", "parserCriteria": "/", "index": 3},
            {"uris": ("spiffe://example.org/device",)},
            "device",
        ),
    ],
)
def test_claim_locations_matchers_and_parsers(
    fresh: Api, acme: ThirdPartyCa, claim: dict[str, Any], cert_args: dict[str, Any], expected: str
) -> None:
    full = {"matcherCriteria": "", "parser": "NONE", "parserCriteria": "", "index": 0, **claim}
    name = unique("claimed")
    auto_ca(fresh, acme, externalIdClaim=full, identityNameFormat=name)
    args = dict(cert_args)
    cert, _ = acme.issue(args.pop("cn", "device"), **args)

    result = enroll_ca(fresh, (cert,))

    assert result.status_code == 200, result.text
    assert identities_named(fresh, name)[0]["externalId"] == expected


# -- hostile names ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "\x00",
        "\ud7ff\U0001f600",
        "n" * 100_000,
        "[requestedName]" * 50,
        "a\nb",
        '"; drop table x; --',
    ],
    ids=["empty", "space", "nul", "unicode", "huge", "placeholders", "newline", "quote"],
)
def test_hostile_requested_names_never_get_a_500(api: Api, acme: ThirdPartyCa, name: str) -> None:
    auto_ca(api, acme, identityNameFormat="[requestedName]")

    for route in ("typed", "generic"):
        result = enroll_ca(api, (acme.issue(f"dev-{route}")[0],), route=route, name=name)
        assert result.status_code < 500, result.text
        if result.status_code >= 400:
            assert error(result)["code"]
