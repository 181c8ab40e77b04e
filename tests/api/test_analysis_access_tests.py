"""``trellis test-access`` and ``trellis advise`` offline, on a database snapshot
(docs/analysis.md §7, §8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli import main
from controller.settings import Settings
from tests.conftest import Api

pytestmark = pytest.mark.durable  # a snapshot of the DuckDB file is what the commands read


@pytest.fixture
def snapshot(api: Api, settings: Settings) -> Path:
    alice = api.create(
        "/identities", {"name": "alice", "type": "User", "isAdmin": False, "roleAttributes": ["staff"]}
    )
    api.create("/identities", {"name": "bob", "type": "User", "isAdmin": False})
    api.create("/services", {"name": "payroll", "encryptionRequired": True, "roleAttributes": ["payroll"]})
    api.create("/edge-routers", {"name": "r1", "roleAttributes": ["edge"]})
    api.create(
        "/service-policies",
        {
            "name": "staff-payroll",
            "type": "Dial",
            "semantic": "AnyOf",
            "identityRoles": ["#staff"],
            "serviceRoles": ["#payroll"],
        },
    )
    api.create(
        "/edge-router-policies",
        {
            "name": "alice-edge",
            "semantic": "AnyOf",
            "identityRoles": ["@" + alice],
            "edgeRouterRoles": ["#edge"],
        },
    )
    api.create(
        "/service-edge-router-policies",
        {
            "name": "payroll-edge",
            "semantic": "AnyOf",
            "serviceRoles": ["#payroll"],
            "edgeRouterRoles": ["#edge"],
        },
    )
    assert api.post("/database/snapshot").status_code == 200
    [path] = [
        p
        for p in settings.db_path.parent.glob(settings.db_path.name + "-*")
        if not p.name.endswith(".partial")
    ]
    return path


def test_test_access_passes_and_reports_coverage(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = tmp_path / "access.yaml"
    tests.write_text(
        "expectations:\n"
        "  - can_dial: {identity: alice, service: payroll}\n"
        "  - cannot_dial: {identity: bob, service: payroll}\n"
        "  - reaches_router: {identity: alice, router: [r1]}\n"
    )
    assert main(["test-access", "--snapshot", str(snapshot), str(tests)]) == 0
    out = capsys.readouterr().out
    assert "3 passed, 0 failed of 3 expectations" in out
    assert "coverage: 3/3 policies exercised" in out


def test_test_access_exits_1_with_a_readable_report(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = tmp_path / "access.yaml"
    tests.write_text(
        "- can_dial: {identity: bob, service: payroll}\n"
        "- expected_access: {identity: alice, dial: [], bind: []}\n"
    )
    assert main(["test-access", "--snapshot", str(snapshot), str(tests)]) == 1
    out = capsys.readouterr().out
    assert "FAIL #1 can_dial bob -> payroll: no Dial service policy grants it" in out
    assert "FAIL #2 expected_access alice: may also Dial payroll" in out
    assert "not exercised: alice-edge (edge-router-policy), payroll-edge (service-edge-router-policy)" in out


def test_test_access_refuses_a_bad_file(
    snapshot: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tests = tmp_path / "access.yaml"
    tests.write_text("- can_fly: {identity: bob}\n")
    assert main(["test-access", "--snapshot", str(snapshot), str(tests)]) == 2
    assert "expectations[0]" in capsys.readouterr().err


def test_advise_offline_as_text_json_and_csv(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["advise", "--snapshot", str(snapshot)]) == 0
    text = capsys.readouterr().out
    assert "OKAY : alice (1) -> payroll (1) Common Routers: (?/1) Dial: Y Bind: N" in text
    assert "dial policies: staff-payroll" in text
    assert "ERROR: bob \n  - Identity does not have access to any services." in text

    assert main(["advise", "--snapshot", str(snapshot), "--format", "json", "--order", "services"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["identityName"], r["serviceName"], r["status"]) for r in rows] == [
        ("alice", "payroll", "OKAY")
    ]

    assert main(["advise", "--snapshot", str(snapshot), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("status,identityName,identityId,serviceName")
    assert any(line.startswith("OKAY,alice,") for line in lines)

    assert main(["advise", "--snapshot", str(snapshot), "--level", "services", "--format", "json"]) == 0
    [summary] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (summary["serviceName"], summary["dialIdentities"], summary["ok"]) == ("payroll", 1, 1)
