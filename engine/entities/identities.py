"""Identities and what authenticates them: authenticators, enrollments, API sessions."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.entities import Entity, register

DEFAULT_AUTH_POLICY_ID = "default"


@register
@dataclass(kw_only=True)
class Identity(Entity):
    ENTITY = "identities"
    UNIQUE = ("name", "external_id")

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


@register
@dataclass(kw_only=True)
class Authenticator(Entity):
    ENTITY = "authenticators"
    UNIQUE = ("username", "fingerprint")
    INDEXED = ("identity_id",)

    identity_id: str
    method: str  # "updb" or "cert"
    username: str | None = None
    password_hash: str | None = None
    cert_pem: str | None = None
    fingerprint: str | None = None
    is_issued_by_network: bool = False


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


@register
@dataclass(kw_only=True)
class ApiSession(Entity):
    ENTITY = "api-sessions"
    UNIQUE = ("token",)
    INDEXED = ("identity_id",)

    token: str
    identity_id: str
    authenticator_id: str
    ip_address: str = ""
    config_types: list[str] = field(default_factory=list)
    last_activity_at: datetime
    is_mfa_required: bool = False
    is_mfa_complete: bool = False
