"""Structured logs (issue 19, part 5): one formatter for every line (key=value or JSON), the two
settings, request ids tied to the error envelope and the access line, security events at INFO or
WARNING, and an expected failure (writes refused by a failing disk) logged as it starts, counted
while it lasts and logged as it ends, with no traceback.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from gunicorn.config import Config

from api import REQUEST_ID_KEY
from controller.accesslog import AccessLog
from controller.logs import (
    GunicornLogger,
    LogSettings,
    StructuredFormatter,
    bind_request_id,
    configure,
    current_request_id,
    gunicorn_options,
    logfmt_value,
    parse_logfmt,
    unbind_request_id,
)
from controller.settings import SettingError, Settings
from engine.logs import Outage, event
from engine.managers.bootstrap import create_default_admin
from engine.testing import FixedClock
from pki.totp import totp_code
from storage.duckdb import DuckDBStore
from storage.duckdb.journal import _segment_path
from tests.api.certs import csr_pem, new_key, unique
from tests.api.logcapture import capture
from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, CLIENT, Api, open_app

PASSWORD = "user-password-1"


def _record(msg: str = "hello", level: int = logging.INFO, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("trellis.test", level, __file__, 1, msg, None, None)
    record.__dict__.update(extra)
    return record


# -- the format -------------------------------------------------------------------------------------
def test_a_line_starts_with_time_level_logger_message_and_request_id() -> None:
    line = StructuredFormatter().format(_record("disk ok", request_id="r1", free_mb=12, ratio=0.5, ok=True))

    fields = parse_logfmt(line)
    assert list(fields) == ["ts", "level", "logger", "msg", "request_id", "free_mb", "ratio", "ok"]
    assert fields["level"] == "info"
    assert fields["logger"] == "trellis.test"
    assert fields["msg"] == "disk ok"
    assert (fields["request_id"], fields["free_mb"], fields["ratio"], fields["ok"]) == (
        "r1",
        "12",
        "0.5",
        "true",
    )
    assert fields["ts"].endswith("Z")
    assert len(fields["ts"]) == len("2025-06-01T12:00:00.123Z")


def test_an_event_line_names_the_event_and_leaves_none_fields_out() -> None:
    logger = logging.getLogger("trellis.test.event")
    with capture() as logs:
        # ``name`` and ``msg`` are a LogRecord's own attributes: such fields get a trailing _
        event(logger, logging.WARNING, "login.failed", method="password", name="x", msg="y", identity_id=None)

    [line] = logs.lines
    assert line.split(" ")[1:4] == ["level=warning", "logger=trellis.test.event", "event=login.failed"]
    fields = parse_logfmt(line)
    assert "msg" not in fields
    assert "identity_id" not in fields
    assert (fields["method"], fields["name_"], fields["msg_"]) == ("password", "x", "y")


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "two words",
        'a "quoted" word',
        "back\\slash",
        "key=value",
        "",
        "line\nts=2020-01-01T00:00:00.000Z level=error forged=1",
        "carriage\rreturn\ttab",
        "next\x85line and \u2028 \u2029 separators",
        "bidi \u202eoverride\u202c and nbsp\xa0",
        "escape \x1b[31m red",
        "emoji \U0001f600 and Jos\u00e9",
        "astral control \U000e0001",
    ],
)
def test_every_value_stays_on_one_line_and_reads_back(value: str) -> None:
    written = logfmt_value(value)

    assert written.isprintable()  # no control, separator or bidi character is left: one line
    assert parse_logfmt(f"k={written}") == {"k": value}


def test_a_field_cannot_forge_another_field_or_line() -> None:
    line = StructuredFormatter().format(
        _record("refused", username='x" level=info event=login.succeeded\nts=0')
    )

    assert len(line.splitlines()) == 1
    fields = parse_logfmt(line)
    assert fields["level"] == "info"  # the record's own (INFO), not the forged one's
    assert "event" not in fields
    assert fields["username"] == 'x" level=info event=login.succeeded\nts=0'


def test_a_long_value_is_cut() -> None:
    fields = parse_logfmt(StructuredFormatter().format(_record("x", blob="a" * 10_000)))
    assert len(fields["blob"]) < 5000
    assert fields["blob"].endswith("...(cut)")


def test_a_traceback_comes_last_on_the_same_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "t", logging.ERROR, __file__, 1, "failed", None, __import__("sys").exc_info()
        )
    line = StructuredFormatter().format(record)

    assert len(line.splitlines()) == 1
    fields = parse_logfmt(line)
    assert list(fields)[-1] == "exc"
    assert fields["exc"].startswith("Traceback (most recent call last):\n")
    assert fields["exc"].endswith("ValueError: boom")


def test_the_json_format_is_one_object_per_line() -> None:
    line = StructuredFormatter(json=True).format(
        _record("hi", request_id="r2", count=3, user="a\u2028b\x85c", when=timedelta(seconds=2))
    )

    assert len(line.splitlines()) == 1
    document = json.loads(line)
    assert list(document)[:5] == ["ts", "level", "logger", "msg", "request_id"]
    assert document["count"] == 3
    assert document["user"] == "a\u2028b\x85c"
    assert document["when"] == "2.0"


# -- the settings -----------------------------------------------------------------------------------
def test_the_settings_default_to_info_and_text() -> None:
    assert LogSettings.from_env({}) == LogSettings(logging.INFO, "text")
    assert LogSettings.from_env({"TRELLIS_LOG_LEVEL": "", "TRELLIS_LOG_FORMAT": ""}) == LogSettings()
    assert LogSettings.from_env({"TRELLIS_LOG_LEVEL": "DEBUG", "TRELLIS_LOG_FORMAT": "Json"}) == LogSettings(
        logging.DEBUG, "json"
    )
    assert gunicorn_options({"TRELLIS_LOG_LEVEL": "warning"}) == {
        "logger_class": GunicornLogger,
        "loglevel": "warning",
    }


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TRELLIS_LOG_LEVEL", "loud"), ("TRELLIS_LOG_FORMAT", "xml"), ("TRELLIS_LOG_LEVEL", "10")],
)
def test_a_bad_setting_is_refused_in_a_line_naming_it(variable: str, value: str) -> None:
    """A :class:`SettingError`: the ``trellis`` command prints it as ``trellis: ...`` and exits 2
    (tests/e2e/test_logging.py runs it)."""
    with pytest.raises(SettingError) as refused:
        LogSettings.from_env({variable: value})

    message = refused.value.message
    assert "\n" not in message
    assert message.startswith(f"{variable} must be one of ")
    assert message.endswith(f"not {value!r}")


@pytest.fixture
def root_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(False)


@pytest.mark.usefixtures("root_restored")
def test_configure_replaces_its_own_handler() -> None:
    first = configure(LogSettings(logging.DEBUG))
    second = configure(LogSettings(logging.WARNING, "json"))

    root = logging.getLogger()
    assert first not in root.handlers
    assert [h for h in root.handlers if getattr(h, "_trellis", False)] == [second]
    assert root.level == logging.WARNING


# -- gunicorn's lines and the access line ----------------------------------------------------------------
TOKEN = "5b0f0c6e-8d7a-4a57-9a44-0e6c1d2b3f4a"
SESSION = "0f7e3b1c-2a4d-4e5f-8a9b-1c2d3e4f5a6b"


class _Resp:
    status = "404 Not Found"
    headers = [("Content-Type", "application/json"), ("zt-session", SESSION)]
    sent = 160


class _Req:
    headers = [("zt-session", SESSION), ("Authorization", f"Bearer {SESSION}")]


@contextmanager
def root_alone() -> Iterator[None]:
    """The root logger without the handlers pytest put there, and gunicorn's loggers without
    what an earlier gunicorn ``Logger`` of the same process left on them (all put back
    afterwards; pytest adds its own as a test's body starts, so this is entered in the body)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for handler in handlers:
        root.removeHandler(handler)
    kept = {}
    for name in ("gunicorn.access", "gunicorn.error"):
        logger = logging.getLogger(name)
        kept[name] = (list(logger.handlers), list(logger.filters), logger.propagate, logger.level)
        logger.handlers.clear()
        logger.filters.clear()
        logger.propagate = True
    try:
        yield
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, (was_handlers, was_filters, was_propagate, was_level) in kept.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = was_handlers
            logger.filters[:] = was_filters
            logger.propagate = was_propagate
            logger.setLevel(was_level)
        logging.captureWarnings(False)


@pytest.mark.parametrize("another_handler", [False, True])
def test_gunicorns_lines_and_the_access_line_go_through_the_formatter(
    monkeypatch: pytest.MonkeyPatch, another_handler: bool
) -> None:
    """The same line whether the access line is written straight to the formatter's handler or,
    another handler being there too, goes through ``logging`` as a record."""
    with root_alone():
        check_gunicorn_lines(monkeypatch, another_handler)


def check_gunicorn_lines(monkeypatch: pytest.MonkeyPatch, another_handler: bool) -> None:
    import io

    monkeypatch.setenv("TRELLIS_LOG_LEVEL", "info")
    monkeypatch.delenv("TRELLIS_LOG_FORMAT", raising=False)
    cfg = Config()
    cfg.set("accesslog", "-")
    log = GunicornLogger(cfg)
    stream = io.StringIO()
    configure(LogSettings(), stream)  # as setup() did, onto a stream the test reads
    if another_handler:
        logging.getLogger().addHandler(logging.NullHandler())
    assert (log._direct_handlers() is None) is another_handler
    environ = {
        "REQUEST_METHOD": "POST",
        "RAW_URI": f"/edge/client/v1/enroll?method=ott&token={TOKEN}",
        "PATH_INFO": "/edge/client/v1/enroll",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "10.1.2.3",
        "HTTP_USER_AGENT": 'sdk "c"',
        "HTTP_REFERER": f"https://console/enroll?token={TOKEN}",
        "HTTP_ZT_SESSION": SESSION,
        "HTTP_AUTHORIZATION": f"Bearer {SESSION}",
        REQUEST_ID_KEY: "Req-1",
    }

    log.info("Booting worker with pid: %d", 42)
    AccessLog(log).write(cfg.access_log_format, _Resp(), _Req(), environ, timedelta(milliseconds=2.5))

    booted, access = (parse_logfmt(line) for line in stream.getvalue().splitlines())
    assert (booted["logger"], booted["msg"]) == ("gunicorn.error", "Booting worker with pid: 42")
    assert access == {
        "ts": access["ts"],
        "level": "info",
        "logger": "gunicorn.access",
        "msg": "request",
        "request_id": "Req-1",
        "remote": "10.1.2.3",
        "method": "POST",
        "path": "/edge/client/v1/enroll?method=ott&token=REDACTED",
        "protocol": "HTTP/1.1",
        "status": "404",
        "bytes": "160",
        "duration_ms": "2.5",
        "user_agent": 'sdk "c"',
        "referer": "https://console/enroll?token=REDACTED",
    }
    assert TOKEN not in stream.getvalue()
    assert SESSION not in stream.getvalue()


@pytest.mark.usefixtures("root_restored")
def test_the_access_line_follows_the_level(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setenv("TRELLIS_LOG_LEVEL", "warning")
    cfg = Config()
    cfg.set("accesslog", "-")
    log = GunicornLogger(cfg)
    stream = io.StringIO()
    configure(LogSettings(logging.WARNING), stream)
    environ = {"REQUEST_METHOD": "GET", "RAW_URI": "/version", "SERVER_PROTOCOL": "HTTP/1.1"}

    AccessLog(log).write(cfg.access_log_format, _Resp(), _Req(), environ, timedelta(0))
    log.warning("worker_connections lowered")

    assert [parse_logfmt(line)["msg"] for line in stream.getvalue().splitlines()] == [
        "worker_connections lowered"
    ]


# -- request ids ----------------------------------------------------------------------------------------
@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    app = open_app(settings, clock=FixedClock())
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    admin = Api(app)
    admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
    yield admin
    app.ctrl.env.store.close()


def authenticate(api: Api, username: str, password: str) -> Any:
    return api.client.simulate_post(
        CLIENT + "/authenticate",
        params={"method": "password"},
        json={"username": username, "password": password},
    )


def test_lines_logged_for_a_request_carry_the_request_id_of_its_answer(api: Api) -> None:
    with capture() as logs:
        refused = authenticate(api, ADMIN_USER, "not-the-password")

    [failed] = logs.events("login.failed")
    assert failed["request_id"] == refused.json["error"]["requestId"]
    assert current_request_id() is None  # unbound once the request is answered


def test_a_request_id_bound_elsewhere_is_put_back() -> None:
    outer = bind_request_id("outer")
    try:
        inner = bind_request_id("inner")
        assert current_request_id() == "inner"
        unbind_request_id(inner)
        assert current_request_id() == "outer"
    finally:
        unbind_request_id(outer)
    assert current_request_id() is None


# -- security events ------------------------------------------------------------------------------------
def person(api: Api, policy_id: str | None = None) -> tuple[str, str]:
    """A non-admin identity with a password: (identity id, username)."""
    username = unique("person")
    body: dict[str, Any] = {"name": username, "isAdmin": False, "type": "User"}
    if policy_id is not None:
        body["authPolicyId"] = policy_id
    identity = api.create("/identities", body)
    api.create(
        "/authenticators",
        {"identityId": identity, "method": "updb", "username": username, "password": PASSWORD},
    )
    return identity, username


def test_logins_are_logged_with_method_identity_and_reason(api: Api) -> None:
    identity, username = person(api)
    with capture() as logs:
        ok = authenticate(api, username, PASSWORD)
        authenticate(api, username, "wrong-password")
        authenticate(api, "nobody\nts=0 level=info event=login.succeeded", PASSWORD)

    assert ok.status_code == 200
    [succeeded] = logs.events("login.succeeded")
    assert succeeded["level"] == "info"
    assert succeeded["method"] == "password"
    assert (succeeded["identity_id"], succeeded["identity_name"]) == (identity, username)
    assert succeeded["session_id"] == ok.json["data"]["id"]
    wrong, unknown = logs.events("login.failed")
    assert (wrong["level"], wrong["reason"], wrong["identity_id"]) == ("warning", "wrong password", identity)
    assert (unknown["reason"], unknown["username"]) == (
        "unknown username",
        "nobody\nts=0 level=info event=login.succeeded",
    )
    assert "identity_id" not in unknown
    assert len(logs.lines) == len(logs.records())  # the typed newline made no line of its own
    assert all(not line.startswith("ts=0") for line in logs.lines)


def test_a_lockout_is_logged_with_its_end(api: Api) -> None:
    policy = api.create(
        "/auth-policies",
        {
            "name": unique("policy"),
            "primary": {"updb": {"maxAttempts": 2, "lockoutDurationMinutes": 10}},
            "secondary": {},
        },
    )
    identity, username = person(api, policy)
    with capture() as logs:
        for _ in range(3):
            authenticate(api, username, "wrong-password")

    [locked] = logs.events("identity.locked_out")
    assert (locked["level"], locked["identity_id"], locked["identity_name"]) == (
        "warning",
        identity,
        username,
    )
    assert locked["failures"] == "2"
    assert locked["until"] == "2026-01-01T12:10:00+00:00"  # the fixed clock's noon, plus 10 minutes
    reasons = [r["reason"] for r in logs.events("login.failed")]
    assert reasons == ["wrong password", "wrong password", "the identity is disabled"]


def test_a_refused_password_change_is_logged(api: Api) -> None:
    identity, username = person(api)
    token = api.login(username, PASSWORD, base=CLIENT)
    mine = api.get("/current-identity/authenticators", token=token, base=CLIENT).json["data"][0]["id"]
    with capture() as logs:
        refused = api.patch(
            f"/current-identity/authenticators/{mine}",
            token=token,
            base=CLIENT,
            json={"password": "Brand-New-Pass-1", "currentPassword": "not-the-password"},
        )

    assert refused.status_code == 401
    [event_] = logs.events("password.change_refused")
    assert (event_["level"], event_["identity_id"], event_["authenticator_id"]) == ("warning", identity, mine)
    assert event_["reason"] == "wrong password"


def test_a_cert_login_failure_is_logged(api: Api) -> None:
    with capture() as logs:
        refused = api.client.simulate_post(CLIENT + "/authenticate", params={"method": "cert"}, json={})

    assert refused.status_code == 401
    [failed] = logs.events("login.failed", method="cert")
    assert failed["reason"] == "a client certificate is required"


def test_mfa_failures_and_throttling_are_logged(api: Api) -> None:
    identity, username = person(api)
    token = api.login(username, PASSWORD, base=CLIENT)
    assert api.post("/current-identity/mfa", token=token, base=CLIENT).status_code == 201
    detail = api.get("/current-identity/mfa", token=token, base=CLIENT).json["data"]
    secret = parse_qs(urlparse(detail["provisioningUrl"]).query)["secret"][0]
    clock = api.ctrl.env.clock
    assert isinstance(clock, FixedClock)
    with capture() as logs:
        verified = api.post(
            "/current-identity/mfa/verify",
            token=token,
            base=CLIENT,
            json={"code": totp_code(secret, clock.now())},
        )
        assert verified.status_code == 200, verified.text
        login = api.login(username, PASSWORD, base=CLIENT)
        for _ in range(11):  # 10 wrong codes are free (the default backoff); the 11th waits
            api.post("/authenticate/mfa", token=login, base=CLIENT, json={"code": "000000"})

    [enrolled] = logs.events("mfa.enrolled")
    assert (enrolled["level"], enrolled["identity_id"], enrolled["identity_name"]) == (
        "info",
        identity,
        username,
    )
    failed = logs.events("mfa.failed", identity_id=identity, purpose="login")
    assert len(failed) == 10
    assert {f["level"] for f in failed} == {"warning"}
    assert failed[-1]["failures"] == "10"
    [throttled] = logs.events("mfa.throttled", identity_id=identity)
    assert int(throttled["retry_after"]) > 0
    assert [r["mfa_required"] for r in logs.events("login.succeeded")] == ["true"]


def test_enrollments_are_logged(api: Api) -> None:
    identity = api.create(
        "/identities",
        {"name": unique("device"), "type": "User", "isAdmin": False, "enrollment": {"ott": True}},
    )
    token = api.get(f"/identities/{identity}").json["data"]["enrollment"]["ott"]["token"]
    csr = csr_pem(new_key())
    with capture() as logs:
        done = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr})
        again = api.client.simulate_post(CLIENT + "/enroll/ott", json={"token": token, "clientCsr": csr})

    assert (done.status_code, again.status_code) == (200, 404)
    [succeeded] = logs.events("enrollment.succeeded")
    assert (succeeded["level"], succeeded["method"], succeeded["identity_id"]) == ("info", "ott", identity)
    [failed] = logs.events("enrollment.failed")
    assert (failed["level"], failed["method"], failed["code"]) == (
        "warning",
        "ott",
        "INVALID_ENROLLMENT_TOKEN",
    )


def test_administrative_writes_are_logged_with_their_actor(api: Api) -> None:
    admin = api.get("/current-identity").json["data"]
    with capture() as logs:
        created = api.create("/identities", {"name": unique("x"), "type": "User", "isAdmin": False})
        api.patch(f"/identities/{created}", json={"name": unique("y")})
        api.post(f"/identities/{created}/disable", json={"durationMinutes": 5})
        api.delete(f"/identities/{created}")
        api.delete(f"/identities/{created}")  # 404: nothing was written
        api.get("/identities")

    writes = logs.events("admin.write")
    assert [(w["action"], w["kind"], w["id"], w["status"]) for w in writes] == [
        ("create", "identities", created, "201"),
        ("update", "identities", created, "200"),
        ("disable", "identities", created, "200"),
        ("delete", "identities", created, "200"),
    ]
    assert {(w["level"], w["actor_id"], w["actor_name"]) for w in writes} == {
        ("info", admin["id"], admin["name"])
    }


# -- an expected failure: logged as it starts, counted, logged as it ends ---------------------------------
class _Time:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_logs_once_counts_at_powers_of_two_and_logs_its_end() -> None:
    logger = logging.getLogger("trellis.test.outage")
    clock = _Time()
    outage = Outage(logger, "commit", clock=clock)
    with capture() as logs:
        outage.succeeded()  # nothing to end
        for _ in range(100):
            clock.now += 0.1
            outage.failed(OSError(28, "No space left on device"))
        outage.succeeded()
        outage.succeeded()

    events = [(r["event"], r.get("refused")) for r in logs.records()]
    assert events == [
        ("commit.failing", "1"),
        ("commit.still_failing", "8"),
        ("commit.still_failing", "16"),
        ("commit.still_failing", "32"),
        ("commit.still_failing", "64"),
        ("commit.recovered", "100"),
    ]
    assert logs.records()[0]["reason"] == "OSError: [Errno 28] No space left on device"
    assert logs.records()[-1]["seconds"] == "9.9"
    assert "exc" not in logs.text


def test_an_outage_that_lasts_is_counted_at_least_once_a_minute() -> None:
    clock = _Time()
    outage = Outage(logging.getLogger("trellis.test.outage"), "flush", unit="attempts", clock=clock)
    with capture() as logs:
        for _ in range(7):  # retried every 30 s: fewer than first_count attempts in 3 minutes
            outage.failed("database gone")
            clock.now += 30.0

    assert [(r["event"], r["attempts"]) for r in logs.records()] == [
        ("flush.failing", "1"),
        ("flush.still_failing", "3"),
        ("flush.still_failing", "5"),
        ("flush.still_failing", "7"),
    ]


def test_an_unexpected_failure_starts_with_its_traceback_once() -> None:
    outage = Outage(logging.getLogger("trellis.test.outage"), "commit")
    with capture() as logs:
        for _ in range(20):
            try:
                raise TypeError("a bug")
            except TypeError as ex:
                outage.failed(ex, expected=False)

    assert logs.text.count("Traceback (most recent call last)") == 1
    assert "exc" in logs.records()[0]


@pytest.mark.durable
def test_writes_refused_by_a_failing_disk_log_no_traceback(settings: Settings) -> None:
    """A real store and journal: the journal's next segment cannot be created (a directory holds
    its name), so every write is refused until it can; reads go on meanwhile."""
    store = DuckDBStore(settings.db_path, journal=True)
    app = open_app(settings, store=store)
    try:
        create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
        api = Api(app)
        api.token = api.login(ADMIN_USER, ADMIN_PASSWORD)
        store.flush()  # nothing pending: the journal's segments are released but the current one
        journal = store._journal
        assert journal is not None
        journal.close()  # the next batch starts a new segment ...
        blocker = _segment_path(settings.db_path, max(journal._segments, default=0) + 1)
        blocker.mkdir()  # ... which cannot be created
        with capture() as logs:
            for n in range(40):
                refused = api.post(
                    "/identities", json={"name": f"lost-{n}", "type": "User", "isAdmin": False}
                )
                assert refused.status_code == 503, refused.text
                assert refused.json["error"]["code"] == "COMMIT_FAILED"
            assert api.get("/identities").status_code == 200
            shutil.rmtree(blocker)
            assert (
                api.post("/identities", json={"name": "kept", "type": "User", "isAdmin": False}).status_code
                == 201
            )

        outage = [r for r in logs.records() if r.get("event", "").startswith("commit.")]
        assert [(r["event"], r["level"], r["refused"]) for r in outage] == [
            ("commit.failing", "error", "1"),
            ("commit.still_failing", "warning", "8"),
            ("commit.still_failing", "warning", "16"),
            ("commit.still_failing", "warning", "32"),
            ("commit.recovered", "warning", "40"),
        ]
        assert outage[0]["reason"].startswith("FileExistsError: [Errno 17] File exists: ")
        assert "Traceback" not in logs.text
        assert "exc=" not in logs.text
        # each refusal is a DEBUG line of its own request, without a traceback
        refusals = [r for r in logs.records() if r.get("msg", "").startswith("write refused")]
        assert len(refusals) == 40
        assert {r["level"] for r in refusals} == {"debug"}
    finally:
        store.close()
