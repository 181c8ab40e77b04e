"""The running controller's shared state, built once by ``create_app``: no globals."""

from __future__ import annotations

from dataclasses import dataclass

from controller.settings import Settings
from engine.managers._base import Env
from engine.managers.access import AccessManager
from engine.managers.api_sessions import ApiSessionManager
from engine.managers.authentication import AuthenticationManager
from engine.managers.registry import Managers
from pki import CertificateAuthority

CLIENT_BASE = "/edge/client/v1"
MANAGEMENT_BASE = "/edge/management/v1"
FABRIC_BASE = "/fabric/v1"


@dataclass
class Controller:
    settings: Settings
    managers: Managers
    #: The controller's PKI (root, signing CA, API server certificate).
    pki: CertificateAuthority
    instance_id: str
    version: str
    version_trellis: str
    #: This controller among the network's (``/controllers``); the store's ``instance_id`` for the
    #: first controller of a network (and for every single one), its own for each that joined it.
    controller_id: str = ""

    def __post_init__(self) -> None:
        if not self.controller_id:
            self.controller_id = self.instance_id

    @property
    def env(self) -> Env:
        return self.managers.env

    @property
    def api_sessions(self) -> ApiSessionManager:
        """The API-session manager (``zt-session`` logins); Dial/Bind sessions are
        ``managers.sessions``."""
        return self.managers.api_sessions

    @property
    def auth(self) -> AuthenticationManager:
        return self.managers.authentication

    @property
    def access(self) -> AccessManager:
        return self.managers.access

    @property
    def base_url(self) -> str:
        return f"https://{self.settings.advertised_address}"
