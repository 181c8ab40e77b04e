"""``python -m bench advise`` (bench/advise.py) runs end to end at tier S in each format, Parquet
included, so that it cannot rot. No timing is asserted: only that each format was measured."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.__main__ import main

pytestmark = [pytest.mark.bench, pytest.mark.seconds(15)]


def test_advise_bench_measures_each_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    formats = ["--format", "csv", "--format", "parquet", "--online", "--per-pair-seconds", "0.2"]
    assert main(["advise", "--tier", "S", *formats]) == 0
    printed = capsys.readouterr().out
    assert "bulk csv (identities):" in printed
    assert "bulk parquet (lz4) (identities):" in printed
    assert "load average" in printed
    assert "per pair:" in printed

    out = tmp_path / "advice.parquet"
    assert (
        main(["advise", "--tier", "S", "--format", "parquet", "--out", str(out), "--per-pair-seconds", "0"])
        == 0
    )
    assert pq.ParquetFile(out).metadata.num_rows > 0
