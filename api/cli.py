"""The ``trellis`` command: ``init`` prepares the data directory, ``serve`` runs the API."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import TextIO

from api.settings import Settings


def init(settings: Settings, *, out: TextIO = sys.stdout) -> bool:
    """Create the database, the PKI and the default admin if absent; True if anything was new."""
    from api.app import build_controller
    from engine.managers.bootstrap import create_default_admin, has_default_admin
    from pki.authority import PkiPaths, init_pki
    from pki.passwords import generate_password

    chosen = os.environ.get("TRELLIS_ADMIN_PASSWORD") or ""
    if chosen and not 5 <= len(chosen) <= 100:
        # The password authentication body allows 5 to 100 characters: refuse an admin who could not log in.
        raise SystemExit("TRELLIS_ADMIN_PASSWORD must be 5 to 100 characters")
    settings.home.mkdir(parents=True, exist_ok=True)
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
                print("(shown once; set TRELLIS_ADMIN_PASSWORD to choose it)", file=out)
            else:
                print("created admin 'admin' with the password from TRELLIS_ADMIN_PASSWORD", file=out)
            created = True
    finally:
        ctrl.env.store.close()
    return created


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trellis", description="OpenZiti-compatible controller")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("init", help="create the data directory, PKI and admin if absent")
    sub.add_parser("serve", help="serve the client and management APIs over HTTPS")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if args.command == "init":
        if not init(settings):
            print(f"{settings.home} is already initialised")
        return 0
    if args.command == "serve":
        from api.serve import serve

        print(f"serving https://{settings.bind} (home {settings.home})", flush=True)
        serve(settings)
        return 0
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
