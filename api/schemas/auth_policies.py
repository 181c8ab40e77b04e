"""Wire shapes of auth policies: request models, filterable fields and the detail renderer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from api.wire import Tags, WireModel, base
from engine.entities.trust import AuthPolicy
from engine.managers.auth_policies import DEFAULT_PRIMARY, DEFAULT_SECONDARY, merge
from engine.managers.identities import MAX_DISABLE_MINUTES
from engine.query import Symbol, SymbolTable, SymbolType

#: Nested keys a patch may set to null (the spec marks them x-nullable and OpenZiti stores nil).
_NULLABLE_POLICY_KEYS = frozenset({"allowedSigners", "requireExtJwtSigner"})


class AuthPolicyPrimaryCert(WireModel):
    allowed: bool | None = None
    allow_expired_certs: bool | None = None


class AuthPolicyPrimaryExtJwt(WireModel):
    allowed: bool | None = None
    allowed_signers: list[str] | None = None


class AuthPolicyPrimaryUpdb(WireModel):
    allowed: bool | None = None
    min_password_length: int | None = None
    require_special_char: bool | None = None
    require_number_char: bool | None = None
    require_mixed_case: bool | None = None
    max_attempts: int | None = None
    #: A lockout is a disable: no longer than the longest Go Duration.
    lockout_duration_minutes: Annotated[int, Field(le=MAX_DISABLE_MINUTES)] | None = None


class AuthPolicyPrimary(WireModel):
    cert: AuthPolicyPrimaryCert | None = None
    ext_jwt: AuthPolicyPrimaryExtJwt | None = None
    updb: AuthPolicyPrimaryUpdb | None = None


class AuthPolicySecondary(WireModel):
    require_ext_jwt_signer: str | None = None
    require_totp: bool | None = None


class AuthPolicyCreate(WireModel):
    name: str
    primary: AuthPolicyPrimary
    secondary: AuthPolicySecondary
    tags: Tags = None


class AuthPolicyUpdate(AuthPolicyCreate):
    pass


class AuthPolicyPatch(WireModel):
    name: str | None = None
    primary: AuthPolicyPrimary | None = None
    secondary: AuthPolicySecondary | None = None
    tags: Tags = None


def _strip_nulls(value: dict[str, Any], keep: frozenset[str] = frozenset()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out[key] = _strip_nulls(item, keep)
        elif item is not None or key in keep:
            out[key] = item
    return out


def auth_policy_fields(model: WireModel, mode: str) -> dict[str, Any]:
    """Manager fields: full ``primary``/``secondary`` (defaults filled) or a patch's sent keys."""
    if mode == "patch":
        out: dict[str, Any] = {}
        for name in ("name", "tags"):
            if name in model.model_fields_set and getattr(model, name) is not None:
                out[name] = getattr(model, name)
        for name in ("primary", "secondary"):
            value = getattr(model, name)
            if name in model.model_fields_set and value is not None:
                out[name] = _strip_nulls(
                    value.model_dump(by_alias=True, exclude_unset=True), _NULLABLE_POLICY_KEYS
                )
        return out
    assert isinstance(model, AuthPolicyCreate)
    primary = _strip_nulls(model.primary.model_dump(by_alias=True))
    secondary = _strip_nulls(model.secondary.model_dump(by_alias=True))
    return {
        "name": model.name,
        "tags": dict(model.tags or {}),
        "primary": merge(DEFAULT_PRIMARY, primary),
        "secondary": merge(DEFAULT_SECONDARY, secondary),
    }


def render_auth_policy(policy: AuthPolicy) -> dict[str, Any]:
    """``authPolicyDetail``."""
    out = base(policy)
    primary = dict(policy.primary)
    ext_jwt = primary.get("extJwt")
    if isinstance(ext_jwt, dict) and ext_jwt.get("allowedSigners") is None:
        # Stored as nil (the default policy, a patch to null); OpenZiti renders it as [].
        primary["extJwt"] = {**ext_jwt, "allowedSigners": []}
    secondary = {k: v for k, v in policy.secondary.items() if not (k == "requireExtJwtSigner" and v is None)}
    # a null requireExtJwtSigner is left out, as Go's omitempty does
    out.update({"name": policy.name, "primary": primary, "secondary": secondary})
    return out


def _field(stype: SymbolType, path: str) -> Symbol:
    """The policy's field at ``path`` (``primary.updb.maxAttempts``), None where it has none."""
    head, *keys = path.split(".")

    def get(policy: AuthPolicy) -> Any:
        value: Any = policy.primary if head == "primary" else policy.secondary
        for key in keys:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    return Symbol(stype, get)


#: OpenZiti's auth policy symbols, typed as the fields are: its store declares
#: ``primary.updb.maxAttempts`` a bool and ``primary.updb.requireNumberChar`` a number, so that no
#: comparison with either's real values is accepted there.
_POLICY_FIELDS = {
    "primary.cert.allowed": SymbolType.BOOL,
    "primary.cert.allowExpiredCerts": SymbolType.BOOL,
    "primary.extJwt.allowed": SymbolType.BOOL,
    "primary.updb.allowed": SymbolType.BOOL,
    "primary.updb.maxAttempts": SymbolType.NUMBER,
    "primary.updb.minPasswordLength": SymbolType.NUMBER,
    "primary.updb.requireMixedCase": SymbolType.BOOL,
    "primary.updb.requireNumberChar": SymbolType.BOOL,
    "primary.updb.requireSpecialChar": SymbolType.BOOL,
    "secondary.requireExtJwtSigner": SymbolType.STRING,
    "secondary.requireTotp": SymbolType.BOOL,
}

AUTH_POLICY_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda e: e.id),
        "name": Symbol(SymbolType.STRING, lambda e: e.name),
        "createdAt": Symbol(SymbolType.DATETIME, lambda e: e.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda e: e.updated_at),
        **{path: _field(stype, path) for path, stype in _POLICY_FIELDS.items()},
    },
    tags_getter=lambda e: e.tags,
)
