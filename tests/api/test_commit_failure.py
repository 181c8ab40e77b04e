"""A write whose batch cannot be made durable is answered 503 COMMIT_FAILED and applies nothing."""

from __future__ import annotations

from storage.duckdb import DuckDBStore
from tests.conftest import Api


def test_a_failed_commit_is_a_503_and_changes_nothing(api: Api) -> None:
    store = api.ctrl.env.store
    assert isinstance(store, DuckDBStore)
    # the database refuses the next transaction: its table is gone
    store._db.run([("ALTER TABLE identities RENAME TO identities_gone", None)])
    try:
        refused = api.post("/identities", json={"name": "lost", "type": "User", "isAdmin": False})
    finally:
        store._db.run([("ALTER TABLE identities_gone RENAME TO identities", None)])
    assert refused.status_code == 503, refused.text
    error = refused.json["error"]
    assert error["code"] == "COMMIT_FAILED"
    assert "cause" not in error  # the database's error text is logged, not shown
    listed = api.get("/identities", params={"filter": 'name = "lost"'})
    assert listed.json["meta"]["pagination"]["totalCount"] == 0
    # the next write goes through, and the engine never heard of the refused one
    assert api.post("/identities", json={"name": "kept", "type": "User", "isAdmin": False}).status_code == 201
    assert api.get("/identities", params={"filter": 'name = "lost"'}).json["data"] == []
