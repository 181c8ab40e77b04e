"""Auth policies: which primary methods an identity may log in with, and what secondary factors.

``primary`` and ``secondary`` are kept in wire form (as ``engine/managers/bootstrap.py`` seeds
the built-in ``default`` policy)::

    primary   {cert {allowed, allowExpiredCerts},
               extJwt {allowed, allowedSigners},
               updb {allowed, minPasswordLength, requireSpecialChar, requireNumberChar,
                     requireMixedCase, maxAttempts, lockoutDurationMinutes}}
    secondary {requireTotp, requireExtJwtSigner}

An update's ``primary``/``secondary`` are merged key by key into the stored ones (a replacement
sends every key, a patch only the keys it changes). Values are normalised as OpenZiti's
``db/auth_policy_store.go`` does: negative ``maxAttempts``/``lockoutDurationMinutes`` become 0
(unlimited / indefinite), ``minPasswordLength`` is at least 5. Referenced external JWT signers
must exist. The built-in ``default`` policy can be updated but never deleted; a policy still used
by identities (or as a signer's enrolment policy) can not be deleted.
"""

from __future__ import annotations

import copy
from typing import Any

from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.entities.trust import AuthPolicy, ExternalJwtSigner
from engine.errors import EntityCanNotBeDeletedError, FieldError, ReferencedEntityError
from engine.managers._base import EntityManager
from engine.ports import Store, UnitOfWork

MIN_PASSWORD_LENGTH = 5
MAX_PASSWORD_LENGTH = 100
DEFAULT_MAX_ATTEMPTS = 5
_SPECIAL = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ")

#: OpenZiti's stored defaults (``FillEntity``) for keys a request leaves out.
DEFAULT_PRIMARY: dict[str, Any] = {
    "cert": {"allowed": True, "allowExpiredCerts": True},
    "extJwt": {"allowed": True, "allowedSigners": []},
    "updb": {
        "allowed": True,
        "minPasswordLength": MIN_PASSWORD_LENGTH,
        "requireSpecialChar": False,
        "requireNumberChar": False,
        "requireMixedCase": False,
        "maxAttempts": DEFAULT_MAX_ATTEMPTS,
        "lockoutDurationMinutes": 0,
    },
}
DEFAULT_SECONDARY: dict[str, Any] = {"requireTotp": False, "requireExtJwtSigner": None}


def primary_rules(store: Store | UnitOfWork, identity: Identity, method: str) -> dict[str, Any]:
    """The identity's auth policy's ``primary.<method>`` object (``updb``, ``cert``, ``extJwt``)."""
    policy = store.get(AuthPolicy, identity.auth_policy_id)
    return dict((policy.primary.get(method) if policy is not None else None) or {})


def password_problem(rules: dict[str, Any], password: str) -> str | None:
    """Why ``password`` breaks a policy's ``primary.updb`` rules, or None."""
    minimum = max(int(rules.get("minPasswordLength") or MIN_PASSWORD_LENGTH), MIN_PASSWORD_LENGTH)
    if len(password) < minimum:
        return f"password must be at least {minimum} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password must be at most {MAX_PASSWORD_LENGTH} characters"
    if rules.get("requireMixedCase") and not (
        any(c.islower() for c in password) and any(c.isupper() for c in password)
    ):
        return "password must contain upper and lower case letters"
    if rules.get("requireNumberChar") and not any(c.isdigit() for c in password):
        return "password must contain a number"
    if rules.get("requireSpecialChar") and not any(c in _SPECIAL or not c.isalnum() for c in password):
        return "password must contain a special character"
    return None


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` applied key by key (nested dicts merged, other values replaced)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _normalize_primary(primary: dict[str, Any]) -> dict[str, Any]:
    out = merge(DEFAULT_PRIMARY, primary)
    updb = out["updb"]
    if updb.get("lockoutDurationMinutes", 0) < 0:
        updb["lockoutDurationMinutes"] = 0
    if updb.get("maxAttempts", 0) < 0:
        updb["maxAttempts"] = 0
    if updb.get("minPasswordLength", 0) < MIN_PASSWORD_LENGTH:
        updb["minPasswordLength"] = MIN_PASSWORD_LENGTH
    return out


def _normalize_secondary(secondary: dict[str, Any]) -> dict[str, Any]:
    out = merge(DEFAULT_SECONDARY, secondary)
    if out.get("requireExtJwtSigner") == "":
        out["requireExtJwtSigner"] = None
    return out


class AuthPolicyManager(EntityManager[AuthPolicy]):
    kind = AuthPolicy

    def build(self, uow: UnitOfWork, fields: dict[str, Any]) -> AuthPolicy:
        values = dict(fields)
        values["primary"] = _normalize_primary(fields.get("primary") or {})
        values["secondary"] = _normalize_secondary(fields.get("secondary") or {})
        return super().build(uow, values)

    def apply(self, uow: UnitOfWork, old: AuthPolicy, fields: dict[str, Any]) -> AuthPolicy:
        values = dict(fields)
        if values.get("primary") is not None:
            values["primary"] = _normalize_primary(merge(old.primary, values["primary"]))
        else:
            values.pop("primary", None)
        if values.get("secondary") is not None:
            values["secondary"] = _normalize_secondary(merge(old.secondary, values["secondary"]))
        else:
            values.pop("secondary", None)
        return super().apply(uow, old, values)

    def validate(self, uow: UnitOfWork, new: AuthPolicy, old: AuthPolicy | None) -> None:
        if not new.name:
            raise FieldError("name", "name in body is required")
        signers = new.primary.get("extJwt", {}).get("allowedSigners") or []
        for signer_id in signers:
            if uow.get(ExternalJwtSigner, signer_id) is None:
                raise FieldError("primary.extJwt.allowedSigners", "external jwt signer not found", signer_id)
        required = new.secondary.get("requireExtJwtSigner")
        if required is not None and uow.get(ExternalJwtSigner, required) is None:
            raise FieldError("secondary.requireExtJwtSigner", "external jwt signer not found", required)

    def before_delete(self, uow: UnitOfWork, entity: AuthPolicy) -> None:
        if entity.id == DEFAULT_AUTH_POLICY_ID:
            raise EntityCanNotBeDeletedError(
                reason=f"cannot delete system authPolicy in a non-system context (id={entity.id})"
            )
        users = sorted(i.id for i in uow.all(Identity) if i.auth_policy_id == entity.id)
        if users:
            raise ReferencedEntityError(
                reason=f"authPolicy {entity.id} is referenced by identities {users}", value=users
            )
        signers = sorted(s.id for s in uow.all(ExternalJwtSigner) if s.enroll_auth_policy_id == entity.id)
        if signers:
            raise ReferencedEntityError(
                reason=f"authPolicy {entity.id} is referenced by externalJwtSigners {signers}", value=signers
            )
