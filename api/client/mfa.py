"""TOTP MFA of the current identity and completing a login's MFA (both APIs).

- ``POST /authenticate/mfa {code}``: the session passes MFA with a TOTP or recovery code;
- ``/current-identity/mfa``: ``POST`` starts an enrollment (201, 409 ``MFA_EXISTS``), ``GET``
  shows it (``provisioningUrl`` and ``recoveryCodes`` until verified; 404 when there is none),
  ``DELETE`` removes it (the code in the ``mfa-validation-code`` header or a ``{code}`` body:
  empty before verification, valid after it);
- ``POST /current-identity/mfa/verify {code}`` completes the enrollment;
- ``GET /current-identity/mfa/qr-code``: the provisioning URL as a PNG QR code (until verified);
- ``/current-identity/mfa/recovery-codes``: ``GET`` shows them (a valid TOTP code in the header or
  body), ``POST`` replaces them; as seed 000 says, the new codes come back under ``error``;
- ``POST /current-api-session/totp-token {code}``: a TOTP code becomes a TOTP token
  (``totpTokenEnvelope`` ``{token, issuedAt}``), for fully authenticated sessions only.

A session that still owes MFA (or has yet to enroll under an auth policy requiring TOTP) may
complete MFA and use the enrollment operations; removing MFA and the recovery codes need a full
session (OpenZiti's permissions in ``routes/current_identity_router.go``). Bad codes are 401
``MFA_INVALID_TOKEN``.
"""

from __future__ import annotations

import io
from typing import Any

import falcon
import segno

from api.controller import Controller
from api.http import empty, meta, ok, read_model
from api.middleware import PARTIAL, SESSION
from api.routing import Routes
from api.schemas.api_sessions import MfaCode
from api.wire import WireModel, ts
from engine.entities.identities import Mfa

VALIDATION_HEADER = "mfa-validation-code"
SELF = "./current-identity/mfa"


class OptionalCode(WireModel):
    code: str | None = None


def _code(req: falcon.Request) -> str:
    """The code of a request: a ``{code}`` body first, else the ``mfa-validation-code`` header."""
    body = read_model(req, OptionalCode, allow_empty=True)
    if body.code is not None:
        return body.code
    return req.get_header(VALIDATION_HEADER) or ""


def mfa_links(mfa: Mfa) -> dict[str, Any]:
    links: dict[str, Any] = {"self": {"href": SELF}, "current-identity": {"href": "./current-identity"}}
    if mfa.is_verified:
        links["recovery-codes"] = {"href": f"{SELF}/recovery-codes"}
    else:
        links["verify"] = {"href": f"{SELF}/verify"}
        links["qr"] = {"href": f"{SELF}/qr-code"}
    return links


def _base(mfa: Mfa) -> dict[str, Any]:
    return {
        "_links": mfa_links(mfa),
        "id": mfa.id,
        "createdAt": ts(mfa.created_at),
        "updatedAt": ts(mfa.updated_at),
        "tags": mfa.tags,
    }


def render_mfa(ctrl: Controller, mfa: Mfa) -> dict[str, Any]:
    """``detailMfa``: the secret's URL and the recovery codes only until the enrollment is verified."""
    out = _base(mfa)
    out["isVerified"] = mfa.is_verified
    if not mfa.is_verified:
        out["provisioningUrl"] = ctrl.managers.mfa.provisioning_url(mfa)
        out["recoveryCodes"] = list(mfa.recovery_codes)
    return out


def render_recovery_codes(mfa: Mfa) -> dict[str, Any]:
    """``detailMfaRecoveryCodes``."""
    out = _base(mfa)
    out["recoveryCodes"] = list(mfa.recovery_codes)
    return out


def qr_png(text: str) -> bytes:
    """A PNG QR code of ``text`` (medium error correction, about 250 pixels like OpenZiti's)."""
    buffer = io.BytesIO()
    segno.make(text, error="m", micro=False).save(buffer, kind="png", scale=5, border=4)
    return buffer.getvalue()


class AuthenticateMfa:
    """Complete the MFA of the current API session with a TOTP code or a recovery code."""

    auth = PARTIAL
    body_models = {"post": MfaCode}

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Complete MFA authentication."""
        model = read_model(req, MfaCode)
        self.ctrl.managers.mfa.complete_login(req.context.session, model.code)
        empty(resp)


class CurrentMfa:
    """The current identity's MFA enrollment."""

    auth = PARTIAL
    auth_by_method = {"DELETE": SESSION}
    body_models = {"post_verify": MfaCode}

    def __init__(self, ctrl: Controller) -> None:
        self.ctrl = ctrl
        self.manager = ctrl.managers.mfa

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """MFA status: the enrollment, with provisioningUrl and recoveryCodes until verified."""
        ok(resp, render_mfa(self.ctrl, self.manager.require_of(req.context.identity.id)))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Initiate MFA enrollment."""
        mfa = self.manager.enroll(req.context.identity.id)
        resp.status = falcon.HTTP_201
        resp.media = {"data": {"_links": {"self": {"href": SELF}}, "id": mfa.id}, "meta": meta()}

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Disable MFA: no code before verification, a valid TOTP or recovery code after it."""
        self.manager.remove(req.context.identity.id, _code(req))
        empty(resp)

    def on_post_verify(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Verify MFA enrollment with a TOTP code; the current session has then passed MFA."""
        model = read_model(req, MfaCode)
        self.manager.verify(req.context.identity.id, model.code, req.context.session)
        empty(resp)

    def on_get_qr(self, req: falcon.Request, resp: falcon.Response) -> None:
        """The provisioning URL of an unverified enrollment as a PNG QR code."""
        url = self.manager.qr_code_url(req.context.identity.id)
        resp.content_type = "image/png"
        resp.data = qr_png(url)


class RecoveryCodes:
    """The recovery codes of the current identity's verified MFA enrollment."""

    auth = SESSION
    body_models = {"post": MfaCode}

    def __init__(self, ctrl: Controller) -> None:
        self.manager = ctrl.managers.mfa

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """View recovery codes (needs a valid TOTP code in the header or the body)."""
        ok(resp, render_recovery_codes(self.manager.recovery_codes(req.context.identity.id, _code(req))))

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Regenerate recovery codes; the new ones are answered under ``error`` (seed 000)."""
        model = read_model(req, MfaCode)
        mfa = self.manager.regenerate_recovery_codes(req.context.identity.id, model.code)
        resp.media = {"error": render_recovery_codes(mfa), "meta": meta()}


class TotpTokenResource:
    """Trade a TOTP code for a token proving it was checked now."""

    auth = SESSION
    body_models = {"post": MfaCode}

    def __init__(self, ctrl: Controller) -> None:
        self.manager = ctrl.managers.mfa

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Create a TOTP token (a valid TOTP code; recovery codes do not count)."""
        model = read_model(req, MfaCode)
        token = self.manager.totp_token(req.context.session, model.code)
        ok(resp, {"token": token.token, "issuedAt": ts(token.issued_at)})


def register(routes: Routes) -> None:
    ctrl = routes.ctrl
    routes.both("/authenticate/mfa", AuthenticateMfa(ctrl))
    mfa = CurrentMfa(ctrl)
    routes.both("/current-identity/mfa", mfa)
    routes.both("/current-identity/mfa/verify", mfa, suffix="verify")
    routes.both("/current-identity/mfa/qr-code", mfa, suffix="qr")
    routes.both("/current-identity/mfa/recovery-codes", RecoveryCodes(ctrl))
    routes.both("/current-api-session/totp-token", TotpTokenResource(ctrl))
