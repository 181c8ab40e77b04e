"""schemathesis against a running ``trellis serve`` with OpenZiti's own specs (issue 8 §7, hostile input).

The upstream specs (``../shared/spec``) are converted to JSON with their fix-ups
(``tests/e2e/fuzz/specs.py``), a small network is seeded through the HTTP API
(``tests/e2e/fuzz/world.py``), and schemathesis (pinned in pyproject.toml's dev extras) runs the
checks ``not_a_server_error``, ``status_code_conformance`` and ``response_schema_conformance``:

1. ``client``: the client API as ``fuzzer``, an enrolled non-admin identity; every operation but
   the DELETEs;
2. ``client-deletes``: the client API's DELETEs (after the rest, so that the session and the
   API-session certificate they delete were there for the reads);
3. ``management``: the management API as the admin; every operation but the DELETEs;
4. ``management-deletes``: the management API's DELETEs.

Each run is bounded: ``--max-time`` (its share of ``TRELLIS_FUZZ_SECONDS``, default 240 s; fuzzing
repeats until its time is spent), a fixed ``--seed``, a few examples per operation, one worker.
The operations left out, and why, are the ``excluded`` entries of ``tests/e2e/fuzz/baseline.json``.

The test asserts no 5xx (as schemathesis saw it and as the server logged it), no crash (the server
still runs and still knows the admin's token; schemathesis finished its runs with no errors: a
refused connection, a timeout) and that every other failure matches a ``deviations`` entry of the
baseline. Its figures go to ``<tmp>/fuzz-figures.json`` and a one-line summary is printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.fuzz import baseline, specs
from tests.e2e.fuzz.runner import CHECKS, Failure, Outcome, Run, execute, tally_access_log
from tests.e2e.fuzz.world import World, seed
from tests.e2e.server import CLIENT, MGMT, ROOT, Server
from tests.e2e.workload import NO_BUDGETS

SPEC_DIR = ROOT.parent / "shared" / "spec"
#: The fuzzing time of all runs together (schemathesis's ``--max-time``, shared out below).
BUDGET = float(os.environ.get("TRELLIS_FUZZ_SECONDS", "240"))
#: Each run's share of the budget.
SHARES = {
    "client": 0.18,
    "client-deletes": 0.05,
    "management": 0.55,
    "management-deletes": 0.15,
    # Trellis's own /analysis/v1 (docs/analysis.md), its spec as the server serves it
    "analysis": 0.07,
}
#: Past its ``--max-time`` a run gets this long to finish its last requests and write its reports.
GRACE = 120.0
#: The least a run gets: the DELETE runs have few operations (4 and 22), which 5 s covers many times.
MIN_RUN_SECONDS = 5

needs_specs = pytest.mark.skipif(
    not (SPEC_DIR / "client.yml").is_file() or not (SPEC_DIR / "management.yml").is_file(),
    reason=f"the upstream OpenZiti specs are absent ({SPEC_DIR} holds no client.yml and management.yml)",
)


def plan(
    world: World, accepted: baseline.Baseline, budget: float, analysis_ids: dict[str, str] | None = None
) -> list[Run]:
    def seconds(name: str) -> int:
        return max(MIN_RUN_SECONDS, round(budget * SHARES[name]))

    client = Run(
        name="client",
        api="client",
        token=world.fuzzer_token,
        ids=world.client_ids,
        exclude=accepted.excluded_from("client"),
        skip_methods=("DELETE",),
        max_time=seconds("client"),
    )
    management = Run(
        name="management",
        api="management",
        token=world.admin_token,
        ids=world.management_ids,
        extra={"identities": {"serviceId": world.service_id}},
        exclude=accepted.excluded_from("management"),
        skip_methods=("DELETE",),
        max_time=seconds("management"),
    )

    def deletes(run: Run) -> Run:
        name = f"{run.name}-deletes"
        return replace(run, name=name, methods=("DELETE",), skip_methods=(), max_time=seconds(name))

    analysis = Run(
        name="analysis",
        api="analysis",
        token=world.admin_token,
        ids={"identities": world.management_ids.get("identities", ""), **(analysis_ids or {})},
        extra={"identities": {"service_id": world.service_id}},
        exclude=accepted.excluded_from("analysis"),
        max_time=seconds("analysis"),
    )
    return [client, deletes(client), management, deletes(management), analysis]


def summary(
    outcomes: list[Outcome], new: list[Failure], requests: int, server_errors: int, seconds: float
) -> dict[str, Any]:
    failures = [f for o in outcomes for f in o.failures]
    by_check = Counter(f.check for f in failures)
    return {
        "seconds": round(seconds, 1),
        "requests": requests,
        "server_errors_5xx": server_errors,
        "test_cases": sum(o.test_cases for o in outcomes),
        "failures_by_check": {check: by_check.get(check, 0) for check in CHECKS},
        "failures_baselined": len(failures) - len(new),
        "failures_new": len(new),
        "errors": sum(len(o.errors) + len(o.report.get("errors") or []) for o in outcomes),
        "runs": {
            o.run.name: {
                "seconds": round(o.seconds, 1),
                "max_time": o.run.max_time,
                "exit_code": o.exit_code,
                "test_cases": o.test_cases,
                "operations": (o.report.get("operations") or {}).get("tested"),
                "failures": len(o.failures),
            }
            for o in outcomes
        },
    }


def readable(failures: list[Failure], limit: int = 40) -> str:
    lines = []
    for failure in failures[:limit]:
        lines.append(f"- {failure.line()}")
        if failure.curl:
            lines.append(f"    {failure.curl[:400]}")
    if len(failures) > limit:
        lines.append(f"... and {len(failures) - limit} more")
    return "\n".join(lines)


@needs_specs
@pytest.mark.parametrize("api", specs.APIS)
def test_the_upstream_specs_convert_to_json_with_integral_numbers(api: str, tmp_path: Path) -> None:
    written = specs.write_json(SPEC_DIR, api, tmp_path)

    spec = json.loads(written.read_text(encoding="utf-8"))
    assert spec["swagger"] == "2.0"
    assert specs.floats(spec) == []
    assert specs.floats(specs.load_yaml(SPEC_DIR / f"{api}.yml")) != []  # what the conversion is for
    assert spec["definitions"]["link"]["properties"]["href"]["format"] == "uri-reference"


def test_the_baseline_is_well_formed() -> None:
    accepted = baseline.load()

    assert accepted.deviations
    assert ("client", "DELETE /current-api-session") in {(e.api, e.operation) for e in accepted.excluded}
    assert ("management", "DELETE /current-api-session") in {(e.api, e.operation) for e in accepted.excluded}


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.seconds(70)
@pytest.mark.timeout(BUDGET + len(SHARES) * GRACE + 300)  # the runs, their grace, seeding and checks
@needs_specs
def test_schemathesis_finds_no_5xx_and_only_baselined_deviations(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    if importlib.util.find_spec("schemathesis") is None:
        pytest.fail("schemathesis is not installed here: pip install -e '.[dev]' (make test does)")
    accepted = baseline.load()
    work = tmp_path / "fuzz"
    work.mkdir()
    paths = {api: specs.write_json(SPEC_DIR, api, work) for api in specs.APIS}
    started = time.monotonic()
    with Server(tmp_path / "home", env=NO_BUDGETS) as server:
        server.up()
        world = seed(server)
        served = server.call("GET", "/analysis/v1/swagger.json")
        paths["analysis"] = work / "analysis.json"
        paths["analysis"].write_text(served.text, encoding="utf-8")
        guardrail = {
            "name": "fuzz-guardrail",
            "form": "deny",
            "mode": "report",
            "identityRoles": ["#nobody"],
            "serviceRoles": ["#nothing"],
        }
        made = server.call("POST", "/analysis/v1/guardrails", world.admin_token, json=guardrail).json()
        analysis_ids = {"guardrails": made["data"]["id"]}
        outcomes: list[Outcome] = []
        for run in plan(world, accepted, BUDGET, analysis_ids):
            base = {"client": CLIENT, "analysis": "/analysis/v1"}.get(run.api, MGMT)
            outcomes.append(
                execute(run, paths[run.api], server.url + base, server.ca, work, run.max_time + GRACE)
            )
            assert server.proc is not None
            assert server.proc.poll() is None, (
                f"trellis serve exited during the {run.name} run\n{server.log_tail()}"
            )
        admin = server.call("GET", f"{MGMT}/current-identity", world.admin_token)
        fuzzer = server.call("GET", f"{CLIENT}/current-identity", world.fuzzer_token)
    seconds = time.monotonic() - started

    with server.log.open(encoding="utf-8", errors="replace") as log:
        logged = tally_access_log(log)
    failures = [f for o in outcomes for f in o.failures]
    new = [f for f in failures if not accepted.accepts(f)]
    figures = summary(outcomes, new, logged.requests, len(logged.server_errors), seconds)
    figures["statuses"] = dict(sorted(logged.statuses.items()))
    figures["baseline_unseen"] = len(accepted.unseen(failures, specs.APIS))
    (tmp_path / "fuzz-figures.json").write_text(json.dumps(figures, indent=2), encoding="utf-8")
    line = (
        f"schemathesis: {logged.requests} fuzzed requests ({figures['test_cases']} test cases) in "
        f"{seconds:.0f} s, {len(logged.server_errors)} 5xx, failures by check "
        f"{figures['failures_by_check']}, {figures['failures_baselined']} baselined, {len(new)} new; "
        f"figures in {tmp_path / 'fuzz-figures.json'}"
    )
    record_property("summary", line)  # printed at the end of the run (tests/conftest.py)

    report = f"{line}\nreports and outputs in {work}"
    assert admin.status_code == 200, f"the admin's session did not survive the runs: {admin.text}\n{report}"
    assert fuzzer.status_code == 200, (
        f"the fuzzer's session did not survive the runs: {fuzzer.text}\n{report}"
    )
    assert logged.server_errors == [], "5xx answers:\n" + "\n".join(logged.server_errors[:30]) + f"\n{report}"
    for outcome in outcomes:
        errors = outcome.errors + [(e.get("title", "?"), str(e)) for e in outcome.report.get("errors") or []]
        finished = outcome.exit_code in (0, 1) and bool(outcome.report.get("complete")) and not errors
        assert finished, (
            f"the {outcome.run.name} run did not finish cleanly (exit {outcome.exit_code}): {errors[:10]}\n"
            f"{outcome.output[-4000:]}\n{report}"
        )
    assert logged.requests > 0, report
    if new:
        pytest.fail(
            f"{len(new)} failures not in tests/e2e/fuzz/baseline.json (fix them, or add a reviewed "
            f"entry with the reason):\n{readable(new)}\n{report}",
            pytrace=False,
        )
