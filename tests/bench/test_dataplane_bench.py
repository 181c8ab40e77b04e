"""``python -m bench dataplane`` (bench/dataplane.py) runs end to end, briefly, so that it cannot rot.

A real ``trellis init`` + ``trellis serve`` with its embedded router; the binders, the direct TLS
server and each dialer in processes of their own (and a second router once routers link), at a
tiny size: bulk runs of 0.3 s, 5 dials, 10 connections held each way, and the py-spy profile.
No timing is asserted: only that every part ran without an error and that the table and the
JSON say so, completely."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.dataplane import PROFILE, TWO_ROUTERS_MISSING, WARM_UP_DIALS, summarise_profile

pytestmark = [pytest.mark.bench, pytest.mark.seconds(50)]

DIALS = 5
CONNECTIONS = 10


def test_dataplane_bench_measures_every_path_without_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "dataplane.json"

    argv = ["dataplane", "--seconds", "0.3", "--dials", str(DIALS), "--connections", str(CONNECTIONS)]
    assert main([*argv, "--repeat", "1", "--concurrency", "4", "--profile", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    paths = [("direct TLS", "plain"), ("direct TLS", "e2e"), ("router", "plain"), ("router", "e2e")]
    if report["two_routers"] == "measured":  # routers link to one another (router/links.py)
        paths += [("two routers", "plain"), ("two routers", "e2e")]
    else:
        assert report["two_routers"] == TWO_ROUTERS_MISSING
    assert [(row["path"], row["mode"]) for row in report["bulk"]] == paths
    for row in report["bulk"]:
        assert row["errors"] == {}, row
        assert row["megabytes"] > 0, row
        assert row["mb_per_s"] > 0, row
        assert row["tls"].startswith("TLS"), row
        assert row["runs_mb_per_s"] == [row["mb_per_s"]], row
        if row["path"] != "direct TLS":
            assert row["router_cpu_percent"] is not None, row
            assert row["of_direct_percent"] is not None, row
        assert (row["second_router_cpu_percent"] is not None) == (row["path"] == "two routers"), row
    dial = report["dial"]
    assert dial["dials"] == DIALS
    assert dial["errors"] == {}
    assert 0 < dial["p50_ms"] <= dial["p99_ms"] <= dial["max_ms"]
    assert [h["shape"] for h in report["held"]] == ["one channel", "a channel each"]
    for held in report["held"]:
        assert held["errors"] == {}, held
        assert held["opened"] == held["echoed"] == held["still_open"] == CONNECTIONS, held
        assert held["router_rss_held_mib"] > 0, held
    assert [h["channels"] for h in report["held"]] == [1, CONNECTIONS]
    # The binder accepted every dial: the held connections, the timed dials and their warm-up,
    # one per bulk run through the router and one for the profiled run.
    assert report["binder"]["errors"] == {}
    assert report["binder"]["accepted"] == 2 * CONNECTIONS + DIALS + WARM_UP_DIALS + 2 + 1
    profile = report["profile"]
    assert profile is not None
    if "error" not in profile:  # py-spy may be refused ptrace somewhere: then it says why
        assert profile["samples"] > 0
        assert profile["categories_percent_of_busy"]
        assert Path(profile["raw"]) == out.parent / PROFILE

    printed = capsys.readouterr().out
    assert "| path | mode | MB/s echoed | of direct |" in printed
    for row in report["bulk"]:
        assert f"| {row['path']} | {row['mode']} | {row['mb_per_s']:.1f} |" in printed
    if report["two_routers"] != "measured":
        assert report["two_routers"] in printed
    assert "| through the router, binder answering |" in printed
    assert "| one channel |" in printed
    assert "| a channel each |" in printed
    assert "Router profile" in printed
    assert str(out) in printed


def test_the_profile_is_summarised_by_where_the_router_spends_its_time() -> None:
    raw = "\n".join(
        [
            "main (controller/cli.py:1);run_forever (asyncio/base_events.py:607);EpollSelector.select (selectors.py:468) 50",
            "main (controller/cli.py:1);_read_ready (asyncio/selector_events.py:952);SSLObject.read (ssl.py:921) 30",
            "main (controller/cli.py:1);data_received (channel/connection.py:106);Decoder.feed (channel/frames.py:187) 15",
            "main (controller/cli.py:1);_on_data (router/edge.py:443) 5",
        ]
    )

    summary = summarise_profile(raw)

    assert summary["samples"] == 100
    assert summary["busy_percent"] == 50.0
    categories = summary["categories_percent_of_busy"]
    assert categories["TLS: decrypt/encrypt (ssl.SSLObject read/write)"] == 60.0
    assert categories["channel v2 frames: decode/encode"] == 30.0
    assert categories["router: edge handlers"] == 10.0
    assert "EpollSelector.select (selectors.py:468)" not in summary["top_self_percent_of_busy"]


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--seconds", "0"], "--seconds"),
        (["--window", "8"], "--window"),
        (["--connections", "0"], "--connections"),
        (["--concurrency", "0"], "--concurrency"),
        (["--repeat", "0"], "--repeat"),
        (["--shapes", "many"], "--shapes"),
    ],
)
def test_bad_sizes_are_refused_before_anything_runs(tmp_path: Path, args: list[str], complaint: str) -> None:
    out = tmp_path / "dataplane.json"
    with pytest.raises(SystemExit, match=complaint):
        main(["dataplane", *args, "--out", str(out)])
    assert not out.exists()
