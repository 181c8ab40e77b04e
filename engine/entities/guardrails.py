"""Guardrails of the access analysis (docs/analysis.md §10): named invariants over access, checked
on every write, and the violations those in ``report`` mode let through.

A guardrail's roles are OpenZiti role lists (``#attr``, ``@id``, ``#all``) read with a policy's
rules (docs/policy.md §1.2) under its ``semantic``. Its ``form`` says what must hold:

- ``deny``: no identity of ``identity_roles`` may ``type`` (Dial or Bind) a service of
  ``service_roles``;
- ``only``: the services of ``service_roles`` may be reached (``type``) only by identities of
  ``identity_roles``;
- ``keep``: every identity of ``identity_roles`` keeps ``type`` on every service of
  ``service_roles``;
- ``routers``: every identity of ``identity_roles`` that may Dial a service of ``service_roles``
  has a common router with it that is online.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.entities import Entity, register

FORMS = ("deny", "only", "keep", "routers")
MODES = ("enforce", "report")


@register
@dataclass(kw_only=True)
class Guardrail(Entity):
    ENTITY = "guardrails"
    UNIQUE = ("name",)

    name: str
    form: str
    mode: str = "enforce"
    semantic: str = "AnyOf"
    #: ``Dial`` or ``Bind`` (``routers``: always Dial).
    type: str = "Dial"
    identity_roles: list[str] = field(default_factory=list)
    service_roles: list[str] = field(default_factory=list)
    description: str = ""


@register
@dataclass(kw_only=True)
class GuardrailViolation(Entity):
    """A write a ``report`` guardrail let through, and the pairs it made violate it."""

    ENTITY = "guardrail-violations"
    INDEXED = ("guardrail_id",)

    guardrail_id: str
    guardrail_name: str
    #: The store's revision before the write (the write's own is the next).
    revision: int
    #: How many (identity, service, type) pairs newly violate the guardrail.
    count: int
    #: The first of them, ``{"identityId", "serviceId", "type"}``.
    pairs: list[dict[str, Any]] = field(default_factory=list)
