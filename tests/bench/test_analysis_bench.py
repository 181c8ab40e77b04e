"""``python -m bench analysis`` (bench/analysis.py) runs end to end at tier S, briefly, so that it
cannot rot. No timing is asserted: only that each operation was measured on each path."""

from __future__ import annotations

import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.bench, pytest.mark.seconds(15)]


def test_analysis_bench_measures_explain_what_if_and_guarded_writes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["analysis", "--tier", "S", "--runs", "5", "--what-if-runs", "3"]) == 0

    printed = capsys.readouterr().out
    assert "| operation | path | p50 ms | p99 ms |" in printed
    for row in (
        "| explain (Dial) | in-process |",
        "| explain (Dial) | wsgi |",
        "| what-if, one policy edit | wsgi |",
        "| service policy write, no guardrail | in-process |",
        "| service policy write, 5 guardrails, untouched | in-process |",
        "| service policy write, 6 guardrails, one touched | in-process |",
        "| service policy write, the guardrail check alone, 5 untouched | in-process |",
    ):
        assert row in printed
