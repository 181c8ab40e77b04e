"""Authenticator wire shapes (admin view): request bodies and ``authenticatorDetail``."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from api.controller import Controller
from api.schemas.enrollments import DateTime
from api.wire import Tags, WireModel, base, ref, ts
from engine.entities.identities import Authenticator
from engine.query import Symbol, SymbolTable, SymbolType

Username = Annotated[str, Field(min_length=4, max_length=100)]
Password = Annotated[str, Field(min_length=5, max_length=100)]


class AuthenticatorCreate(WireModel):
    identity_id: str
    method: str
    cert_pem: str | None = None
    username: str | None = None
    password: str | None = None
    tags: Tags = None


class ReEnroll(WireModel):
    expires_at: DateTime


class RequestExtend(WireModel):
    roll_keys: bool | None = None


class ExtendCert(WireModel):
    client_cert_csr: str


class ExtendVerify(WireModel):
    client_cert: str


class AuthenticatorUpdate(WireModel):
    username: Username
    password: Password
    tags: Tags = None


class AuthenticatorPatch(WireModel):
    username: Username | None = None
    password: Password | None = None
    tags: Tags = None


class CurrentAuthenticatorUpdate(WireModel):
    """``authenticatorUpdateWithCurrent``: the identity's own new credentials, proven by the old password."""

    username: Username
    password: Password
    current_password: Password
    tags: Tags = None


class CurrentAuthenticatorPatch(WireModel):
    """``authenticatorPatchWithCurrent``: the fields to change, proven by the current password."""

    username: Username | None = None
    password: Password | None = None
    current_password: Password
    tags: Tags = None


def render_authenticator(ctrl: Controller, authenticator: Authenticator) -> dict[str, Any]:
    """``authenticatorDetail``: never the password hash."""
    identity = ctrl.managers.identities.get(authenticator.identity_id)
    out = base(authenticator)
    out["_links"]["identities"] = {"href": f"./identities/{authenticator.identity_id}"}
    out.update(
        {
            "identity": ref(identity),
            "identityId": authenticator.identity_id,
            "method": authenticator.method,
        }
    )
    if authenticator.method == "updb":
        out["username"] = authenticator.username
    else:
        out.update(
            {
                "certPem": authenticator.cert_pem,
                "fingerprint": authenticator.fingerprint,
                "isIssuedByNetwork": authenticator.is_issued_by_network,
            }
        )
        # newer specs' optional fields, left out while false or null (Go's omitempty; OpenZiti
        # v1.6.0 has none of them)
        optional = {
            "isExtendRequested": authenticator.is_extend_requested,
            "isKeyRollRequested": authenticator.is_key_roll_requested,
            "extendRequestedAt": ts(authenticator.extend_requested_at),
            "lastExtendRolledKeys": authenticator.last_extend_rolled_keys,
        }
        out.update({key: value for key, value in optional.items() if value})
    return out


def authenticator_symbols() -> SymbolTable:
    """The filterable fields of authenticators (OpenZiti's store symbols plus wire-name aliases)."""
    string, boolean, when = SymbolType.STRING, SymbolType.BOOL, SymbolType.DATETIME
    return SymbolTable(
        {
            "id": Symbol(string, lambda a: a.id),
            "createdAt": Symbol(when, lambda a: a.created_at),
            "updatedAt": Symbol(when, lambda a: a.updated_at),
            "method": Symbol(string, lambda a: a.method),
            "identity": Symbol(string, lambda a: a.identity_id),
            "identityId": Symbol(string, lambda a: a.identity_id),
            "updbUsername": Symbol(string, lambda a: a.username),
            "username": Symbol(string, lambda a: a.username),
            "certFingerprint": Symbol(string, lambda a: a.fingerprint),
            "fingerprint": Symbol(string, lambda a: a.fingerprint),
            "certPem": Symbol(string, lambda a: a.cert_pem),
            "isIssuedByNetwork": Symbol(boolean, lambda a: a.is_issued_by_network),
        },
        tags_getter=lambda a: a.tags,
    )
