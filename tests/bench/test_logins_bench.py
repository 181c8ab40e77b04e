"""``python -m bench logins`` (bench/logins.py) runs end to end, briefly, so that it cannot rot.

A real ``trellis init`` + server; password and certificate logins, legacy and through OIDC's
whole authorization-code flow, and authenticated requests with a ``zt-session`` token and with an
OIDC bearer token, from 2 clients for about 1 s each. No timing is asserted: only that every row
was answered, nothing was refused, and the table and the JSON say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.logins import METHODS

pytestmark = pytest.mark.bench


def test_logins_bench_logs_in_every_way_and_makes_requests_with_each_credential(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "logins.json"

    assert main(["logins", "--clients", "2", "--seconds", "1", "--out", str(out)]) == 0

    report = json.loads(out.read_text())
    assert [(row["method"], row["clients"]) for row in report["rows"]] == [(m, 2) for m in METHODS]
    for row in report["rows"]:
        assert row["errors"] == {}, row
        assert row["logins"] > 0
        assert 0 < row["p50_ms"] <= row["p99_ms"]
    assert report["hash_verify_ms"]
    printed = capsys.readouterr().out
    assert "| method | clients | logins | logins/s | p50 ms | p99 ms |" in printed
    for row in report["rows"]:
        assert f"| {row['method']} | 2 | {row['logins']} |" in printed
    assert str(out) in printed


def test_methods_must_be_known(tmp_path: Path) -> None:
    out = tmp_path / "logins.json"
    with pytest.raises(SystemExit, match="--methods takes"):
        main(["logins", "--methods", "totp", "--out", str(out)])
    with pytest.raises(SystemExit, match="--clients"):
        main(["logins", "--clients", "0", "--out", str(out)])
    assert not out.exists()
