"""API session wire shapes and the authenticate request body."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from api.controller import Controller
from api.wire import WireModel, base, ref, ts
from engine.entities.identities import ApiSession, Authenticator, Identity


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


def render_api_session(ctrl: Controller, session: ApiSession, *, token: str | None = None) -> dict[str, Any]:
    """``apiSessionDetail``; with ``token`` (the caller's own session) ``currentApiSessionDetail``.

    The store keeps only a hash of the token, so only its owner, who sent it, sees it again.
    """
    identity = ctrl.env.store.get(Identity, session.identity_id)
    authenticator = ctrl.env.store.get(Authenticator, session.authenticator_id)
    cert = authenticator if authenticator is not None and authenticator.method == "cert" else None
    last = ctrl.sessions.last_activity(session)
    out = base(session)
    out.update(
        {
            "authQueries": [],
            "authenticatorId": session.authenticator_id,
            "cachedLastActivityAt": ts(last),
            "configTypes": session.config_types,
            "identity": ref(identity),
            "identityId": session.identity_id,
            "improperClientCertChain": False,
            "ipAddress": session.ip_address,
            "isCertExtendRequested": cert is not None and cert.is_extend_requested,
            "isCertExtendable": cert is not None and cert.is_issued_by_network,
            "isCertKeyRollRequested": cert is not None and cert.is_key_roll_requested,
            "isMfaComplete": session.is_mfa_complete,
            "isMfaRequired": session.is_mfa_required,
            "lastActivityAt": ts(last),
        }
    )
    if token is not None:
        out["token"] = token
        expires = ctrl.sessions.expires_at(session)
        out["expiresAt"] = ts(expires)
        out["expirationSeconds"] = max(0, int((expires - ctrl.env.clock.now()).total_seconds()))
    return out
