"""``/controllers`` on both APIs and the ``/summary`` entity counts."""

from __future__ import annotations

from tests.conftest import CLIENT, Api


def test_management_controllers_list_this_controller(api: Api) -> None:
    result = api.get("/controllers")

    assert result.status_code == 200, result.text
    [ctrl] = result.json["data"]
    pki = api.ctrl.pki
    assert ctrl["id"] == api.ctrl.instance_id
    assert ctrl["name"] == api.ctrl.instance_id
    assert ctrl["isOnline"] is True
    assert ctrl["certPem"] == pki.server_cert_pem
    assert len(ctrl["fingerprint"]) == 40
    assert ctrl["apiAddresses"] == {
        "edge-client": [{"url": "https://127.0.0.1:1280/edge/client/v1", "version": "v1"}],
        "edge-management": [{"url": "https://127.0.0.1:1280/edge/management/v1", "version": "v1"}],
    }
    assert ctrl["ctrlAddress"] == "tls:127.0.0.1:6262"  # the control listener
    assert ctrl["lastJoinedAt"].endswith("Z")
    assert ctrl["createdAt"].endswith("Z")
    assert ctrl["_links"]["self"]["href"] == f"./controllers/{api.ctrl.instance_id}"
    assert result.json["meta"]["pagination"]["totalCount"] == 1


def test_client_controllers_hide_management_details(api: Api) -> None:
    result = api.get("/controllers", base=CLIENT)

    assert result.status_code == 200
    [ctrl] = result.json["data"]
    assert set(ctrl["apiAddresses"]) == {"edge-client"}
    assert ctrl["ctrlAddress"] is None


def test_controllers_need_a_session_not_admin(api: Api) -> None:
    assert api.get("/controllers", token="").status_code == 401
    assert api.get("/controllers", base=CLIENT, token="").status_code == 401


def test_controllers_filter(api: Api) -> None:
    hit = api.get("/controllers", params={"filter": "isOnline = true"})
    miss = api.get("/controllers", params={"filter": 'name = "other"'})

    assert len(hit.json["data"]) == 1
    assert miss.json["data"] == []


def test_summary_counts(api: Api) -> None:
    api.create("/posture-checks", {"name": "mfa", "typeId": "MFA"})
    api.create(
        "/external-jwt-signers",
        {"name": "s", "issuer": "i", "audience": "a", "enabled": True, "jwksEndpoint": "https://x/jwks"},
    )

    result = api.get("/summary")

    assert result.status_code == 200, result.text
    data = result.json["data"]
    assert data["identities"] == 1
    assert data["authenticators"] == 1
    assert data["apiSessions"] == 1
    assert data["authPolicies"] == 1
    assert data["postureChecks"] == 1
    assert data["externalJwtSigners"] == 1
    assert data["cas"] == 0
    assert data["controllers"] == 1
    assert data["identityTypes"] == 2
    assert data["postureCheckTypes"] == 6
    for key in (
        "services",
        "services.edge",
        "routers",
        "routers.edge",
        "configs",
        "configTypes",
        "edgeRouterPolicies",
        "serviceEdgeRouterPolicies",
        "servicePolicies",
        "enrollments",
        "sessions",
        "terminators",
        "mfas",
        "revocations",
    ):
        assert isinstance(data[key], int), key


def test_summary_requires_admin(anon: Api) -> None:
    assert anon.get("/summary").status_code == 401
