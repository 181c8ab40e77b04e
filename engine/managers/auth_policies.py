"""Auth policies: which primary methods an identity may log in with, and what secondary factors.

``primary`` and ``secondary`` are stored in wire form (as ``engine/managers/bootstrap.py`` seeds
the built-in ``default`` policy)::

    primary   {cert {allowed, allowExpiredCerts},
               extJwt {allowed, allowedSigners},
               updb {allowed, minPasswordLength, requireSpecialChar, requireNumberChar,
                     requireMixedCase, maxAttempts, lockoutDurationMinutes}}
    secondary {requireTotp, requireExtJwtSigner}

and read by the rest of the engine as typed values: :func:`rules_for` gives an identity's
:class:`PolicyRules` (:class:`UpdbRules`, :class:`CertRules`, :class:`ExtJwtRules`,
:class:`SecondaryRules`).

An update's ``primary``/``secondary`` are merged key by key into the stored ones (a replacement
sends every key, a patch only the keys it changes). Values are normalised as OpenZiti's
``db/auth_policy_store.go`` does: negative ``maxAttempts``/``lockoutDurationMinutes`` become 0
(unlimited / indefinite), ``minPasswordLength`` is at least 5. Referenced external JWT signers
must exist (404 ``NOT_FOUND`` naming the field, as OpenZiti's ``verifyExtJwt``). The built-in
``default`` policy can be updated but never deleted; a policy still used by identities (or as a
signer's enrolment policy) can not be deleted (409, as OpenZiti's references answer; the default
policy is always in use: every identity without a policy has it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.entities.identities import DEFAULT_AUTH_POLICY_ID, Identity
from engine.entities.trust import AuthPolicy, ExternalJwtSigner
from engine.errors import FieldError, NotFoundError, ReferencedEntityError
from engine.managers._base import EntityManager
from engine.memo import PerObject
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


# -- typed values ------------------------------------------------------------------------------------
def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class UpdbRules:
    """``primary.updb``: password logins, password rules and the lockout."""

    allowed: bool = True
    min_password_length: int = MIN_PASSWORD_LENGTH
    require_special_char: bool = False
    require_number_char: bool = False
    require_mixed_case: bool = False
    #: Failed logins before the identity is locked out; 0 = unlimited.
    max_attempts: int = 0
    #: How long a lockout lasts; 0 = until an administrator enables the identity.
    lockout_duration_minutes: int = 0

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> UpdbRules:
        raw = raw or {}
        return cls(
            allowed=raw.get("allowed") is not False,
            min_password_length=max(_int(raw.get("minPasswordLength"), 0), MIN_PASSWORD_LENGTH),
            require_special_char=bool(raw.get("requireSpecialChar")),
            require_number_char=bool(raw.get("requireNumberChar")),
            require_mixed_case=bool(raw.get("requireMixedCase")),
            max_attempts=max(_int(raw.get("maxAttempts"), 0), 0),
            lockout_duration_minutes=max(_int(raw.get("lockoutDurationMinutes"), 0), 0),
        )


@dataclass(frozen=True)
class CertRules:
    """``primary.cert``: certificate logins."""

    allowed: bool = True
    allow_expired_certs: bool = True

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> CertRules:
        raw = raw or {}
        return cls(
            allowed=raw.get("allowed") is not False, allow_expired_certs=bool(raw.get("allowExpiredCerts"))
        )


@dataclass(frozen=True)
class ExtJwtRules:
    """``primary.extJwt``: external JWT logins; an empty ``allowed_signers`` allows every signer."""

    allowed: bool = True
    allowed_signers: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> ExtJwtRules:
        raw = raw or {}
        signers = raw.get("allowedSigners") or ()
        return cls(allowed=raw.get("allowed") is not False, allowed_signers=tuple(str(s) for s in signers))

    def allows(self, signer_id: str) -> bool:
        return self.allowed and (not self.allowed_signers or signer_id in self.allowed_signers)


@dataclass(frozen=True)
class SecondaryRules:
    """``secondary``: factors required after the primary login."""

    require_totp: bool = False
    require_ext_jwt_signer: str | None = None

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any] | None) -> SecondaryRules:
        raw = raw or {}
        signer = raw.get("requireExtJwtSigner")
        return cls(require_totp=bool(raw.get("requireTotp")), require_ext_jwt_signer=signer or None)


@dataclass(frozen=True)
class PolicyRules:
    """An auth policy as the engine reads it."""

    id: str = DEFAULT_AUTH_POLICY_ID
    updb: UpdbRules = field(default_factory=UpdbRules)
    cert: CertRules = field(default_factory=CertRules)
    ext_jwt: ExtJwtRules = field(default_factory=ExtJwtRules)
    secondary: SecondaryRules = field(default_factory=SecondaryRules)

    @classmethod
    def from_policy(cls, policy: AuthPolicy) -> PolicyRules:
        primary = policy.primary or {}
        return cls(
            id=policy.id,
            updb=UpdbRules.from_wire(primary.get("updb")),
            cert=CertRules.from_wire(primary.get("cert")),
            ext_jwt=ExtJwtRules.from_wire(primary.get("extJwt")),
            secondary=SecondaryRules.from_wire(policy.secondary),
        )

    def allows(self, method: str) -> bool:
        """Whether primary method ``method`` (``updb``, ``cert``, ``extJwt``) may log in."""
        allowed = {"updb": self.updb.allowed, "cert": self.cert.allowed, "extJwt": self.ext_jwt.allowed}
        return allowed.get(method, False)


#: What an identity whose auth policy is missing gets: nothing allowed.
NO_LOGIN = PolicyRules(
    id="",
    updb=UpdbRules(allowed=False),
    cert=CertRules(allowed=False),
    ext_jwt=ExtJwtRules(allowed=False),
)


#: Typed rules per policy version (every request of an API session asks for its identity's).
_RULES: PerObject[AuthPolicy, PolicyRules] = PerObject(PolicyRules.from_policy, 256)


def rules_for(store: Store | UnitOfWork, identity: Identity) -> PolicyRules:
    """The identity's auth policy as typed rules (nothing allowed if the policy is missing)."""
    policy = store.get(AuthPolicy, identity.auth_policy_id or DEFAULT_AUTH_POLICY_ID)
    return _RULES(policy) if policy is not None else NO_LOGIN


def secondary_for(store: Store | UnitOfWork, identity: Identity) -> SecondaryRules:
    """The secondary factors the identity's auth policy imposes. None for the default admin: a
    required factor it could not give (an external JWT it has no provider for) would leave nobody
    able to administer the network, as a lockout would (the admin's own verified MFA still
    counts; OpenZiti's ``auth_policy_test.go`` keeps using the admin after requiring both on the
    default policy)."""
    if identity.is_default_admin:
        return SecondaryRules()
    return rules_for(store, identity).secondary


def password_problem(rules: UpdbRules | Mapping[str, Any], password: str) -> str | None:
    """Why ``password`` breaks a policy's ``primary.updb`` rules, or None."""
    if not isinstance(rules, UpdbRules):
        rules = UpdbRules.from_wire(rules)
    minimum = rules.min_password_length
    if len(password) < minimum:
        return f"password must be at least {minimum} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"password must be at most {MAX_PASSWORD_LENGTH} characters"
    if rules.require_mixed_case and not (
        any(c.islower() for c in password) and any(c.isupper() for c in password)
    ):
        return "password must contain upper and lower case letters"
    if rules.require_number_char and not any(c.isdigit() for c in password):
        return "password must contain a number"
    if rules.require_special_char and not any(c in _SPECIAL or not c.isalnum() for c in password):
        return "password must contain a special character"
    return None


def check_password(rules: UpdbRules, password: str, field: str = "password") -> None:
    """Raise a field error (never echoing the password) when ``password`` breaks ``rules``."""
    problem = password_problem(rules, password)
    if problem is not None:
        raise FieldError(field, problem)


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
        # OpenZiti's verifyExtJwt: an unknown signer is 404, the field in the cause.
        signers = new.primary.get("extJwt", {}).get("allowedSigners") or []
        for index, signer_id in enumerate(signers):
            if uow.get(ExternalJwtSigner, signer_id) is None:
                raise NotFoundError(
                    field=f"primary.extJwt.allowedExtJwtSigners[{index}]", value=signer_id, reason="not found"
                )
        required = new.secondary.get("requireExtJwtSigner")
        if required is not None and uow.get(ExternalJwtSigner, required) is None:
            raise NotFoundError(field="secondary.requiredExtJwtSigner", value=required, reason="not found")

    def before_delete(self, uow: UnitOfWork, entity: AuthPolicy) -> None:
        if entity.id == DEFAULT_AUTH_POLICY_ID:  # every identity without a policy uses it: 409
            raise ReferencedEntityError(
                reason=f"cannot delete the default authPolicy (id={entity.id}): identities without a policy use it"
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
