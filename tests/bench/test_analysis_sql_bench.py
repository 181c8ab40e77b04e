"""``python -m bench analysis-sql`` (bench/analysis_sql.py) runs end to end at tier S, briefly, so
that it cannot rot. No timing or size is asserted: only that each figure was measured."""

from __future__ import annotations

import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.bench, pytest.mark.seconds(10)]


def test_analysis_sql_bench_measures_who_can_and_what_an_identity_can_dial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["analysis-sql", "--tier", "S", "--runs", "3", "--no-whole"]) == 0

    printed = capsys.readouterr().out
    for line in (
        "first query at a revision",
        "who can Dial X (1,000 rows at most): p50",
        "what can identity Y Dial (1,000 rows at most): p50",
        "access_paths of one identity",
        "export access_pairs of one service",
    ):
        assert line in printed


def test_analysis_sql_bench_measures_the_resident_size_step_by_step(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["analysis-sql", "--tier", "S", "--memory"]) == 0

    printed = capsys.readouterr().out
    for row in (
        "| after the load |",
        "| 200 explanations |",
        "| a read of the findings |",
        "| 5 what-ifs |",
        "| 2 SQL queries (who can Dial X, a count) |",
        "| what can identity Y Dial |",
    ):
        assert row in printed
