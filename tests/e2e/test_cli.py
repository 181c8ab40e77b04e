"""The ``trellis`` command as operators meet it: help, version, and every refusal one line.

Each case runs the real CLI as a subprocess (``python -m controller.cli``, as tests/e2e/server.py does)
and checks what the operator sees: a bad setting, a home the command cannot use, an address that
cannot be listened on, a second server on the same home, a missing snapshot all end with exit
status 2 and one line on stderr, ``trellis: ...``, naming the variable (or the file), and no
traceback; nothing is served and nothing is written. The refusals come before anything slow, so
each case takes a Python start; one ``trellis init`` (module fixture) serves all that need a home,
and one real server the cases that need one running.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from api import __version__
from controller.settings import SETTINGS, read_by
from tests.e2e.server import HOST, MGMT, PASSWORD, ROOT, TRELLIS, Server, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(45)]

#: What a start that got as far as gunicorn prints: a refusal comes before it (no retries, no
#: waiting for a worker), which is what makes it quick (no timed asserts: the output says it).
GUNICORN_STARTED = "Starting gunicorn"


def trellis(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m controller.cli *args`` with no ``TRELLIS_*`` variable of ours, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    return subprocess.run(
        [*TRELLIS, *args],
        env={**base, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Assert ``done`` is a refusal (exit 2, one ``trellis:`` line holding every fragment, no
    traceback, nothing served); that line."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    (line,) = lines
    assert line.startswith("trellis: "), line
    for fragment in fragments:
        assert fragment in line, line
    assert "serving" not in done.stdout, done.stdout
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    return line


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home made by ``trellis init`` (not served)."""
    made = tmp_path_factory.mktemp("cli") / "home"
    done = trellis("init", env={"TRELLIS_HOME": str(made), "TRELLIS_ADMIN_PASSWORD": PASSWORD})
    assert done.returncode == 0, done.stderr
    return made


def serve_env(home: Path, **more: str) -> dict[str, str]:
    return {
        "TRELLIS_HOME": str(home),
        "TRELLIS_BIND": f"{HOST}:{free_port()}",
        "TRELLIS_CTRL_BIND": f"{HOST}:{free_port()}",
        **more,
    }


# -- help and version ------------------------------------------------------------------------------


def test_help_lists_the_commands_options_and_every_setting_with_its_default() -> None:
    done = trellis("--help")

    assert done.returncode == 0, done.stderr
    for word in ("init", "serve", "restore", "--version", "--help", "exit status 2"):
        assert word in done.stdout
    for setting in SETTINGS:
        assert re.search(rf"^  {setting.env} +\S", done.stdout, re.MULTILINE), setting.env
    assert re.search(r"^  TRELLIS_THREADS +16$", done.stdout, re.MULTILINE)
    assert re.search(r"^  TRELLIS_BIND +127\.0\.0\.1:1280$", done.stdout, re.MULTILINE)


@pytest.mark.parametrize("command", ["init", "serve", "restore"])
def test_each_command_help_lists_the_settings_it_reads_and_their_form(command: str) -> None:
    done = trellis(command, "--help")

    assert done.returncode == 0, done.stderr
    flat = " ".join(done.stdout.split())
    for setting in SETTINGS:
        if setting in read_by(command):
            assert f"{setting.env} (default: " in done.stdout, setting.env
            assert f"Form: {setting.form}." in flat, setting.env
        else:
            assert setting.env + " (" not in done.stdout, setting.env
    if command == "restore":
        assert "snapshot" in done.stdout
    if command == "serve":
        assert "TRELLIS_THREADS (default: 16)" in done.stdout
        assert "a whole number from 1 to 256" in flat


def test_version_names_trellis_and_the_openziti_api() -> None:
    done = trellis("--version")

    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"trellis {re.escape(__version__)} \(OpenZiti controller API v\d+\.\d+\.\d+\)\n", done.stdout
    ), done.stdout


# -- bad settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TRELLIS_THREADS", "abc", "TRELLIS_THREADS must be a whole number from 1 to 256, not 'abc'"),
        ("TRELLIS_THREADS", "0", "TRELLIS_THREADS must be a whole number from 1 to 256, not '0'"),
        ("TRELLIS_BIND", "nonsense", "TRELLIS_BIND must be host:port with a port from 1 to 65535"),
        ("TRELLIS_BIND", "127.0.0.1:99999", "not '127.0.0.1:99999' (port 99999 is out of range)"),
        ("TRELLIS_BIND", "::1:1280", "(an IPv6 address goes in brackets)"),
        ("TRELLIS_ADVERTISE", "ctrl.example.test", "TRELLIS_ADVERTISE must be host:port"),
        ("TRELLIS_SESSION_TIMEOUT_MINUTES", "half an hour", "TRELLIS_SESSION_TIMEOUT_MINUTES must be"),
        ("TRELLIS_TIMEOUT_BODY_SECONDS", "-1", "TRELLIS_TIMEOUT_BODY_SECONDS must be a number of seconds"),
        ("TRELLIS_TIMEOUT_HEADER_SECONDS", "inf", "TRELLIS_TIMEOUT_HEADER_SECONDS must be"),
        ("TRELLIS_RATE_AUTH_PER_MINUTE", "ten", "TRELLIS_RATE_AUTH_PER_MINUTE must be a whole number"),
        ("TRELLIS_DB_JOURNAL", "maybe", "TRELLIS_DB_JOURNAL must be on or off, not 'maybe'"),
        ("TRELLIS_DB_WRITER", "fork", "TRELLIS_DB_WRITER must be process or thread, not 'fork'"),
        ("TRELLIS_DB_MEMORY_LIMIT", "lots", "TRELLIS_DB_MEMORY_LIMIT must be a size such as"),
        ("TRELLIS_CERT_PROXIES", "10.0.0.0/33", "TRELLIS_CERT_PROXIES must be comma-separated IP"),
        (
            "TRELLIS_CORS_ORIGINS",
            "ftp://console.test",
            "TRELLIS_CORS_ORIGINS must be comma-separated origins",
        ),
        ("TRELLIS_MFA_BACKOFF_MAX_SECONDS", "10", "must be at least TRELLIS_MFA_BACKOFF_SECONDS (30)"),
        ("TRELLIS_JWKS_ALLOW_LOOPBACK", "yes", "TRELLIS_JWKS_ALLOW_LOOPBACK must be on or off"),
    ],
)
def test_serve_refuses_a_bad_setting_in_one_line(home: Path, name: str, value: str, message: str) -> None:
    done = trellis("serve", env={**serve_env(home), name: value})

    refused(done, name, message)
    assert GUNICORN_STARTED not in done.stdout + done.stderr


def test_init_refuses_a_bad_setting_before_making_anything(tmp_path: Path) -> None:
    target = tmp_path / "home"
    env = {"TRELLIS_HOME": str(target), "TRELLIS_SAN": "ctrl.example.test,bad..name"}

    refused(trellis("init", env=env), "TRELLIS_SAN must be comma-separated DNS names or IP addresses")
    short = trellis("init", env={"TRELLIS_HOME": str(target), "TRELLIS_ADMIN_PASSWORD": "abc"})
    refused(short, "TRELLIS_ADMIN_PASSWORD must be 5 to 100 characters")
    assert "abc" not in short.stderr  # a password is never echoed
    assert not target.exists()


def test_a_setting_another_command_reads_does_not_stop_restore(home: Path, tmp_path: Path) -> None:
    """``restore`` reads TRELLIS_HOME only: a bad TRELLIS_THREADS is serve's business."""
    done = trellis("restore", str(tmp_path / "none"), env={"TRELLIS_HOME": str(home), "TRELLIS_THREADS": "x"})

    refused(done, "no such snapshot file")


# -- the home ------------------------------------------------------------------------------------


def foreign_directory(tmp_path: Path) -> Path:
    """A directory of someone else's files, readable by others (as a home never is)."""
    other = tmp_path / "documents"
    other.mkdir()
    (other / "notes.txt").write_text("not a database\n")
    other.chmod(0o755)
    return other


def test_serve_before_init_says_to_run_init(tmp_path: Path) -> None:
    done = trellis("serve", env=serve_env(tmp_path / "home"))

    refused(done, "TRELLIS_HOME", "does not exist: run `trellis init` first (or `make run`")
    assert not (tmp_path / "home").exists()


def test_serve_in_an_empty_or_half_made_home_says_to_run_init(tmp_path: Path, home: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    half = tmp_path / "half"
    half.mkdir()
    shutil.copytree(home / "pki", half / "pki")

    refused(trellis("serve", env=serve_env(empty)), "TRELLIS_HOME", "is not initialised", "`trellis init`")
    refused(trellis("serve", env=serve_env(half)), "is not initialised (no trellis.duckdb)")


@pytest.mark.parametrize("command", ["init", "serve"])
def test_a_foreign_home_is_refused_and_left_untouched(tmp_path: Path, command: str) -> None:
    other = foreign_directory(tmp_path)
    env = {**serve_env(other), "TRELLIS_ADMIN_PASSWORD": PASSWORD}

    refused(trellis(command, env=env), "TRELLIS_HOME", "is not a Trellis home")
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]
    assert stat.S_IMODE(other.stat().st_mode) == 0o755  # not tightened: it is not ours


def test_a_file_as_home_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "home"
    afile.write_text("")

    refused(trellis("serve", env=serve_env(afile)), "TRELLIS_HOME", "is not a directory")


# -- the address ----------------------------------------------------------------------------------


def test_an_address_in_use_is_refused_at_once(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = trellis("serve", env={"TRELLIS_HOME": str(home), "TRELLIS_BIND": f"{HOST}:{port}"})

    refused(done, f"TRELLIS_BIND {HOST}:{port} cannot be listened on: the address is in use")
    assert GUNICORN_STARTED not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("bind", "message"),
    [
        ("nosuch.invalid:1280", "TRELLIS_BIND nosuch.invalid:1280: cannot resolve 'nosuch.invalid'"),
        ("192.0.2.1:1280", "the host is not an address of this machine"),  # TEST-NET-1
    ],
)
def test_an_address_not_of_this_machine_is_refused_at_once(home: Path, bind: str, message: str) -> None:
    done = trellis("serve", env={"TRELLIS_HOME": str(home), "TRELLIS_BIND": bind})

    refused(done, message)
    assert GUNICORN_STARTED not in done.stdout + done.stderr


# -- restore -------------------------------------------------------------------------------------


def test_restore_refuses_a_missing_or_foreign_home(tmp_path: Path, home: Path) -> None:
    snapshot = tmp_path / "snapshot"
    shutil.copyfile(home / "trellis.duckdb", snapshot)

    missing = trellis("restore", str(snapshot), env={"TRELLIS_HOME": str(tmp_path / "none")})
    foreign = trellis("restore", str(snapshot), env={"TRELLIS_HOME": str(foreign_directory(tmp_path))})

    refused(missing, "TRELLIS_HOME", "does not exist: restore replaces the database of an existing home")
    refused(foreign, "TRELLIS_HOME", "is not a Trellis home")
    assert not (tmp_path / "none").exists()


def test_restore_refuses_a_missing_or_broken_snapshot(tmp_path: Path, home: Path) -> None:
    env = {"TRELLIS_HOME": str(home)}
    broken = tmp_path / "broken"
    broken.write_text("not a database\n")
    before = (home / "trellis.duckdb").read_bytes()

    refused(
        trellis("restore", str(tmp_path / "none"), env=env), f"{tmp_path / 'none'}: no such snapshot file"
    )
    refused(trellis("restore", str(broken), env=env), f"{broken} is not a DuckDB database")
    assert (home / "trellis.duckdb").read_bytes() == before


def test_a_corrupt_database_stops_serve_with_one_line_and_no_retries(tmp_path: Path, home: Path) -> None:
    """A database the worker cannot open is not a crash to retry: one ``trellis:`` line naming
    the home and DuckDB's reason, exit status 1, no traceback, no second worker."""
    copy = tmp_path / "home"
    shutil.copytree(home, copy)
    database = copy / "trellis.duckdb"
    with database.open("r+b") as f:
        f.seek(4096)
        f.write(os.urandom(65536))

    done = trellis("serve", env=serve_env(copy))

    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("trellis: ")]
    assert len(ours) == 1, done.stderr
    assert ours[0].startswith(f"trellis: cannot start on {copy}: "), done.stderr
    assert "orrupt" in ours[0] or "checksum" in ours[0], ours
    assert done.stderr.count("Booting worker") == 1, done.stderr


# -- with a server running -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with Server(tmp_path_factory.mktemp("cli-served") / "home") as server:
        yield server.up()


def test_a_second_server_on_the_same_home_is_refused_at_once(served: Server) -> None:
    done = trellis("serve", env=serve_env(served.home))

    line = refused(done, f"TRELLIS_HOME {served.home} is in use by a running server: stop it first")
    assert f"(pid {served.pid})" in line
    assert GUNICORN_STARTED not in done.stdout + done.stderr
    assert served.call("GET", "/version").status_code == 200  # the first one serves on


def test_init_and_restore_are_refused_while_a_server_holds_the_home(served: Server, tmp_path: Path) -> None:
    env = {"TRELLIS_HOME": str(served.home)}
    snapshot = tmp_path / "snapshot"
    snapshot.write_text("")

    refused(trellis("init", env=env), "is in use by a running server: stop it first")
    refused(trellis("restore", str(snapshot), env=env), "is in use by a running server: stop it first")


def test_the_snapshot_answer_names_the_file_it_wrote(served: Server) -> None:
    token = served.login()

    body = served.expect(served.call("POST", f"{MGMT}/database/snapshot", token), 200, "snapshot")

    path = Path(body["data"]["path"])
    assert path.is_absolute()
    assert path.parent == served.home.absolute()
    assert re.fullmatch(r"trellis\.duckdb-\d{8}-\d{6}", path.name), path.name
    assert path.is_file()


# -- the router ------------------------------------------------------------------------------------


def test_router_run_without_an_enrolled_router_says_to_enroll(tmp_path: Path) -> None:
    done = trellis("router", "run", env={"TRELLIS_ROUTER_HOME": str(tmp_path / "none")})

    refused(done, "TRELLIS_ROUTER_HOME", "does not exist: enroll the router first")


def test_router_enroll_refuses_what_is_not_an_edge_router_jwt(tmp_path: Path) -> None:
    env = {"TRELLIS_ROUTER_HOME": str(tmp_path / "router")}
    not_a_jwt = tmp_path / "not.jwt"
    not_a_jwt.write_text("hello\n")

    refused(trellis("router", "enroll", str(tmp_path / "missing.jwt"), env=env), "cannot read")
    refused(trellis("router", "enroll", str(not_a_jwt), env=env), "not an enrollment JWT")
    assert not (tmp_path / "router").exists()


def test_router_settings_are_checked_like_the_controllers(tmp_path: Path) -> None:
    env = {"TRELLIS_ROUTER_HOME": str(tmp_path / "router"), "TRELLIS_ROUTER_EDGE_BIND": "nonsense"}
    jwt_file = tmp_path / "r.jwt"
    jwt_file.write_text("x")

    refused(trellis("router", "enroll", str(jwt_file), env=env), "TRELLIS_ROUTER_EDGE_BIND must be host:port")


def test_init_makes_the_embedded_router_in_the_home(home: Path) -> None:
    router = home / "router"

    assert sorted(p.name for p in router.iterdir()) == [
        "ca.pem",
        "cert.pem",
        "key.pem",
        "router.json",
        "server.pem",
    ]
    assert stat.S_IMODE(router.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in router.iterdir())
