"""``python -m bench cluster`` (bench/cluster.py) runs end to end, briefly, so that it cannot rot.

Tier S, one round, 1 s per scenario and per writer count: the three configurations (DuckDB, and
PostgreSQL with one and two processes), the lag between two stores and the round trip. No
timing is asserted: only the report's shape, that every figure is there and that nothing failed.
Skipped, with the reason, where PostgreSQL or wrk is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cluster, http
from bench.__main__ import main
from tests.postgres import find_bindir

pytestmark = pytest.mark.bench


@pytest.mark.timeout(900)
def test_cluster_bench_measures_every_configuration_the_writes_and_the_lag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if find_bindir() is None:
        pytest.skip("PostgreSQL is not installed (no initdb and postgres)")
    try:
        http.ensure_wrk()
    except http.WrkUnavailable as ex:
        pytest.skip(f"wrk is not installed and could not be: {ex}")
    out = tmp_path / "cluster-S.json"
    argv = ["cluster", "--seconds", "1", "--rounds", "1", "--writers", "1,2", "--write-seconds", "1"]
    argv += ["--lag-seconds", "1", "--connections", "4", "--session-rate", "100", "--out", str(out)]

    assert main(argv) == 0

    report = json.loads(out.read_text())
    configs = [cluster.config_name(d, p) for d, p in cluster.CONFIGS]
    assert sorted(run["config"] for run in report["runs"]) == sorted(configs)
    for run in report["runs"]:
        assert [row["scenario"] for row in run["scenarios"]] == list(cluster.SCENARIOS), run
        for row in run["scenarios"]:
            assert row["requests_per_second"] > 0, row
            assert row["errors"] == 0, row
            assert 0 < row["p50_ms"] <= row["p99_ms"], row
        dial = next(row for row in run["scenarios"] if row["scenario"] == "create session")
        assert dial["durable_per_second"] > 0, run
        assert [row["writers"] for row in run["writes"]] == [1, 2]
        for row in run["writes"]:
            assert row["writes_per_second"] > 0, row
            assert row["errors"] == 0, row
            assert row["failures"] == [], row
        workers = [role for role in run["memory"] if role.startswith("worker")]
        assert len(workers) == (2 if run["config"] == "postgres x2" else 1), run["memory"]
    assert [row["mode"] for row in report["lag"]] == ["idle", "busy"]
    for row in report["lag"]:
        assert row["samples"] > 0, row
        assert row["not_seen"] == 0, row
        assert row["errors"] == 0, row
        assert 0 <= row["p50_ms"] <= row["p99_ms"] <= row["max_ms"], row
    assert report["lag"][1]["writes_per_second"] > 0
    assert report["bare"][0]["requests_per_second"] > 0
    assert 0 < report["hop"]["p50_us"] <= report["hop"]["p99_us"]
    printed = capsys.readouterr().out
    assert "| measure | duckdb x1 | postgres x1 | postgres x2 | x2 / x1 |" in printed
    assert "| durable Dial sessions/s |" in printed
    assert "change-log lag between two processes, busy" in printed
    assert "targets (issue 25):" in printed
    assert str(out) in printed
