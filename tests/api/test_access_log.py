"""controller/accesslog.py writes exactly the line gunicorn's own ``Logger.access`` writes.

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

from controller.accesslog import DEFAULT_FORMAT, AccessLog, redact_query, redact_uri


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


# -- secrets never reach the log (issue 10) -----------------------------------------------------------
TOKEN = "5b0f0c6e-8d7a-4a57-9a44-0e6c1d2b3f4a"
SESSION = "0f7e3b1c-2a4d-4e5f-8a9b-1c2d3e4f5a6b"


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        (f"method=ott&token={TOKEN}", "method=ott&token=REDACTED"),
        (f"token={TOKEN}&method=ott", "token=REDACTED&method=ott"),
        (f"TOKEN={TOKEN}", "TOKEN=REDACTED"),
        (f"%74oken={TOKEN}", "%74oken=REDACTED"),  # percent-encoded name
        (f"access_token={SESSION}&id_token=x.y.z", "access_token=REDACTED&id_token=REDACTED"),
        (f"enrollmentToken={TOKEN}", "enrollmentToken=REDACTED"),
        ("client_secret=s3cr3t&code=123456", "client_secret=REDACTED&code=REDACTED"),
        (f"zt-session={SESSION}", "zt-session=REDACTED"),
        ("password=hunter22&username=bob", "password=REDACTED&username=bob"),
        (f"filter=token%3D%22{TOKEN}%22&limit=5", "filter=REDACTED&limit=5"),
        (f'filter=enrollmentJwt contains "{TOKEN}"', "filter=REDACTED"),
        # what is no secret stays as it came
        ('filter=name="a b"&limit=10&offset=0', 'filter=name="a b"&limit=10&offset=0'),
        ("method=password", "method=password"),
        ("token=&method=ott", "token=&method=ott"),
        ("token", "token"),
        ("", ""),
    ],
)
def test_secret_query_values_are_redacted(query: str, logged: str) -> None:
    assert redact_query(query) == logged
    assert redact_uri(f"/edge/client/v1/enroll?{query}") == f"/edge/client/v1/enroll?{logged}"
    assert redact_uri("/version") == "/version"


def _secret_request() -> dict[str, Any]:
    return _environ(
        "POST",
        f"/edge/client/v1/enroll?method=ott&token={TOKEN}",
        HTTP_REFERER=f"https://console/enroll?token={TOKEN}",
        HTTP_USER_AGENT="ziti-sdk-c/0.29.3",
        HTTP_ZT_SESSION=SESSION,
        HTTP_AUTHORIZATION=f"Bearer {SESSION}",
    )


def test_the_fast_line_redacts_the_token(tmp_path: Path) -> None:
    path = tmp_path / "fast.log"
    log, cfg = _logger(path)
    access = AccessLog(log)
    assert access.streams(cfg.access_log_format) is not None  # the fast path

    access.write(cfg.access_log_format, _Resp("404 Not Found", 160), REQ, _secret_request(), timedelta(0))

    [line] = _lines(path)
    assert TOKEN not in line, line
    assert SESSION not in line, line
    assert '"POST /edge/client/v1/enroll?method=ott&token=REDACTED HTTP/1.1" 404 160' in line
    assert '"https://console/enroll?token=REDACTED" "ziti-sdk-c/0.29.3"' in line


class _SecretReq:
    headers = [
        ("zt-session", SESSION),
        ("Authorization", f"Bearer {SESSION}"),
        ("Accept", "application/json"),
    ]


def test_gunicorn_formatting_redacts_every_atom(tmp_path: Path) -> None:
    """A custom format goes through gunicorn's ``Logger.access``: the request line, the query, the
    environ, the referer and the credential headers (request and response) are redacted there too."""
    path = tmp_path / "custom.log"
    fmt = (
        "%(r)s|%(q)s|%(f)s|%({raw_uri}e)s|%({query_string}e)s|%({http_zt_session}e)s|"
        "%({http_authorization}e)s|%({zt-session}i)s|%({authorization}i)s|%({accept}i)s|%({zt-session}o)s|%(U)s"
    )
    log, cfg = _logger(path, access_log_format=fmt)
    access = AccessLog(log)
    assert access.streams(cfg.access_log_format) is None  # gunicorn formats it
    resp = _Resp("200 OK", 10)
    resp.headers = [("Content-Type", "application/json"), ("zt-session", SESSION)]

    access.write(cfg.access_log_format, resp, _SecretReq(), _secret_request(), timedelta(0))

    [line] = _lines(path)
    assert TOKEN not in line, line
    assert SESSION not in line, line
    assert line.split("|") == [
        "POST /edge/client/v1/enroll?method=ott&token=REDACTED HTTP/1.1",
        "method=ott&token=REDACTED",
        "https://console/enroll?token=REDACTED",
        "/edge/client/v1/enroll?method=ott&token=REDACTED",
        "method=ott&token=REDACTED",
        "REDACTED",
        "Bearer REDACTED",
        "REDACTED",
        "Bearer REDACTED",
        "application/json",
        "REDACTED",
        "/edge/client/v1/enroll",
    ]


def test_gunicorn_formatting_keeps_a_basic_user_but_not_the_password(tmp_path: Path) -> None:
    path = tmp_path / "basic.log"
    log, cfg = _logger(path, access_log_format="%(u)s %({http_authorization}e)s")
    access = AccessLog(log)
    environ = _environ("GET", "/x", HTTP_AUTHORIZATION="Basic " + base64.b64encode(b"alice:secret").decode())

    access.write(cfg.access_log_format, _Resp("200 OK", 1), REQ, environ, timedelta(0))

    [line] = _lines(path)
    user, header = line.split(" ", 1)
    assert user == "alice"
    assert base64.b64decode(header.removeprefix("Basic ")) == b"alice:REDACTED"
