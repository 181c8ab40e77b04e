"""api/accesslog.py writes exactly the line gunicorn's own ``Logger.access`` writes.

Both run against a real gunicorn ``Logger`` set up from a real ``Config`` (its access log handler
pointed at a file), on the same requests: quotes in the target and the agent, a ``Basic`` user,
no referer, a HEAD with nothing sent, a 500. The fast path is taken only for gunicorn's default
format on its own logger with plain handlers; otherwise gunicorn formats the line.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from api.accesslog import DEFAULT_FORMAT, AccessLog


class _Resp:
    def __init__(self, status: str, sent: int | None) -> None:
        self.status = status
        self.headers = [("Content-Type", "application/json")]
        self.sent = sent
        self.response_length = sent


class _Req:
    """What gunicorn's atoms read of the request: its headers."""

    headers: list[tuple[str, str]] = []


REQ = _Req()


def _close_gunicorn_handlers() -> None:
    for name in ("gunicorn.access", "gunicorn.error"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            # (pytest's own capturing handlers may sit here too: a foreign handler, which would
            # rightly send every line through gunicorn)
            logger.removeHandler(handler)
            if getattr(handler, "_gunicorn", False):
                handler.close()


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    yield
    _close_gunicorn_handlers()


def _logger(path: Path, access_log_format: str | None = None) -> tuple[Logger, Config]:
    _close_gunicorn_handlers()
    cfg = Config()
    cfg.set("accesslog", str(path))
    if access_log_format is not None:
        cfg.set("access_log_format", access_log_format)
    return Logger(cfg), cfg


def _environ(method: str, uri: str, **extra: str) -> dict[str, Any]:
    environ = {
        "REQUEST_METHOD": method,
        "RAW_URI": uri,
        "PATH_INFO": uri.split("?", 1)[0],
        "QUERY_STRING": uri.split("?", 1)[1] if "?" in uri else "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
    }
    environ.update(extra)
    return environ


CASES = [
    (_environ("GET", "/version", HTTP_USER_AGENT="curl/8"), _Resp("200 OK", 120)),
    (
        _environ(
            "GET",
            '/edge/management/v1/identities?filter=name="a b"',
            HTTP_USER_AGENT='agent "quoted"',
            HTTP_REFERER="https://console/x",
        ),
        _Resp("200 OK", 4096),
    ),
    (
        _environ(
            "POST",
            "/edge/client/v1/sessions",
            HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"alice:secret").decode(),
        ),
        _Resp("201 Created", 77),
    ),
    (_environ("HEAD", "/", HTTP_AUTHORIZATION="Basic !!!"), _Resp("200 OK", 0)),
    (_environ("GET", "/x", HTTP_AUTHORIZATION="Bearer abc"), _Resp("500 Internal Server Error", None)),
]


def _lines(path: Path) -> list[str]:
    for handler in logging.getLogger("gunicorn.access").handlers:
        handler.flush()
    return path.read_text().splitlines()


def test_the_fast_line_is_gunicorns_line(tmp_path: Path) -> None:
    theirs, ours = tmp_path / "gunicorn.log", tmp_path / "trellis.log"
    log, cfg = _logger(theirs)
    for environ, resp in CASES:
        log.access(resp, REQ, environ, timedelta(milliseconds=3))
    expected = _lines(theirs)

    log, cfg = _logger(ours)
    access = AccessLog(log)
    assert cfg.access_log_format == DEFAULT_FORMAT
    assert access.streams(cfg.access_log_format) is not None  # the fast path is taken
    for environ, resp in CASES:
        access.write(cfg.access_log_format, resp, REQ, environ, timedelta(milliseconds=3))

    written = _lines(ours)
    assert len(written) == len(expected) == len(CASES)
    # Same line apart from the second the time stamp was taken in.
    strip = [line.split(" [", 1)[0] + " " + line.split("] ", 1)[1] for line in written]
    assert strip == [line.split(" [", 1)[0] + " " + line.split("] ", 1)[1] for line in expected]
    assert written[1].endswith('"https://console/x" "agent \\"quoted\\""')
    assert written[2].startswith("127.0.0.1 - alice [")
    assert written[3].endswith(' 200 0 "-" "-"')
    assert ' 500 - "-" "-"' in written[4]


def test_a_custom_format_goes_through_gunicorn(tmp_path: Path) -> None:
    path = tmp_path / "custom.log"
    log, cfg = _logger(path, access_log_format="%(m)s %(U)s %({user-agent}i)s %(D)s")
    access = AccessLog(log)
    assert access.streams(cfg.access_log_format) is None
    environ, resp = CASES[0]
    access.write(cfg.access_log_format, resp, REQ, environ, timedelta(milliseconds=3))
    assert _lines(path) == ["GET /version - 3000"]


@pytest.mark.parametrize("disabled", [True, False])
def test_a_handler_gunicorn_did_not_set_up_is_respected(tmp_path: Path, disabled: bool) -> None:
    path = tmp_path / "x.log"
    log, cfg = _logger(path)
    access = AccessLog(log)
    assert access.streams(cfg.access_log_format) is not None
    extra = logging.StreamHandler()
    if disabled:
        extra.setLevel(logging.ERROR)
    log.access_log.addHandler(extra)
    try:
        assert access.streams(cfg.access_log_format) is None  # re-read when the handlers change
    finally:
        log.access_log.removeHandler(extra)
    assert access.streams(cfg.access_log_format) is not None
