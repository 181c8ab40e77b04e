"""The running controller's shared state, built once by ``create_app``: no globals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jwt

from api.settings import Settings
from engine.entities.identities import Enrollment
from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication import AuthenticationManager

if TYPE_CHECKING:
    from pki import CertificateAuthority

CLIENT_BASE = "/edge/client/v1"
MANAGEMENT_BASE = "/edge/management/v1"


@dataclass
class Controller:
    settings: Settings
    env: Env
    sessions: ApiSessionManager
    auth: AuthenticationManager
    access: AccessManager
    instance_id: str
    version: str
    version_trellis: str
    pki: CertificateAuthority | None = None
    #: (api, template, resource, suffix) for every registered route; the spec is generated from it.
    routes: list[tuple[str, str, Any, str | None]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"https://{self.settings.advertised_address}"

    def enrollment_jwt(self, enrollment: Enrollment) -> str | None:
        """The enrollment's JWT (wire-contract §6.1), signed with the TLS server key; None without a PKI."""
        if self.pki is None:
            return None
        claims = {
            "em": enrollment.method,
            "iss": self.base_url,
            "sub": enrollment.identity_id,
            "jti": enrollment.token,
            "exp": int(enrollment.expires_at.timestamp()),
            "aud": [""],
            "ctrls": [],
        }
        headers = {"kid": self.pki.jwt_kid(), "typ": "JWT"}
        return jwt.encode(
            claims, self.pki.signing_key_for_jwt(), algorithm=self.pki.jwt_algorithm(), headers=headers
        )
