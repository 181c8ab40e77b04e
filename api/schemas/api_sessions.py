"""API session wire shapes and the authenticate request body."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from api.controller import Controller
from api.wire import WireModel, base, ref, ts
from engine.entities.identities import ApiSession, Identity


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


def render_api_session(ctrl: Controller, session: ApiSession, *, current: bool) -> dict[str, Any]:
    identity = ctrl.env.store.get(Identity, session.identity_id)
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
            "isCertExtendRequested": False,
            "isCertExtendable": False,
            "isCertKeyRollRequested": False,
            "isMfaComplete": session.is_mfa_complete,
            "isMfaRequired": session.is_mfa_required,
            "lastActivityAt": ts(last),
            "token": session.token,
        }
    )
    if current:
        expires = ctrl.sessions.expires_at(session)
        out["expiresAt"] = ts(expires)
        out["expirationSeconds"] = max(0, int((expires - ctrl.env.clock.now()).total_seconds()))
    return out
