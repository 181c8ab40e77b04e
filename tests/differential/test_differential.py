"""Trellis beside OpenZiti v1.6.0: the same requests, the same answers, or a listed reason.

Both controllers start fresh: OpenZiti's ``ziti edge quickstart`` (controller and router) and
``trellis init`` + ``trellis serve`` with its embedded router. Every step of
:mod:`tests.differential.corpus` runs on both, in order, and :func:`harness.compare` compares the
answers. Each difference must be a row of docs/api.md §15 (with its reason); the test fails on a
difference no row allows and on a row that allowed nothing (so the list stays true). The whole
comparison is written to ``differential-report.json`` in the test's temporary directory.

``make test-diff`` runs this tier alone. It needs the ``ziti`` binary (:mod:`tests.e2e.ziti_cli`)
and OpenZiti's specs in ``../shared/spec`` (it is skipped without them, as the fuzz is);
``TRELLIS_SKIP_ZITI_E2E=1`` skips it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.differential import corpus
from tests.differential.harness import Context, compare, read_allowed, run, split
from tests.e2e.openziti import OpenZiti
from tests.e2e.server import MGMT, Server
from tests.e2e.ziti_cli import SKIP_ENV

pytestmark = [
    pytest.mark.seconds(30),
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(bool(os.environ.get(SKIP_ENV)), reason=f"{SKIP_ENV} is set"),
    # as the schemathesis fuzz: the generated part sends every operation of OpenZiti's specs
    pytest.mark.skipif(
        not all((corpus.SPEC_DIR / f"{api}.yml").is_file() for api in ("client", "management")),
        reason=f"the upstream OpenZiti specs are absent ({corpus.SPEC_DIR} holds no client.yml and management.yml)",
    ),
]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"
HEADING = "## 15."


def _router_online(server: Server, token: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = server.call("GET", f"{MGMT}/edge-routers", token, params={"filter": "isOnline = true"})
        if answer.status_code == 200 and answer.json()["data"]:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the embedded router was not online within {timeout:.0f} s\n{server.log_tail()}")


def test_trellis_answers_as_openziti_v1_6_0_does(tmp_path: Path) -> None:
    with (
        OpenZiti(tmp_path / "openziti") as oracle,
        Server(tmp_path / "trellis" / "home", env={"TRELLIS_ROUTER": "on"}) as trellis,
    ):
        (tmp_path / "trellis").mkdir(exist_ok=True)
        oracle.start()
        trellis.up()
        oracle.wait_router(oracle.login())
        _router_online(trellis, trellis.login())

        t = Context(trellis, "trellis")
        o = Context(oracle, "openziti")
        corpus.prepare(t, trellis.password, tmp_path)
        corpus.prepare(o, oracle.password, tmp_path)
        differences = []
        report = []
        for step in [*corpus.flows(), *corpus.second_login(), *corpus.generated()]:
            t_answer = run(t, step)
            o_answer = run(o, step)
            found = compare(step, (t, t_answer), (o, o_answer)) if step.compare else []
            differences += found
            report.append(
                {
                    "step": step.name,
                    "trellis": [t_answer.status, t_answer.body],
                    "openziti": [o_answer.status, o_answer.body],
                    "differences": [str(d) for d in found],
                }
            )
        (tmp_path / "differential-report.json").write_text(json.dumps(report, indent=1, default=str))

    allowed = read_allowed(DOCS.read_text(), HEADING)
    unlisted, stale = split(differences, allowed)
    lines = [f"  {d}" for d in unlisted]
    lines += [f"  stale row: {row.step} {row.aspect} {row.where}" for row in stale]
    assert not lines, (
        f"{len(unlisted)} differences from OpenZiti v1.6.0 not in docs/api.md §15, {len(stale)} rows "
        f"that allowed nothing (report: {tmp_path / 'differential-report.json'}):\n" + "\n".join(lines)
    )
