"""Posture: the data identities report, checks evaluated against it, and what it gates.

Filled in by issue #7's posture work (policy-semantics §6).
"""

from __future__ import annotations

from engine.managers._base import Env
from engine.managers.access import AccessManager


class PostureManager:
    def __init__(self, env: Env, access: AccessManager) -> None:
        self.env = env
        self.access = access
