"""Hostile input never gets a 5xx (issue 8): each cause of a 500 that fuzzing with OpenZiti's own
specs found, and its neighbours, answered 400 with OpenZiti's error code on the field, decided
before anything is written."""

from __future__ import annotations

import json
from typing import Any

import falcon
import falcon.testing
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.http import read_json
from api.wire import MAX_DURATION_SECONDS
from engine.errors import CouldNotParseBodyError
from engine.managers.identities import MAX_DISABLE_MINUTES
from engine.query.zitiql import MAX_NESTING
from tests.api.certs import csr_pem, unique
from tests.api.conftest import shared_admin_api
from tests.api.session_helpers import user
from tests.conftest import CLIENT, Api, examples

api = shared_admin_api("hostile-input")

BIG = 2**70  # beyond every 64-bit integer
JSON = {"content-type": "application/json"}


def raw_post(api: Api, path: str, body: bytes, **kwargs: Any) -> Any:
    return api.post(path, body=body, headers=JSON, **kwargs)


def assert_field_error(result: Any, field: str) -> dict[str, Any]:
    assert result.status_code == 400, result.text
    error = result.json["error"]
    assert error["code"] == "COULD_NOT_VALIDATE"
    assert error["cause"]["field"] == field
    return dict(error["cause"])


def identity_body(**extra: Any) -> dict[str, Any]:
    return {"name": unique("hostile"), "type": "Default", "isAdmin": False, **extra}


def names(api: Api, path: str) -> set[str]:
    return {row["name"] for row in api.get(path, params={"limit": "-1"}).json["data"]}


# -- integers beyond 64 bits and non-finite numbers in free-form maps ------------------------------------
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"n": BIG}, "n: integer 1180591620717411303424 does not fit in a signed 64-bit integer"),
        ({"a": {"b": [1, -BIG]}}, "a.b[1]: integer -1180591620717411303424 does not fit"),
        ({"n": 2**63}, "n: integer 9223372036854775808 does not fit"),
    ],
)
def test_app_data_with_an_integer_beyond_64_bits_is_refused_on_app_data(
    api: Api, value: dict[str, Any], reason: str
) -> None:
    body = identity_body(appData=value)

    cause = assert_field_error(api.post("/identities", json=body), "appData")

    assert cause["reason"].startswith(reason)
    assert body["name"] not in names(api, "/identities")


def test_app_data_at_the_64_bit_limits_is_stored_exactly(api: Api) -> None:
    app_data = {"max": 2**63 - 1, "min": -(2**63), "f": 1.5}

    identity_id = api.create("/identities", identity_body(appData=app_data))

    assert api.get(f"/identities/{identity_id}").json["data"]["appData"] == app_data


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_non_finite_numbers_in_app_data_are_refused(api: Api, token: bytes) -> None:
    name = unique("nan")
    body = b'{"name": "%s", "type": "Default", "isAdmin": false, "appData": {"x": [%s]}}' % (
        name.encode(),
        token,
    )

    cause = assert_field_error(raw_post(api, "/identities", body), "appData")

    assert cause["reason"].startswith("x[0]: ")
    assert name not in names(api, "/identities")


def test_patching_app_data_beyond_64_bits_leaves_the_identity_unchanged(api: Api) -> None:
    identity_id = api.create("/identities", identity_body(appData={"keep": 1}))

    assert_field_error(api.patch(f"/identities/{identity_id}", json={"appData": {"x": BIG}}), "appData")

    assert api.get(f"/identities/{identity_id}").json["data"]["appData"] == {"keep": 1}


def test_edge_router_app_data_beyond_64_bits_is_refused(api: Api) -> None:
    body = {"name": unique("er"), "appData": {"x": BIG}}

    assert_field_error(api.post("/edge-routers", json=body), "appData")
    assert body["name"] not in names(api, "/edge-routers")


def test_config_data_beyond_64_bits_is_refused_on_data(api: Api) -> None:
    config_type = api.create("/config-types", {"name": unique("ct")})
    body = {"name": unique("cfg"), "configTypeId": config_type, "data": {"port": BIG}}

    cause = assert_field_error(api.post("/configs", json=body), "data")

    assert cause["reason"].startswith("port: integer")
    assert body["name"] not in names(api, "/configs")


def test_replacing_config_data_beyond_64_bits_leaves_the_config_unchanged(api: Api) -> None:
    config_type = api.create("/config-types", {"name": unique("ct")})
    name = unique("cfg")
    config_id = api.create("/configs", {"name": name, "configTypeId": config_type, "data": {"port": 1}})

    assert_field_error(api.put(f"/configs/{config_id}", json={"name": name, "data": {"port": BIG}}), "data")

    assert api.get(f"/configs/{config_id}").json["data"]["data"] == {"port": 1}


def test_config_type_schema_beyond_64_bits_is_refused_on_schema(api: Api) -> None:
    body = {"name": unique("ct"), "schema": {"type": "object", "maximum": BIG}}

    cause = assert_field_error(api.post("/config-types", json=body), "schema")

    assert cause["reason"].startswith("maximum: integer")
    assert body["name"] not in names(api, "/config-types")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/services", {"encryptionRequired": True, "maxIdleTimeMillis": BIG}, "maxIdleTimeMillis"),
        ("/edge-routers", {"cost": BIG}, "cost"),
        (
            "/identities",
            {"type": "Default", "isAdmin": False, "defaultHostingCost": BIG},
            "defaultHostingCost",
        ),
    ],
)
def test_plain_integer_fields_beyond_64_bits_are_refused_on_the_field(
    api: Api, path: str, body: dict[str, Any], field: str
) -> None:
    assert_field_error(api.post(path, json={"name": unique("big"), **body}), field)


# -- durations that would overflow date arithmetic ---------------------------------------------------
def test_disable_for_billions_of_minutes_is_refused_on_duration_minutes(api: Api) -> None:
    identity_id = api.create("/identities", identity_body())

    cause = assert_field_error(
        api.post(f"/identities/{identity_id}/disable", json={"durationMinutes": 4_300_000_000}),
        "durationMinutes",
    )

    assert cause["value"] == "4300000000"
    assert api.get(f"/identities/{identity_id}").json["data"]["disabled"] is False


def test_disable_for_the_longest_go_duration_is_accepted(api: Api) -> None:
    identity_id = api.create("/identities", identity_body())

    result = api.post(f"/identities/{identity_id}/disable", json={"durationMinutes": MAX_DISABLE_MINUTES})

    assert result.status_code == 200, result.text
    data = api.get(f"/identities/{identity_id}").json["data"]
    assert data["disabled"] is True
    assert data["disabledUntil"] > "2290"


def test_auth_policy_lockout_beyond_the_longest_go_duration_is_refused(api: Api) -> None:
    body = {
        "name": unique("ap"),
        "primary": {
            "cert": {"allowed": True, "allowExpiredCerts": False},
            "extJwt": {"allowed": False, "allowedSigners": []},
            "updb": {
                "allowed": True,
                "lockoutDurationMinutes": MAX_DISABLE_MINUTES + 1,
                "maxAttempts": 3,
                "minPasswordLength": 5,
                "requireMixedCase": False,
                "requireNumberChar": False,
                "requireSpecialChar": False,
            },
        },
        "secondary": {"requireTotp": False},
    }

    assert_field_error(api.post("/auth-policies", json=body), "primary.updb.lockoutDurationMinutes")
    assert body["name"] not in names(api, "/auth-policies")


def test_mfa_posture_timeout_beyond_the_longest_go_duration_is_refused(api: Api) -> None:
    body = {"name": unique("pc"), "typeId": "MFA", "timeoutSeconds": MAX_DURATION_SECONDS + 1}

    assert_field_error(api.post("/posture-checks", json=body), "timeoutSeconds")
    assert body["name"] not in names(api, "/posture-checks")


@pytest.mark.parametrize("expires_at", ["9999-12-31T23:59:59-23:00", "0001-01-01T00:00:00+23:00"])
def test_an_enrollment_expiry_outside_years_1_to_9999_in_utc_is_refused(api: Api, expires_at: str) -> None:
    identity_id = api.create("/identities", identity_body())

    result = api.post(
        "/enrollments", json={"identityId": identity_id, "method": "ott", "expiresAt": expires_at}
    )

    assert_field_error(result, "expiresAt")


# -- filters ------------------------------------------------------------------------------------------------
def nested_filter(levels: int) -> str:
    return "(" * levels + 'name = "x"' + ")" * levels


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 250, 1000])
def test_a_non_admin_cannot_overflow_the_stack_with_a_nested_filter(api: Api, levels: int) -> None:
    person = user(api)

    result = api.get("/services", base=CLIENT, token=person.token, params={"filter": nested_filter(levels)})

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"
    assert f"nested more than {MAX_NESTING} levels" in result.json["error"]["cause"]["message"]


def test_a_filter_nested_to_the_limit_is_served(api: Api) -> None:
    result = api.get("/identities", params={"filter": nested_filter(MAX_NESTING)})

    assert result.status_code == 200, result.text
    assert result.json["data"] == []


@pytest.mark.parametrize("joiner", [" and ", " or "])
def test_a_filter_of_thousands_of_terms_is_served(api: Api, joiner: str) -> None:
    text = joiner.join(['name = "no-such-identity"'] * 3000)

    result = api.get("/identities", params={"filter": text})

    assert result.status_code == 200, result.text
    assert result.json["meta"]["pagination"]["totalCount"] == 0


@pytest.mark.parametrize(
    "text",
    [
        "name = " + "1" * 5000,
        "createdAt > datetime(" + "2" * 5000 + "-01-01T00:00:00Z)",
        "not " * 400 + "true",
    ],
)
def test_filters_python_cannot_evaluate_are_invalid_filters(api: Api, text: str) -> None:
    result = api.get("/identities", params={"filter": text})

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_FILTER"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limit", "9" * 5000),
        ("limit", str(BIG)),
        ("offset", str(2**63)),
        ("limit", "1_0"),
        ("offset", "\u0663"),
    ],
)
def test_a_paging_number_go_would_not_read_as_an_int64_is_an_invalid_pagination(
    api: Api, name: str, value: str
) -> None:
    result = api.get("/identities", params={name: value})

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "INVALID_PAGINATION"
    assert result.json["error"]["cause"]["field"] == name
    assert len(result.json["error"]["cause"]["value"]) <= 64


def test_paging_numbers_at_the_int64_limits_are_clamped(api: Api) -> None:
    result = api.get("/identities", params={"limit": str(2**63 - 1), "offset": str(-(2**63))})

    assert result.status_code == 200, result.text
    assert result.json["meta"]["pagination"]["limit"] == 500
    assert result.json["meta"]["pagination"]["offset"] == 0


# -- body shapes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "COULD_NOT_PARSE_BODY"),
        (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "COULD_NOT_PARSE_BODY"),
        (b'{"name": "n", "appData":' + b'{"a":' * 300 + b"1" + b"}" * 300 + b"}", "COULD_NOT_PARSE_BODY"),
        (b"[]", "COULD_NOT_VALIDATE"),
        (b"[{}]", "COULD_NOT_VALIDATE"),
        (b'"' + b"x" * 1000 + b'"', "COULD_NOT_VALIDATE"),
    ],
)
def test_arrays_and_deeply_nested_bodies_are_client_errors(api: Api, body: bytes, code: str) -> None:
    result = raw_post(api, "/identities", body)

    assert result.status_code == 400, result.text[:300]
    assert result.json["error"]["code"] == code


def test_app_data_nested_as_deep_as_the_json_parser_reads_is_stored(api: Api) -> None:
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(190):
        deep = {"a": deep}

    identity_id = api.create("/identities", identity_body(appData=deep))

    assert api.get(f"/identities/{identity_id}").json["data"]["appData"] == deep


# -- PKCS#7 / PEM enrollment bodies ----------------------------------------------------------------------------
pem_like = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=600).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=400).map(
        lambda b: b"-----BEGIN CERTIFICATE REQUEST-----\n" + json.dumps(b.hex()).encode() + b"\n-----END"
    ),
    st.binary(max_size=400).map(
        lambda b: b"-----BEGIN PKCS7-----\n" + b.hex().encode() + b"\n-----END PKCS7-----"
    ),
)
LEGACY_MEDIA = ["application/pkcs7", "application/x-pem-file", "text/plain"]


def test_any_legacy_enrollment_body_is_a_client_error_and_spends_no_token(api: Api) -> None:
    identity_id = api.create("/identities", identity_body(enrollment={"ott": True}))
    token = api.get(f"/identities/{identity_id}").json["data"]["enrollment"]["ott"]["token"]

    def enroll(body: bytes | str, media: str) -> Any:
        return api.client.simulate_post(
            CLIENT + "/enroll",
            params={"method": "ott", "token": token},
            body=body,
            headers={"content-type": media},
        )

    @settings(max_examples=examples(60), deadline=None, derandomize=True, database=None)
    @given(body=pem_like, media=st.sampled_from(LEGACY_MEDIA))
    def refused(body: bytes, media: str) -> None:
        result = enroll(body, media)
        assert 400 <= result.status_code < 500, result.text
        assert result.json["error"]["code"]

    refused()

    result = enroll(csr_pem(), "application/pkcs7")
    assert result.status_code == 200, result.text
    assert api.get(f"/identities/{identity_id}").json["data"]["authenticators"]["cert"]


# -- free-form JSON bodies ----------------------------------------------------------------------------------
def json_request(body: bytes) -> falcon.Request:
    req = falcon.testing.create_req(method="POST", body=body, headers=JSON)
    req.context.max_body_bytes = 1 << 20
    return req


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 2000 + b"1" + b"}" * 2000,
        b"[NaN]",
        b"[Infinity]",
        b"{",
        b" ",
    ],
)
def test_a_free_form_json_body_python_cannot_parse_is_could_not_parse_body(body: bytes) -> None:
    with pytest.raises(CouldNotParseBodyError):
        read_json(json_request(body))


def test_a_free_form_json_body_is_read_as_any_json_value() -> None:
    assert read_json(json_request(b'[{"a": [1, 2.5, null, true]}, "x"]')) == [
        {"a": [1, 2.5, None, True]},
        "x",
    ]


@pytest.mark.parametrize("path", ["/posture-response", "/posture-response-bulk"])
def test_a_deeply_nested_posture_response_is_a_parse_error(api: Api, path: str) -> None:
    device = user(api)
    body = ("[" * 5000 + "]" * 5000).encode()

    result = raw_post(api, path, body, base=CLIENT, token=device.token)

    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_PARSE_BODY"
