"""Identities: create (with an optional first enrollment or password), update, delete."""

from __future__ import annotations

from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Enrollment, Identity
from engine.managers._base import EntityManager, check_attributes
from engine.managers.references import remove_entity_references
from engine.ports import UnitOfWork


class IdentityManager(EntityManager[Identity]):
    kind = Identity

    def create_with_password(self, fields: dict[str, Any], username: str, password: str) -> Identity:
        """An identity with a username/password authenticator (the default admin)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            identity = self.build(uow, fields)
            self.validate(uow, identity, None)
            self.check_unique(uow, identity)
            uow.put(identity)
            now = self.env.clock.now()
            authenticator = Authenticator(
                id=self.env.ids.new_id(),
                created_at=now,
                updated_at=now,
                identity_id=identity.id,
                method="updb",
                username=username,
                password_hash=self.env.hasher.hash(password),
            )
            uow.put(authenticator)
            self.env.commit(uow)
            return identity

    def validate(self, uow: UnitOfWork, new: Identity, old: Identity | None) -> None:
        check_attributes(new.role_attributes)

    def after_delete(self, uow: UnitOfWork, entity: Identity) -> None:
        for authenticator in uow.all(Authenticator):
            if authenticator.identity_id == entity.id:
                uow.delete(Authenticator, authenticator.id)
        for enrollment in uow.all(Enrollment):
            if enrollment.identity_id == entity.id:
                uow.delete(Enrollment, enrollment.id)
        for session in uow.all(ApiSession):
            if session.identity_id == entity.id:
                uow.delete(ApiSession, session.id)
        remove_entity_references(uow, entity, self.env.clock)
