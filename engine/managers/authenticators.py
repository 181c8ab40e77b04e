"""Authenticators: the username/password (``updb``) and certificate (``cert``) credentials.

OpenZiti's rules (``controller/model/authenticator_manager.go``, ``db/authenticator_store.go``):
``method`` is ``updb`` or ``cert``; an identity holds at most one authenticator per method
(409 ``MAX_AUTHENTICATOR_METHODS_REACHED``); router identities get none; usernames and certificate
fingerprints are unique. Passwords are stored only as hashes. Deleting an authenticator ends the
API sessions that were opened with it.

The certificate fingerprint is computed by the caller (``pki`` is not visible from here) and
passed in as the ``fingerprint`` field next to ``cert_pem``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.entities.identities import ApiSession, Authenticator, Identity
from engine.errors import ControllerError, FieldError
from engine.managers._base import EntityManager
from engine.ports import UnitOfWork

METHODS = ("updb", "cert")
ROUTER_TYPE = "Router"

USERNAME_MIN, USERNAME_MAX = 4, 100
PASSWORD_MIN, PASSWORD_MAX = 5, 100


class AuthenticatorMethodMaxError(ControllerError):
    code = "MAX_AUTHENTICATOR_METHODS_REACHED"
    default_message = "The identity already has the maximum authenticators of the specified method"


class AuthenticatorCanNotBeUpdatedError(ControllerError):
    code = "CAN_NOT_UPDATE_AUTHENTICATOR"
    default_message = "The authenticator cannot be updated in this fashion"


def check_length(field: str, value: str | None, low: int, high: int) -> None:
    if value is None or value == "":
        raise FieldError(field, f"{field} is required", value)
    if len(value) < low:
        raise FieldError(field, f"{field} should be at least {low} chars long", _masked(field, value))
    if len(value) > high:
        raise FieldError(field, f"{field} should be at most {high} chars long", _masked(field, value))


def _masked(field: str, value: str) -> str:
    return "******" if field == "password" else value


class AuthenticatorManager(EntityManager[Authenticator]):
    kind = Authenticator
    immutable = frozenset({"id", "created_at", "updated_at", "identity_id", "method", "password_hash"})

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Authenticator:
        method = fields.get("method") or ""
        if method not in METHODS:
            raise FieldError("method", "method must be updb or cert", method)
        identity_id = fields.get("identity_id") or ""
        now = self.env.clock.now()
        authenticator = Authenticator(
            id=self.env.ids.new_id(),
            created_at=now,
            updated_at=now,
            tags=dict(fields.get("tags") or {}),
            identity_id=identity_id,
            method=method,
        )
        if method == "updb":
            username, password = fields.get("username"), fields.get("password")
            check_length("username", username, USERNAME_MIN, USERNAME_MAX)
            check_length("password", password, PASSWORD_MIN, PASSWORD_MAX)
            assert password is not None
            return dataclasses.replace(
                authenticator, username=username, password_hash=self.env.hasher.hash(password)
            )
        cert_pem, fingerprint = fields.get("cert_pem"), fields.get("fingerprint")
        if not cert_pem:
            raise FieldError("certPem", "certPem is required", cert_pem)
        if not fingerprint:
            raise FieldError("certPem", "could not parse PEM certificate")
        return dataclasses.replace(
            authenticator,
            cert_pem=cert_pem,
            fingerprint=fingerprint,
            is_issued_by_network=bool(fields.get("is_issued_by_network", False)),
        )

    def apply(self, uow: UnitOfWork, old: Authenticator, fields: dict[str, Any]) -> Authenticator:
        changes = {k: v for k, v in fields.items() if k not in self.immutable}
        password = changes.pop("password", None)
        credential_change = password is not None or "username" in changes
        if credential_change and old.method != "updb":
            raise AuthenticatorCanNotBeUpdatedError()
        if "username" in changes:
            check_length("username", changes["username"], USERNAME_MIN, USERNAME_MAX)
        if password is not None:
            check_length("password", password, PASSWORD_MIN, PASSWORD_MAX)
            changes["password_hash"] = self.env.hasher.hash(password)
        return dataclasses.replace(old, updated_at=self.env.clock.now(), **changes)

    def validate(self, uow: UnitOfWork, new: Authenticator, old: Authenticator | None) -> None:
        if old is not None:
            return
        identity = uow.get(Identity, new.identity_id) if new.identity_id else None
        if identity is None:
            raise FieldError("identityId", "identity not found", new.identity_id)
        if identity.type_id == ROUTER_TYPE:
            raise FieldError("identityId", "may not create authenticators for router identities", identity.id)
        for existing in uow.find_by(Authenticator, "identity_id", identity.id):
            if existing.method == new.method:
                raise AuthenticatorMethodMaxError()

    def after_delete(self, uow: UnitOfWork, entity: Authenticator) -> None:
        for session in uow.find_by(ApiSession, "identity_id", entity.identity_id):
            if session.authenticator_id == entity.id:
                uow.delete(ApiSession, session.id)

    def for_identity(self, identity_id: str) -> list[Authenticator]:
        return self.env.store.find_by(Authenticator, "identity_id", identity_id)
