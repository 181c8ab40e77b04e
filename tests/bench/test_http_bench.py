"""``python -m bench http`` (bench/http.py) runs end to end at tier S, briefly, so that it cannot rot.

A real seeded home, the bare app under both workers, ``trellis serve`` and wrk for 1 s per
scenario. No timing is asserted: only that every scenario was answered without an error, that
the Dial scenario created sessions, and that the table and the JSON say so. Skipped, with the
reason, where wrk is not installed and cannot be (it comes from Debian's packages).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import http
from bench.__main__ import main

pytestmark = [pytest.mark.bench, pytest.mark.seconds(31)]

#: Every row of the report: the two bare apps, then each scenario in its order.
SCENARIOS = ["bare gthread", "bare trellis", *http.SCENARIO_NAMES]


@pytest.mark.timeout(900)  # wrk may have to be installed first (apt-get)
def test_http_bench_runs_every_scenario_at_tier_s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        http.ensure_wrk()
    except http.WrkUnavailable as ex:
        pytest.skip(f"wrk is not installed and could not be: {ex}")
    out = tmp_path / "results" / "http-S.json"

    argv = ["http", "--tier", "S", "--seconds", "1", "--connections", "4"]
    assert main([*argv, "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert [row["scenario"] for row in report["rows"]] == SCENARIOS
    for row in report["rows"]:
        assert row["requests"] > 0, row
        assert row["errors"] == 0, row
        assert row["socket_errors"] == {}, row
        assert set(row["statuses"]) <= {"200", "201"}, row
        assert 0 < row["p50_ms"] <= row["p99_ms"], row
        assert row["ratio_to_bare_gthread"] > 0
    rows = {row["scenario"]: row for row in report["rows"]}
    session = rows["create session"]
    assert session["durable_creations"] > 0
    assert rows["repeat session"]["durable_creations"] is None  # nothing to write: not counted
    assert report["notes"] == []  # every answer of the Dial scenario created a session
    trellis = report["servers"]["trellis"]
    assert trellis["start_seconds"] > 0
    assert trellis["rss_mb_at_start"] > 0
    memory = trellis["memory_after"]
    assert {"master", "worker", "writer"} <= set(memory)
    assert all(0 < m["pss_mb"] <= m["rss_mb"] for m in memory.values()), memory
    assert trellis["device_services"] == http.BENCH_SERVICES
    assert report["machine"]["cores"] >= 1
    assert report["machine"]["wrk"].startswith("wrk")
    printed = capsys.readouterr().out
    assert "| scenario | req/s | p50 ms | p99 ms | errors | vs bare gthread |" in printed
    assert f"| create session | {session['requests_per_second']:,.0f} |" in printed
    assert str(out) in printed


def test_without_wrk_or_apt_get_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http.shutil, "which", lambda name: None)

    with pytest.raises(http.WrkUnavailable, match="apt-get install wrk"):
        http.ensure_wrk(cache=tmp_path / "cache")
