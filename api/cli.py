"""The ``trellis`` command: ``init`` prepares the data directory, ``serve`` runs the API,
``restore`` puts a database snapshot back in place while the server is stopped.

Secrets at rest: the process umask is ``077`` before anything is created, so ``TRELLIS_HOME``
(0700), the database, its WAL and the keys (0600) are never readable by others, not even
briefly; an existing home, PKI directory and key files are tightened when found looser.

The admin password reaches ``init`` through ``TRELLIS_ADMIN_PASSWORD`` or, better, through
``TRELLIS_ADMIN_PASSWORD_FILE`` (a file holding it); ``init`` drops both from its environment
once read, and ``serve`` re-executes itself without them, so that neither the server nor its
gunicorn worker carries the password (``/proc/<pid>/environ`` shows the environment a process
was executed with, which deleting from ``os.environ`` does not change).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from api.settings import Settings
from storage.files import restrict_umask, tighten

PASSWORD_VAR = "TRELLIS_ADMIN_PASSWORD"
PASSWORD_FILE_VAR = "TRELLIS_ADMIN_PASSWORD_FILE"
#: Never kept in the environment of ``serve`` (nor of the worker it forks).
PASSWORD_VARS = (PASSWORD_VAR, PASSWORD_FILE_VAR)


def admin_password(environ: MutableMapping[str, str]) -> tuple[str, str]:
    """The chosen admin password ("" to generate one) and the variable it came from.

    ``TRELLIS_ADMIN_PASSWORD_FILE`` names a file holding the password (one trailing line ending
    is ignored). Setting both variables is refused, as is a password that could not log in: the
    password authentication body allows 5 to 100 characters.
    """
    value = environ.get(PASSWORD_VAR) or ""
    file = environ.get(PASSWORD_FILE_VAR) or ""
    if value and file:
        raise SystemExit(f"set {PASSWORD_VAR} or {PASSWORD_FILE_VAR}, not both")
    if not file:
        source = PASSWORD_VAR
    else:
        source = PASSWORD_FILE_VAR
        try:
            value = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as ex:
            raise SystemExit(f"{PASSWORD_FILE_VAR}: cannot read {file}: {ex}") from None
        value = value.removesuffix("\n").removesuffix("\r")
        if not value:
            raise SystemExit(f"{PASSWORD_FILE_VAR}: {file} is empty")
    if value and not 5 <= len(value) <= 100:
        raise SystemExit(f"{source} must be 5 to 100 characters")
    return value, source


def forget_password(environ: MutableMapping[str, str]) -> None:
    """Drop the admin password variables from ``environ`` (and so from any child's)."""
    for name in PASSWORD_VARS:
        environ.pop(name, None)


def secure_home(settings: Settings) -> None:
    """Tighten an existing home, PKI directory and key files to owner-only access."""
    from pki.authority import PkiPaths

    paths = PkiPaths.in_directory(settings.pki_dir)
    for path in (settings.home, settings.pki_dir, *paths.key_files()):
        tighten(path)


def init(settings: Settings, *, out: TextIO = sys.stdout) -> bool:
    """Create the database, the PKI and the default admin if absent; True if anything was new."""
    from api.app import build_controller
    from engine.managers.bootstrap import create_default_admin, has_default_admin
    from pki.authority import PkiPaths, init_pki
    from pki.passwords import generate_password

    restrict_umask()
    chosen, source = admin_password(os.environ)  # validated before anything is created
    forget_password(os.environ)
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    secure_home(settings)
    created = False
    if not PkiPaths.in_directory(settings.pki_dir).exists():
        init_pki(settings.pki_dir, sans=list(settings.sans), now=datetime.now(UTC))
        print(
            f"created PKI in {settings.pki_dir}; clients trust {settings.pki_dir / 'ca-bundle.pem'}", file=out
        )
        created = True
    ctrl = build_controller(settings)
    try:
        if not has_default_admin(ctrl.env):
            password = chosen
            generated = not password
            if generated:
                password = generate_password()
            create_default_admin(ctrl.env, "admin", password)
            if generated:
                print(f"created admin 'admin' with password: {password}", file=out)
                print(f"(shown once; set {PASSWORD_FILE_VAR} or {PASSWORD_VAR} to choose it)", file=out)
            else:
                print(f"created admin 'admin' with the password from {source}", file=out)
            created = True
    finally:
        ctrl.env.store.close()
    return created


def serve_without_password() -> None:
    """Re-execute ``serve`` without the admin password variables, if they are present.

    Deleting them from ``os.environ`` would not do: ``/proc/<pid>/environ`` keeps showing the
    environment the process was executed with. Returns only when there is nothing to strip.
    """
    if not any(name in os.environ for name in PASSWORD_VARS):
        return
    env = {name: value for name, value in os.environ.items() if name not in PASSWORD_VARS}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "api.cli", "serve"], env)


def restore(settings: Settings, snapshot: Path, *, out: TextIO = sys.stdout) -> None:
    """Replace the home's database with ``snapshot`` (``POST /database/snapshot`` made it).

    Refused, with nothing changed, while a server holds the database; the replaced database is
    kept beside it. Failures end the command with their reason (``SystemExit``).
    """
    from storage.duckdb import RestoreError, restore_snapshot

    restrict_umask()
    try:
        aside = restore_snapshot(settings.db_path, snapshot, datetime.now(UTC))
    except RestoreError as ex:
        raise SystemExit(f"trellis restore: {ex}") from None
    print(f"restored {settings.db_path} from {snapshot}", file=out)
    if aside is not None:
        print(f"the replaced database is kept as {aside}", file=out)


def main(argv: list[str] | None = None) -> int:
    restrict_umask()  # before anything is created; gunicorn and its worker inherit it
    parser = argparse.ArgumentParser(prog="trellis", description="OpenZiti-compatible controller")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the data directory, PKI and admin if absent")
    sub.add_parser("serve", help="serve the client and management APIs over HTTPS")
    restoring = sub.add_parser("restore", help="replace the database with a snapshot (server stopped)")
    restoring.add_argument("snapshot", type=Path, help="a snapshot file made by POST /database/snapshot")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve_without_password()
    settings = Settings.from_env()
    if args.command == "init":
        if not init(settings):
            print(f"{settings.home} is already initialised")
        return 0
    if args.command == "serve":
        from api.serve import serve

        if settings.home.is_dir():
            secure_home(settings)
        print(f"serving https://{settings.bind} (home {settings.home})", flush=True)
        serve(settings)
        return 0
    if args.command == "restore":
        restore(settings, args.snapshot)
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
