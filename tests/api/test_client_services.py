"""Client ``/services``: what an identity's policies grant, with permissions, configs and posture."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import falcon.testing

from tests.conftest import CLIENT, Api

INTERCEPT = {"protocols": ["tcp"], "addresses": ["echo.ziti"], "portRanges": [{"low": 80, "high": 80}]}
OTHER_INTERCEPT = {"protocols": ["udp"], "addresses": ["other.ziti"], "portRanges": [{"low": 53, "high": 53}]}
HOST = {"protocol": "tcp", "address": "localhost", "port": 8080}
INTERCEPT_TYPE = "g7cIWbcGg"
HOST_TYPE = "NH5p4FpGR"


@dataclass
class Device:
    """A non-admin identity logged in on the client API."""

    api: Api
    id: str
    token: str

    def get(self, path: str, **params: Any) -> falcon.testing.Result:
        return self.api.get(path, base=CLIENT, token=self.token, params=params)

    def services(self, **params: Any) -> list[dict[str, Any]]:
        result = self.get("/services", **params)
        assert result.status_code == 200, result.text
        return list(result.json["data"])


def device(api: Api, name: str, *, config_types: list[str] | None = None, **fields: Any) -> Device:
    identity = api.create("/identities", {"name": name, "isAdmin": False, "type": "User", **fields})
    password = f"{name}-secret"
    body = {"identityId": identity, "method": "updb", "username": name, "password": password}
    api.create("/authenticators", body)
    login: dict[str, Any] = {"username": name, "password": password}
    if config_types is not None:
        login["configTypes"] = config_types
    result = api.client.simulate_post(CLIENT + "/authenticate", params={"method": "password"}, json=login)
    assert result.status_code == 200, result.text
    return Device(api, identity, str(result.json["data"]["token"]))


def service(api: Api, name: str, **fields: Any) -> str:
    return api.create("/services", {"name": name, "encryptionRequired": True, **fields})


def grant(api: Api, identity: str, service_id: str, type: str = "Dial") -> str:
    body = {
        "name": f"{type}-{identity}-{service_id}",
        "type": type,
        "semantic": "AnyOf",
        "identityRoles": [f"@{identity}"],
        "serviceRoles": [f"@{service_id}"],
    }
    return api.create("/service-policies", body)


def config(api: Api, name: str, type_id: str, data: dict[str, Any]) -> str:
    return api.create("/configs", {"name": name, "configTypeId": type_id, "data": data})


def names(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(row["name"] for row in rows)


# -- visibility and permissions ----------------------------------------------------------------------
def test_lists_exactly_the_services_its_policies_grant_with_their_permissions(api: Api) -> None:
    laptop = device(api, "laptop")
    dial, bind, both = service(api, "dial-only"), service(api, "bind-only"), service(api, "both")
    service(api, "not-granted")
    grant(api, laptop.id, dial)
    grant(api, laptop.id, bind, "Bind")
    grant(api, laptop.id, both)
    grant(api, laptop.id, both, "Bind")

    rows = {row["name"]: row for row in laptop.services()}

    assert sorted(rows) == ["bind-only", "both", "dial-only"]
    assert rows["dial-only"]["permissions"] == ["Dial"]
    assert rows["bind-only"]["permissions"] == ["Bind"]
    assert rows["both"]["permissions"] == ["Bind", "Dial"]


def test_an_admin_sees_on_the_client_api_only_what_policies_grant(api: Api) -> None:
    granted = service(api, "granted")
    service(api, "other")
    admin = api.get("/current-identity").json["data"]["id"]
    grant(api, admin, granted)

    listed = api.get("/services", base=CLIENT)

    assert listed.status_code == 200
    assert [(row["id"], row["permissions"]) for row in listed.json["data"]] == [(granted, ["Dial"])]
    assert len(api.get("/services").json["data"]) == 2  # management lists every service


def test_read_of_a_granted_service_and_404_for_one_not_granted_or_missing(api: Api) -> None:
    laptop = device(api, "laptop")
    granted, hidden = service(api, "granted", roleAttributes=["web"]), service(api, "hidden")
    grant(api, laptop.id, granted)

    result = laptop.get(f"/services/{granted}")

    assert result.status_code == 200
    data = result.json["data"]
    assert data["id"] == granted
    assert data["name"] == "granted"
    assert data["permissions"] == ["Dial"]
    assert data["roleAttributes"] == ["web"]
    assert data["encryptionRequired"] is True
    assert data["_links"]["self"] == {"href": f"./services/{granted}"}
    for missing in (hidden, "no-such-service"):
        refused = laptop.get(f"/services/{missing}")
        assert refused.status_code == 404
        assert refused.json["error"]["code"] == "NOT_FOUND"


def test_losing_the_policy_hides_the_service(api: Api) -> None:
    laptop = device(api, "laptop")
    svc = service(api, "echo")
    policy = grant(api, laptop.id, svc)
    assert names(laptop.services()) == ["echo"]

    assert api.delete(f"/service-policies/{policy}").status_code == 200

    assert laptop.services() == []
    assert laptop.get(f"/services/{svc}").status_code == 404


def test_requires_an_api_session(anon: Api) -> None:
    result = anon.get("/services", base=CLIENT)

    assert result.status_code == 401
    assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert anon.get("/services/x", base=CLIENT).status_code == 401


# -- config map ------------------------------------------------------------------------------------------
def test_config_map_holds_the_types_asked_on_the_request_by_name(api: Api) -> None:
    laptop = device(api, "laptop")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    host = config(api, "echo-host", HOST_TYPE, HOST)
    grant(api, laptop.id, service(api, "echo", configs=[intercept, host]))

    def config_map(**params: Any) -> dict[str, Any]:
        [row] = laptop.services(**params)
        return dict(row["config"])

    assert config_map() == {}
    assert config_map(configTypes="intercept.v1") == {"intercept.v1": INTERCEPT}
    assert config_map(configTypes=HOST_TYPE) == {"host.v1": HOST}
    assert config_map(configTypes="all") == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert config_map(configTypes=f"intercept.v1,{HOST_TYPE}") == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert config_map(configTypes=["intercept.v1", "host.v1"]) == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert config_map(configTypes="no-such-type") == {}


def test_config_map_follows_the_config_types_asked_at_login(api: Api) -> None:
    by_name = device(api, "by-name", config_types=["intercept.v1"])
    everything = device(api, "everything", config_types=["all"])
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    host = config(api, "echo-host", HOST_TYPE, HOST)
    echo = service(api, "echo", configs=[intercept, host])
    grant(api, by_name.id, echo)
    grant(api, everything.id, echo)

    assert by_name.services()[0]["config"] == {"intercept.v1": INTERCEPT}
    assert by_name.get(f"/services/{echo}").json["data"]["config"] == {"intercept.v1": INTERCEPT}
    assert everything.services()[0]["config"] == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    assert by_name.services(configTypes="host.v1")[0]["config"] == {"host.v1": HOST}


def test_all_at_login_covers_config_types_created_later(api: Api) -> None:
    laptop = device(api, "laptop", config_types=["all"])
    custom_type = api.create("/config-types", {"name": "custom.v1"})
    custom = config(api, "custom", custom_type, {"x": 1})
    grant(api, laptop.id, service(api, "echo", configs=[custom]))

    [row] = laptop.services()

    assert row["config"] == {"custom.v1": {"x": 1}}


def test_the_sdk_list_and_lookup_calls(api: Api) -> None:
    """What the C SDK sends: ``configTypes=all&limit=25&offset=0`` and a name filter."""
    laptop = device(api, "laptop")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    echo = service(api, "echo", configs=[intercept])
    grant(api, laptop.id, echo)

    listed = laptop.get("/services", configTypes="all", limit=25, offset=0)
    found = laptop.get("/services", filter='name="echo"', configTypes="all")

    assert listed.status_code == 200
    assert listed.json["meta"]["pagination"] == {"limit": 25, "offset": 0, "totalCount": 1}
    assert listed.json["data"][0]["config"] == {"intercept.v1": INTERCEPT}
    assert [row["id"] for row in found.json["data"]] == [echo]


# -- identity service-config overrides ----------------------------------------------------------------
def test_an_override_replaces_the_service_config_of_its_type_for_that_identity_only(api: Api) -> None:
    laptop, phone = device(api, "laptop"), device(api, "phone")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    host = config(api, "echo-host", HOST_TYPE, HOST)
    special = config(api, "special-intercept", INTERCEPT_TYPE, OTHER_INTERCEPT)
    echo = service(api, "echo", configs=[intercept, host])
    grant(api, laptop.id, echo)
    grant(api, phone.id, echo)

    assigned = api.post(
        f"/identities/{laptop.id}/service-configs", json=[{"serviceId": echo, "configId": special}]
    )

    assert assigned.status_code == 200
    assert laptop.services(configTypes="all")[0]["config"] == {
        "intercept.v1": OTHER_INTERCEPT,
        "host.v1": HOST,
    }
    assert laptop.services(configTypes="host.v1")[0]["config"] == {"host.v1": HOST}
    assert phone.services(configTypes="all")[0]["config"] == {"intercept.v1": INTERCEPT, "host.v1": HOST}
    as_laptop = api.get(f"/services/{echo}", params={"asIdentity": laptop.id, "configTypes": "intercept.v1"})
    assert as_laptop.json["data"]["config"] == {"intercept.v1": OTHER_INTERCEPT}


def test_an_override_adds_a_type_the_service_does_not_have(api: Api) -> None:
    laptop = device(api, "laptop")
    host = config(api, "laptop-host", HOST_TYPE, HOST)
    echo = service(api, "echo")
    grant(api, laptop.id, echo)
    api.post(f"/identities/{laptop.id}/service-configs", json=[{"serviceId": echo, "configId": host}])

    assert laptop.services(configTypes="all")[0]["config"] == {"host.v1": HOST}
    assert laptop.services(configTypes="intercept.v1")[0]["config"] == {}


# -- posture queries ---------------------------------------------------------------------------------------
def test_posture_queries_are_one_passing_dummy_per_permission_without_posture_checks(api: Api) -> None:
    laptop = device(api, "laptop")
    echo = service(api, "echo")
    grant(api, laptop.id, echo)
    grant(api, laptop.id, echo, "Bind")

    [row] = laptop.services()

    assert row["postureQueries"] == [
        {
            "isPassing": True,
            "policyId": "dummy bind policy: no posture checks defined",
            "policyType": "Bind",
            "postureQueries": [],
        },
        {
            "isPassing": True,
            "policyId": "dummy dial policy: no posture checks defined",
            "policyType": "Dial",
            "postureQueries": [],
        },
    ]


def test_posture_queries_list_the_checks_of_each_policy(api: Api) -> None:
    laptop = device(api, "laptop")
    echo = service(api, "echo")
    check = api.create(
        "/posture-checks",
        {"name": "corp-domain", "typeId": "DOMAIN", "domains": ["corp.example"], "roleAttributes": ["corp"]},
    )
    policy = api.create(
        "/service-policies",
        {
            "name": "dial-with-domain",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": [f"@{laptop.id}"],
            "serviceRoles": [f"@{echo}"],
            "postureCheckRoles": ["#corp"],
        },
    )

    [row] = laptop.services()

    [entry] = row["postureQueries"]
    assert entry["policyId"] == policy
    assert entry["policyType"] == "Dial"
    assert entry["isPassing"] is False
    [query] = entry["postureQueries"]
    assert query["id"] == check
    assert query["queryType"] == "DOMAIN"
    assert query["isPassing"] is False


# -- lists ------------------------------------------------------------------------------------------------
def test_filter_sort_paging_and_role_filter(api: Api) -> None:
    laptop = device(api, "laptop")
    for index, attrs in enumerate((["web"], ["web", "east"], ["db"])):
        grant(api, laptop.id, service(api, f"svc-{index}", roleAttributes=attrs))
    service(api, "svc-hidden", roleAttributes=["web"])

    page = laptop.get("/services", sort="name desc", limit=2, offset=1)
    filtered = laptop.services(filter='name contains "svc-" and anyOf(roleAttributes) = "web"', sort="name")

    assert page.status_code == 200
    assert [row["name"] for row in page.json["data"]] == ["svc-1", "svc-0"]
    assert page.json["meta"]["pagination"] == {"limit": 2, "offset": 1, "totalCount": 3}
    assert "name" in page.json["meta"]["filterableFields"]
    assert [row["name"] for row in filtered] == ["svc-0", "svc-1"]
    assert names(laptop.services(roleFilter="#web")) == ["svc-0", "svc-1"]
    assert names(laptop.services(roleFilter=["#web", "#db"], roleSemantic="AnyOf")) == [
        "svc-0",
        "svc-1",
        "svc-2",
    ]
    bad = laptop.get("/services", roleFilter="web")
    assert bad.status_code == 400
    assert bad.json["error"]["cause"]["field"] == "roleFilter"
    bad_filter = laptop.get("/services", filter="name =")
    assert bad_filter.status_code == 400


# -- admin-only changes on the client API -------------------------------------------------------------------
def test_replace_patch_and_delete_need_an_admin(api: Api) -> None:
    laptop = device(api, "laptop")
    echo = service(api, "echo")
    grant(api, laptop.id, echo)

    for method, body in (("PUT", {"name": "x"}), ("PATCH", {"name": "x"}), ("DELETE", None)):
        result = api.request(method, f"/services/{echo}", base=CLIENT, token=laptop.token, json=body)
        assert result.status_code == 401, method
        assert result.json["error"]["code"] == "UNAUTHORIZED"
    assert api.get(f"/services/{echo}").json["data"]["name"] == "echo"


def test_an_admin_replaces_patches_and_deletes_on_the_client_api(api: Api) -> None:
    echo = service(api, "echo", roleAttributes=["web"], maxIdleTimeMillis=5)

    patched = api.patch(f"/services/{echo}", base=CLIENT, json={"maxIdleTimeMillis": 9})
    assert patched.status_code == 200
    assert patched.json["data"] == {}
    assert api.get(f"/services/{echo}").json["data"]["maxIdleTimeMillis"] == 9

    replaced = api.put(f"/services/{echo}", base=CLIENT, json={"name": "echo-2"})
    assert replaced.status_code == 200
    after = api.get(f"/services/{echo}").json["data"]
    assert (after["name"], after["roleAttributes"], after["maxIdleTimeMillis"]) == ("echo-2", [], 0)

    invalid = api.put(f"/services/{echo}", base=CLIENT, json={"roleAttributes": ["x"]})
    assert invalid.status_code == 400
    assert invalid.json["error"]["cause"]["field"] == "name"
    assert api.put("/services/nope", base=CLIENT, json={"name": "n"}).status_code == 404

    deleted = api.delete(f"/services/{echo}", base=CLIENT)
    assert deleted.status_code == 200
    assert deleted.json["data"] == {}
    assert api.get(f"/services/{echo}").status_code == 404
    assert api.delete(f"/services/{echo}", base=CLIENT).status_code == 404


def test_the_client_api_creates_no_services(api: Api) -> None:
    result = api.post("/services", base=CLIENT, json={"name": "s", "encryptionRequired": True})

    assert result.status_code == 405
