"""MFA checks, per API session (``model/posture_check_model_mfa.go``).

A check passes when the API session passed MFA, the pass has not timed out (``timeoutSeconds``;
-1 is none), and the wake / unlock rules hold: with ``promptOnWake`` (``promptOnUnlock``), a wake
(unlock) reported after the MFA pass leaves :data:`MFA_PROMPT_GRACE` to pass MFA again, after which
the check fails. ``timeoutRemaining`` shrinks to that grace when it is shorter; with
``ignoreLegacyEndpoints`` an SDK older than the C SDK 0.25.0 (or one not identifying itself as
the C SDK) has no timeout.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.entities.posture import PostureCheck
from engine.managers.posture._core import (
    MFA_PROMPT_GRACE,
    NO_TIMEOUT,
    PostureData,
    SessionPostureData,
)
from engine.managers.posture.os import compare, parse_version

C_SDK = "ziti-sdk-c"
MIN_C_SDK = (0, 25, 0, ())


def _timeout(check: PostureCheck) -> int:
    value = check.details.get("timeoutSeconds")
    return int(value) if isinstance(value, int) and value > 0 else NO_TIMEOUT


def is_legacy(session: SessionPostureData) -> bool:
    """An endpoint that cannot report wake / unlock events (OpenZiti's ``IsLegacyClient``)."""
    info = session.sdk_info or {}
    if info.get("type") != C_SDK:
        return True
    version = parse_version(str(info.get("version") or ""))
    return version is None or compare(version, MIN_C_SDK) < 0


def _grace_left(now: datetime, event_at: datetime) -> int:
    return max(0, int((MFA_PROMPT_GRACE - (now - event_at)).total_seconds()))


def _passed_after(
    prompt: bool, event_at: datetime | None, session: SessionPostureData, now: datetime
) -> bool:
    """promptOnWake / promptOnUnlock: no later event, or still inside the grace period."""
    if not prompt:
        return True
    passed = session.passed_mfa_at
    if passed is None:
        return False
    return event_at is None or event_at < passed or now - MFA_PROMPT_GRACE < event_at


class MfaEvaluator:
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        session = data.session(api_session_id)
        if session is None or session.passed_mfa_at is None:
            return False
        timeout = _timeout(check)
        if timeout != NO_TIMEOUT and (now - session.passed_mfa_at).total_seconds() > timeout:
            return False
        details = check.details
        return _passed_after(
            bool(details.get("promptOnWake")), session.woken_at, session, now
        ) and _passed_after(bool(details.get("promptOnUnlock")), session.unlocked_at, session, now)

    def timeout(self, check: PostureCheck) -> int:
        return _timeout(check)

    def timeout_remaining(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> int:
        timeout = _timeout(check)
        if timeout == NO_TIMEOUT:
            return NO_TIMEOUT
        session = data.session(api_session_id)
        if session is None or session.passed_mfa_at is None:
            return 0
        if check.details.get("ignoreLegacyEndpoints") and is_legacy(session):
            return NO_TIMEOUT
        remaining = timeout - int((now - session.passed_mfa_at).total_seconds())
        if remaining <= 0:
            return 0
        for prompt, event_at in (
            (check.details.get("promptOnWake"), session.woken_at),
            (check.details.get("promptOnUnlock"), session.unlocked_at),
        ):
            if prompt and event_at is not None and event_at > session.passed_mfa_at:
                remaining = min(remaining, _grace_left(now, event_at))
        return remaining

    def last_updated_at(self, check: PostureCheck, api_session_id: str, data: PostureData) -> datetime | None:
        session = data.session(api_session_id)
        if session is None:
            return None
        latest: datetime | None = None
        if check.details.get("promptOnWake") and session.woken_at is not None:
            latest = session.woken_at
        unlocked = session.unlocked_at
        if (
            check.details.get("promptOnUnlock")
            and unlocked is not None
            and (latest is None or unlocked > latest)
        ):
            latest = unlocked
        return latest

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        details = check.details
        session = data.session(api_session_id) or SessionPostureData()
        passed_at = session.passed_mfa_at
        timed_out = True
        if passed_at is not None:
            timeout = _timeout(check)
            timed_out = timeout != NO_TIMEOUT and (now - passed_at).total_seconds() > timeout
        return {
            "actualValue": {
                "passedMfa": passed_at is not None,
                "passedOnUnlock": _passed_after(
                    bool(details.get("promptOnUnlock")), session.unlocked_at, session, now
                ),
                "passedOnWake": _passed_after(
                    bool(details.get("promptOnWake")), session.woken_at, session, now
                ),
                "timedOut": timed_out,
            },
            "criteria": {
                "passedMfaAt": passed_at,
                "timeoutRemainingSeconds": self.timeout_remaining(check, api_session_id, data, now),
                "timeoutSeconds": _timeout(check),
                "unlockedAt": session.unlocked_at,
                "wokenAt": session.woken_at,
            },
            "expectedValue": {
                "passedMfa": True,
                "passedOnUnlock": bool(details.get("promptOnUnlock")),
                "passedOnWake": bool(details.get("promptOnWake")),
                "timedOut": False,
            },
        }
