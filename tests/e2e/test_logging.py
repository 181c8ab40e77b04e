"""``trellis serve``'s log, as a real process writes it (issue 19, part 5): every line structured
(gunicorn's, the access log's, ours), request ids tying the access line to the error envelope and
to the events of its request, security events, no secret even at DEBUG, and the two settings
checked before anything starts.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

from controller.logs import parse_logfmt
from tests.e2e.server import CLIENT, MGMT, ROOT, SAN, TRELLIS, Server

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(55)]

ENROLLMENT_TOKEN = "5b0f0c6e-8d7a-4a57-9a44-0e6c1d2b3f4a"
WRONG_PASSWORD = "Wrong-Horse-Battery-9"
FORGED_SESSION = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"


def log_lines(server: Server) -> list[str]:
    """The server's log lines, less what the ``trellis`` command prints before the server starts."""
    lines = server.log.read_text(errors="replace").splitlines()
    return [line for line in lines if not line.startswith("serving https://")]


def test_the_log_is_structured_ties_request_ids_and_holds_no_secret(tmp_path: Path) -> None:
    with Server(tmp_path / "home", env={**SAN, "TRELLIS_LOG_LEVEL": "debug"}) as server:
        server.up()
        token = server.login()
        wrong = server.call(
            "POST",
            CLIENT + "/authenticate?method=password",
            json={"username": "admin", "password": WRONG_PASSWORD},
        )
        assert wrong.status_code == 401
        assert server.call("GET", CLIENT + "/current-identity", FORGED_SESSION).status_code == 401
        enroll = server.call("POST", f"{CLIENT}/enroll?method=ott&token={ENROLLMENT_TOKEN}", data=b"x")
        assert enroll.status_code == 404
        created = server.call(
            "POST", MGMT + "/services", token, json={"name": "logged-svc", "encryptionRequired": True}
        )
        assert created.status_code == 201, created.text
    text = server.log.read_text(errors="replace")
    records = [parse_logfmt(line) for line in log_lines(server)]

    # every line is a record: time, level, logger, and an event or a message
    for line, record in zip(log_lines(server), records, strict=True):
        assert {"ts", "level", "logger"} <= set(record), line
        assert "event" in record or "msg" in record, line
    loggers = {r["logger"] for r in records}
    assert {"gunicorn.error", "gunicorn.access", "engine.managers.authentication", "trellis.audit"} <= loggers

    # the refused login: its envelope's request id is on its access line and on its event
    request_id = wrong.json()["error"]["requestId"]
    [access] = [r for r in records if r["logger"] == "gunicorn.access" and r.get("request_id") == request_id]
    assert (access["method"], access["status"]) == ("POST", "401")
    assert access["path"] == "/edge/client/v1/authenticate?method=password"
    [failed] = [r for r in records if r.get("event") == "login.failed"]
    assert (failed["request_id"], failed["level"], failed["reason"]) == (
        request_id,
        "warning",
        "wrong password",
    )
    [write] = [r for r in records if r.get("event") == "admin.write"]
    assert (write["action"], write["kind"], write["id"]) == (
        "create",
        "services",
        created.json()["data"]["id"],
    )
    assert write["request_id"] in {r.get("request_id") for r in records if r["logger"] == "gunicorn.access"}

    # no secret, not even at DEBUG; no traceback
    for secret in (server.password, WRONG_PASSWORD, token, FORGED_SESSION, ENROLLMENT_TOKEN):
        assert secret not in text, secret
    assert "token=REDACTED" in text
    assert "Traceback" not in text


def test_the_json_format_is_one_object_a_line(tmp_path: Path) -> None:
    with Server(tmp_path / "home", env={**SAN, "TRELLIS_LOG_FORMAT": "json"}) as server:
        server.up()
        server.login()
    documents = [json.loads(line) for line in log_lines(server)]
    assert {d["logger"] for d in documents} >= {"gunicorn.error", "gunicorn.access"}
    assert all(d["level"] in ("info", "warning") for d in documents)  # the default level: INFO
    [login] = [d for d in documents if d.get("event") == "login.succeeded"]
    assert login["method"] == "password"


@pytest.mark.parametrize(
    ("variable", "value"), [("TRELLIS_LOG_LEVEL", "chatty"), ("TRELLIS_LOG_FORMAT", "xml")]
)
def test_a_bad_setting_stops_serve_with_status_2(tmp_path: Path, variable: str, value: str) -> None:
    server = Server(tmp_path / "home", env=SAN)
    server.init()
    done = subprocess.run(
        [*TRELLIS, "serve"],
        env={**server.env, variable: value},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"trellis: {variable} must be one of ")
    assert line.endswith(f"not {value!r}")


# -- a disk that refuses writes ----------------------------------------------------------------------
@contextmanager
def piped_log(path: Path) -> Iterator[list[str]]:
    """``path`` as a FIFO whose lines are collected (a file limit set on the server below would
    refuse its log lines too); the lines, once the writer has closed it."""
    os.mkfifo(path)
    lines: list[str] = []

    def read() -> None:
        with path.open("rb") as pipe:
            lines.extend(line.decode("utf-8", "replace").rstrip("\n") for line in pipe)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        reader.join(timeout=30)


def worker_of(master: int) -> int:
    """The gunicorn worker: the server's one child process (Linux ``/proc``)."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_a_disk_refusing_writes_is_logged_once_counted_and_logged_as_it_ends(tmp_path: Path) -> None:
    """The worker may not grow any file (``RLIMIT_FSIZE``: what a full disk answers, ``EFBIG`` for
    ``ENOSPC``): 300 writes are refused with 503 while reads go on, then the limit is lifted and
    writes go on. The log has one line as the refusals start, a few counts, one as they end, an
    access line per request, and no traceback (it had one per refused write)."""
    fifo = tmp_path / "serve.fifo"
    with piped_log(fifo) as lines, Server(tmp_path / "home", env=SAN, log=fifo) as server:
        server.up()
        token = server.login()
        worker = worker_of(server.pid)
        soft, hard = resource.prlimit(worker, resource.RLIMIT_FSIZE)
        resource.prlimit(worker, resource.RLIMIT_FSIZE, (1, hard))
        try:

            def write(n: int) -> int:
                body = {"name": f"lost-{n}", "type": "User", "isAdmin": False}
                return server.call("POST", MGMT + "/identities", token, json=body).status_code

            with ThreadPoolExecutor(8) as pool:
                statuses = list(pool.map(write, range(300)))
            assert statuses == [503] * 300
            assert server.call("GET", MGMT + "/identities", token).status_code == 200
        finally:
            resource.prlimit(worker, resource.RLIMIT_FSIZE, (soft, hard))
        kept = server.call(
            "POST", MGMT + "/identities", token, json={"name": "kept", "type": "User", "isAdmin": False}
        )
        assert kept.status_code == 201, kept.text
    records = [parse_logfmt(line) for line in lines if line.startswith("ts=")]
    text = "\n".join(lines)

    commits = [(r["event"], int(r["refused"])) for r in records if r.get("event", "").startswith("commit.")]
    assert commits[0][0] == "commit.failing"
    assert commits[-1] == ("commit.recovered", 300)
    counts = [n for event, n in commits if event == "commit.still_failing"]
    assert 1 <= len(counts) <= 10  # a count when it passes 8, 16, 32, ... (and at least once a minute)
    assert counts == sorted(counts)
    assert len(commits) == len(counts) + 2
    assert (
        len([r for r in records if r.get("logger") == "gunicorn.access" and r.get("status") == "503"]) == 300
    )
    assert "Traceback" not in text
    assert len(lines) < 300 + 60  # the access lines, and a bounded few more
