"""PROCESS and PROCESS_MULTI checks (``model/posture_check_model_process*.go``).

PROCESS reads the report sent for that check (by check id): the process must be running, carry
the check's signer fingerprint among its signers (when the check names one) and have one of the
check's hashes (when it lists any); comparisons ignore case.

PROCESS_MULTI reads the latest report per process *path* and applies its own ``semantic``: AllOf
needs every listed process to pass, AnyOf at least one. A listed process passes when its report says
it is running, its hash is one of the listed hashes (if any) and one of its signers is listed (if
any).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine.entities.posture import PostureCheck
from engine.managers.posture._core import NoTimeout, PostureData, ProcessData


class ProcessEvaluator(NoTimeout):
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        report = data.processes.get(check.id)
        if report is None or report.timed_out or not report.is_running:
            return False
        wanted: dict[str, Any] = check.details.get("process") or {}
        fingerprint = (wanted.get("signerFingerprint") or "").lower()
        if fingerprint and fingerprint not in (s.lower() for s in report.signer_fingerprints):
            return False
        hashes = [h.lower() for h in wanted.get("hashes") or []]
        return not hashes or report.binary_hash.lower() in hashes

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        wanted: dict[str, Any] = dict(check.details.get("process") or {})
        report = data.processes.get(check.id)
        return {"actualValue": actual(report), "expectedValue": wanted}


def actual(report: ProcessData | None, *, with_path: bool = False) -> dict[str, Any]:
    """``postureCheckFailureProcessActual`` of a report (an empty one when nothing was reported)."""
    out: dict[str, Any] = {
        "hash": report.binary_hash if report else "",
        "isRunning": report.is_running if report else False,
        "signerFingerprints": list(report.signer_fingerprints) if report else [],
    }
    if with_path:
        out["path"] = report.path if report else ""
    return out


def meets(report: ProcessData, wanted: dict[str, Any]) -> bool:
    """Whether a process report satisfies one process of a PROCESS_MULTI check."""
    if not report.is_running or report.timed_out:
        return False
    hashes = [h.lower() for h in wanted.get("hashes") or []]
    if hashes and report.binary_hash.lower() not in hashes:
        return False
    signers = {s.lower() for s in wanted.get("signerFingerprints") or []}
    return not signers or any(s.lower() in signers for s in report.signer_fingerprints)


class ProcessMultiEvaluator(NoTimeout):
    def passes(self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime) -> bool:
        processes: list[dict[str, Any]] = check.details.get("processes") or []
        semantic = check.details.get("semantic")
        if semantic == "AllOf":
            for wanted in processes:
                report = data.process_paths.get(wanted.get("path") or "")
                if not wanted.get("path") or report is None or not meets(report, wanted):
                    return False
            return True
        if semantic == "AnyOf":
            for wanted in processes:
                report = data.process_paths.get(wanted.get("path") or "")
                if wanted.get("path") and report is not None and meets(report, wanted):
                    return True
            return False
        return False

    def failure(
        self, check: PostureCheck, api_session_id: str, data: PostureData, now: datetime
    ) -> dict[str, Any]:
        processes: list[dict[str, Any]] = check.details.get("processes") or []
        reported = [
            actual(data.process_paths[p["path"]], with_path=True)
            for p in processes
            if p.get("path") in data.process_paths
        ]
        return {
            "actualValue": reported,
            "expectedValue": [dict(p) for p in processes],
            "semantic": check.details.get("semantic"),
        }
