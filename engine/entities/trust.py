"""Trust anchors and login rules: CAs, external JWT signers, auth policies."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.entities import Entity, register


@register
@dataclass(kw_only=True)
class Ca(Entity):
    ENTITY = "cas"
    UNIQUE = ("name", "fingerprint", "verification_token")

    name: str
    cert_pem: str
    fingerprint: str
    is_verified: bool = False
    verification_token: str
    is_auth_enabled: bool = False
    is_auto_ca_enrollment_enabled: bool = False
    is_ott_ca_enrollment_enabled: bool = False
    identity_roles: list[str] = field(default_factory=list)
    identity_name_format: str = "[caName]-[commonName]"
    external_id_claim: dict[str, Any] | None = None


@register
@dataclass(kw_only=True)
class ExternalJwtSigner(Entity):
    ENTITY = "external-jwt-signers"
    UNIQUE = ("name", "issuer", "fingerprint", "kid")

    name: str
    issuer: str
    audience: str | None = None
    enabled: bool = True
    cert_pem: str | None = None
    jwks_endpoint: str | None = None
    kid: str | None = None
    external_auth_url: str | None = None
    claims_property: str = "sub"
    use_external_id: bool = False
    client_id: str | None = None
    scopes: list[str] = field(default_factory=list)
    target_token: str = "ACCESS"
    common_name: str | None = None
    fingerprint: str | None = None
    not_before: datetime | None = None
    not_after: datetime | None = None
    enroll_to_cert_enabled: bool = False
    enroll_to_token_enabled: bool = False
    enroll_attribute_claims_selector: str = ""
    enroll_name_claims_selector: str = ""
    enroll_auth_policy_id: str = ""


@register
@dataclass(kw_only=True)
class AuthPolicy(Entity):
    ENTITY = "auth-policies"
    UNIQUE = ("name",)

    name: str
    primary: dict[str, Any] = field(default_factory=dict)
    secondary: dict[str, Any] = field(default_factory=dict)
