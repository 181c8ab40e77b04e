"""A write whose batch cannot be made durable is answered 503 COMMIT_FAILED and applies nothing."""

from __future__ import annotations

import os

import pytest

from storage.duckdb import DuckDBStore
from tests.conftest import Api

pytestmark = pytest.mark.durable  # the subject is the journal's failing disk


def test_a_failed_commit_is_a_503_and_changes_nothing(api: Api) -> None:
    store = api.ctrl.env.store
    assert isinstance(store, DuckDBStore)
    journal = store._journal
    assert journal is not None  # the controller's default: a batch is durable once journaled
    api.post("/identities", json={"name": "first", "type": "User", "isAdmin": False})
    assert journal._fd is not None
    os.close(journal._fd)  # the journal's file refuses the next batch, as a failing disk would
    refused = api.post("/identities", json={"name": "lost", "type": "User", "isAdmin": False})
    assert refused.status_code == 503, refused.text
    error = refused.json["error"]
    assert error["code"] == "COMMIT_FAILED"
    assert "cause" not in error  # the database's error text is logged, not shown
    listed = api.get("/identities", params={"filter": 'name = "lost"'})
    assert listed.json["meta"]["pagination"]["totalCount"] == 0
    # the next write goes through, and the engine never heard of the refused one
    assert api.post("/identities", json={"name": "kept", "type": "User", "isAdmin": False}).status_code == 201
    assert api.get("/identities", params={"filter": 'name = "lost"'}).json["data"] == []
