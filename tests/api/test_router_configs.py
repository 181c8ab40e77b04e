"""Routers' ``configs`` (management spec: ``edgeRouterCreate``/``Update``/``Patch``/``Detail``,
``routerCreate``/...): router-targeted configs, at most one per config type.

As OpenZiti's ``validateRouterConfigs`` (``controller/model/router_model.go``) and its
``Test_EdgeRouterConfigs``/``Test_TransitRouterConfigs``: a config whose type targets services, or
two configs of one type, is a field error on ``configs``; configs come back as a set of ids
(sorted); a replacement without them clears them; deleting a config drops it from its routers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.entities.routers import EdgeRouter, Router
from engine.ports import Put
from tests.api.certs import unique
from tests.api.conftest import shared_admin_api
from tests.conftest import Api

api = shared_admin_api("router-configs")

ROUTER_KINDS = ["/edge-routers", "/transit-routers"]


def config_type(api: Api, target: str = "router") -> str:
    return api.create("/config-types", {"name": unique("ct"), "target": target})


def config(api: Api, type_id: str, name: str | None = None) -> str:
    body = {"name": name or unique("cfg"), "configTypeId": type_id, "data": {"key": "value"}}
    return api.create("/configs", body)


def router(api: Api, path: str, **body: Any) -> str:
    return api.create(path, {"name": unique("r"), **body})


def configs_of(api: Api, path: str, id: str) -> list[str]:
    result = api.get(f"{path}/{id}")
    assert result.status_code == 200, result.text
    return list(result.json["data"].get("configs", []))


def refused(result: Any) -> dict[str, Any]:
    assert result.status_code == 400, result.text
    assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
    cause: dict[str, Any] = result.json["error"]["cause"]
    assert cause["field"] == "configs"
    return cause


# == create, read, list ============================================================================
@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_router_is_created_with_router_targeted_configs(api: Api, path: str) -> None:
    configs = sorted([config(api, config_type(api)), config(api, config_type(api))])

    id = router(api, path, configs=list(reversed(configs)))

    assert configs_of(api, path, id) == configs  # a set of ids: sorted
    listed = api.get(path, params={"filter": f'id = "{id}"'}).json["data"]
    assert [r.get("configs", []) for r in listed] == [configs]


@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_router_without_configs_has_none(api: Api, path: str) -> None:
    id = router(api, path)

    assert configs_of(api, path, id) == []


def test_transit_routers_show_the_same_configs_on_routers(api: Api) -> None:
    cfg = config(api, config_type(api))

    id = router(api, "/transit-routers", configs=[cfg])

    assert configs_of(api, "/routers", id) == [cfg]


def test_configs_may_be_named(api: Api) -> None:
    name = unique("named-cfg")
    cfg = config(api, config_type(api), name=name)

    id = router(api, "/edge-routers", configs=[name])

    assert configs_of(api, "/edge-routers", id) == [cfg]


# == validation ====================================================================================
@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_service_targeted_config_is_refused(api: Api, path: str) -> None:
    type_id = config_type(api, "service")
    type_name = api.get(f"/config-types/{type_id}").json["data"]["name"]
    name = unique("svc-cfg")
    cfg = config(api, type_id, name=name)

    cause = refused(api.post(path, json={"name": unique("r"), "configs": [cfg]}))

    assert cause["reason"] == f"config {name} has config type {type_name} which does not target routers"
    assert cause["value"] == f"[{cfg}]"  # the list as given, as Go prints it


def test_a_builtin_service_config_type_is_refused(api: Api) -> None:
    data = {"addresses": ["echo.ziti"], "protocols": ["tcp"], "portRanges": [{"low": 80, "high": 80}]}
    cfg = api.create("/configs", {"name": unique("intercept"), "configTypeId": "intercept.v1", "data": data})

    refused(api.post("/edge-routers", json={"name": unique("r"), "configs": [cfg]}))


@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_two_configs_of_one_type_are_refused(api: Api, path: str) -> None:
    type_id = config_type(api)
    type_name = api.get(f"/config-types/{type_id}").json["data"]["name"]
    first, second = unique("first"), unique("second")
    configs = [config(api, type_id, name=first), config(api, type_id, name=second)]

    cause = refused(api.post(path, json={"name": unique("r"), "configs": configs}))

    assert cause["reason"] == (
        f"duplicate configs named {first} and {second} found for config type {type_name}. "
        "Only one config of a given type is allowed per router"
    )
    assert cause["value"] == f"[{' '.join(configs)}]"


def test_the_same_config_twice_is_two_of_one_type(api: Api) -> None:
    name = unique("twice")
    cfg = config(api, config_type(api), name=name)

    cause = refused(api.post("/edge-routers", json={"name": unique("r"), "configs": [cfg, name]}))

    assert cause["reason"].startswith(f"duplicate configs named {name} and {name} found")


@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_an_unknown_config_is_refused(api: Api, path: str) -> None:
    cfg = config(api, config_type(api))

    cause = refused(api.post(path, json={"name": unique("r"), "configs": [cfg, "no-such-config"]}))

    assert cause["reason"] == "config with id or name 'no-such-config' not found"
    assert cause["value"] == "no-such-config"


def test_a_refused_create_creates_nothing(api: Api) -> None:
    name = unique("refused")

    refused(api.post("/edge-routers", json={"name": name, "configs": ["no-such-config"]}))

    assert api.get("/edge-routers", params={"filter": f'name = "{name}"'}).json["data"] == []


# == update and patch ==============================================================================
@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_replacement_sets_and_clears_configs(api: Api, path: str) -> None:
    first, second = config(api, config_type(api)), config(api, config_type(api))
    name = unique("r")
    id = router(api, path, configs=[first])

    added = api.put(f"{path}/{id}", json={"name": name, "configs": [second, first]})
    after_add = configs_of(api, path, id)
    cleared = api.put(f"{path}/{id}", json={"name": name})
    after_clear = configs_of(api, path, id)

    assert (added.status_code, cleared.status_code) == (200, 200)
    assert after_add == sorted([first, second])
    assert after_clear == []


@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_patch_sets_configs_and_another_patch_keeps_them(api: Api, path: str) -> None:
    cfg = config(api, config_type(api))
    id = router(api, path)

    set_result = api.patch(f"{path}/{id}", json={"configs": [cfg]})
    after_set = configs_of(api, path, id)
    other = api.patch(f"{path}/{id}", json={"cost": 3})
    after_other = configs_of(api, path, id)
    cleared = api.patch(f"{path}/{id}", json={"configs": []})

    assert (set_result.status_code, other.status_code, cleared.status_code) == (200, 200, 200)
    assert after_set == [cfg]
    assert after_other == [cfg]
    assert configs_of(api, path, id) == []


@pytest.mark.parametrize("path", ROUTER_KINDS)
def test_a_refused_update_or_patch_keeps_the_configs(api: Api, path: str) -> None:
    type_id = config_type(api)
    kept, rival = config(api, type_id), config(api, type_id)
    service_cfg = config(api, config_type(api, "service"))
    name = unique("r")
    id = router(api, path, name=name, configs=[kept])

    refused(api.put(f"{path}/{id}", json={"name": name, "configs": [kept, rival]}))
    refused(api.patch(f"{path}/{id}", json={"configs": [service_cfg]}))
    refused(api.patch(f"{path}/{id}", json={"configs": ["no-such-config"]}))

    assert configs_of(api, path, id) == [kept]


def test_re_enrollment_keeps_the_configs(api: Api) -> None:
    cfg = config(api, config_type(api))
    id = router(api, "/edge-routers", configs=[cfg])

    assert api.post(f"/edge-routers/{id}/re-enroll").status_code == 200

    assert configs_of(api, "/edge-routers", id) == [cfg]


# == references ====================================================================================
def test_deleting_a_config_drops_it_from_its_routers(api: Api) -> None:
    doomed, kept = config(api, config_type(api)), config(api, config_type(api))
    edge = router(api, "/edge-routers", configs=[doomed, kept])
    transit = router(api, "/transit-routers", configs=[doomed])

    result = api.delete(f"/configs/{doomed}")

    assert result.status_code == 200, result.text
    assert configs_of(api, "/edge-routers", edge) == [kept]
    assert configs_of(api, "/transit-routers", transit) == []


def test_a_config_type_with_configs_on_routers_cannot_be_deleted(api: Api) -> None:
    type_id = config_type(api)
    router(api, "/edge-routers", configs=[config(api, type_id)])

    result = api.delete(f"/config-types/{type_id}")

    assert result.status_code == 409, result.text


def test_the_integrity_check_finds_and_fixes_a_router_listing_a_missing_config(api: Api) -> None:
    kept = config(api, config_type(api))
    edge_id = router(api, "/edge-routers", configs=[kept])
    transit_id = router(api, "/transit-routers", configs=[kept])
    store = api.ctrl.env.store
    edge = store.get(EdgeRouter, edge_id)
    transit = store.get(Router, transit_id)
    assert edge is not None
    assert transit is not None
    # damage made behind the managers' back: configs that do not exist
    store.commit(
        [
            Put(dataclasses.replace(edge, configs=[kept, "gone-config"])),
            Put(dataclasses.replace(transit, configs=["gone-config"])),
        ]
    )

    checked = run_integrity(api, "/database/check-data-integrity")
    fixed = run_integrity(api, "/database/fix-data-integrity")

    edge_finding = f"edge router {edge_id} ({edge.name}): lists config gone-config, which does not exist"
    transit_finding = f"router {transit_id} ({transit.name}): lists config gone-config, which does not exist"
    assert {(edge_finding, False), (transit_finding, False)} <= checked
    assert {(edge_finding, True), (transit_finding, True)} <= fixed
    assert configs_of(api, "/edge-routers", edge_id) == [kept]
    assert configs_of(api, "/transit-routers", transit_id) == []


def run_integrity(api: Api, path: str) -> set[tuple[str, bool]]:
    """Run a data integrity check or fix and answer its findings as (description, fixed)."""
    assert api.post(path).status_code == 202
    assert api.ctrl.managers.integrity.join(timeout=120)
    data = api.get("/database/data-integrity-results").json["data"]
    assert data["error"] is None
    return {(r["description"], r["fixed"]) for r in data["results"]}
