"""``method=password``: a username and password checked against a ``updb`` authenticator."""

from __future__ import annotations

from engine.entities.identities import Authenticator
from engine.errors import InvalidAuthError
from engine.managers._base import Env
from engine.ports import PasswordHasher

# Verified against when the username is unknown, so that a miss costs what a wrong password costs.
_DUMMY_PASSWORD = "trellis-timing-equaliser"


class PasswordCheck:
    def __init__(self, env: Env) -> None:
        self.env = env
        self._hasher: PasswordHasher = env.hasher
        self._dummy_hash = env.hasher.hash(_DUMMY_PASSWORD)

    def authenticator(self, username: str, password: str) -> Authenticator:
        """The ``updb`` authenticator ``username``/``password`` prove, or ``INVALID_AUTH``."""
        found = self.env.store.find_unique(Authenticator, "username", username)
        if found is None or found.method != "updb" or not found.password_hash:
            self._hasher.verify(password, self._dummy_hash)
            raise InvalidAuthError()
        if not self._hasher.verify(password, found.password_hash):
            raise InvalidAuthError()
        return found
