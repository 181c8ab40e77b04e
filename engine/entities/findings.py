"""Findings of the access analysis (docs/analysis.md §6): what survives a restart of their lifecycle.

A finding itself is computed from the policy graph (``engine.analysis.findings``); what is stored
is its record (first seen, resolved, an administrator's archive or unarchive) and the archive
rules that hide findings an administrator has accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from engine.entities import Entity, register

ACTIVE, ARCHIVED, RESOLVED = "ACTIVE", "ARCHIVED", "RESOLVED"


@register
@dataclass(kw_only=True)
class FindingRecord(Entity):
    """One finding's lifecycle; its id is the finding's stable id (kind and subject)."""

    ENTITY = "findings"

    kind: str
    subject_type: str
    subject_id: str
    first_seen_at: datetime
    #: What it said when last found (kept for a resolved finding).
    message: str = ""
    #: When it was last found gone (None while it is present).
    resolved_at: datetime | None = None
    #: ``ARCHIVED`` or ``ACTIVE`` when an administrator set it; None: the archive rules decide.
    status_override: str | None = None


@register
@dataclass(kw_only=True)
class FindingArchiveRule(Entity):
    """Findings it matches are ARCHIVED: those already found and those found later. Every
    criterion given must hold: a ZitiQL ``filter`` over the findings' fields, a ``kind``, a
    ``subject_id``."""

    ENTITY = "finding-archive-rules"
    UNIQUE = ("name",)

    name: str
    filter: str = ""
    kind: str = ""
    subject_id: str = ""
    description: str = ""
