"""Secrets at rest with real ``trellis init`` / ``trellis serve`` processes.

Private modes on everything under ``TRELLIS_HOME`` (only the public ``*.pem`` certificates may be
readable by others), no live session token nor the admin password in any file, and no admin
password in the environment of the server or its gunicorn worker.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.seconds(45)]

PASSWORD = "e2e-secret-admin-password"
PASSWORD_VARS = ("TRELLIS_ADMIN_PASSWORD", "TRELLIS_ADMIN_PASSWORD_FILE")
#: A permissive umask for the processes started here: the CLI must tighten it itself.
LOOSE_UMASK = 0o022


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


class Controller(Server):
    """A server whose processes get neither password variable unless a call passes one, with the
    admin password in a file beside the home, and its log outside the home (the home is what is
    checked)."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(
            tmp / "home",
            password=PASSWORD,
            env=dict.fromkeys(PASSWORD_VARS),
            log=tmp / "serve.log",
            umask=LOOSE_UMASK,
        )
        self.password_file = tmp / "admin-password"
        self.password_file.write_text(PASSWORD + "\n")
        self.password_file.chmod(0o600)

    @property
    def db(self) -> Path:
        return self.home / "trellis.duckdb"


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    with Controller(tmp_path) as ctl:
        yield ctl


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        found.extend(int(child) for child in children.read_text().split())
    return found


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.decode(errors="replace").partition("=") for entry in raw.split(b"\0") if entry)
    return {name: value for name, _, value in pairs}


def _umask(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise AssertionError(f"no Umask in /proc/{pid}/status")


def _assert_private(home: Path) -> None:
    """The home 0700; the database, its WAL and every key 0600; nothing else open to others
    except public certificates (``pki/*.pem``), which must not be writable by others."""
    assert _mode(home) == 0o700
    assert _mode(home / "pki") == 0o700
    assert _mode(home / "trellis.duckdb") == 0o600
    wal = home / "trellis.duckdb.wal"
    if wal.exists():
        assert _mode(wal) == 0o600
    keys = sorted(home.glob("pki/*.key"))
    assert keys, "no key files found"
    for key in keys:
        assert _mode(key) == 0o600, key
    for path in home.rglob("*"):
        mode = _mode(path)
        if path.parent == home / "pki" and path.suffix == ".pem":
            assert mode & 0o022 == 0, f"{path} {oct(mode)}"
            assert b"PRIVATE KEY" not in path.read_bytes(), path
        else:
            assert mode & 0o077 == 0, f"{path} {oct(mode)}"


def _files_containing(home: Path, secret: str) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_secrets_at_rest_and_in_no_environment(controller: Controller) -> None:
    done = controller.init(check=False, TRELLIS_ADMIN_PASSWORD_FILE=str(controller.password_file))
    assert done.returncode == 0, done.stderr
    assert "created admin 'admin' with the password from TRELLIS_ADMIN_PASSWORD_FILE" in done.stdout
    _assert_private(controller.home)

    # Started with the password variables set, as `make run` leaves them: serve must drop them.
    pid = controller.start(
        TRELLIS_ADMIN_PASSWORD=PASSWORD, TRELLIS_ADMIN_PASSWORD_FILE=str(controller.password_file)
    ).pid
    token = controller.login()
    for path in ("/edge/management/v1/identities", "/edge/management/v1/api-sessions"):
        listed = controller.call("GET", path, token)
        assert listed.status_code == 200, listed.text
    created = controller.call(
        "POST",
        "/edge/management/v1/services",
        token,
        json={"name": "secrets-svc", "encryptionRequired": True},
    )
    assert created.status_code == 201, created.text
    assert controller.call("GET", "/edge/management/v1/current-api-session", token).status_code == 200

    workers = _children(pid)
    assert workers, "no gunicorn worker found"
    for process in (pid, *workers):
        environ = _environ(process)
        assert environ.get("TRELLIS_HOME") == str(controller.home)  # the right process, readable
        assert not [name for name in environ if name.startswith("TRELLIS_ADMIN_PASSWORD")], process
        assert PASSWORD.encode() not in Path(f"/proc/{process}/environ").read_bytes()
        assert PASSWORD.encode() not in Path(f"/proc/{process}/cmdline").read_bytes()
        assert _umask(process) & 0o077 == 0o077, process

    # While serving (the session is in the WAL or the database) and after a clean stop (checkpoint).
    _assert_private(controller.home)
    assert _files_containing(controller.home, token) == []
    assert _files_containing(controller.home, PASSWORD) == []
    controller.stop()
    assert not (controller.home / "trellis.duckdb.wal").exists()
    _assert_private(controller.home)
    assert _files_containing(controller.home, token) == []
    assert _files_containing(controller.home, PASSWORD) == []

    # The stored hash still opens the session after a restart (without the variables this time).
    controller.start()
    again = controller.call(
        "GET", "/edge/management/v1/services", token, params={"filter": 'name = "secrets-svc"'}
    )
    assert again.status_code == 200, again.text
    assert again.json()["meta"]["pagination"]["totalCount"] == 1
    controller.stop()
    assert _files_containing(controller.home, token) == []


def test_init_tightens_an_existing_install(controller: Controller) -> None:
    assert controller.init(check=False, TRELLIS_ADMIN_PASSWORD=PASSWORD).returncode == 0
    controller.home.chmod(0o755)
    (controller.home / "pki").chmod(0o755)
    controller.db.chmod(0o644)
    for key in controller.home.glob("pki/*.key"):
        key.chmod(0o644)

    again = controller.init(check=False)
    assert again.returncode == 0, again.stderr
    assert "already initialised" in again.stdout
    _assert_private(controller.home)


def test_serve_tightens_an_existing_install(controller: Controller) -> None:
    assert controller.init(check=False, TRELLIS_ADMIN_PASSWORD=PASSWORD).returncode == 0
    controller.home.chmod(0o755)
    controller.db.chmod(0o644)
    controller.start()
    _assert_private(controller.home)
    controller.login()
    controller.stop()
    _assert_private(controller.home)


def test_init_password_sources(controller: Controller, tmp_path: Path) -> None:
    both = controller.init(
        check=False,
        TRELLIS_ADMIN_PASSWORD=PASSWORD,
        TRELLIS_ADMIN_PASSWORD_FILE=str(controller.password_file),
    )
    assert both.returncode != 0
    assert "not both" in both.stderr
    missing = controller.init(check=False, TRELLIS_ADMIN_PASSWORD_FILE=str(tmp_path / "missing"))
    assert missing.returncode != 0
    assert "cannot read" in missing.stderr
    short = tmp_path / "short"
    short.write_text("abc\n")
    too_short = controller.init(check=False, TRELLIS_ADMIN_PASSWORD_FILE=str(short))
    assert too_short.returncode != 0
    assert "TRELLIS_ADMIN_PASSWORD_FILE must be 5 to 100 characters" in too_short.stderr
    assert not controller.home.exists()  # refused before anything was created

    generated = controller.init(check=False)
    assert generated.returncode == 0, generated.stderr
    assert "created admin 'admin' with password: " in generated.stdout
    _assert_private(controller.home)
