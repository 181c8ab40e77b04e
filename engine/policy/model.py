"""Kinds, bulk-load rows and the read-only views the policy engine hands out.

Entity kinds: ``identity``, ``service``, ``edge-router``, ``posture-check``. Policy kinds and the
role fields (sides) each one has:

===============================  =============================================================
``service-policy``               ``identity_roles``, ``service_roles``, ``posture_check_roles``
``edge-router-policy``           ``identity_roles``, ``edge_router_roles``
``service-edge-router-policy``   ``service_roles``, ``edge_router_roles``
===============================  =============================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

__all__ = [
    "EDGE_ROUTER",
    "EDGE_ROUTER_POLICY",
    "ENTITY_KINDS",
    "IDENTITY",
    "POLICY_FIELDS",
    "POLICY_KINDS",
    "POSTURE_CHECK",
    "SERVICE",
    "SERVICE_EDGE_ROUTER_POLICY",
    "SERVICE_POLICY",
    "EntityKind",
    "EntityLike",
    "EntityRow",
    "PolicyKind",
    "PolicyLike",
    "PolicyRecord",
    "PolicyRow",
    "PolicyType",
    "UnknownEntityError",
    "UnknownPolicyError",
    "make_record",
    "normalize_type",
]

EntityKind = Literal["identity", "service", "edge-router", "posture-check"]
PolicyKind = Literal["service-policy", "edge-router-policy", "service-edge-router-policy"]
PolicyType = Literal["Dial", "Bind"]

IDENTITY: Final = "identity"
SERVICE: Final = "service"
EDGE_ROUTER: Final = "edge-router"
POSTURE_CHECK: Final = "posture-check"
ENTITY_KINDS: Final[tuple[EntityKind, ...]] = (IDENTITY, SERVICE, EDGE_ROUTER, POSTURE_CHECK)

SERVICE_POLICY: Final = "service-policy"
EDGE_ROUTER_POLICY: Final = "edge-router-policy"
SERVICE_EDGE_ROUTER_POLICY: Final = "service-edge-router-policy"
POLICY_KINDS: Final[tuple[PolicyKind, ...]] = (
    SERVICE_POLICY,
    EDGE_ROUTER_POLICY,
    SERVICE_EDGE_ROUTER_POLICY,
)

ROLE_FIELD: Final[dict[EntityKind, str]] = {
    IDENTITY: "identity_roles",
    SERVICE: "service_roles",
    EDGE_ROUTER: "edge_router_roles",
    POSTURE_CHECK: "posture_check_roles",
}
"""Entity kind -> the name of the role field (keyword argument, row attribute) that selects it."""

POLICY_FIELDS: Final[dict[PolicyKind, tuple[EntityKind, ...]]] = {
    SERVICE_POLICY: (IDENTITY, SERVICE, POSTURE_CHECK),
    EDGE_ROUTER_POLICY: (IDENTITY, EDGE_ROUTER),
    SERVICE_EDGE_ROUTER_POLICY: (SERVICE, EDGE_ROUTER),
}
"""Policy kind -> the entity kinds of its sides, in role-field order."""


class UnknownEntityError(KeyError):
    """No entity of that kind has that id."""


class UnknownPolicyError(KeyError):
    """No policy of that kind has that id."""


def normalize_type(policy_type: str) -> PolicyType:
    """``Dial``/``Bind``, compared case-insensitively as OpenZiti's model layer does."""
    folded = policy_type.lower()
    if folded == "dial":
        return "Dial"
    if folded == "bind":
        return "Bind"
    raise ValueError(f"invalid policy type {policy_type!r}: valid types are 'Dial' and 'Bind'")


class EntityLike(Protocol):
    """Anything with an ``id`` and role ``attributes`` can be bulk-loaded (e.g. :class:`EntityRow`)."""

    @property
    def id(self) -> str: ...

    @property
    def attributes(self) -> Sequence[str]: ...


class PolicyLike(Protocol):
    """Anything with an ``id`` and a ``semantic`` can be bulk-loaded (e.g. :class:`PolicyRow`).

    ``type`` and the role fields (``identity_roles``, ``service_roles``, ``edge_router_roles``,
    ``posture_check_roles``) are read when present and default to ``None`` / empty.
    """

    @property
    def id(self) -> str: ...

    @property
    def semantic(self) -> str: ...


@dataclass(frozen=True, slots=True)
class EntityRow:
    """One entity for :meth:`engine.policy.graph.PolicyGraph.build`."""

    id: str
    attributes: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class PolicyRow:
    """One policy for :meth:`engine.policy.graph.PolicyGraph.build`.

    ``type`` is required for service policies and ignored otherwise; role fields that the policy
    kind does not have must stay empty.
    """

    id: str
    semantic: str
    type: str | None = None
    identity_roles: Sequence[str] = ()
    service_roles: Sequence[str] = ()
    edge_router_roles: Sequence[str] = ()
    posture_check_roles: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class PolicyRecord:
    """A policy as the engine holds it: the semantic as given, the type, the role lists as given."""

    kind: PolicyKind
    id: str
    semantic: str
    type: PolicyType | None
    roles: dict[EntityKind, tuple[str, ...]] = field(default_factory=dict)


def make_record(
    kind: PolicyKind,
    policy_id: str,
    semantic: str,
    policy_type: str | None,
    roles: dict[str, Sequence[str]],
) -> PolicyRecord:
    """A checked :class:`PolicyRecord`: no role field foreign to the kind; a service policy's type."""
    fields = POLICY_FIELDS[kind]
    wanted = {ROLE_FIELD[entity_kind] for entity_kind in fields}
    for name, values in roles.items():
        if values and name not in wanted:
            raise ValueError(f"a {kind} has no {name}")
    normalized: PolicyType | None = None
    if kind == SERVICE_POLICY:
        if policy_type is None:
            raise ValueError("a service-policy needs a type (Dial or Bind)")
        normalized = normalize_type(policy_type)
    return PolicyRecord(
        kind,
        policy_id,
        semantic,
        normalized,
        {entity_kind: tuple(roles.get(ROLE_FIELD[entity_kind], ())) for entity_kind in fields},
    )
