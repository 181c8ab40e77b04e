"""Identity enrollments (ott, ottca, updb): create, refresh, delete.

OpenZiti's rules (``controller/model/enrollment_manager.go``): the identity must exist, the
expiry must lie in the future, ``ottca`` needs an existing CA and ``updb`` a username, and an
identity holds at most one enrollment per method (409 ``ENROLLMENT_EXISTS``). A refresh issues a
new token (so the old JWT stops working) with a new expiry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.entities.identities import Enrollment, Identity
from engine.entities.trust import Ca
from engine.errors import EnrollmentExistsError, FieldError
from engine.managers._base import EntityManager, Env
from engine.managers.enrollment._core import (
    IDENTITY_METHODS,
    EnrollmentSettings,
    new_identity_enrollment,
    sign,
)
from engine.ports import UnitOfWork


def check_enrollment(
    uow: UnitOfWork, enrollment: Enrollment, *, ca_field: str = "caId", username_field: str = "username"
) -> None:
    """The method-specific requirements of an identity enrollment, reported on the given fields."""
    if enrollment.method not in IDENTITY_METHODS:
        raise FieldError("method", "unsupported enrollment method", enrollment.method)
    if enrollment.method == "ottca":
        if not enrollment.ca_id or uow.get(Ca, enrollment.ca_id) is None:
            raise FieldError(ca_field, "ca not found", enrollment.ca_id)
    elif enrollment.method == "updb" and not enrollment.username:
        raise FieldError(username_field, "username not provided", enrollment.username)


class EnrollmentManager(EntityManager[Enrollment]):
    kind = Enrollment

    def __init__(self, env: Env, settings: EnrollmentSettings) -> None:
        super().__init__(env)
        self.settings = settings

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Enrollment:
        return new_identity_enrollment(
            self.env,
            self.settings,
            identity_id=fields.get("identity_id") or "",
            method=fields.get("method") or "",
            expires_at=fields["expires_at"],
            ca_id=fields.get("ca_id"),
            username=fields.get("username"),
            tags=fields.get("tags"),
        )

    def validate(self, uow: UnitOfWork, new: Enrollment, old: Enrollment | None) -> None:
        if old is not None:
            return
        identity = uow.get(Identity, new.identity_id) if new.identity_id else None
        if identity is None:
            raise FieldError("identityId", "identity not found", new.identity_id)
        if new.expires_at <= self.env.clock.now():
            raise FieldError("expiresAt", "expiresAt must be in the future", new.expires_at.isoformat())
        check_enrollment(uow, new)
        for existing in uow.find_by(Enrollment, "identity_id", identity.id):
            if existing.method == new.method:
                raise EnrollmentExistsError(
                    field="method", value=new.method, reason="enrollment of this method exists"
                )

    def for_identity(self, identity_id: str) -> list[Enrollment]:
        return self.env.store.find_by(Enrollment, "identity_id", identity_id)

    def refresh(self, id: str, expires_at: datetime) -> Enrollment:
        """A new token and expiry for enrollment ``id``; the previous JWT no longer works."""
        with self.env.store.write_lock():
            old = self.require(id)
            if expires_at <= self.env.clock.now():
                raise FieldError(
                    "expiresAt", "must be after the current date and time", expires_at.isoformat()
                )
            uow = UnitOfWork(self.env.store)
            new = sign(self.env, self.settings, old, expires_at, token=self.env.ids.new_token())
            self.check_unique(uow, new)
            uow.put(new)
            self.env.commit(uow)
            return new
