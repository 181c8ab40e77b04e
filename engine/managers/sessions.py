"""Dial and Bind sessions (client ``/sessions``, management ``/sessions``).

Filled in by issue #7's sessions work: create with OpenZiti's checks in order (permission,
type, posture, a shared edge router), list, read and delete; sessions end with their API session.
"""

from __future__ import annotations

from engine.entities.sessions import Session
from engine.managers._base import EntityManager, Env
from engine.managers.access import AccessManager
from engine.managers.posture import PostureManager


class SessionManager(EntityManager[Session]):
    kind = Session

    def __init__(self, env: Env, access: AccessManager, posture: PostureManager) -> None:
        super().__init__(env)
        self.access = access
        self.posture = posture
