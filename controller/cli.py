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

Every refusal is one line, ``trellis: <why>``, on stderr and exit status 2, before anything is
changed: a setting not of its form (:mod:`controller.settings` checks each the command reads), a home the
command cannot use or one another server holds (:mod:`controller.home`), an address ``serve`` cannot
listen on (:func:`controller.serve.check_bind`), a snapshot ``restore`` cannot use. ``--help`` (also
per command) lists the settings with their defaults and forms; ``--version`` the version.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import MutableMapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from controller import access_cli, analysis_cli, home, query_cli, stream_cli
from controller.settings import SettingError, Settings, describe, listing
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
        raise SettingError(f"set {PASSWORD_VAR} or {PASSWORD_FILE_VAR}, not both")
    if not file:
        source = PASSWORD_VAR
    else:
        source = PASSWORD_FILE_VAR
        try:
            value = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as ex:
            reason = ex.strerror if isinstance(ex, OSError) and ex.strerror else str(ex)
            raise SettingError(f"{PASSWORD_FILE_VAR}: cannot read {file}: {reason}") from None
        value = value.removesuffix("\n").removesuffix("\r")
        if not value:
            raise SettingError(f"{PASSWORD_FILE_VAR}: {file} is empty")
    if value and not 5 <= len(value) <= 100:
        raise SettingError(f"{source} must be 5 to 100 characters")
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
    restrict_umask()
    chosen, source = admin_password(os.environ)  # validated before anything is created
    forget_password(os.environ)
    home.check(settings.home, "init")
    home.refuse_while_served(settings.home)
    from controller.compose import build_controller
    from engine.managers.bootstrap import create_default_admin, has_default_admin
    from pki.authority import PkiPaths, init_pki
    from pki.passwords import generate_password

    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    secure_home(settings)
    created = False
    paths = PkiPaths.in_directory(settings.pki_dir)
    # a home given a network's CA (its pki/ copied without the server certificate) joins it
    joining = not paths.server_cert.is_file()
    if not paths.exists():
        init_pki(settings.pki_dir, sans=list(settings.sans), now=datetime.now(UTC))
        print(
            f"created PKI in {settings.pki_dir}; clients trust {settings.pki_dir / 'ca-bundle.pem'}", file=out
        )
        created = True
    ctrl = build_controller(settings, joining=joining)
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
        if settings.router:
            from controller import embedded_router

            created = embedded_router.ensure(ctrl, settings, out=out) or created
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
    os.execve(sys.executable, [sys.executable, "-m", "controller.cli", "serve"], env)


def restore(settings: Settings, snapshot: Path, *, out: TextIO = sys.stdout) -> None:
    """Replace the home's database with ``snapshot`` (``POST /database/snapshot`` made it).

    Refused, with nothing changed, while a server holds the home; the replaced database is
    kept beside it. Failures end the command with their reason (:class:`SettingError`).
    """
    from storage.duckdb import RestoreError, restore_snapshot

    if settings.database_url:
        raise SettingError(
            "restore puts back a snapshot of the DuckDB database; the data is in PostgreSQL "
            "(TRELLIS_DATABASE_URL): restore it with pg_restore"
        )
    restrict_umask()
    home.check(settings.home, "restore")
    home.refuse_while_served(settings.home)
    if not snapshot.is_file():
        raise SettingError(f"restore: {snapshot}: no such snapshot file")
    try:
        aside = restore_snapshot(settings.db_path, snapshot, datetime.now(UTC))
    except RestoreError as ex:
        raise SettingError("restore: " + " ".join(str(ex).split())) from None
    print(f"restored {settings.db_path} from {snapshot}", file=out)
    if aside is not None:
        print(f"the replaced database is kept as {aside}", file=out)


def router_enroll(settings: Settings, jwt_file: Path, *, out: TextIO = sys.stdout) -> None:
    """Enroll a standalone router into ``TRELLIS_ROUTER_HOME`` with the JWT in ``jwt_file``."""
    from controller.embedded_router import router_addresses
    from router import identity
    from router.enroll import EnrollError, enroll

    directory = settings.router_home
    if identity.is_enrolled(directory):
        raise SettingError(f"TRELLIS_ROUTER_HOME {directory} already holds an enrolled router")
    try:
        token = jwt_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as ex:
        raise SettingError(
            f"router enroll: cannot read {jwt_file}: {getattr(ex, 'strerror', None) or ex}"
        ) from None
    bind, advertise, link = router_addresses(settings)
    try:
        record = enroll(
            token, directory, ctrl=settings.router_ctrl, edge=bind, advertise=advertise, link=link
        )
    except EnrollError as ex:
        raise SettingError(f"router enroll: {ex}") from None
    print(
        f"enrolled edge router {record.id} in {directory}; SDKs reach it at {record.edge_url}",
        file=out,
    )


def router_run(settings: Settings, *, await_controller: bool = False) -> None:
    """Run the router enrolled in ``TRELLIS_ROUTER_HOME`` until stopped."""
    from router import identity
    from router.enroll import split_addresses
    from router.main import run_router

    try:
        record = identity.load(settings.router_home)
    except identity.IdentityError as ex:
        raise SettingError(f"TRELLIS_ROUTER_HOME: {ex}") from None
    if settings.router_ctrl:
        record = record.with_ctrls(split_addresses(settings.router_ctrl))
    run_router(
        settings.router_home,
        record,
        await_controller=await_controller,
        offline_grace=settings.router_offline_grace,
        follow_controllers=not settings.router_ctrl,  # TRELLIS_ROUTER_CTRL chose them
    )


#: How long ``trellis controller remove`` waits to learn which controllers are online.
ONLINE_WAIT_SECONDS = 10.0


def controller_remove(settings: Settings, controller_id: str, *, out: TextIO = sys.stdout) -> None:
    """Remove a controller that is gone for good from the network (OpenZiti's ``ziti agent
    cluster remove``): its record goes from the database ``serve`` uses, so ``/controllers`` no
    longer lists it, enrollment JWTs no longer name it, and routers are told to stop connecting
    to it. Refused for this home's own controller and for a controller that is online."""
    from controller.compose import build_controller
    from engine.errors import EntityCanNotBeDeletedError, NotFoundError

    check_serve_home(settings)
    if not settings.database_url:
        home.refuse_while_served(settings.home)  # one process may open the DuckDB file
    ctrl = build_controller(settings)
    try:
        if settings.database_url and not ctrl.managers.fleet.wait_shared(ONLINE_WAIT_SECONDS):
            raise SettingError("controller remove: which controllers are online could not be read")
        try:
            removed = ctrl.managers.controllers.remove(controller_id, own_id=ctrl.controller_id)
        except NotFoundError:
            raise SettingError(f"controller remove: no controller {controller_id!r}") from None
        except EntityCanNotBeDeletedError as ex:
            raise SettingError(f"controller remove: {ex.message}") from None
    finally:
        ctrl.env.store.close()
    print(f"removed controller {removed.id} ({removed.ctrl_address or 'no control address'})", file=out)


def check_serve_home(settings: Settings) -> None:
    """Refuse a home ``serve`` cannot use. With ``TRELLIS_DATABASE_URL`` the data is in
    PostgreSQL and the home holds the PKI (and the embedded router), not ``trellis.duckdb``."""
    if not settings.database_url:
        home.check(settings.home, "serve")
        return
    home.check(settings.home, "init")  # neither a file nor a directory of other files
    state, lacking = home.examine(settings.home)
    lacking = [name for name in lacking if name != home.DB_FILE]
    if state == home.MISSING:
        raise SettingError(
            f"TRELLIS_HOME {home.shown(settings.home)} does not exist: run `trellis init` first"
        )
    if lacking:
        raise SettingError(
            f"TRELLIS_HOME {home.shown(settings.home)} is not initialised (no {', '.join(lacking)}): "
            "run `trellis init` first"
        )


def serve(settings: Settings, *, out: TextIO = sys.stdout) -> None:
    """Check the home, take its server lock, check the address and the database, then serve
    until stopped."""
    check_serve_home(settings)
    database = ""
    if settings.database_url:  # reachable and usable, before the worker starts (nothing loaded)
        from controller.compose import check_database

        database = f", database {check_database(settings)}"
    secure_home(settings)
    lock = home.hold(settings.home)  # held until this process (and its worker) exits
    home.wait_for_database(settings.db_path)
    from controller import serve as serving  # gunicorn and the app's modules: once the home is fine

    serving.check_bind(settings)
    from controller import embedded_router

    print(f"serving https://{settings.bind} (home {settings.home}{database})", file=out, flush=True)
    router = embedded_router.EmbeddedRouter(settings)
    router.start()  # with serve, connecting once the control listener accepts; stopped first
    try:
        serving.serve(settings, router)
    except serving.StartFailed as ex:
        if ex.args[0] == serving.WORKER_BOOT_ERROR:  # unexpected: the traceback is in the log
            print("trellis: the server's worker failed to start (the log above says why)", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        router.stop()
        os.close(lock)


# -- the command line ------------------------------------------------------------------------------

DESCRIPTION = """\
Trellis, an OpenZiti-compatible controller: OpenZiti's edge client and management APIs over
HTTPS, its data (a DuckDB database and a PKI) in TRELLIS_HOME. `trellis init` makes the home,
`trellis serve` serves it."""

ERRORS = """\
Settings come from the environment; an empty variable is the same as an unset one. A bad
setting, or a home the command cannot use, stops it with one line on stderr and exit status 2."""

COMMAND_HELP = {
    "init": (
        "create TRELLIS_HOME (database, PKI, the default admin) if absent",
        "Create TRELLIS_HOME (mode 0700) with the database, the PKI and the default admin "
        "'admin', whatever of them is absent; an initialised home is left as it is. The admin's "
        "password comes from TRELLIS_ADMIN_PASSWORD_FILE or TRELLIS_ADMIN_PASSWORD, else one is "
        "generated and printed once. Refused for a directory that holds other files.",
    ),
    "serve": (
        "serve the client and management APIs over HTTPS (after init)",
        "Serve the edge client and management APIs over HTTPS on TRELLIS_BIND, in the "
        "foreground, until Ctrl-C. Needs a home made by `trellis init`; one server per home.",
    ),
    "router": (
        "enroll or run an edge router (trellis router enroll JWT_FILE | trellis router run)",
        "An edge router: OpenZiti SDKs connect to it and it relays their traffic; it connects to "
        "the controller's control listener. `enroll JWT_FILE` enrolls it with the JWT of an edge "
        "router made in the management API into TRELLIS_ROUTER_HOME; `run` runs it there until "
        "Ctrl-C.",
    ),
    "controller": (
        "remove a controller that is gone for good (trellis controller remove ID)",
        "The controllers of the network (GET /controllers lists them, online or not). `remove ID` "
        "forgets one that is gone for good: /controllers no longer lists it, enrollment JWTs no "
        "longer name it and routers stop connecting to it. Refused for this home's own "
        "controller and for one that is online. Reads the settings `trellis serve` reads.",
    ),
    "restore": (
        "replace the database with a snapshot (server stopped)",
        "Put a snapshot made by POST /edge/management/v1/database/snapshot back in place as "
        "TRELLIS_HOME's database, with the server stopped; the replaced database is kept beside "
        "it as trellis.duckdb.pre-restore-<time>.",
    ),
}


class VersionAction(argparse.Action):
    """``--version``: Trellis's version and the OpenZiti API it implements (imported only then)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=str(kwargs["help"]))

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from api import ZITI_COMPAT_VERSION, __version__

        print(f"trellis {__version__} (OpenZiti controller API {ZITI_COMPAT_VERSION})")
        parser.exit()


def _settings_epilog(command: str | None) -> str:
    if command is None:
        title = "settings (environment variables) and their defaults; `trellis <command> --help` lists\n"
        title += "those the command reads, what each means and the form it takes"
        return f"{title}:\n{listing()}\n\n{ERRORS}"
    return f"settings {command} reads (environment variables):\n{describe(command)}\n\n{ERRORS}"


def build_parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="trellis", description=DESCRIPTION, epilog=_settings_epilog(None), formatter_class=raw
    )
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="<command>")
    for command, (summary, description) in COMMAND_HELP.items():
        one = sub.add_parser(
            command,
            help=summary,
            description=textwrap.fill(description, 79),
            epilog=_settings_epilog("serve" if command == "controller" else command),
            formatter_class=raw,
        )
        if command == "restore":
            one.add_argument("snapshot", type=Path, help="a snapshot file (trellis.duckdb-YYYYMMDD-HHMMSS)")
        if command == "controller":
            actions = one.add_subparsers(title="actions", dest="action", required=True, metavar="<action>")
            remove = actions.add_parser(
                "remove",
                help="remove a controller that is gone for good",
                epilog=_settings_epilog("serve"),
                formatter_class=raw,
            )
            remove.add_argument("id", help="the controller's id, as GET /controllers shows it")
        if command == "router":
            actions = one.add_subparsers(title="actions", dest="action", required=True, metavar="<action>")
            enroll = actions.add_parser(
                "enroll",
                help="enroll with an edge router's one-time JWT",
                epilog=_settings_epilog("router-enroll"),
                formatter_class=raw,
            )
            enroll.add_argument("jwt", type=Path, help="a file holding the enrollment JWT")
            run_action = actions.add_parser(
                "run",
                help="run the enrolled router",
                epilog=_settings_epilog("router-run"),
                formatter_class=raw,
            )
            run_action.add_argument(
                "--await-controller",
                action="store_true",
                help="connect to the controller only once its control listener accepts connections, "
                "trying quietly until then (how trellis serve starts its embedded router)",
            )
    access_cli.add_commands(sub)
    analysis_cli.add_commands(sub)
    stream_cli.add_commands(sub)
    query_cli.add_commands(sub)
    return parser


def run(args: argparse.Namespace) -> int:
    if (answer := analysis_cli.run(args)) is not None:  # explain, what-if, check
        return answer
    if (answer := stream_cli.run(args)) is not None:  # watch-access
        return answer
    if (answer := access_cli.run(args)) is not None:  # advise, test-access: no settings read
        return answer
    if (answer := query_cli.run(args)) is not None:  # query: no settings read
        return answer
    if args.command == "serve":
        serve_without_password()
    command = f"{args.command}-{args.action}" if args.command in ("router", "controller") else args.command
    # `controller remove` opens the home and the database `serve` does, with its settings
    settings = Settings.from_env(command="serve" if args.command == "controller" else command)
    if args.command != "serve":  # serve configures gunicorn's logging and ours (controller.serve)
        from controller.logs import configure_from_env

        configure_from_env()
    if args.command == "init":
        if not init(settings):
            print(f"{settings.home} is already initialised")
    elif args.command == "serve":
        serve(settings)
    elif args.command == "restore":
        restore(settings, args.snapshot)
    elif command == "router-enroll":
        router_enroll(settings, args.jwt)
    elif command == "router-run":
        router_run(settings, await_controller=args.await_controller)
    elif command == "controller-remove":
        controller_remove(settings, args.id)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``trellis``: a refusal (:class:`SettingError`) is one line on stderr and exit status 2."""
    restrict_umask()  # before anything is created; gunicorn and its worker inherit it
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except SettingError as ex:
        print(f"trellis: {ex.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
