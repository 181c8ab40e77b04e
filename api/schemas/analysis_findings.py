"""Wire shapes of the findings, archive rules, advice and access tests of ``/analysis/v1``
(docs/analysis.md §6-§8)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

from api.wire import Tags, WireModel, base, one_of, ts
from engine.analysis.findings import FINDING_KINDS, FindingView
from engine.entities.findings import ACTIVE, ARCHIVED, FindingArchiveRule


class FindingPatch(WireModel):
    """``PATCH /findings/{id}``: archive (``ARCHIVED``) or unarchive (``ACTIVE``) a finding."""

    status: Annotated[str, AfterValidator(one_of("status", (ACTIVE, ARCHIVED)))]


class ArchiveRuleCreate(WireModel):
    """An archive rule: every criterion given must hold for a finding it archives."""

    name: str
    filter: str = ""
    kind: Annotated[str, AfterValidator(one_of("kind", ("", *FINDING_KINDS)))] = ""
    subject_id: str = ""
    description: str = ""
    tags: Tags = None


class ArchiveRulePatch(WireModel):
    name: str | None = None
    filter: str | None = None
    kind: Annotated[str, AfterValidator(one_of("kind", ("", *FINDING_KINDS)))] | None = None
    subject_id: str | None = None
    description: str | None = None
    tags: Tags = None


class AccessTestsRequest(WireModel):
    """``POST /access-tests``: the expectations of a test file, as JSON."""

    expectations: list[Any]


def render_finding(view: FindingView) -> dict[str, Any]:
    return {
        "_links": {"self": {"href": f"./findings/{view.id}"}},
        "id": view.id,
        "kind": view.kind,
        "severity": view.severity,
        "status": view.status,
        "archivedBy": view.archived_by,
        "subjectType": view.subject_type,
        "subjectId": view.subject_id,
        "subjectName": view.subject_name,
        "message": view.message,
        "details": dict(view.details),
        "firstSeenAt": ts(view.first_seen_at),
        "lastSeenAt": ts(view.last_seen_at),
        "resolvedAt": ts(view.resolved_at),
    }


def render_rule(rule: FindingArchiveRule) -> dict[str, Any]:
    return {
        **base(rule),
        "name": rule.name,
        "filter": rule.filter,
        "kind": rule.kind,
        "subjectId": rule.subject_id,
        "description": rule.description,
    }
