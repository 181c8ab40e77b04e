"""schemathesis runs against a running ``trellis serve``: the command, its reports, the verdict.

schemathesis runs as a CLI subprocess (``python -m schemathesis.cli`` of this interpreter, so the
version pyproject.toml pins): its hypothesis settings and warnings stay out of pytest's process.
Each run writes a JUnit report (each operation's failures, with the check's code, the answer and a
curl line) and a JSON run report (test cases generated, errors, stop reason), both read here. The
server's access log, read afterwards, gives the figures from the server's side: the requests
schemathesis sent (by their User-Agent) and how many were answered 5xx.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from controller.logs import parse_logfmt

#: The checks run (issue 8 §7).
CHECKS = ("not_a_server_error", "status_code_conformance", "response_schema_conformance")
#: schemathesis failure codes (``st explain``) -> the check that reports them.
CODES = {
    "ST101": "not_a_server_error",  # Server error (5xx)
    "ST102": "not_a_server_error",  # Server error with an unexpected content type
    "ST103": "status_code_conformance",  # Undocumented status code
    "ST108": "response_schema_conformance",  # Response violates schema
    "ST109": "response_schema_conformance",  # JSON deserialization error
    "ST110": "response_schema_conformance",  # Response content could not be deserialised
    "ST111": "response_schema_conformance",  # Discriminator mismatch
}
SEED = 8
#: Examples per operation and phase: few, the time budget bounds the run.
EXAMPLES = 10
#: A request's own time limit; an answer slower than this is an error of the run.
REQUEST_TIMEOUT = 20
#: Variables of ours the subprocess must not see: requests would let a CA bundle override the
#: server's CA, and a proxy would take the loopback traffic.
DROPPED_ENV = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@dataclass(frozen=True)
class Run:
    """One schemathesis run: an API's spec, a token, the path ids, the operations it covers."""

    name: str
    api: str
    token: str
    #: Path prefix (``identities``, ``current-identity/authenticators``) -> the ``{id}`` it takes.
    ids: Mapping[str, str]
    #: Other path parameters (``serviceId``) of the operations under a prefix.
    extra: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: Operation names (``DELETE /current-api-session``) left out.
    exclude: Sequence[str] = ()
    #: Only the operations of these methods (all when empty).
    methods: Sequence[str] = ()
    #: Leave out the operations of these methods.
    skip_methods: Sequence[str] = ()
    max_time: int = 60


@dataclass(frozen=True)
class Failure:
    """A failed check of one operation, in one run (deduplicated by schemathesis)."""

    run: str
    api: str
    operation: str
    check: str
    code: str
    title: str
    detail: str
    #: The answer's status, when reported.
    status: str = ""
    curl: str = ""

    def line(self) -> str:
        return f"[{self.api}] {self.operation} {self.check} ({self.code} {self.title}): {self.detail}"


@dataclass
class Outcome:
    """What one run found."""

    run: Run
    exit_code: int
    seconds: float
    failures: list[Failure]
    #: Errors schemathesis reports (network errors, timeouts, schema errors): operation -> text.
    errors: list[tuple[str, str]]
    report: dict[str, Any]
    output: str

    @property
    def test_cases(self) -> int:
        return int(self.report.get("test_cases", {}).get("generated", 0))


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value)


def config_text(run: Run, ca: str) -> str:
    """schemathesis.toml of ``run``: the token, TLS trust and the path parameters."""
    lines = [
        f"tls-verify = {_toml(ca)}",
        "[headers]",
        f'"zt-session" = {_toml(run.token)}',
        "",
    ]
    for prefix, entity in sorted(run.ids.items()):
        parameters = {"path.id": entity, **{f"path.{k}": v for k, v in run.extra.get(prefix, {}).items()}}
        table = ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in parameters.items())
        pattern = "^/" + re.escape(prefix) + r"/\{id\}(/|$)"
        lines += [
            "[[operations]]",
            f"include-path-regex = {_toml(pattern)}",
            f"parameters = {{ {table} }}",
            "",
        ]
    return "\n".join(lines)


def command(run: Run, spec: Path, url: str, config: Path, reports: Path) -> list[str]:
    args = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        str(spec),
        "--url",
        url,
        "--checks",
        ",".join(CHECKS),
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        str(EXAMPLES),
        "--max-time",
        str(run.max_time),
        "--seed",
        str(SEED),
        "--workers",
        "1",
        "--request-timeout",
        str(REQUEST_TIMEOUT),
        "--generation-database",
        "none",
        "--no-color",
        "--report",
        "junit,json",
        "--report-junit-path",
        str(reports / f"{run.name}-junit.xml"),
        "--report-json-path",
        str(reports / f"{run.name}-report.json"),
    ]
    for name in run.exclude:
        args += ["--exclude-name", name]
    for method in run.methods:
        args += ["--include-method", method]
    for method in run.skip_methods:
        args += ["--exclude-method", method]
    return args


def execute(run: Run, spec: Path, url: str, ca: str, work: Path, timeout: float) -> Outcome:
    """Run ``run`` (its files under ``work``) and read its reports."""
    config = work / f"{run.name}.toml"
    config.write_text(config_text(run, ca), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k.upper() not in DROPPED_ENV}
    started = time.monotonic()
    done = subprocess.run(
        command(run, spec, url, config, work),
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    (work / f"{run.name}.txt").write_text(output, encoding="utf-8")
    report_path = work / f"{run.name}-report.json"
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    failures, errors = read_junit(work / f"{run.name}-junit.xml", run)
    return Outcome(run, done.returncode, seconds, failures, errors, report, output)


# -- the JUnit report -----------------------------------------------------------------------------
_CASE = re.compile(r"^\d+\. Test Case ID: \S+$", re.MULTILINE)
_CHECK = re.compile(r"^- (ST\d{3}) (.+)$", re.MULTILINE)
_STATUS = re.compile(r"^\[(\d{3})\] ", re.MULTILINE)


def read_junit(path: Path, run: Run) -> tuple[list[Failure], list[tuple[str, str]]]:
    if not path.exists():
        return [], [("(run)", f"no JUnit report at {path.name}")]
    root = ElementTree.parse(path).getroot()
    failures: list[Failure] = []
    errors: list[tuple[str, str]] = []
    for case in root.iter("testcase"):
        operation = case.get("name", "?")
        for element in case.findall("failure"):
            failures += parse_failures(element.text or "", run, operation)
        errors += [(operation, element.text or "") for element in case.findall("error")]
    return failures, errors


def parse_failures(text: str, run: Run, operation: str) -> list[Failure]:
    """The checks failed in a ``<failure>`` text: one or more test cases, each with one or more
    ``- STnnn Title`` lines followed by their detail, the answer and a curl line."""
    out: list[Failure] = []
    starts = [m.start() for m in _CASE.finditer(text)] or [0]
    for begin, end in zip(starts, [*starts[1:], len(text)], strict=True):
        block = text[begin:end]
        status = _STATUS.search(block)
        curl = block[block.find("curl ") :].strip() if "curl " in block else ""
        checks = list(_CHECK.finditer(block))
        for i, match in enumerate(checks):
            stop = (
                checks[i + 1].start() if i + 1 < len(checks) else (status.start() if status else len(block))
            )
            detail = " ".join(block[match.end() : stop].split())
            out.append(
                Failure(
                    run=run.name,
                    api=run.api,
                    operation=operation,
                    check=CODES.get(match.group(1), match.group(1)),
                    code=match.group(1),
                    title=match.group(2).strip(),
                    detail=detail[:300],
                    status=status.group(1) if status else "",
                    curl=curl[:600],
                )
            )
    return out


# -- the server's access log ----------------------------------------------------------------------
#: gunicorn's combined access line: ... "METHOD PATH HTTP/1.1" STATUS LENGTH "REFERER" "USER-AGENT"
_ACCESS = re.compile(r'" (\d{3}) \S+ "[^"]*" "([^"]*)"$')


def _access(line: str) -> tuple[str, str] | None:
    """(status, user agent) of an access line: ``trellis serve``'s structured one (controller/logs.py),
    or gunicorn's combined one; None for any other line."""
    if "logger=gunicorn.access" in line:
        fields = parse_logfmt(line)
        return fields.get("status", ""), fields.get("user_agent", "")
    match = _ACCESS.search(line)
    return (match.group(1), match.group(2)) if match is not None else None


@dataclass
class ServerTally:
    """The fuzzers' requests as the server logged them."""

    requests: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)


def tally_access_log(lines: Iterable[str], agent: str = "schemathesis/") -> ServerTally:
    tally = ServerTally()
    for line in lines:
        found = _access(line.rstrip("\n"))
        if found is None or not found[1].startswith(agent):
            continue
        tally.requests += 1
        status = found[0]
        tally.statuses[status[0] + "xx"] += 1
        if status.startswith("5"):
            tally.server_errors.append(line.strip()[:500])
    return tally
