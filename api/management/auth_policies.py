"""``/auth-policies``: the standard family pattern over :class:`AuthPolicyManager`."""

from __future__ import annotations

from api.resources import Family, mount
from api.routing import Routes
from api.schemas.trust import (
    AuthPolicyCreate,
    AuthPolicyPatch,
    AuthPolicyUpdate,
    auth_policy_fields,
    render_auth_policy,
)
from engine.query import Symbol, SymbolTable, SymbolType

SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
    },
    tags_getter=lambda e: e.tags,
)


def register(routes: Routes) -> None:
    mount(
        routes,
        Family(
            entity="auth-policies",
            manager=routes.managers.auth_policies,
            render=render_auth_policy,
            symbols=SYMBOLS,
            create_model=AuthPolicyCreate,
            update_model=AuthPolicyUpdate,
            patch_model=AuthPolicyPatch,
            to_fields=auth_policy_fields,
        ),
    )
