"""What every manager shares: the environment, and create / update / delete of one kind.

A manager method is one use case. It runs under the store's write lock, gathers its changes
in a :class:`UnitOfWork` (so related entities change together), validates, and commits once.
Validation failures raise before anything is written, so a refused request changes nothing.
The commit is staged in the store's group commit: the use case returns when it leaves the write
lock, after its batch is durable and published (or raises ``CommitFailedError``).
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from engine.attempts import MemoryAttempts
from engine.entities import Entity
from engine.errors import FieldError, NameConflictError, NotFoundError
from engine.ports import (
    ActivityBoard,
    Attempts,
    CertificateAuthority,
    Change,
    Clock,
    ExternalJwtVerifier,
    FleetBoard,
    IdGenerator,
    NoActivityBoard,
    NoFleetBoard,
    NoPostureBoard,
    PasswordHasher,
    PostureBoard,
    Put,
    SchemaChecker,
    Store,
    TokenSigner,
    TotpService,
    UnconfiguredJwtVerifier,
    UnconfiguredTotp,
    UnitOfWork,
)
from engine.query.plan import ListIndex

E = TypeVar("E", bound=Entity)

log = logging.getLogger(__name__)

Listener = Callable[[list[Change]], None]
Check = Callable[[list[Change]], list[Change]]


@dataclass
class Env:
    """The ports every manager uses, built once by the composition root."""

    store: Store
    clock: Clock
    ids: IdGenerator
    hasher: PasswordHasher
    schemas: SchemaChecker
    ca: CertificateAuthority
    tokens: TokenSigner
    #: TOTP codes and recovery codes for MFA (``pki.totp``).
    totp: TotpService = field(default_factory=UnconfiguredTotp)
    #: Signature checks of external identity providers' JWTs (``pki.jwks``).
    jwt_verifier: ExternalJwtVerifier = field(default_factory=UnconfiguredJwtVerifier)
    #: Guesses at passwords and codes, counted before they are checked (``engine.attempts``).
    attempts: Attempts = field(default_factory=MemoryAttempts)
    #: API sessions' last use, shared with the other processes of a shared store.
    activity: ActivityBoard = field(default_factory=NoActivityBoard)
    #: The routers connected to the other processes of a shared store (``engine.managers.fleet``).
    fleet_board: FleetBoard = field(default_factory=NoFleetBoard)
    #: Identities' posture data, shared with the other processes of a shared store.
    posture_board: PostureBoard = field(default_factory=NoPostureBoard)
    #: Told every published batch, in order (the policy engine, caches, session enforcement).
    listeners: list[Listener] = field(default_factory=list)
    #: Shown every write's changes before they are staged (under the write lock): each may refuse
    #: the write by raising, or answer more changes to commit with it (the guardrails,
    #: ``engine.analysis.guardrails``).
    checks: list[Check] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.store.subscribe(self._published)

    def _published(self, changes: list[Change]) -> None:
        for listener in list(self.listeners):
            try:
                listener(changes)
            except Exception:  # the batch is durable: one listener's failure must not stop the rest
                log.exception("a commit listener failed")

    def commit(self, uow: UnitOfWork) -> None:
        """Stage ``uow``'s changes in the store's group commit (see :class:`~engine.ports.Store`):
        under the write lock, the caller is answered when it leaves the lock, once they are
        durable and the listeners have taken them."""
        if self.checks:
            changes = uow.changes()
            for check in list(self.checks):
                for extra in check(changes):
                    if isinstance(extra, Put):
                        uow.put(extra.entity)
        uow.commit()


class EntityManager(Generic[E]):
    """Create, update and delete entities of one kind with validation and reference hooks."""

    kind: type[E]
    #: Fields callers may never set through create/update (ids, computed values).
    immutable: frozenset[str] = frozenset({"id", "created_at", "updated_at"})

    def __init__(self, env: Env) -> None:
        self.env = env

    # -- reads -------------------------------------------------------------------------------
    def get(self, id: str) -> E | None:
        return self.env.store.get(self.kind, id)

    def require(self, id: str) -> E:
        """The entity, else :class:`NotFoundError`: after looking again once the store has caught
        up with what other processes sharing it committed (created there a moment ago)."""
        entity = self.env.store.get(self.kind, id)
        if entity is None and self.env.store.catch_up():
            entity = self.env.store.get(self.kind, id)
        if entity is None:
            raise NotFoundError()
        return entity

    def list(self) -> list[E]:
        return self.env.store.all(self.kind)

    def list_index(self) -> ListIndex[E]:
        """The kind's whole collection with the store's indexes, for lists that filter and page."""
        return self.env.store.list_index(self.kind)

    def get_many(self, ids: Iterable[str]) -> builtins.list[E]:
        """The entities with these ids, in order; ids of entities that are gone are skipped."""
        found = (self.env.store.get(self.kind, id) for id in ids)
        return [entity for entity in found if entity is not None]

    def find_by(self, field: str, value: object) -> builtins.list[E]:
        """The entities whose ``field`` (an indexed or unique field) equals ``value``."""
        return self.env.store.find_by(self.kind, field, value)

    def find_unique(self, field: str, value: object) -> E | None:
        """The entity whose unique ``field`` equals ``value``, if any."""
        return self.env.store.find_unique(self.kind, field, value)

    def by_id_or_name(self, value: str) -> E | None:
        """The entity with this id, else the one with this (unique) name."""
        entity = self.env.store.get(self.kind, value)
        if entity is None and "name" in self.kind.UNIQUE:
            entity = self.env.store.find_unique(self.kind, "name", value)
        return entity

    def count(self) -> int:
        return self.env.store.count(self.kind)

    # -- writes ------------------------------------------------------------------------------
    def create(self, fields: dict[str, Any]) -> E:
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            entity = sorted_role_attributes(self.build(uow, fields))
            self.validate(uow, entity, None)
            self.check_unique(uow, entity)
            uow.put(entity)
            self.after_create(uow, entity)
            self.env.commit(uow)
            return entity

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> E:
        """A new entity from create fields; override to derive fields (hashes, tokens)."""
        now = self.env.clock.now()
        values = {k: v for k, v in fields.items() if k not in self.immutable}
        entity = self.kind(id=self.env.ids.new_id(), created_at=now, updated_at=now, **values)
        return sorted_role_attributes(entity)

    def update(self, id: str, fields: dict[str, Any]) -> E:
        """Set ``fields`` (a full replacement's fields, or a patch's present fields)."""
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            new = sorted_role_attributes(self.apply(uow, old, fields))
            self.validate(uow, new, old)
            self.check_unique(uow, new)
            uow.put(new)
            self.after_update(uow, old, new)
            self.env.commit(uow)
            return new

    def apply(self, uow: UnitOfWork, old: E, fields: dict[str, Any]) -> E:
        """The updated entity; override to derive fields or refuse read-only ones."""
        values = {k: v for k, v in fields.items() if k not in self.immutable}
        return dataclasses.replace(old, updated_at=self.env.clock.now(), **values)

    def delete(self, id: str) -> None:
        with self.env.store.write_lock():
            uow = UnitOfWork(self.env.store)
            old = self.require(id)
            self.before_delete(uow, old)
            uow.delete(self.kind, id)
            self.after_delete(uow, old)
            self.env.commit(uow)

    def save(self, entity: E) -> E:
        """Commit one changed entity on its own (call under the write lock, after the checks)."""
        uow = UnitOfWork(self.env.store)
        uow.put(entity)
        self.env.commit(uow)
        return entity

    # -- hooks -------------------------------------------------------------------------------
    def validate(self, uow: UnitOfWork, new: E, old: E | None) -> None:
        """Raise a ControllerError if ``new`` may not be stored."""

    def after_create(self, uow: UnitOfWork, entity: E) -> None:
        """Add dependent changes to ``uow`` after a create."""

    def after_update(self, uow: UnitOfWork, old: E, new: E) -> None:
        """Add dependent changes to ``uow`` after an update."""

    def before_delete(self, uow: UnitOfWork, entity: E) -> None:
        """Raise (e.g. ReferencedEntityError) if ``entity`` may not be deleted."""

    def after_delete(self, uow: UnitOfWork, entity: E) -> None:
        """Add dependent changes (cascades, reference clean-up) after a delete."""

    # -- helpers -----------------------------------------------------------------------------
    def check_unique(self, uow: UnitOfWork, entity: E) -> None:
        for name in entity.UNIQUE:
            value = getattr(entity, name)
            if value is None:
                continue
            other = uow.store.find_unique(self.kind, name, value)
            if other is not None and other.id != entity.id:
                current = uow.get(self.kind, other.id)
                if current is not None and getattr(current, name) == value:
                    raise NameConflictError(_wire_name(name), value, self.kind.ENTITY)
            for pending in _pending(uow, self.kind):
                if pending.id != entity.id and getattr(pending, name) == value:
                    raise NameConflictError(_wire_name(name), value, self.kind.ENTITY)


def _pending(uow: UnitOfWork, kind: type[E]) -> Iterable[E]:
    for change in uow.changes():
        entity = getattr(change, "entity", None)
        if isinstance(entity, kind):
            yield entity


def _wire_name(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def sorted_role_attributes(entity: E) -> E:
    """``entity`` with its ``role_attributes`` (if it has them) sorted and without duplicates.

    OpenZiti keeps an entity's role attributes as a set in its store and reads them back in byte
    order (its API tests compare against a sorted list); Python's string order is that order.
    Applied by ``build`` and, whatever a manager's ``build``/``apply`` do, by ``create``/``update``.
    """
    attributes = getattr(entity, "role_attributes", None)
    if isinstance(attributes, list):
        ordered = sorted(set(attributes))
        if ordered != attributes:
            return dataclasses.replace(entity, role_attributes=ordered)  # type: ignore[call-arg]
    return entity


def check_attributes(values: list[str], field: str = "roleAttributes") -> None:
    """Entity role attributes may not start with ``#`` or ``@`` (docs/policy.md §1.3)."""
    for value in values:
        if value.startswith("#"):
            raise FieldError(field, "role attributes may not be prefixed with #", value)
        if value.startswith("@"):
            raise FieldError(field, "role attributes may not be prefixed with @", value)


def require_entity(uow: UnitOfWork, kind: type[E], id: str | None, field: str) -> E:
    """The referenced entity, or a field error naming the reference."""
    entity = uow.get(kind, id) if id else None
    if entity is None:
        raise FieldError(field, f"{kind.ENTITY[:-1]} not found", id)
    return entity
