"""``python -m bench writes`` (bench/writes.py) runs end to end, briefly, so that it cannot rot.

A real ``trellis init`` + server (and the use cases in process, ``--path store``), 1 and 2
writers for about 1 s each on each path. No timing is asserted:
only that every write of the cycle was acknowledged, none was refused, and the table and the
JSON say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.writes import OPERATIONS

pytestmark = [pytest.mark.bench, pytest.mark.seconds(21)]


def test_writes_bench_runs_every_write_of_the_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "writes.json"

    assert main(["writes", "--writers", "1,2", "--seconds", "1", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert [(row["path"], row["writers"]) for row in report["rows"]] == [
        ("store", 1),
        ("store", 2),
        ("http", 1),
        ("http", 2),
    ]
    for row in report["rows"]:
        assert row["errors"] == {}, row
        assert row["failures"] == [], row
        assert set(row["per_operation"]) == set(OPERATIONS)
        assert all(n > 0 for n in row["per_operation"].values()), row
        assert row["acknowledged"] == sum(row["per_operation"].values())
        assert row["writes_per_second"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"]
        assert row["server_cpu_percent"] > 0  # read from /proc (Linux)
    printed = capsys.readouterr().out
    assert (
        "| path | writers | acknowledged writes | writes/s | p50 ms | p99 ms | errors | server CPU | client CPU |"
        in printed
    )
    for row in report["rows"]:
        assert f"| {row['path']} | {row['writers']} | {row['acknowledged']} |" in printed
    assert str(out) in printed


def test_writer_counts_must_be_whole_and_positive(tmp_path: Path) -> None:
    out = tmp_path / "writes.json"
    with pytest.raises(SystemExit, match="each 1 or more"):
        main(["writes", "--writers", "0", "--out", str(out)])
    with pytest.raises(SystemExit, match="whole numbers"):
        main(["writes", "--writers", "one", "--out", str(out)])
    with pytest.raises(SystemExit, match="--path takes"):
        main(["writes", "--path", "disk", "--out", str(out)])
    assert not out.exists()
