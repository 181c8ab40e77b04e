"""``trellis advise --format parquet`` offline on a database snapshot, and ``GET /advice`` as a
streamed Parquet body (docs/analysis.md §7): the rows read back are the JSON rows."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from controller.cli import main
from tests.api.test_analysis_access_tests import snapshot  # noqa: F401  (the fixture)
from tests.conftest import Api
from tests.unit.engine.test_advise_parquet import read_rows

pytestmark = pytest.mark.durable  # a snapshot of the DuckDB file is what the command reads

A = "/analysis/v1"


def _json_rows(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    assert main(["advise", *args, "--format", "json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_advise_offline_as_parquet(
    snapshot: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "advice.parquet"
    assert main(["advise", "--snapshot", str(snapshot), "--format", "parquet", "--out", str(out)]) == 0
    rows = read_rows(out.read_bytes())
    assert rows == _json_rows(capsys, "--snapshot", str(snapshot))
    mine = {(r["identityName"], r["serviceName"]): r for r in rows}  # (and the admin's row)
    assert (mine["alice", "payroll"]["status"], mine["bob", ""]["status"]) == ("OKAY", "ERROR")
    assert mine["alice", "payroll"]["dialPolicies"] == ["staff-payroll"]
    assert mine["alice", "payroll"]["onlineCommonRouterCount"] is None
    assert mine["bob", ""]["serviceId"] is None

    errors = tmp_path / "errors.parquet"
    argv = ["advise", "--snapshot", str(snapshot), "--format", "parquet", "--out", str(errors)]
    assert main([*argv, "--errors-only", "--order", "services"]) == 0
    assert read_rows(errors.read_bytes()) == _json_rows(
        capsys, "--snapshot", str(snapshot), "--errors-only", "--order", "services"
    )


def test_advise_out_writes_the_file_stdout_would_get(
    snapshot: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for fmt in ("csv", "json", "text"):
        assert main(["advise", "--snapshot", str(snapshot), "--format", fmt]) == 0
        printed = capsys.readouterr().out
        out = tmp_path / f"advice.{fmt}"
        assert main(["advise", "--snapshot", str(snapshot), "--format", fmt, "--out", str(out)]) == 0
        assert capsys.readouterr().out == ""
        assert out.read_bytes().decode() == printed


def test_advise_parquet_needs_a_file_and_pairs(
    snapshot: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["advise", "--snapshot", str(snapshot), "--format", "parquet"]) == 2
    assert "--out" in capsys.readouterr().err
    argv = ["advise", "--snapshot", str(snapshot), "--format", "parquet", "--out", str(tmp_path / "x")]
    assert main([*argv, "--level", "services"]) == 2
    assert "--level pairs" in capsys.readouterr().err


def test_advice_streams_as_parquet(api: Api, snapshot: Path) -> None:  # noqa: F811
    paged = api.request("GET", "/advice", base=A, params={"limit": 100}).json["data"]
    for params, headers in (
        ({"format": "parquet"}, None),
        ({}, {"Accept": "application/vnd.apache.parquet"}),
    ):
        result = api.client.simulate_get(A + "/advice", params=params, headers=api.headers(extra=headers))
        assert result.status_code == 200, result.text
        assert result.headers["content-type"] == "application/vnd.apache.parquet"
        assert read_rows(result.content) == paged
        assert pq.ParquetFile(io.BytesIO(result.content)).metadata.num_rows == len(paged)
    refused = api.request("GET", "/advice", base=A, params={"format": "parquet", "level": "services"})
    assert refused.status_code == 400


def test_parquet_advice_answers_past_the_cap_are_429_until_one_ends(api: Api) -> None:
    """Each Parquet advice answer holds a slot while it streams (at tier L, minutes of two
    threads): past ``ADVICE_STREAMS`` at once the next is 429; one closed frees its slot."""
    import falcon.testing

    from api.analysis_findings import ADVICE_STREAMS, Advice
    from api.bodies import ReleasingBody
    from engine.analysis import analysis_for
    from engine.errors import RateLimitedError

    resource = Advice(analysis_for(api.ctrl.managers))

    def start() -> ReleasingBody:
        resp = falcon.Response()
        resource.on_get(falcon.testing.create_req(query_string="format=parquet"), resp)
        assert isinstance(resp.stream, ReleasingBody)
        return resp.stream

    bodies = [start() for _ in range(ADVICE_STREAMS)]
    with pytest.raises(RateLimitedError):
        resource.on_get(falcon.testing.create_req(query_string="format=parquet"), falcon.Response())
    read_rows(b"".join(bodies.pop()))  # read to its end: the slot is given back
    bodies.pop().close()  # closed early (a client gone): so is this one
    for body in [start() for _ in range(ADVICE_STREAMS)]:
        body.close()
