"""Builders for the policy and router tests: entities put straight into the store, and error
assertions. Builders never assert."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from engine.entities import Entity
from engine.entities.posture import PostureCheck
from engine.entities.services import Service
from engine.managers.identities import IdentityManager
from engine.ports import UnitOfWork


def put(app: Any, entity: Entity) -> str:
    """Commit ``entity`` as-is (bypassing managers) and return its id."""
    uow = UnitOfWork(app.ctrl.env.store)
    uow.put(entity)
    app.ctrl.env.commit(uow)
    return entity.id


def remove(app: Any, kind: type[Entity], id: str) -> None:
    """Delete an entity behind the managers' back (no reference clean-up): a dangling ``@id``."""
    uow = UnitOfWork(app.ctrl.env.store)
    uow.delete(kind, id)
    app.ctrl.env.commit(uow)


def _now() -> datetime:
    return datetime.now(UTC)


def make_identity(app: Any, name: str, *attributes: str) -> str:
    manager = IdentityManager(app.ctrl.env)
    return manager.create({"name": name, "role_attributes": list(attributes)}).id


def make_service(app: Any, name: str, *attributes: str) -> str:
    now = _now()
    service = Service(
        id=app.ctrl.env.ids.new_id(),
        created_at=now,
        updated_at=now,
        name=name,
        role_attributes=list(attributes),
    )
    return put(app, service)


def make_posture_check(app: Any, name: str, *attributes: str) -> str:
    now = _now()
    check = PostureCheck(
        id=app.ctrl.env.ids.new_id(),
        created_at=now,
        updated_at=now,
        name=name,
        type_id="MFA",
        role_attributes=list(attributes),
    )
    return put(app, check)


def field_error(result: Any) -> dict[str, Any]:
    """The cause of a 400 COULD_NOT_VALIDATE answer."""
    assert result.status_code == 400, result.text
    error = result.json["error"]
    assert error["code"] == "COULD_NOT_VALIDATE", error
    cause: dict[str, Any] = error["cause"]
    return cause
