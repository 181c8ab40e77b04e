"""MAC checks: any reported MAC address is one of the check's.

Both sides are compared in OpenZiti's clean form: lower case, hex digits only (the check's
addresses are stored that way; reports are cleaned when they arrive).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from engine.entities.posture import PostureCheck
from engine.managers.posture._core import NoTimeout, PostureData

_NOT_HEX = re.compile(r"[^a-f0-9]+")


def clean_hex(value: str) -> str:
    """Lower case with everything but hex digits removed (OpenZiti's ``CleanHexString``)."""
    return _NOT_HEX.sub("", value.lower())


class MacEvaluator(NoTimeout):
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        if data.mac.timed_out:
            return False
        allowed = {clean_hex(str(m)) for m in check.details.get("macAddresses") or []}
        return any(address in allowed for address in data.mac.addresses)

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        return {
            "actualValue": list(data.mac.addresses),
            "expectedValue": list(check.details.get("macAddresses") or []),
        }
