"""Auth policies: CRUD, nested defaults and merges, signer references, the built-in default policy."""

from __future__ import annotations

from typing import Any

import pytest

from engine.entities.identities import Identity
from engine.entities.trust import AuthPolicy
from engine.ports import UnitOfWork
from tests.conftest import Api, open_app

FULL = {
    "name": "strict",
    "primary": {
        "cert": {"allowed": False, "allowExpiredCerts": False},
        "extJwt": {"allowed": False, "allowedSigners": []},
        "updb": {
            "allowed": True,
            "minPasswordLength": 8,
            "requireSpecialChar": True,
            "requireNumberChar": True,
            "requireMixedCase": True,
            "maxAttempts": 3,
            "lockoutDurationMinutes": 10,
        },
    },
    "secondary": {"requireTotp": True, "requireExtJwtSigner": None},
    "tags": {"team": "sec"},
}

SIGNER = {
    "name": "idp",
    "issuer": "https://idp.example.com",
    "audience": "ziti",
    "enabled": True,
    "jwksEndpoint": "https://idp.example.com/jwks",
}


def _get(api: Api, id: str) -> dict[str, Any]:
    result = api.get(f"/auth-policies/{id}")
    assert result.status_code == 200, result.text
    return dict(result.json["data"])


def _identity_with_policy(api: Api, policy_id: str) -> None:
    env = api.ctrl.env
    now = env.clock.now()
    uow = UnitOfWork(env.store)
    uow.put(Identity(id="ident1", created_at=now, updated_at=now, name="user", auth_policy_id=policy_id))
    env.commit(uow)


def test_default_policy_is_listed(api: Api) -> None:
    result = api.get("/auth-policies")

    assert result.status_code == 200
    default = next(d for d in result.json["data"] if d["id"] == "default")
    assert default["name"] == "Default"
    assert default["primary"]["updb"]["allowed"] is True
    assert default["secondary"]["requireTotp"] is False
    assert {"id", "name", "createdAt", "updatedAt"} <= set(result.json["meta"]["filterableFields"])


def test_default_policy_can_not_be_deleted(api: Api) -> None:
    result = api.delete("/auth-policies/default")

    assert result.status_code == 409  # OpenZiti's auth_policy_test.go
    assert result.json["error"]["code"] == "CAN_NOT_DELETE_REFERENCED_ENTITY"
    assert api.get("/auth-policies/default").status_code == 200


def test_default_policy_can_be_updated(api: Api) -> None:
    # (requireTotp here binds every identity on the default policy but the default admin)
    result = api.patch("/auth-policies/default", json={"primary": {"updb": {"maxAttempts": 7}}})

    assert result.status_code == 200, result.text
    data = _get(api, "default")
    assert data["primary"]["updb"]["maxAttempts"] == 7
    assert data["primary"]["updb"]["allowed"] is True


def test_create_and_read(api: Api) -> None:
    id = api.create("/auth-policies", FULL)

    data = _get(api, id)

    assert data["name"] == "strict"
    assert data["primary"] == FULL["primary"]
    assert data["secondary"] == {"requireTotp": True}  # a null signer is left out (omitempty)
    assert data["tags"] == {"team": "sec"}
    assert data["_links"]["self"]["href"] == f"./auth-policies/{id}"


def test_omitted_nested_values_take_openziti_defaults(api: Api) -> None:
    id = api.create(
        "/auth-policies", {"name": "lax", "primary": {"updb": {"maxAttempts": 2}}, "secondary": {}}
    )

    data = _get(api, id)

    assert data["primary"]["cert"] == {"allowed": True, "allowExpiredCerts": True}
    assert data["primary"]["extJwt"] == {"allowed": True, "allowedSigners": []}
    assert data["primary"]["updb"]["allowed"] is True
    assert data["primary"]["updb"]["maxAttempts"] == 2
    assert data["primary"]["updb"]["minPasswordLength"] == 5
    assert data["secondary"] == {"requireTotp": False}  # a null signer is left out (omitempty)


def test_values_are_normalised(api: Api) -> None:
    body = {
        "name": "odd",
        "primary": {"updb": {"minPasswordLength": 1, "maxAttempts": -3, "lockoutDurationMinutes": -1}},
        "secondary": {},
    }
    id = api.create("/auth-policies", body)

    updb = _get(api, id)["primary"]["updb"]

    assert updb["minPasswordLength"] == 5
    assert updb["maxAttempts"] == 0
    assert updb["lockoutDurationMinutes"] == 0


def test_create_requires_name_primary_and_secondary(api: Api) -> None:
    for missing in ("name", "primary", "secondary"):
        body = {k: v for k, v in FULL.items() if k != missing}

        result = api.post("/auth-policies", json=body)

        assert result.status_code == 400, missing
        assert result.json["error"]["code"] == "COULD_NOT_VALIDATE"
        assert result.json["error"]["cause"]["field"] == missing


def test_nested_types_are_validated(api: Api) -> None:
    body = {**FULL, "primary": {"updb": {"maxAttempts": "many"}}}

    result = api.post("/auth-policies", json=body)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "primary.updb.maxAttempts"


def test_duplicate_name_is_refused(api: Api) -> None:
    api.create("/auth-policies", FULL)

    result = api.post("/auth-policies", json=FULL)

    assert result.status_code == 400
    assert result.json["error"]["cause"]["field"] == "name"


def test_unknown_signers_are_refused(api: Api) -> None:
    allowed = {**FULL, "primary": {"extJwt": {"allowed": True, "allowedSigners": ["nope"]}}}
    required = {**FULL, "secondary": {"requireTotp": False, "requireExtJwtSigner": "nope"}}

    first = api.post("/auth-policies", json=allowed)
    second = api.post("/auth-policies", json=required)

    # OpenZiti's verifyExtJwt: 404 NOT_FOUND, the field in the cause
    assert first.status_code == 404
    assert first.json["error"]["code"] == "NOT_FOUND"
    assert first.json["error"]["cause"]["field"] == "primary.extJwt.allowedExtJwtSigners[0]"
    assert first.json["error"]["cause"]["value"] == "nope"
    assert second.status_code == 404
    assert second.json["error"]["cause"]["field"] == "secondary.requiredExtJwtSigner"


def test_existing_signers_are_accepted(api: Api) -> None:
    signer = api.create("/external-jwt-signers", SIGNER)
    body = {
        **FULL,
        "primary": {"extJwt": {"allowed": True, "allowedSigners": [signer]}},
        "secondary": {"requireTotp": False, "requireExtJwtSigner": signer},
    }

    id = api.create("/auth-policies", body)

    data = _get(api, id)
    assert data["primary"]["extJwt"]["allowedSigners"] == [signer]
    assert data["secondary"].get("requireExtJwtSigner") == signer


def test_replace_resets_omitted_values(api: Api) -> None:
    id = api.create("/auth-policies", FULL)

    result = api.put(f"/auth-policies/{id}", json={"name": "renamed", "primary": {}, "secondary": {}})

    assert result.status_code == 200, result.text
    data = _get(api, id)
    assert data["name"] == "renamed"
    assert data["primary"]["cert"]["allowed"] is True
    assert data["primary"]["updb"]["maxAttempts"] == 5
    assert data["secondary"]["requireTotp"] is False
    assert data["tags"] == {}


def test_patch_merges_nested_values(api: Api) -> None:
    id = api.create("/auth-policies", FULL)

    result = api.patch(f"/auth-policies/{id}", json={"primary": {"updb": {"maxAttempts": 9}}})

    assert result.status_code == 200
    data = _get(api, id)
    assert data["primary"]["updb"]["maxAttempts"] == 9
    assert data["primary"]["updb"]["minPasswordLength"] == 8
    assert data["primary"]["cert"]["allowed"] is False
    assert data["secondary"]["requireTotp"] is True
    assert data["name"] == "strict"


def test_patch_can_clear_the_required_signer(api: Api) -> None:
    signer = api.create("/external-jwt-signers", SIGNER)
    id = api.create(
        "/auth-policies", {**FULL, "secondary": {"requireTotp": False, "requireExtJwtSigner": signer}}
    )

    result = api.patch(f"/auth-policies/{id}", json={"secondary": {"requireExtJwtSigner": None}})

    assert result.status_code == 200
    assert _get(api, id)["secondary"].get("requireExtJwtSigner") is None


def test_delete(api: Api) -> None:
    id = api.create("/auth-policies", FULL)

    result = api.delete(f"/auth-policies/{id}")

    assert result.status_code == 200
    assert result.json["data"] == {}
    assert api.get(f"/auth-policies/{id}").status_code == 404


def test_policy_used_by_an_identity_can_not_be_deleted(api: Api) -> None:
    id = api.create("/auth-policies", FULL)
    _identity_with_policy(api, id)

    result = api.delete(f"/auth-policies/{id}")

    assert result.status_code == 409
    assert result.json["error"]["code"] == "CAN_NOT_DELETE_REFERENCED_ENTITY"


def test_unknown_ids_answer_404(api: Api) -> None:
    assert api.get("/auth-policies/nope").status_code == 404
    assert api.put("/auth-policies/nope", json=FULL).status_code == 404
    assert api.patch("/auth-policies/nope", json={"name": "x"}).status_code == 404
    assert api.delete("/auth-policies/nope").status_code == 404


def test_list_filter(api: Api) -> None:
    id = api.create("/auth-policies", FULL)

    result = api.get("/auth-policies", params={"filter": 'name = "strict"'})

    assert [d["id"] for d in result.json["data"]] == [id]


def test_requires_admin(anon: Api) -> None:
    assert anon.get("/auth-policies").status_code == 401


@pytest.mark.durable
def test_policies_survive_a_restart(api: Api, app: Any, settings: Any) -> None:
    id = api.create("/auth-policies", FULL)
    app.ctrl.env.store.close()

    reopened = open_app(settings, durable=True)
    try:
        policy = reopened.ctrl.env.store.get(AuthPolicy, id)
        assert policy is not None
        assert policy.primary["updb"]["maxAttempts"] == 3
        assert reopened.ctrl.env.store.get(AuthPolicy, "default") is not None
    finally:
        reopened.ctrl.env.store.close()
