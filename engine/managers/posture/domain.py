"""DOMAIN checks: the reported Windows domain is one of the check's, ignoring case."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.entities.posture import PostureCheck
from engine.managers.posture._core import NoTimeout, PostureData


class DomainEvaluator(NoTimeout):
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        if data.domain.timed_out or not data.domain.name:
            return False
        reported = data.domain.name.lower()
        return any(reported == str(d).lower() for d in check.details.get("domains") or [])

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        return {"actualValue": data.domain.name, "expectedValue": list(check.details.get("domains") or [])}
