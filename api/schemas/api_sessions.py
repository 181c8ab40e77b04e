"""API session wire shapes and the authenticate request body."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from api.controller import Controller
from api.wire import WireModel, base, ref, ts
from engine.entities.identities import ApiSession
from engine.managers.authentication import AuthQuery


class EnvInfo(WireModel):
    arch: str | None = None
    domain: str | None = None
    hostname: str | None = None
    os: str | None = None
    os_release: str | None = None
    os_version: str | None = None


class SdkInfo(WireModel):
    app_id: str | None = None
    app_version: str | None = None
    branch: str | None = None
    revision: str | None = None
    type: str | None = None
    version: str | None = None


class Authenticate(WireModel):
    username: Annotated[str, Field(min_length=4, max_length=100)] | None = None
    password: Annotated[str, Field(min_length=5, max_length=100)] | None = None
    config_types: list[str] | None = None
    env_info: EnvInfo | None = None
    sdk_info: SdkInfo | None = None


def info_dict(model: WireModel | None) -> dict[str, Any]:
    if model is None:
        return {}
    return model.model_dump(by_alias=True, exclude_none=True)


class MfaCode(WireModel):
    """``mfaCode``: a TOTP code or a recovery code."""

    code: str


def render_auth_query(query: AuthQuery) -> dict[str, Any]:
    """``authQueryDetail``: only the fields the factor has."""
    out: dict[str, Any] = {"typeId": query.type_id, "provider": query.provider}
    optional = {
        "httpMethod": query.http_method,
        "httpUrl": query.http_url,
        "format": query.format,
        "minLength": query.min_length,
        "maxLength": query.max_length,
        "id": query.id,
        "clientId": query.client_id,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    if query.scopes:
        out["scopes"] = list(query.scopes)
    return out


def render_api_session(
    ctrl: Controller,
    session: ApiSession,
    *,
    token: str | None = None,
    auth_queries: Sequence[AuthQuery] = (),
) -> dict[str, Any]:
    """``apiSessionDetail``; with ``token`` (the caller's own session) ``currentApiSessionDetail``.

    The store keeps only a hash of the token, so only its owner, who sent it, sees it again.
    ``auth_queries`` are the factors the session still owes on the current request (only the
    caller's own session is rendered in a request context; OpenZiti lists none for others).
    """
    identity = ctrl.managers.identities.get(session.identity_id)
    authenticator = ctrl.managers.authenticators.get(session.authenticator_id)
    cert = authenticator if authenticator is not None and authenticator.method == "cert" else None
    last = ctrl.api_sessions.last_activity(session)
    out = base(session)
    out.update(
        {
            "authQueries": [render_auth_query(q) for q in auth_queries],
            "authenticatorId": session.authenticator_id,
            "cachedLastActivityAt": ts(last),
            "configTypes": session.config_types,
            "identity": ref(identity),
            "identityId": session.identity_id,
            "ipAddress": session.ip_address,
            "isCertExtendable": cert is not None and cert.is_issued_by_network,
            "isMfaComplete": session.is_mfa_complete,
            "isMfaRequired": session.is_mfa_required,
            "lastActivityAt": ts(last),
        }
    )
    # Go leaves these out when false (``omitempty``); OpenZiti v1.6.0 has neither
    if cert is not None and cert.is_extend_requested:
        out["isCertExtendRequested"] = True
    if cert is not None and cert.is_key_roll_requested:
        out["isCertKeyRollRequested"] = True
    if token is not None:
        out["token"] = token
        expires = ctrl.api_sessions.expires_at(session)
        out["expiresAt"] = ts(expires)
        out["expirationSeconds"] = max(0, int((expires - ctrl.env.clock.now()).total_seconds()))
    return out
