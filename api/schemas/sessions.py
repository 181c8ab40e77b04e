"""Session wire shapes: ``sessionCreate`` and ``sessionManagementDetail`` (both APIs render it)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from api.schemas.client_edge_routers import render_session_edge_router
from api.wire import Tags, WireModel, base, one_of, ref
from engine.entities.sessions import Session
from engine.managers.sessions import SessionView
from engine.query import Symbol, SymbolTable, SymbolType

#: ``dialBind``: the REST enum (``Invalid`` is accepted here and refused as a session type).
SessionType = Annotated[str, AfterValidator(one_of("type", ("Dial", "Bind", "Invalid")))]

SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda s: s.id),
        "token": Symbol(SymbolType.STRING, lambda s: s.token),
        "apiSession": Symbol(SymbolType.STRING, lambda s: s.api_session_id),
        "service": Symbol(SymbolType.STRING, lambda s: s.service_id),
        "identity": Symbol(SymbolType.STRING, lambda s: s.identity_id),
        "type": Symbol(SymbolType.STRING, lambda s: s.type),
        "servicePolicies": Symbol(SymbolType.STRING, lambda s: s.service_policy_ids, is_set=True),
        "createdAt": Symbol(SymbolType.DATETIME, lambda s: s.created_at),
        "updatedAt": Symbol(SymbolType.DATETIME, lambda s: s.updated_at),
    },
    tags_getter=lambda s: s.tags,
)


class SessionCreate(WireModel):
    service_id: str | None = None
    type: SessionType | None = None
    tags: Tags = None


def render_created_session(view: SessionView) -> dict[str, Any]:
    """``sessionDetail``, what creating a session answers: the session without the policies that
    granted it (OpenZiti's create answer is not the management detail)."""
    out = render_session(view)
    del out["servicePolicies"]
    return out


def render_session(view: SessionView) -> dict[str, Any]:
    """``sessionManagementDetail``: the session, its routers and the policies that granted it."""
    session: Session = view.session
    out = base(session, "route-path")
    out.update(
        {
            "apiSession": ref(view.api_session, ""),
            "apiSessionId": session.api_session_id,
            "edgeRouters": [
                render_session_edge_router(r, view.presences.get(r.id), view.sync_statuses.get(r.id, ""))
                for r in view.edge_routers
            ],
            "identityId": session.identity_id,
            "service": ref(view.service),
            "serviceId": session.service_id,
            "servicePolicies": [ref(p) for p in view.service_policies],
            "token": session.token,
            "type": session.type,
        }
    )
    return out
