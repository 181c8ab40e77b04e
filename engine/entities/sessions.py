"""Sessions: an API session's permission to Dial or Bind one service through edge routers."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.entities import Entity, register

DIAL, BIND = "Dial", "Bind"


@register
@dataclass(kw_only=True)
class Session(Entity):
    """A Dial or Bind session. Its token is what an edge router is shown, so it is kept readable."""

    ENTITY = "sessions"
    #: ``use``: one session per (API session, type, service), found without a scan.
    UNIQUE = ("token", "use")
    INDEXED = ("api_session_id", "identity_id", "service_id")

    token: str
    api_session_id: str
    identity_id: str
    service_id: str
    type: str = DIAL
    #: The service policies that granted it (OpenZiti records them on legacy sessions).
    service_policy_ids: list[str] = field(default_factory=list)

    @property
    def use(self) -> tuple[str, str, str]:
        """What the session is for: (API session, type, service); an API session has at most one."""
        return (self.api_session_id, self.type, self.service_id)
