"""``/database``: data integrity runs and snapshots (admin only), as OpenZiti's ``DatabaseRouter``.

- ``POST /database/check-data-integrity`` and ``POST /database/fix-data-integrity`` start a run in
  the background: 202 with an empty ``data``; 429 ``RATE_LIMITED`` while one runs.
- ``GET /database/data-integrity-results``: the running or last run, ``meta.pagination`` of
  ``limit -1, offset 0, totalCount <results>`` and no filterable fields, as OpenZiti answers.
- ``POST /database/snapshot``: 200 with ``data: {"path": <the snapshot file, absolute>}``; 429
  ``RATE_LIMITED`` within a minute of the last snapshot. OpenZiti answers its ``empty`` envelope
  (``data: {}``, an object of no declared properties, which its clients read as any object):
  Trellis names the file it wrote there, what ``trellis restore`` takes.
"""

from __future__ import annotations

import os
from typing import Any

import falcon

from api.http import empty, ok
from api.routing import Routes
from api.wire import ts
from engine.managers.database import DatabaseManager
from engine.managers.integrity import IntegrityManager, IntegrityReport


def render_report(report: IntegrityReport) -> dict[str, Any]:
    """``dataIntegrityCheckDetails`` (absent times and error are null, as OpenZiti sends them)."""
    return {
        "endTime": ts(report.end_time),
        "error": report.error,
        "fixingErrors": report.fixing_errors,
        "inProgress": report.in_progress,
        "results": [{"description": r.description, "fixed": r.fixed} for r in report.results],
        "startTime": ts(report.start_time),
        "tooManyErrors": report.too_many_errors,
    }


class DataIntegrityRun:
    """Starts a check or, with ``fix``, a fix."""

    def __init__(self, integrity: IntegrityManager, *, fix: bool) -> None:
        self.integrity = integrity
        self.fix = fix

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        self.integrity.start(fix=self.fix)
        empty(resp)
        resp.status = falcon.HTTP_202


class DataIntegrityResults:
    def __init__(self, integrity: IntegrityManager) -> None:
        self.integrity = integrity

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        report = self.integrity.results()
        pagination = {"limit": -1, "offset": 0, "totalCount": len(report.results)}
        ok(resp, render_report(report), {"pagination": pagination, "filterableFields": []})


class DatabaseSnapshot:
    def __init__(self, database: DatabaseManager) -> None:
        self.database = database

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        path = self.database.snapshot()
        ok(resp, {"path": os.path.abspath(path)})


def register(routes: Routes) -> None:
    managers = routes.managers
    routes.management("/database/check-data-integrity", DataIntegrityRun(managers.integrity, fix=False))
    routes.management("/database/fix-data-integrity", DataIntegrityRun(managers.integrity, fix=True))
    routes.management("/database/data-integrity-results", DataIntegrityResults(managers.integrity))
    routes.management("/database/snapshot", DatabaseSnapshot(managers.database))
