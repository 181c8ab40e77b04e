"""Client ``/services`` lists answer each service from kept JSON (``api.views.EncodedServices``):
a change between two lists must show in the second, exactly as a fresh rendering shows it.

Each test lists, changes one thing a service's answer is made of, and lists again; every row is
also checked against ``GET /services/{id}``, which renders the service afresh.
"""

from __future__ import annotations

from typing import Any

import orjson

from api.views import EncodedServices
from tests.api.test_client_services import (
    HOST,
    HOST_TYPE,
    INTERCEPT,
    INTERCEPT_TYPE,
    OTHER_INTERCEPT,
    Device,
    config,
    device,
    grant,
    service,
)
from tests.conftest import Api


def listed(who: Device, **params: Any) -> dict[str, dict[str, Any]]:
    """The device's services by id, each checked against its fresh rendering: the list's bytes
    are those of the envelope of the rows ``GET /services/{id}`` renders afresh."""
    result = who.get("/services", **params)
    assert result.status_code == 200, result.text
    rows = list(result.json["data"])
    fresh_rows = []
    for row in rows:
        fresh = who.get(f"/services/{row['id']}", **params)
        assert fresh.status_code == 200, fresh.text
        assert fresh.json["data"] == row
        fresh_rows.append(fresh.json["data"])
    assert result.content == orjson.dumps({"data": fresh_rows, "meta": result.json["meta"]})
    return {row["id"]: row for row in rows}


def test_a_renamed_service_is_listed_with_its_new_name(api: Api) -> None:
    laptop = device(api, "laptop")
    echo = service(api, "echo", tags={"k": "v"})
    grant(api, laptop.id, echo)
    before = listed(laptop)[echo]

    assert api.patch(f"/services/{echo}", json={"name": "echo-2", "tags": {"k": "w"}}).status_code == 200

    after = listed(laptop)[echo]
    assert (before["name"], after["name"]) == ("echo", "echo-2")
    assert after["tags"] == {"k": "w"}


def test_a_changed_config_is_listed_with_its_new_data(api: Api) -> None:
    laptop = device(api, "laptop")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    echo = service(api, "echo", configs=[intercept])
    grant(api, laptop.id, echo)
    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": INTERCEPT}

    assert api.patch(f"/configs/{intercept}", json={"data": OTHER_INTERCEPT}).status_code == 200

    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": OTHER_INTERCEPT}
    assert listed(laptop, configTypes="host.v1")[echo]["config"] == {}


def test_configs_added_to_and_removed_from_a_service(api: Api) -> None:
    laptop = device(api, "laptop")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    host = config(api, "echo-host", HOST_TYPE, HOST)
    echo = service(api, "echo", configs=[intercept])
    grant(api, laptop.id, echo)
    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": INTERCEPT}

    api.patch(f"/services/{echo}", json={"configs": [intercept, host]})
    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": INTERCEPT, "host.v1": HOST}

    api.patch(f"/services/{echo}", json={"configs": [host]})
    assert listed(laptop, configTypes="all")[echo]["config"] == {"host.v1": HOST}


def test_a_renamed_config_type_is_listed_under_its_new_name(api: Api) -> None:
    laptop = device(api, "laptop")
    kind = api.create("/config-types", {"name": "acme.v1"})
    data = {"x": 1.25, "big": 2**53 + 1, "ü": "é\u2028", "nested": [{"a": None}]}
    acme = config(api, "echo-acme", kind, data)
    echo = service(api, "echo", configs=[acme])
    grant(api, laptop.id, echo)
    assert listed(laptop, configTypes="all")[echo]["config"] == {"acme.v1": data}

    assert api.patch(f"/config-types/{kind}", json={"name": "acme.v2"}).status_code == 200

    assert listed(laptop, configTypes="all")[echo]["config"] == {"acme.v2": data}


def test_an_identity_override_changes_that_identity_s_list_only(api: Api) -> None:
    laptop, phone = device(api, "laptop"), device(api, "phone")
    intercept = config(api, "echo-intercept", INTERCEPT_TYPE, INTERCEPT)
    special = config(api, "special-intercept", INTERCEPT_TYPE, OTHER_INTERCEPT)
    echo = service(api, "echo", configs=[intercept])
    grant(api, laptop.id, echo)
    grant(api, phone.id, echo)
    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": INTERCEPT}

    api.post(f"/identities/{laptop.id}/service-configs", json=[{"serviceId": echo, "configId": special}])

    assert listed(laptop, configTypes="all")[echo]["config"] == {"intercept.v1": OTHER_INTERCEPT}
    assert listed(phone, configTypes="all")[echo]["config"] == {"intercept.v1": INTERCEPT}


def test_policy_changes_are_listed_with_the_new_permissions(api: Api) -> None:
    laptop, phone = device(api, "laptop"), device(api, "phone")
    echo = service(api, "echo")
    dial = grant(api, laptop.id, echo)
    grant(api, phone.id, echo, "Bind")
    assert listed(laptop)[echo]["permissions"] == ["Dial"]
    assert listed(phone)[echo]["permissions"] == ["Bind"]  # the same service, another grant

    grant(api, laptop.id, echo, "Bind")
    after = listed(laptop)[echo]
    assert after["permissions"] == ["Bind", "Dial"]
    assert [p["policyType"] for p in after["postureQueries"]] == ["Bind", "Dial"]

    assert api.delete(f"/service-policies/{dial}").status_code == 200
    assert listed(laptop)[echo]["permissions"] == ["Bind"]


def test_posture_checks_appearing_and_going_change_the_posture_queries(api: Api) -> None:
    laptop = device(api, "laptop")
    echo = service(api, "echo")
    policy = grant(api, laptop.id, echo)
    [dummy] = listed(laptop)[echo]["postureQueries"]
    assert dummy["policyId"] == "dummy dial policy: no posture checks defined"

    # a posture check somewhere (not on this policy): the policy's own id, nothing to check
    other = api.create(
        "/posture-checks",
        {"name": "corp-domain", "typeId": "DOMAIN", "domains": ["corp.example"], "roleAttributes": ["corp"]},
    )
    [plain] = listed(laptop)[echo]["postureQueries"]
    assert (plain["policyId"], plain["isPassing"], plain["postureQueries"]) == (policy, True, [])

    # the check on the policy: evaluated for the session (failing: no domain reported)
    api.patch(f"/service-policies/{policy}", json={"postureCheckRoles": ["#corp"]})
    [checked] = listed(laptop)[echo]["postureQueries"]
    assert checked["isPassing"] is False
    assert [q["id"] for q in checked["postureQueries"]] == [other]

    api.patch(f"/service-policies/{policy}", json={"postureCheckRoles": []})
    [plain_again] = listed(laptop)[echo]["postureQueries"]
    assert plain_again == plain


def test_the_kept_json_is_what_the_row_renders_to() -> None:
    """The memo answers ``orjson.dumps`` of the rendering, and renders again for another key."""
    made: list[str] = []

    class Thing:
        id = "s"

    def render(thing: Any) -> dict[str, Any]:
        made.append(thing.id)
        return {"id": thing.id, "n": len(made)}

    memo = EncodedServices()
    thing, data = Thing(), {"a": 1}
    first = memo.get(thing, [("t", data)], ("Dial",), (("p", "Dial", True),), render)  # type: ignore[arg-type]
    again = memo.get(thing, [("t", data)], ("Dial",), (("p", "Dial", True),), render)  # type: ignore[arg-type]
    assert first == again == orjson.dumps({"id": "s", "n": 1})
    other_data = memo.get(thing, [("t", {"a": 1})], ("Dial",), (("p", "Dial", True),), render)  # type: ignore[arg-type]
    other_grant = memo.get(thing, [("t", data)], ("Bind",), (("p", "Bind", True),), render)  # type: ignore[arg-type]
    other_thing = memo.get(Thing(), [("t", data)], ("Dial",), (("p", "Dial", True),), render)  # type: ignore[arg-type]
    assert [other_data, other_grant, other_thing] == [orjson.dumps({"id": "s", "n": n}) for n in (2, 3, 4)]
