"""What the three policy managers share: sorted role lists, OpenZiti's validation order, and
OpenZiti's store names in duplicate-name errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from engine.entities import Entity
from engine.entities.policies import Policy
from engine.errors import NameConflictError
from engine.managers._base import EntityManager
from engine.ports import UnitOfWork
from engine.roles import RoleField, check_policy_roles, sort_roles

P = TypeVar("P", bound=Policy)


class PolicyManager(EntityManager[P]):
    """Create, update and delete one policy kind.

    Subclasses list their role fields in OpenZiti's validation order with the entity kind each
    one references by ``@id``.
    """

    #: (role field, the entity kind its ``@id`` entries must name), in validation order.
    role_fields: ClassVar[tuple[tuple[RoleField, type[Entity]], ...]] = ()
    #: OpenZiti's store name, as duplicate-name errors report it (e.g. ``servicePolicies``).
    store_name: ClassVar[str] = ""

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> P:
        return self.normalize(super().build(uow, fields))

    def apply(self, uow: UnitOfWork, old: P, fields: dict[str, Any]) -> P:
        return self.normalize(super().apply(uow, old, fields))

    def normalize(self, policy: P) -> P:
        """Canonical field values before validation (role lists are sorted only once valid)."""
        return policy

    def validate(self, uow: UnitOfWork, new: P, old: P | None) -> None:
        check_policy_roles(new, old, [(field, _exists(uow, kind)) for field, kind in self.role_fields])
        # ``new`` is this write's own fresh object: store its role lists sorted (PersistEntity does).
        for field, _ in self.role_fields:
            setattr(new, field.attr, sort_roles(getattr(new, field.attr)))

    def check_unique(self, uow: UnitOfWork, entity: P) -> None:
        try:
            super().check_unique(uow, entity)
        except NameConflictError as ex:
            raise NameConflictError(
                ex.field or "name", ex.value, self.store_name or self.kind.ENTITY
            ) from None


def _exists(uow: UnitOfWork, kind: type[Entity]) -> Callable[[str], bool]:
    return lambda id: uow.get(kind, id) is not None
