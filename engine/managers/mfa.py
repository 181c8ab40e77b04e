"""TOTP MFA of an identity: enroll, verify, disable, recovery codes, and completing a login.

Filled in by issue #7's MFA work (seed 000's MFA state table).
"""

from __future__ import annotations

from engine.entities.identities import Mfa
from engine.managers._base import EntityManager, Env
from engine.managers.api_sessions import ApiSessionManager


class MfaManager(EntityManager[Mfa]):
    kind = Mfa

    def __init__(self, env: Env, sessions: ApiSessionManager) -> None:
        super().__init__(env)
        self.sessions = sessions
