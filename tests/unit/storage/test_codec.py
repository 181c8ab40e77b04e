"""The storage codec refuses values it cannot write with a FieldError naming the field, before a
batch is written (the API refuses them first; this is the last line, issue 8)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.entities import all as _kinds  # noqa: F401
from engine.entities.identities import Identity
from engine.errors import FieldError
from engine.ports import Put
from storage.codec import decode, encode
from storage.duckdb import DuckDBStore

NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)


def identity(**fields: Any) -> Identity:
    return Identity(id="id-1", created_at=NOW, updated_at=NOW, name="n", **fields)


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        (
            {"app_data": {"a": {"b": [1, 2**70]}}},
            "appData.a.b[1]",
            "integer 1180591620717411303424 is out of range",
        ),
        ({"app_data": {"a": -(2**63) - 1}}, "appData.a", "integer -9223372036854775809 is out of range"),
        ({"app_data": {"a": "\udc00"}}, "appData.a", "text is not valid UTF-8"),
        ({"app_data": {1: "x"}}, "appData", "map keys must be strings"),
        (
            {"service_hosting_costs": {"s": object()}},
            "serviceHostingCosts.s",
            "a value of type object cannot",
        ),
    ],
)
def test_a_value_orjson_cannot_write_is_a_field_error_on_its_field(
    fields: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(FieldError) as raised:
        encode(identity(**fields))

    assert raised.value.field == field
    assert (raised.value.reason or "").startswith(reason)


def test_a_document_nested_deeper_than_orjson_writes_is_a_field_error() -> None:
    deep: list[Any] = []
    for _ in range(300):
        deep = [deep]

    with pytest.raises(FieldError) as raised:
        encode(identity(app_data={"d": deep}))

    assert (raised.value.field or "").startswith("appData.d[0][0]")
    assert raised.value.reason == "nested too deeply to be stored"


def test_integers_up_to_unsigned_64_bits_round_trip() -> None:
    app_data = {"max": 2**64 - 1, "min": -(2**63)}

    decoded = decode(Identity, "id-1", encode(identity(app_data=app_data)))

    assert isinstance(decoded, Identity)
    assert decoded.app_data == app_data


def test_a_refused_batch_writes_nothing(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "t.duckdb")
    good = Identity(id="id-2", created_at=NOW, updated_at=NOW, name="good")

    with pytest.raises(FieldError):
        store.commit([Put(good), Put(identity(app_data={"x": 2**70}))])
    assert store.get(Identity, "id-2") is None
    store.close()

    reopened = DuckDBStore(tmp_path / "t.duckdb")
    assert reopened.get(Identity, "id-2") is None
    assert reopened.get(Identity, "id-1") is None
    reopened.close()


def test_documents_round_trip_and_decode_across_versions() -> None:
    """A document from a newer version (a key this one lacks) decodes with that key ignored; one
    from an older version (a field it lacked) takes the field's default."""
    entity = identity(role_attributes=["a", "b"], tags={"k": "v"}, disabled_until=NOW, is_admin=True)
    assert decode(Identity, "id-1", encode(entity)) == entity

    newer = orjson.loads(encode(entity)) | {"from_a_newer_version": 1}
    assert decode(Identity, "id-1", orjson.dumps(newer).decode()) == entity

    older = {k: v for k, v in orjson.loads(encode(entity)).items() if k not in ("tags", "is_mfa_enabled")}
    decoded = decode(Identity, "id-1", orjson.dumps(older).decode())
    assert decoded.tags == {}
    assert decoded.is_mfa_enabled is False
    assert decoded.disabled_until == NOW
    assert decoded.created_at == NOW
