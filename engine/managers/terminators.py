"""Terminators: where a service's traffic leaves the overlay (management CRUD).

Filled in by issue #7's terminator work.
"""

from __future__ import annotations

from engine.entities.services import Terminator
from engine.managers._base import EntityManager


class TerminatorManager(EntityManager[Terminator]):
    kind = Terminator
