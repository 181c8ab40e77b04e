"""Enrollment wire shapes: ``enrollmentCreate``, ``enrollmentRefresh`` and ``enrollmentDetail``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator

from api.controller import Controller
from api.wire import WireModel, base, ref, ts
from engine.entities.identities import Enrollment, Identity
from engine.managers.enrollment import IDENTITY_METHODS
from engine.query import Symbol, SymbolTable, SymbolType


def _method(value: str) -> str:
    if value not in IDENTITY_METHODS:
        raise ValueError(f"method must be one of {list(IDENTITY_METHODS)}")
    return value


def _utc(value: datetime) -> datetime:
    """RFC 3339 date-times; one without an offset is taken as UTC (and must stay within years
    1 to 9999 once it is)."""
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:
        raise ValueError("date-time out of range") from None


Method = Annotated[str, AfterValidator(_method)]
DateTime = Annotated[datetime, AfterValidator(_utc)]


class EnrollmentCreate(WireModel):
    method: Method
    identity_id: str
    expires_at: DateTime
    ca_id: str | None = None
    username: str | None = None


class EnrollmentRefresh(WireModel):
    expires_at: DateTime


def identity_summary(identity: Identity | None, identity_id: str) -> dict[str, Any]:
    """The enrollment's ``identity``: ``{_links, id, name, urlName}`` (OpenZiti's own shape here)."""
    return {
        "_links": {"self": {"href": f"./identities/{identity_id}"}},
        "id": identity_id,
        "name": identity.name if identity is not None else "",
        "urlName": "identities",
    }


def render_enrollment(ctrl: Controller, enrollment: Enrollment) -> dict[str, Any]:
    """``enrollmentDetail``."""
    identity = ctrl.managers.identities.get(enrollment.identity_id)
    ca = ctrl.managers.cas.get(enrollment.ca_id) if enrollment.ca_id else None
    out = base(enrollment)
    out.update(
        {
            "ca": ref(ca),
            "caId": enrollment.ca_id,
            "edgeRouter": None,
            "edgeRouterId": None,
            "expiresAt": ts(enrollment.expires_at),
            "identity": identity_summary(identity, enrollment.identity_id),
            "identityId": enrollment.identity_id,
            "jwt": enrollment.jwt,
            "method": enrollment.method,
            "token": enrollment.token,
            "transitRouter": None,
            "transitRouterId": None,
            "username": enrollment.username,
        }
    )
    return out


def _no_router(enrollment: Enrollment) -> None:
    return None


def enrollment_symbols() -> SymbolTable:
    """The filterable fields of enrollments (OpenZiti's store symbols plus wire-name aliases).
    ``edgeRouter`` and ``transitRouter`` are null, as their detail shows: the enrollments listed
    here are identities' (a router's own enrollment is kept on the router), and OpenZiti's are
    null too on an identity's enrollment."""
    string, when = SymbolType.STRING, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda e: e.id),
            "createdAt": Symbol(when, lambda e: e.created_at),
            "updatedAt": Symbol(when, lambda e: e.updated_at),
            "method": Symbol(string, lambda e: e.method),
            "token": Symbol(string, lambda e: e.token),
            "expiresAt": Symbol(when, lambda e: e.expires_at),
            "identity": Symbol(string, lambda e: e.identity_id),
            "identityId": Symbol(string, lambda e: e.identity_id),
            "ca": Symbol(string, lambda e: e.ca_id),
            "caId": Symbol(string, lambda e: e.ca_id),
            "username": Symbol(string, lambda e: e.username),
            "edgeRouter": Symbol(string, _no_router),
            "transitRouter": Symbol(string, _no_router),
        },
        tags_getter=lambda e: e.tags,
    )
