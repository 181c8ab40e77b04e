"""Identities: create (with first enrollments or a password), update, disable/enable, delete.

OpenZiti's rules kept here (``controller/model/identity_*.go``, ``db/identity_store.go``):

* identity types are ``Default`` and ``Router``; router identities belong to tunneler-enabled
  edge routers: they may not be created through the API, renamed, retyped or deleted while their
  router exists (their role attributes may change), and no identity may become one;
* the default admin stays an admin and cannot be deleted;
* ``authPolicyId`` names an existing auth policy (empty means ``default``), hosting maps name
  existing services, role attributes carry no ``#``/``@`` prefix;
* deleting an identity deletes its enrollments, authenticators, MFA enrollment and API sessions
  and drops ``@<id>`` from policy role lists;
* service-config overrides (``/identities/{id}/service-configs``) map, per service, a config
  type to a config that replaces the service's own config of that type for this identity; they
  go with a deleted service, and a config in use by one cannot be deleted;
* disabling an identity (for ``durationMinutes``, 0 = until enabled) ends its API sessions at
  once; the default admin can not be disabled (OpenZiti allows it, and then nobody can log in to
  enable anyone again): 400 ``ENTITY_CAN_NOT_BE_UPDATED``; a duration beyond the longest Go
  ``time.Duration`` (:data:`MAX_DISABLE_MINUTES`, about 292 years, where OpenZiti's
  ``durationMinutes * time.Minute`` wraps around) is a field error on ``durationMinutes`` (a
  lockout's duration is capped there instead);
* a password set at creation must satisfy the identity's auth policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from engine.attempts import password_key
from engine.entities.identities import (
    DEFAULT_AUTH_POLICY_ID,
    ApiSession,
    Authenticator,
    Enrollment,
    Identity,
    Mfa,
)
from engine.entities.routers import EdgeRouter
from engine.entities.services import Config, ConfigType, Service
from engine.entities.trust import AuthPolicy
from engine.errors import (
    EntityCanNotBeDeletedError,
    EntityCanNotBeUpdatedError,
    FieldError,
    NotFoundError,
    ReferencedEntityError,
)
from engine.managers._base import EntityManager, check_attributes
from engine.managers.api_sessions import delete_session
from engine.managers.auth_policies import check_password, rules_for
from engine.managers.enrollment._core import EnrollmentSettings, new_identity_enrollment
from engine.managers.enrollments import check_enrollment
from engine.managers.references import remove_entity_references
from engine.ports import Clock, UnitOfWork

DEFAULT_TYPE = "Default"
ROUTER_TYPE = "Router"
IDENTITY_TYPE_IDS = (DEFAULT_TYPE, ROUTER_TYPE)
PRECEDENCES = ("default", "required", "failed")


@dataclasses.dataclass(frozen=True)
class EnrollmentRequest:
    """The ``enrollment`` object of an identity create: which first enrollments to open."""

    ott: bool = False
    ottca: str | None = None
    updb: str | None = None

    def methods(self) -> list[tuple[str, str | None, str | None]]:
        """(method, ca_id, username) for each requested enrollment."""
        out: list[tuple[str, str | None, str | None]] = []
        if self.ott:
            out.append(("ott", None, None))
        if self.ottca is not None:
            out.append(("ottca", self.ottca, None))
        if self.updb is not None:
            out.append(("updb", None, self.updb))
        return out


def _require_config(uow: UnitOfWork, config_id: str) -> Config:
    config = uow.get(Config, config_id)
    if config is None:
        raise NotFoundError(field="configId", value=config_id, reason=f"config with id {config_id} not found")
    return config


def drop_service_config_overrides(uow: UnitOfWork, clock: Clock, service_id: str) -> None:
    """Remove every identity's overrides of a deleted service."""
    now = clock.now()
    for identity in uow.find_by(Identity, "overrides_configs", True):
        if service_id in identity.service_configs:
            kept = {s: by_type for s, by_type in identity.service_configs.items() if s != service_id}
            uow.put(dataclasses.replace(identity, service_configs=kept, updated_at=now))


def check_config_not_overridden(uow: UnitOfWork, config_id: str) -> None:
    """A config an identity uses as a service-config override may not be deleted (OpenZiti's
    ``configStore.DeleteById``: "config is in use by identity <id> for service <id>")."""
    for identity in uow.find_by(Identity, "overrides_configs", True):
        for service_id, by_type in identity.service_configs.items():
            if config_id in by_type.values() and uow.get(Service, service_id) is not None:
                raise ReferencedEntityError(
                    field="id",
                    value=config_id,
                    reason=f"config is in use by identity {identity.id} for service {service_id}",
                )


def delete_identity_cascade(uow: UnitOfWork, identity: Identity, clock: Clock) -> None:
    """Everything that goes with an identity: enrollments, authenticators, API sessions, ``@id`` refs.

    Also used by the edge-router manager when it removes a router identity (a system change).
    """
    for enrollment in uow.find_by(Enrollment, "identity_id", identity.id):
        uow.delete(Enrollment, enrollment.id)
    for authenticator in uow.find_by(Authenticator, "identity_id", identity.id):
        uow.delete(Authenticator, authenticator.id)
    mfa = uow.find_unique(Mfa, "identity_id", identity.id)
    if mfa is not None:
        uow.delete(Mfa, mfa.id)
    for session in uow.find_by(ApiSession, "identity_id", identity.id):
        delete_session(uow, session.id)
    remove_entity_references(uow, identity, clock)


#: The longest disable: the longest Go ``time.Duration`` (int64 nanoseconds) in whole minutes.
MAX_DISABLE_MINUTES = (2**63 - 1) // 60_000_000_000


def disable_identity(uow: UnitOfWork, identity: Identity, minutes: int, now: datetime) -> Identity:
    """Lock ``identity`` out from ``now`` for ``minutes`` (0: until enabled); its API sessions end.

    Shared by the administrator's disable and the password lockout of an auth policy. Durations
    are capped at :data:`MAX_DISABLE_MINUTES`.
    """
    minutes = min(max(minutes, 0), MAX_DISABLE_MINUTES)
    until = now + timedelta(minutes=minutes) if minutes else None
    new = dataclasses.replace(identity, disabled=True, disabled_at=now, disabled_until=until, updated_at=now)
    uow.put(new)
    for session in uow.find_by(ApiSession, "identity_id", identity.id):
        delete_session(uow, session.id)
    return new


class IdentityManager(EntityManager[Identity]):
    kind = Identity

    # -- creation ------------------------------------------------------------------------------
    def create_with_enrollments(
        self, fields: dict[str, Any], enrollment: EnrollmentRequest | None, settings: EnrollmentSettings
    ) -> Identity:
        """An identity and its first enrollments (with their JWTs), in one commit."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            identity = self.build(uow, fields)
            self.validate(uow, identity, None)
            self.check_unique(uow, identity)
            uow.put(identity)
            expires_at = self.env.clock.now() + settings.identity_duration
            for method, ca_id, username in (enrollment or EnrollmentRequest()).methods():
                entry = new_identity_enrollment(
                    self.env,
                    settings,
                    identity_id=identity.id,
                    method=method,
                    expires_at=expires_at,
                    ca_id=ca_id,
                    username=username,
                )
                check_enrollment(uow, entry, ca_field="enrollment.ottca", username_field="enrollment.updb")
                uow.put(entry)
            self.env.commit(uow)
            return identity

    def create_with_password(self, fields: dict[str, Any], username: str, password: str) -> Identity:
        """An identity with a username/password authenticator (the default admin)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            identity = self.build(uow, fields)
            self.validate(uow, identity, None)
            self.check_unique(uow, identity)
            uow.put(identity)
            check_password(rules_for(uow, identity).updb, password)
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

    # -- disable / enable ----------------------------------------------------------------------
    def disable(self, id: str, duration_minutes: int) -> Identity:
        """Lock the identity out (``0`` = until enabled) and end its API sessions."""
        if not 0 <= duration_minutes <= MAX_DISABLE_MINUTES:
            raise FieldError(
                "durationMinutes",
                f"durationMinutes must be between 0 and {MAX_DISABLE_MINUTES}",
                duration_minutes,
            )
        with self.env.store.write_lock():
            old = self.require(id)
            if old.is_default_admin:
                raise EntityCanNotBeUpdatedError(reason="the default admin identity may not be disabled")
            uow = UnitOfWork(self.env.store)
            new = disable_identity(uow, old, duration_minutes, self.env.clock.now())
            self.env.commit(uow)
            return new

    def enable(self, id: str) -> Identity:
        """End a disable or lockout; the identity's counted password failures start again from 0."""
        with self.env.store.write_lock():
            old = self.require(id)
            new = dataclasses.replace(
                old, disabled=False, disabled_at=None, disabled_until=None, updated_at=self.env.clock.now()
            )
            saved = self.save(new)
        for authenticator in self.env.store.find_by(Authenticator, "identity_id", id):
            self.env.attempts.forget(password_key(authenticator.id))
        return saved

    def is_disabled(self, identity: Identity) -> bool:
        """Disabled now: locked and the lock has no end or has not ended yet."""
        return identity.is_disabled_at(self.env.clock.now())

    # -- service configs -----------------------------------------------------------------------
    def service_configs(self, id: str) -> list[tuple[Service, Config]]:
        """The identity's service-config overrides as (service, config) pairs, by service then type.

        Pairs whose service or config has gone are left out (deleting either drops its overrides).
        """
        identity = self.require(id)
        store = self.env.store
        out: list[tuple[Service, Config]] = []
        for service_id, by_type in sorted(identity.service_configs.items()):
            service = store.get(Service, service_id)
            for _, config_id in sorted(by_type.items()):
                config = store.get(Config, config_id)
                if service is not None and config is not None:
                    out.append((service, config))
        return out

    def assign_service_configs(self, id: str, pairs: Sequence[tuple[str, str]]) -> Identity:
        """Override, for this identity, each service's config of the given config's type.

        As OpenZiti's ``AssignServiceConfigs``: the identity, each service and each config must
        exist (404); a later pair for the same service and config type replaces an earlier one.
        """
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            overrides = {service: dict(by_type) for service, by_type in old.service_configs.items()}
            for service_id, config_id in pairs:
                if uow.get(Service, service_id) is None:
                    raise NotFoundError(
                        field="serviceId", value=service_id, reason=f"service with id {service_id} not found"
                    )
                config = _require_config(uow, config_id)
                config_type = uow.get(ConfigType, config.config_type_id)
                if config_type is not None and config_type.target != "service":
                    raise FieldError(
                        "configId",
                        f"config {config.name} has config type {config_type.name} which does not target services",
                        config_id,
                    )
                overrides.setdefault(service_id, {})[config.config_type_id] = config.id
            return self._save_overrides(uow, old, overrides)

    def remove_service_configs(self, id: str, pairs: Sequence[tuple[str, str]]) -> Identity:
        """Drop, for each pair, the identity's override of the service for the config's type.

        As OpenZiti's ``RemoveServiceConfigs``: the config must exist (404); no pairs at all
        removes every override of the identity (its ``Test_ServiceListWithConfigs``).
        """
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            overrides = {service: dict(by_type) for service, by_type in old.service_configs.items()}
            if not pairs:
                overrides = {}
            for service_id, config_id in pairs:
                config = _require_config(uow, config_id)
                overrides.get(service_id, {}).pop(config.config_type_id, None)
            return self._save_overrides(uow, old, overrides)

    def _save_overrides(
        self, uow: UnitOfWork, old: Identity, overrides: dict[str, dict[str, str]]
    ) -> Identity:
        kept = {service: by_type for service, by_type in overrides.items() if by_type}
        if kept == old.service_configs:
            return old
        new = dataclasses.replace(old, service_configs=kept, updated_at=self.env.clock.now())
        uow.put(new)
        self.env.commit(uow)
        return new

    # -- hooks ---------------------------------------------------------------------------------
    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> Identity:
        identity = super().build(uow, fields)
        if identity.type_id == ROUTER_TYPE:
            raise FieldError("typeId", "may not create identities with given typeId", identity.type_id)
        return identity

    def apply(self, uow: UnitOfWork, old: Identity, fields: dict[str, Any]) -> Identity:
        values = {k: v for k, v in fields.items() if k not in self.immutable and k != "is_default_admin"}
        new = dataclasses.replace(old, updated_at=self.env.clock.now(), **values)
        if old.type_id == ROUTER_TYPE:
            if new.type_id != ROUTER_TYPE:
                raise FieldError("typeId", "may not change type of router identities", new.type_id)
            if new.name != old.name:
                raise FieldError("name", "may not change name of router identities", new.name)
        elif new.type_id == ROUTER_TYPE:
            raise FieldError("typeId", "may not change type to router", new.type_id)
        if old.is_default_admin and not new.is_admin:
            raise FieldError("isAdmin", "the default admin identity must remain an admin", new.is_admin)
        return new

    def validate(self, uow: UnitOfWork, new: Identity, old: Identity | None) -> None:
        if not new.name:
            raise FieldError("name", "name is required", new.name)
        if new.type_id not in IDENTITY_TYPE_IDS:
            raise NotFoundError(field="typeId", value=new.type_id, reason="typeId not found")
        check_attributes(new.role_attributes)
        if uow.get(AuthPolicy, new.auth_policy_id or DEFAULT_AUTH_POLICY_ID) is None:
            raise FieldError("authPolicyId", "auth policy not found", new.auth_policy_id)
        if not 0 <= new.default_hosting_cost <= 65535:
            raise FieldError("defaultHostingCost", "must be between 0 and 65535", new.default_hosting_cost)
        if new.default_hosting_precedence not in PRECEDENCES:
            raise FieldError(
                "defaultHostingPrecedence",
                f"must be one of {list(PRECEDENCES)}",
                new.default_hosting_precedence,
            )
        self._check_services(uow, "serviceHostingCosts", new.service_hosting_costs)
        self._check_services(uow, "serviceHostingPrecedences", new.service_hosting_precedences)

    def before_delete(self, uow: UnitOfWork, entity: Identity) -> None:
        if entity.is_default_admin:
            raise EntityCanNotBeDeletedError(reason="the default admin identity may not be deleted")
        if entity.type_id == ROUTER_TYPE and self._router_of(uow, entity) is not None:
            raise EntityCanNotBeDeletedError(
                reason=f"cannot delete router identity {entity.name} until associated router is deleted"
            )

    def after_delete(self, uow: UnitOfWork, entity: Identity) -> None:
        delete_identity_cascade(uow, entity, self.env.clock)

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _check_services(uow: UnitOfWork, field: str, values: dict[str, Any]) -> None:
        for service_id in values:
            if uow.get(Service, service_id) is None:
                raise NotFoundError(
                    field=field, value=service_id, reason=f"service with id {service_id} not found"
                )

    @staticmethod
    def _router_of(uow: UnitOfWork, identity: Identity) -> EdgeRouter | None:
        router = uow.get(EdgeRouter, identity.id)
        if router is not None:
            return router
        return uow.store.find_unique(EdgeRouter, "name", identity.name)
