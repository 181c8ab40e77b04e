"""``/controllers`` on both APIs and the ``/summary`` entity counts."""

from __future__ import annotations

import io

import pytest

from controller.cli import controller_remove
from controller.settings import SettingError, Settings
from engine.managers.controllers import Joining
from tests.conftest import CLIENT, Api, open_app


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


def test_a_controller_that_is_away_is_listed_offline(api: Api) -> None:
    """Each controller keeps a record (written as a process of it starts); one whose processes
    have all stopped is still listed, ``isOnline`` false, until it is removed."""
    api.app.join_network()
    own = api.ctrl.controller_id
    api.ctrl.managers.controllers.join(
        Joining(
            id="ctrl-gone",
            name="ctrl-gone",
            ctrl_address="tls:127.0.0.9:6262",
            api_addresses={
                "edge-client": [{"url": "https://127.0.0.9:1280/edge/client/v1", "version": "v1"}],
                "edge-management": [{"url": "https://127.0.0.9:1280/edge/management/v1", "version": "v1"}],
            },
            cert_pem="-----BEGIN CERTIFICATE-----\n...",
            fingerprint="cd" * 20,
        )
    )

    listed = api.get("/controllers").json["data"]
    offline = api.get("/controllers", params={"filter": "isOnline = false"}).json["data"]
    client = api.get("/controllers", base=CLIENT).json["data"]
    summary = api.get("/summary").json["data"]

    assert [(c["id"], c["isOnline"]) for c in listed] == [(own, True), ("ctrl-gone", False)]
    assert listed[0]["ctrlAddress"] == "tls:127.0.0.1:6262"
    assert listed[1]["ctrlAddress"] == "tls:127.0.0.9:6262"
    assert listed[1]["fingerprint"] == "cd" * 20
    assert listed[1]["lastJoinedAt"].endswith("Z")
    assert [c["id"] for c in offline] == ["ctrl-gone"]
    assert client[1]["ctrlAddress"] is None
    assert set(client[1]["apiAddresses"]) == {"edge-client"}
    assert summary["controllers"] == 2

    api.ctrl.managers.controllers.remove("ctrl-gone", own_id=own)
    assert [c["id"] for c in api.get("/controllers").json["data"]] == [own]


def test_the_first_controller_was_created_with_the_network(api: Api) -> None:
    before = api.get("/controllers").json["data"][0]
    api.app.join_network()
    after = api.get("/controllers").json["data"][0]

    assert after["createdAt"] == before["createdAt"]
    assert after["id"] == before["id"]
    assert after["certPem"] == before["certPem"]
    assert after["apiAddresses"] == before["apiAddresses"]


@pytest.mark.durable
def test_trellis_controller_remove_on_a_duckdb_home(settings: Settings) -> None:
    """The command opens the home's database as ``serve`` does (refused while it serves): it
    removes another controller's record, and refuses this home's own and an unknown id."""
    app = open_app(settings, durable=True)
    app.join_network()
    own = app.ctrl.controller_id
    app.ctrl.managers.controllers.join(
        Joining(id="ctrl-old", name="ctrl-old", ctrl_address="tls:10.0.0.9:6262")
    )
    app.ctrl.env.store.close()

    printed = io.StringIO()
    controller_remove(settings, "ctrl-old", out=printed)
    with pytest.raises(SettingError, match="this home's own controller"):
        controller_remove(settings, own, out=io.StringIO())
    with pytest.raises(SettingError, match="no controller 'ctrl-old'"):
        controller_remove(settings, "ctrl-old", out=io.StringIO())

    assert printed.getvalue() == "removed controller ctrl-old (tls:10.0.0.9:6262)\n"
    again = open_app(settings, durable=True)
    try:
        assert [c.id for c in again.ctrl.managers.controllers.list()] == [own]
    finally:
        again.ctrl.env.store.close()
