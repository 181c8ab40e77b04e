"""``python -m bench peer`` (bench/peer.py) runs end to end, briefly, so that it cannot rot.

OpenZiti's own ``ziti edge quickstart`` (the binary :mod:`tests.e2e.ziti_cli` builds once per
machine) and ``trellis serve`` with its router, both seeded with 40 identities through REST, then
every measure at its smallest (``--quick``): wrk runs of 1 s, logins from 2 clients, two policy
changes, five dials and 1 MB through each router's ``ziti tunnel`` pair, one restart each. No
timing is asserted: only that every row has both sides' figures, without errors, and that the
table and the JSON say so. Skipped with ``TRELLIS_SKIP_ZITI_E2E=1``, as the other ziti tests.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.peer import ROW_NAMES, SIDES
from tests.e2e.ziti_cli import LOCK_TIMEOUT, SKIP_ENV

pytestmark = [
    pytest.mark.seconds(60),
    pytest.mark.bench,
    pytest.mark.e2e,
    pytest.mark.slow,
    # the ziti binary may be built first (bounded by its build lock's timeout)
    pytest.mark.timeout(LOCK_TIMEOUT + 600),
    pytest.mark.skipif(
        os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes"),
        reason=f"{SKIP_ENV} is set: OpenZiti ziti e2e tests skipped on purpose",
    ),
]


def test_peer_bench_measures_every_row_on_both_sides(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "peer.json"

    assert main(["peer", "--quick", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert [row["name"] for row in report["rows"]] == list(ROW_NAMES)
    assert report["topology"]["identities"] == 40
    for row in report["rows"]:
        for side in SIDES:
            figure = row[side]
            assert figure["errors"] == 0, (row["name"], side, figure)
            assert figure["value"] > 0, (row["name"], side, figure)
            assert figure["count"] > 0, (row["name"], side, figure)
            if row["unit"] in ("req/s", "sessions/s", "logins/s", "ms"):
                assert 0 < figure["p50_ms"] <= figure["p99_ms"], (row["name"], side, figure)
        assert row["ratio"] == pytest.approx(row["trellis"]["value"] / row["openziti"]["value"], rel=1e-2)
        assert row["verdict"] in ("ahead", "level", "behind")
    memory = {row["name"]: row for row in report["rows"]}["resident memory after the load"]
    assert len(memory["openziti"]["runs"][0]["processes"]) >= 1
    assert len(memory["trellis"]["runs"][0]["processes"]) == 4  # serve, its worker, the writer, the router

    printed = capsys.readouterr().out
    assert (
        "| measure | OpenZiti v1.6.0 | Trellis | Trellis / OpenZiti | Trellis | per CPU-second |" in printed
    )
    for name in ROW_NAMES:
        assert f"| {name} | " in printed
    assert str(out) in printed


def test_sizes_must_be_positive(tmp_path: Path) -> None:
    out = tmp_path / "peer.json"
    with pytest.raises(SystemExit, match="--identities"):
        main(["peer", "--identities", "0", "--out", str(out)])
    with pytest.raises(SystemExit, match="--seed-concurrency"):
        main(["peer", "--seed-concurrency", "0", "--out", str(out)])
    assert not out.exists()
