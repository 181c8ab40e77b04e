"""``/auth-policies``: the standard family pattern over :class:`AuthPolicyManager`."""

from __future__ import annotations

from api.resources import mount, view_family
from api.routing import Routes
from api.schemas.auth_policies import AuthPolicyCreate, AuthPolicyPatch, AuthPolicyUpdate, auth_policy_fields


def register(routes: Routes) -> None:
    family = view_family(
        routes.views.auth_policies,
        routes.managers.auth_policies,
        create_model=AuthPolicyCreate,
        update_model=AuthPolicyUpdate,
        patch_model=AuthPolicyPatch,
        to_fields=auth_policy_fields,
    )
    mount(routes, family)
