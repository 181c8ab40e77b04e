"""Service policies: which identities may Dial or Bind which services, under which posture checks."""

from __future__ import annotations

import dataclasses

from engine.entities.identities import Identity
from engine.entities.policies import ServicePolicy
from engine.entities.posture import PostureCheck
from engine.entities.services import Service
from engine.errors import FieldError
from engine.managers._policies import PolicyManager
from engine.ports import UnitOfWork
from engine.roles import IDENTITY_ROLES, POSTURE_CHECK_ROLES, SERVICE_ROLES

DIAL = "Dial"
BIND = "Bind"
POLICY_TYPES = (DIAL, BIND)
INVALID_TYPE_REASON = "invalid policy type. valid types are 'Dial' and 'Bind'"


def canonical_type(value: str) -> str:
    """``Dial``/``Bind`` for any casing (OpenZiti's model compares case-insensitively); other
    values are returned unchanged so validation can report them."""
    for name in POLICY_TYPES:
        if value.lower() == name.lower():
            return name
    return value


class ServicePolicyManager(PolicyManager[ServicePolicy]):
    kind = ServicePolicy
    store_name = "servicePolicies"
    role_fields = (
        (IDENTITY_ROLES, Identity),
        (SERVICE_ROLES, Service),
        (POSTURE_CHECK_ROLES, PostureCheck),
    )

    def normalize(self, policy: ServicePolicy) -> ServicePolicy:
        return dataclasses.replace(policy, type=canonical_type(policy.type))

    def validate(self, uow: UnitOfWork, new: ServicePolicy, old: ServicePolicy | None) -> None:
        # The model layer checks the type before the store validates roles.
        if new.type not in POLICY_TYPES:
            raise FieldError("policyType", INVALID_TYPE_REASON, new.type)
        super().validate(uow, new, old)
