"""Wire conventions shared by both APIs: versions, aliases, envelopes, errors, headers."""

from __future__ import annotations

from tests.conftest import CLIENT, MGMT, Api


def test_unprefixed_version_lists_every_api_path(anon: Api) -> None:
    result = anon.client.simulate_get("/version")
    assert result.status_code == 200
    data = result.json["data"]
    assert data["apiVersions"]["edge"]["v1"]["path"] == CLIENT
    assert data["apiVersions"]["edge-client"]["v1"]["path"] == CLIENT
    assert data["apiVersions"]["edge-management"]["v1"]["path"] == MGMT
    assert data["apiVersions"]["edge-management"]["v1"]["apiBaseUrls"] == ["https://127.0.0.1:1280" + MGMT]
    assert data["apiVersions"]["edge-oidc"]["v1"] == {
        "apiBaseUrls": ["https://127.0.0.1:1280"],
        "path": "/oidc",
        "version": "v1",
    }
    assert data["capabilities"] == ["OIDC_AUTH"]
    assert result.json["meta"] == {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}


def test_version_is_served_at_root_and_under_both_bases(anon: Api) -> None:
    for path in ("/", "/version", CLIENT + "/version", MGMT + "/version", MGMT, CLIENT + "/"):
        result = anon.client.simulate_get(path)
        assert result.status_code == 200, path
        assert "apiVersions" in result.json["data"]


def test_every_response_names_the_controller_and_instance(anon: Api) -> None:
    result = anon.client.simulate_get("/version")
    assert result.headers["server"].startswith("ziti-controller/v")
    assert result.headers["ziti-instance-id"] == anon.ctrl.instance_id


def test_capability_list_advertises_oidc_but_not_ha(anon: Api) -> None:
    version = anon.client.simulate_get("/version").json["data"]
    assert "OIDC_AUTH" in version["capabilities"]  # the provider at /oidc (docs/api.md §16)
    assert "HA_CONTROLLER" not in version["capabilities"]
    listed = anon.client.simulate_get(MGMT + "/enumerated-capabilities").json["data"]
    assert "OIDC_AUTH" in listed


def test_client_api_serves_unprefixed_and_legacy_paths(anon: Api) -> None:
    unprefixed = anon.client.simulate_post(
        "/authenticate",
        params={"method": "password"},
        json={"username": "admin", "password": "admin-password-1"},
    )
    assert unprefixed.status_code == 200
    legacy = anon.client.simulate_post(
        "/edge/v1/authenticate",
        params={"method": "password"},
        json={"username": "admin", "password": "admin-password-1"},
    )
    assert legacy.status_code == 200


def test_unknown_path_is_not_found_in_the_error_envelope(api: Api) -> None:
    result = api.get("/no-such-thing")
    assert result.status_code == 404
    assert result.json["error"]["code"] == "NOT_FOUND"
    assert result.json["error"]["requestId"]
    assert result.json["meta"] == {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}


def test_wrong_verb_is_method_not_allowed(api: Api) -> None:
    result = api.request("PUT", "/version")
    assert result.status_code == 405
    assert result.json["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_malformed_json_is_could_not_parse_body(api: Api) -> None:
    result = api.post(
        "/authenticate",
        params={"method": "password"},
        body=b'{"name": ',
        headers={"content-type": "application/json"},
    )
    assert result.status_code == 400
    assert result.json["error"]["code"] == "COULD_NOT_PARSE_BODY"


def test_body_over_one_mebibyte_is_refused(api: Api) -> None:
    body = b'{"name": "' + b"x" * (1024 * 1024) + b'"}'
    result = api.post(
        "/authenticate",
        params={"method": "password"},
        body=body,
        headers={"content-type": "application/json"},
    )
    assert result.status_code == 413
    assert result.json["error"]["code"] == "REQUEST_ENTITY_TOO_LARGE"


def test_bad_filter_says_where_it_failed(api: Api) -> None:
    result = api.get("/api-sessions", params={"filter": 'ipAddress = "x" and'})
    assert result.status_code == 400
    assert result.json["error"]["code"] == "INVALID_FILTER"
    assert "1:" in result.json["error"]["cause"]["message"]


def test_bad_limit_is_invalid_pagination(api: Api) -> None:
    result = api.get("/api-sessions", params={"limit": "ten"})
    assert result.status_code == 400
    assert result.json["error"]["code"] == "INVALID_PAGINATION"
    assert result.json["error"]["cause"]["field"] == "limit"


def test_list_meta_reports_pagination_and_filterable_fields(api: Api) -> None:
    result = api.get("/api-sessions", params={"limit": "-1"})
    meta = result.json["meta"]
    assert meta["pagination"]["totalCount"] == 1
    assert meta["pagination"]["offset"] == 0
    assert meta["pagination"]["limit"] == 9223372036854775807
    assert "ipAddress" in meta["filterableFields"]


def test_timestamps_are_rfc3339_with_milliseconds(api: Api) -> None:
    created = api.get("/current-api-session").json["data"]["createdAt"]
    assert created.endswith("Z")
    assert len(created) == len("2026-01-02T03:04:05.678Z")


def test_est_cacerts_is_base64_pkcs7(anon: Api) -> None:
    import base64

    from cryptography.hazmat.primitives.serialization import pkcs7

    for path in ("/.well-known/est/cacerts", MGMT + "/.well-known/est/cacerts"):
        result = anon.client.simulate_get(path)
        assert result.status_code == 200
        assert result.headers["content-type"] == "application/pkcs7-mime"
        certs = pkcs7.load_der_pkcs7_certificates(base64.b64decode(result.text))
        assert len(certs) == 2


def test_specs_are_listed_and_served(anon: Api) -> None:
    listed = anon.client.simulate_get(MGMT + "/specs").json["data"]
    assert [s["id"] for s in listed] == ["edge-management"]
    spec = anon.client.simulate_get(MGMT + "/specs/edge-management/spec").json["data"]
    assert spec["basePath"] == MGMT
    assert "/identities" in spec["paths"]
    swagger = anon.client.simulate_get(CLIENT + "/swagger.json").json
    assert swagger["basePath"] == CLIENT
    assert "/authenticate" in swagger["paths"]
    assert anon.client.simulate_get(MGMT + "/specs/nope").status_code == 404


def test_a_body_missing_several_fields_names_the_first_by_name(api: Api) -> None:
    """OpenZiti's models check properties in name order: the cause is the first missing by name."""
    identity = api.create("/identities", {"name": "order-check", "type": "Device", "isAdmin": False})
    for path, field in (
        (f"/identities/{identity}", "isAdmin"),  # isAdmin, name, type
        ("/identities", "isAdmin"),
        ("/configs", "configTypeId"),  # configTypeId, data, name
        ("/terminators", "address"),  # address, router, service
    ):
        result = api.put(path, json={}) if "/identities/" in path else api.post(path, json={})

        assert result.status_code == 400, (path, result.text)
        assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
        assert result.json["error"]["cause"]["field"] == field, (path, result.json)
