"""Identities and what authenticates them: authenticators, enrollments, API sessions."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.entities import Entity, register

DEFAULT_AUTH_POLICY_ID = "default"


def username_key(username: str) -> str:
    """What two usernames share when a reader would take them for the same name: compatibility
    forms folded (NFKC), case folded, surrounding whitespace dropped (``"Admin"``, ``"admin "``
    and fullwidth ``admin`` are all ``"admin"``)."""
    return unicodedata.normalize("NFKC", username).casefold().strip()


@register
@dataclass(kw_only=True)
class Identity(Entity):
    ENTITY = "identities"
    UNIQUE = ("name", "external_id")
    #: The few identities with service-config overrides or per-service hosting entries, found
    #: without a scan of every identity (the deletes of configs and services).
    INDEXED = ("overrides_configs", "has_hosting_entries")
    MULTI_INDEXED = ("role_attributes",)

    name: str
    type_id: str = "Default"
    is_admin: bool = False
    is_default_admin: bool = False
    role_attributes: list[str] = field(default_factory=list)
    auth_policy_id: str = DEFAULT_AUTH_POLICY_ID
    external_id: str | None = None
    default_hosting_cost: int = 0
    default_hosting_precedence: str = "default"
    service_hosting_costs: dict[str, int] = field(default_factory=dict)
    service_hosting_precedences: dict[str, str] = field(default_factory=dict)
    app_data: dict[str, Any] = field(default_factory=dict)
    disabled: bool = False
    disabled_at: datetime | None = None
    disabled_until: datetime | None = None
    env_info: dict[str, Any] = field(default_factory=dict)
    sdk_info: dict[str, Any] = field(default_factory=dict)
    is_mfa_enabled: bool = False
    #: Service-config overrides: service id -> config type id -> config id. For this identity, the
    #: config replaces the service's own config of that type (``/identities/{id}/service-configs``).
    service_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def is_disabled_at(self, moment: datetime) -> bool:
        """Whether disabled at ``moment``: locked, and the lock has no end or has not ended."""
        return self.disabled and (self.disabled_until is None or self.disabled_until > moment)

    @property
    def overrides_configs(self) -> bool | None:
        """True when the identity has service-config overrides, else None (an index of the store,
        kept sparse: indexes leave out None)."""
        return True if self.service_configs else None

    @property
    def has_hosting_entries(self) -> bool | None:
        """True when the identity has per-service hosting costs or precedences, else None."""
        return True if self.service_hosting_costs or self.service_hosting_precedences else None


@register
@dataclass(kw_only=True)
class Authenticator(Entity):
    ENTITY = "authenticators"
    UNIQUE = ("username", "fingerprint", "unverified_fingerprint")
    #: ``username_key`` (computed): usernames that read alike are refused (``check_username``).
    INDEXED = ("identity_id", "username_key")

    identity_id: str
    method: str  # "updb" or "cert"
    username: str | None = None
    password_hash: str | None = None
    cert_pem: str | None = None
    fingerprint: str | None = None
    is_issued_by_network: bool = False
    #: The third-party CA that issued ``cert_pem`` (ottca / CA auto-enrollment), if any.
    ca_id: str | None = None
    #: A certificate issued by ``extend`` and not yet confirmed by ``extend-verify``.
    unverified_cert_pem: str | None = None
    unverified_fingerprint: str | None = None
    #: An administrator asked the identity to extend (and maybe re-key) its certificate.
    is_extend_requested: bool = False
    is_key_roll_requested: bool = False
    extend_requested_at: datetime | None = None
    last_extend_rolled_keys: bool = False

    @property
    def username_key(self) -> str | None:
        return username_key(self.username) if self.username else None


@register
@dataclass(kw_only=True)
class Enrollment(Entity):
    ENTITY = "enrollments"
    UNIQUE = ("token",)
    INDEXED = ("identity_id",)

    identity_id: str
    method: str  # ott, ottca, updb
    token: str
    expires_at: datetime
    ca_id: str | None = None
    username: str | None = None
    #: The enrollment JWT, signed once when the token is issued (and again on refresh).
    jwt: str | None = None


@register
@dataclass(kw_only=True)
class ApiSession(Entity):
    """An API session. Only the SHA-256 of its token is kept: a copy of the store opens no session."""

    ENTITY = "api-sessions"
    UNIQUE = ("token_hash",)
    INDEXED = ("identity_id", "ca_id")

    token_hash: str
    identity_id: str
    authenticator_id: str
    ip_address: str = ""
    config_types: list[str] = field(default_factory=list)
    last_activity_at: datetime
    is_mfa_required: bool = False
    is_mfa_complete: bool = False
    #: When this session last passed MFA (login's second factor, or a later MFA check); MFA
    #: posture checks time out from here.
    mfa_completed_at: datetime | None = None
    #: The third-party CA whose certificate opened the session (it ends when the CA goes).
    ca_id: str | None = None


@register
@dataclass(kw_only=True)
class ApiSessionCertificate(Entity):
    """An ephemeral client certificate issued to an API session (``/current-api-session/certificates``)."""

    ENTITY = "api-session-certificates"
    UNIQUE = ("fingerprint",)
    INDEXED = ("api_session_id",)

    api_session_id: str
    identity_id: str
    subject: str
    cert_pem: str
    fingerprint: str
    valid_from: datetime
    valid_to: datetime


@register
@dataclass(kw_only=True)
class Mfa(Entity):
    """An identity's TOTP enrollment: unverified until a first valid code is sent, then enforced."""

    ENTITY = "mfas"
    UNIQUE = ("identity_id",)

    identity_id: str
    is_verified: bool = False
    #: The base32 TOTP secret (it must be readable to check codes and to show the provisioning URL).
    secret: str
    recovery_codes: list[str] = field(default_factory=list)
