"""``python -m bench cluster`` (bench/cluster.py) runs end to end, briefly, so that it cannot rot.

Tier S, one round, 1 s per scenario and per writer count, on the configuration with the most
moving parts (PostgreSQL with two processes: the others differ only in the store and
``TRELLIS_WORKERS``, and ``bench http`` serves DuckDB in its own smoke run), the lag between two
stores and the round trip. No timing is asserted: only the report's shape, that every figure is
there and that nothing failed; and that ``--configs`` refuses what cannot be measured.
Skipped, with the reason, where PostgreSQL or wrk is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cluster, http
from bench.__main__ import main
from tests.postgres import find_bindir

pytestmark = [pytest.mark.bench, pytest.mark.seconds(40)]


@pytest.mark.timeout(900)
def test_cluster_bench_measures_the_scenarios_the_writes_and_the_lag(
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
    argv += ["--configs", "postgres:2"]

    assert main(argv) == 0

    report = json.loads(out.read_text())
    assert [run["config"] for run in report["runs"]] == ["postgres x2"]
    assert report["configs"] == ["postgres x2"]
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
        assert len(workers) == 2, run["memory"]
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
    assert "| measure | postgres x2 | x2 / x1 |" in printed
    assert "| durable Dial sessions/s |" in printed
    assert "change-log lag between two processes, busy" in printed
    assert "targets (issue 25):" in printed
    assert str(out) in printed


@pytest.mark.parametrize(
    ("text", "configs"),
    [
        ("duckdb:1,postgres:1,postgres:2", [("duckdb", 1), ("postgres", 1), ("postgres", 2)]),
        ("postgres, postgres:4,postgres:1", [("postgres", 1), ("postgres", 4)]),
    ],
)
def test_configs_are_database_and_processes(text: str, configs: list[tuple[str, int]]) -> None:
    assert cluster.parse_configs(text) == configs


@pytest.mark.parametrize("text", ["", "duckdb:2", "sqlite:1", "postgres:0", "postgres:two"])
def test_configs_that_cannot_be_measured_are_refused(text: str) -> None:
    with pytest.raises(SystemExit, match="--configs"):
        cluster.parse_configs(text)
