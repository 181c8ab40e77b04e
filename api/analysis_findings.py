"""``/analysis/v1`` findings, archive rules, whole-network advice and access tests
(docs/analysis.md §6-§8), for administrators. Mounted by ``api/analysis.py``'s ``register``
through :func:`mount_findings` (with its ``mount``, so the Swagger document lists them):

- ``GET /findings`` (ZitiQL ``filter``, ``sort``, ``limit``/``offset``), ``GET /findings/{id}``,
  ``PATCH /findings/{id}`` with ``{"status": "ARCHIVED"|"ACTIVE"}``;
- ``GET|POST /finding-archive-rules``, ``GET|PUT|PATCH|DELETE /finding-archive-rules/{id}``;
- ``GET /advice``: policy advice of every (identity, service) pair, paged
  (``order=identities|services``, ``errorsOnly=true``, ``level=services`` for one row per service),
  or every row as one streamed Parquet file (``format=parquet`` or ``Accept:
  application/vnd.apache.parquet``, :mod:`api.advice_parquet`);
- ``POST /access-tests``: a test file's expectations, as JSON; the report.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from itertools import islice
from typing import Any

import falcon

from api.advice_parquet import PARQUET, advice_parquet
from api.bodies import ReleasingBody, Slots
from api.http import list_response, ok, read_model
from api.middleware import ADMIN
from api.schemas.analysis_findings import (
    AccessTestsRequest,
    ArchiveRuleCreate,
    ArchiveRulePatch,
    FindingPatch,
    render_finding,
    render_rule,
)
from api.wire import WireModel
from engine.analysis import AnalysisManager
from engine.analysis.access_tests import parse_expectations, run_access_tests
from engine.analysis.advise import advise, service_summaries
from engine.analysis.advise_bulk import advise_block_jobs
from engine.analysis.findings import FINDING_SYMBOLS, FindingsManager
from engine.entities.identities import Identity
from engine.errors import FieldError, RateLimitedError
from engine.query import Symbol, SymbolTable, SymbolType

#: The most advice rows one page holds.
ADVICE_PAGE_MAX = 10_000
ADVICE_PAGE_DEFAULT = 1_000
#: Parquet advice answers running at once in a process (at tier L each takes two minutes and two
#: threads); one more is 429.
ADVICE_STREAMS = 2

RULE_SYMBOLS = SymbolTable(
    {
        "id": Symbol(SymbolType.STRING, lambda r: r.id),
        "name": Symbol(SymbolType.STRING, lambda r: r.name),
        "kind": Symbol(SymbolType.STRING, lambda r: r.kind),
        "subjectId": Symbol(SymbolType.STRING, lambda r: r.subject_id),
        "createdAt": Symbol(SymbolType.DATETIME, lambda r: r.created_at),
    },
    tags_getter=lambda r: r.tags,
)


class Findings:
    """Every finding, found now or resolved, with its status."""

    auth = ADMIN

    def __init__(self, findings: FindingsManager) -> None:
        self.findings = findings

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """List findings (ZitiQL filter, sort and paging)."""
        list_response(req, resp, self.findings.views(), FINDING_SYMBOLS, render_finding)


class Finding:
    """One finding; PATCH archives or unarchives it."""

    auth = ADMIN
    body_models = {"patch": FindingPatch}

    def __init__(self, findings: FindingsManager) -> None:
        self.findings = findings

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """One finding."""
        ok(resp, render_finding(self.findings.view(id)))

    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Archive (``ARCHIVED``) or unarchive (``ACTIVE``) a finding."""
        body = read_model(req, FindingPatch)
        ok(resp, render_finding(self.findings.set_status(id, body.status)))


def _rule_fields(model: Any, only_set: bool) -> dict[str, Any]:
    names = ("name", "filter", "kind", "subject_id", "description", "tags")
    out = {}
    for name in names:
        if only_set and name not in model.model_fields_set:
            continue
        value = getattr(model, name)
        if value is None:
            if name == "tags" and not only_set:
                value = {}
            else:
                continue
        out[name] = value
    return out


class ArchiveRules:
    """Archive rules: findings they match are ARCHIVED, those there now and those found later."""

    auth = ADMIN
    body_models: dict[str, type[WireModel]] = {"post": ArchiveRuleCreate}

    def __init__(self, findings: FindingsManager) -> None:
        self.rules = findings.rules

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """List archive rules."""
        list_response(req, resp, self.rules.list(), RULE_SYMBOLS, render_rule)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Create an archive rule."""
        body = read_model(req, ArchiveRuleCreate)
        rule = self.rules.create(_rule_fields(body, only_set=False))
        resp.status = falcon.HTTP_201
        ok(resp, {"_links": {"self": {"href": f"./finding-archive-rules/{rule.id}"}}, "id": rule.id})


class ArchiveRule:
    """One archive rule."""

    auth = ADMIN
    body_models: dict[str, type[WireModel]] = {"put": ArchiveRuleCreate, "patch": ArchiveRulePatch}

    def __init__(self, findings: FindingsManager) -> None:
        self.rules = findings.rules

    def on_get(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """One archive rule."""
        ok(resp, render_rule(self.rules.require(id)))

    def on_put(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Replace an archive rule."""
        body = read_model(req, ArchiveRuleCreate)
        self.rules.update(id, _rule_fields(body, only_set=False))
        ok(resp, {})

    def on_patch(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Change some fields of an archive rule."""
        body = read_model(req, ArchiveRulePatch)
        self.rules.update(id, _rule_fields(body, only_set=True))
        ok(resp, {})

    def on_delete(self, req: falcon.Request, resp: falcon.Response, id: str) -> None:
        """Delete an archive rule (the findings it archived are ACTIVE again)."""
        self.rules.delete(id)
        ok(resp, {})


def _int(req: falcon.Request, name: str, default: int, top: int) -> int:
    raw = req.get_param(name)
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or int(raw) > top:
        raise FieldError(name, f"must be an integer from 0 to {top}", raw)
    return int(raw)


class Advice:
    """Policy advice of every (identity, service) pair in one pass (``trellis advise``)."""

    auth = ADMIN
    responses = {"429": {"description": "too many Parquet advice answers are running"}}
    #: This operation's media types and query parameters in the served Swagger document.
    operation_spec = {
        "get": {
            "produces": ["application/json", PARQUET],
            "parameters": [
                {"name": "limit", "in": "query", "type": "integer", "minimum": 0, "maximum": ADVICE_PAGE_MAX},
                {"name": "offset", "in": "query", "type": "integer", "minimum": 0},
                {"name": "order", "in": "query", "type": "string", "enum": ["identities", "services"]},
                {"name": "level", "in": "query", "type": "string", "enum": ["pairs", "services"]},
                {"name": "errorsOnly", "in": "query", "type": "boolean"},
                {"name": "format", "in": "query", "type": "string", "enum": ["json", "parquet"]},
            ],
        }
    }

    def __init__(self, analysis: AnalysisManager) -> None:
        self.analysis = analysis
        self.streams = Slots(ADVICE_STREAMS)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Advice rows, paged (``limit``, ``offset``; ``meta.pagination.more`` when more follow)."""
        order = req.get_param("order") or "identities"
        if order not in ("identities", "services"):
            raise FieldError("order", "must be identities or services", order)
        level = req.get_param("level") or "pairs"
        if level not in ("pairs", "services"):
            raise FieldError("level", "must be pairs or services", level)
        errors_only = (req.get_param("errorsOnly") or "false").lower() == "true"
        fmt = req.get_param("format") or ""
        if fmt not in ("", "json", "parquet"):
            raise FieldError("format", "must be json or parquet", fmt)
        if fmt == "parquet" or (not fmt and PARQUET in (req.accept or "")):
            if level != "pairs":
                raise FieldError("level", "Parquet gives a row per pair (level=pairs)", level)
            self._parquet(resp, order, errors_only)
            return
        limit = _int(req, "limit", ADVICE_PAGE_DEFAULT, ADVICE_PAGE_MAX)
        offset = _int(req, "offset", 0, 2**62)
        revision, view, graph = self.analysis._consistent()
        names = self.analysis._namer(view)
        fleet = self.analysis.managers.fleet
        rows: list[Any]
        if level == "services":
            rows = list(
                islice(
                    service_summaries(graph, online=fleet.is_online, names=names), offset, offset + limit + 1
                )
            )
        else:
            now = self.analysis.env.clock.now()

            def disabled(identity_id: str) -> bool:
                identity = view.get(Identity, identity_id)
                return identity is not None and identity.is_disabled_at(now)

            answers = advise(
                graph,
                online=fleet.is_online,
                names=names,
                disabled=disabled,
                order=order,
                errors_only=errors_only,
            )
            rows = list(islice(answers, offset, offset + limit + 1))
        more = len(rows) > limit
        ok(
            resp,
            [row.as_dict() for row in rows[:limit]],
            {"revision": revision, "pagination": {"limit": limit, "offset": offset, "more": more}},
        )

    def _parquet(self, resp: falcon.Response, order: str, errors_only: bool) -> None:
        """Every pair's row as one Parquet file, streamed a row group (about a million rows) at a
        time from the bulk path (docs/analysis.md §7): a consistent graph's fork, read as sent.
        At most :data:`ADVICE_STREAMS` at once (429 past them)."""
        if not self.streams.take():
            raise RateLimitedError("too many advice downloads are running; try again later")
        try:
            revision, view, graph = self.analysis._consistent()
            now = self.analysis.env.clock.now()

            def disabled(identity_id: str) -> bool:
                identity = view.get(Identity, identity_id)
                return identity is not None and identity.is_disabled_at(now)

            tables, jobs = advise_block_jobs(
                graph,
                online=self.analysis.managers.fleet.is_online,
                names=self.analysis._namer(view),
                disabled=disabled,
                order=order,
                errors_only=errors_only,
                local_sets=True,
            )
        except BaseException:
            self.streams.give()
            raise
        resp.content_type = PARQUET
        resp.set_header("Content-Disposition", 'attachment; filename="advice.parquet"')
        resp.set_header("X-Trellis-Revision", str(revision))
        resp.stream = ReleasingBody(advice_parquet(tables, jobs), self.streams.give)


class AccessTests:
    """Run access expectations (a test file's, as JSON) against the live policy."""

    auth = ADMIN
    body_models = {"post": AccessTestsRequest}

    def __init__(self, analysis: AnalysisManager) -> None:
        self.analysis = analysis

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Check every expectation; the report names failures and the policies none exercised."""
        body = read_model(req, AccessTestsRequest)
        expectations = parse_expectations(body.expectations)
        revision, view, graph = self.analysis._consistent()
        report = run_access_tests(
            graph,
            expectations,
            resolve=_resolver(view),
            names=self.analysis._namer(view),
            disabled=_disabled(self.analysis, view),
        )
        ok(resp, {"revision": revision, **report.as_dict()})


def _resolver(view: Any) -> Callable[[str, str], str | None]:
    from engine.analysis.manager import CLASSES

    def resolve(kind: str, value: str) -> str | None:
        cls = CLASSES.get(kind)
        if cls is None:
            return None
        if view.get(cls, value) is not None:
            return value
        found = view.find_unique(cls, "name", value) if "name" in cls.UNIQUE else None
        return found.id if found is not None else None

    return resolve


def _disabled(analysis: AnalysisManager, view: Any) -> Callable[[str], bool]:
    now = analysis.env.clock.now()

    def disabled(identity_id: str) -> bool:
        identity = view.get(Identity, identity_id)
        return identity is not None and identity.is_disabled_at(now)

    return disabled


#: Each controller's findings manager (one per analysis manager): the SQL ``findings`` view reads it.
_MANAGERS: weakref.WeakKeyDictionary[AnalysisManager, FindingsManager] = weakref.WeakKeyDictionary()


def findings_manager(analysis: AnalysisManager) -> FindingsManager | None:
    """The findings manager mounted for ``analysis``, if any."""
    return _MANAGERS.get(analysis)


def mount_findings(routes: Any, analysis: AnalysisManager, mount: Callable[[str, Any], None]) -> None:
    """Mount this module's resources with ``register``'s ``mount`` (``/analysis/v1`` + template)."""
    findings = _MANAGERS[analysis] = FindingsManager(analysis)
    mount("/findings", Findings(findings))
    mount("/findings/{id}", Finding(findings))
    mount("/finding-archive-rules", ArchiveRules(findings))
    mount("/finding-archive-rules/{id}", ArchiveRule(findings))
    mount("/advice", Advice(analysis))
    mount("/access-tests", AccessTests(analysis))
