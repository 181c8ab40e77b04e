"""The running controller's shared state, built once by ``create_app``: no globals."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from api.settings import Settings
from engine.managers._base import Env
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
    instance_id: str
    version: str
    version_trellis: str
    pki: CertificateAuthority | None = None
    #: (api, template, resource, suffix) for every registered route; the spec is generated from it.
    routes: list[tuple[str, str, Any, str | None]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"https://{self.settings.advertised_address}"
