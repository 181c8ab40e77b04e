"""Usernames that can not pass for another's.

OpenZiti only keeps usernames unique as given, so ``"Admin"``, ``"admin "`` or a fullwidth
``admin`` could sit beside ``admin`` and log in under it. Every username set (an authenticator
created or changed by an administrator or by its own identity, a ``updb`` enrollment completed) is
checked here against :func:`~engine.entities.identities.username_key` of every other one.
"""

from __future__ import annotations

import unicodedata

from engine.entities.identities import Authenticator, username_key
from engine.errors import FieldError, NameConflictError
from engine.ports import UnitOfWork


def check_username(uow: UnitOfWork, username: str, own_id: str | None, field: str = "username") -> None:
    """A username no other authenticator's reads alike (:func:`username_key`): no surrounding
    whitespace, no control or format characters, and not another's in other case or width
    (400 ``COULD_NOT_VALIDATE``; OpenZiti checks exact uniqueness only). Logins still match the
    username exactly."""
    if username != username.strip():
        raise FieldError(field, f"{field} may not start or end with whitespace", username)
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") for ch in username):
        raise FieldError(field, f"{field} may not contain control or invisible characters", None)
    for other in uow.find_by(Authenticator, "username_key", username_key(username)):
        if other.id != own_id:
            raise NameConflictError(field, username, Authenticator.ENTITY)
