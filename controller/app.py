"""The composition root: ``create_app`` builds the store, the ports, the managers and the Falcon app.

Collaborators come in as keyword arguments (tests pass ``engine.testing`` fakes and a temporary
store); whatever is not given is built from ``settings``. Nothing here is global: two apps in one
process share nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import falcon
import orjson
from falcon import media

from api import ZITI_COMPAT_VERSION, __version__, authentication, current, errors, fabric, info
from api.client import register_all as register_client
from api.controller import Controller
from api.http import DEFERRED_KEY
from api.json_schemas import JsonSchemaChecker
from api.limits import RequestLimits
from api.management import register_all as register_management
from api.middleware import RequestMiddleware
from api.routing import Routes, SharedRouter
from api.views import Views
from controller.control import ControlServer
from controller.maintenance import Maintenance
from controller.settings import SettingError, Settings
from controller.system import ShortIds, SystemClock
from controller.tls import TlsTrust
from engine.entities import all as _all_kinds  # noqa: F401  (registers every entity kind)
from engine.managers._base import Env
from engine.managers.enrollment import EnrollmentSettings
from engine.managers.registry import build_managers
from engine.ports import (
    Backoff,
    Clock,
    ExternalJwtVerifier,
    IdGenerator,
    PasswordHasher,
    Store,
    TotpService,
)
from pki import Argon2idPasswordHasher, CertificateAuthority, JwksVerifier, JwtSigner, PkiPaths, PyotpTotp

log = logging.getLogger("trellis")


def open_store(settings: Settings) -> Store:
    """The store of ``settings``: the PostgreSQL database of ``TRELLIS_DATABASE_URL`` when set,
    else the DuckDB file in ``TRELLIS_HOME``. A PostgreSQL database that cannot be opened stops
    the command in one line (:class:`SettingError`), its password never shown."""
    if settings.database_url:
        from storage.postgres import PostgresStore

        with _database_url_refused():
            return PostgresStore(settings.database_url, change_log_retain=settings.change_log_retain)
    from storage.duckdb import DuckDBStore

    return DuckDBStore(
        settings.db_path,
        memory_limit=settings.db_memory_limit,
        change_log_retain=settings.change_log_retain,
        writer=settings.db_writer,
        journal=settings.db_journal,
    )


def check_database(settings: Settings) -> str:
    """Where ``settings`` keep the data, checked without loading it (what ``trellis serve`` does
    before its worker starts): the PostgreSQL database of ``TRELLIS_DATABASE_URL`` must be
    reachable and usable, else :class:`SettingError`; its description, password masked (the
    DuckDB file's path when there is none)."""
    if not settings.database_url:
        return str(settings.db_path)
    from storage.postgres import probe

    with _database_url_refused():
        return probe(settings.database_url)


@contextmanager
def _database_url_refused() -> Iterator[None]:
    """The PostgreSQL store's refusals as one-line :class:`SettingError`s (never the password)."""
    from storage.postgres import DatabaseUrlError, StoreOpenError

    try:
        yield
    except DatabaseUrlError as ex:
        raise SettingError(f"TRELLIS_DATABASE_URL: {ex}") from None
    except StoreOpenError as ex:
        raise SettingError(f"TRELLIS_DATABASE_URL: {' '.join(str(ex).split())}") from None


def load_pki(settings: Settings) -> CertificateAuthority:
    paths = PkiPaths.in_directory(settings.pki_dir)
    if not paths.exists():
        raise SystemExit(f"no PKI in {settings.pki_dir}: run `trellis init` first")
    return CertificateAuthority.load(paths)


def enrollment_settings(settings: Settings) -> EnrollmentSettings:
    return EnrollmentSettings(
        issuer=f"https://{settings.advertised_address}",
        # Where a router enrolled with it is to connect (OpenZiti's ``tls:host:port`` form).
        ctrls=(f"tls:{settings.advertised_ctrl_address}",),
        identity_duration=settings.enrollment_duration,
        router_duration=settings.enrollment_duration,
    )


def build_controller(
    settings: Settings,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    hasher: PasswordHasher | None = None,
    ca: CertificateAuthority | None = None,
    totp: TotpService | None = None,
    jwt_verifier: ExternalJwtVerifier | None = None,
    joining: bool = False,
) -> Controller:
    """The controller's state: ports (given or built from ``settings``) and one set of managers.
    ``joining``: ``trellis init`` issued this home's server certificate (see
    :func:`controller_identity`)."""
    authority = ca if ca is not None else load_pki(settings)
    store = store if store is not None else open_store(settings)
    ids = ids if ids is not None else ShortIds()
    env = Env(
        store=store,
        clock=clock if clock is not None else SystemClock(),
        ids=ids,
        hasher=hasher if hasher is not None else Argon2idPasswordHasher(),
        schemas=JsonSchemaChecker(),
        ca=authority,
        tokens=JwtSigner.for_authority(authority),
        totp=totp if totp is not None else PyotpTotp(),
        jwt_verifier=(
            jwt_verifier
            if jwt_verifier is not None
            else JwksVerifier(allow_loopback=settings.jwks_allow_loopback)
        ),
        # shared with the store's other processes where it has any (PostgreSQL)
        attempts=store.attempts_ledger(),
        activity=store.activity_board(max(settings.session_timeout * 2, timedelta(days=1))),
        fleet_board=store.fleet_board(),
        posture_board=store.posture_board(),
    )
    managers = build_managers(
        env,
        enrollment_settings(settings),
        session_timeout=settings.session_timeout,
        code_backoff=Backoff(settings.mfa_free_failures, settings.mfa_backoff, settings.mfa_backoff_max),
    )
    # several workers may start at once on a new shared database: the first one's id for all
    existing = store.get_setting("instance_id")
    instance_id = existing or store.setdefault_setting("instance_id", ids.new_id())
    return Controller(
        settings=settings,
        managers=managers,
        pki=authority,
        instance_id=instance_id,
        version=ZITI_COMPAT_VERSION,
        version_trellis=__version__,
        controller_id=controller_identity(
            settings.home, instance_id, ids, joining=joining and bool(existing)
        ),
    )


#: The file of a home that holds its controller's id among the network's (``/controllers``).
CONTROLLER_ID_FILE = "controller.id"


def controller_identity(home: Path, instance_id: str, ids: IdGenerator, *, joining: bool) -> str:
    """This controller's id: the one its home keeps; else, kept from now on, a new one for a
    controller joining a network that has one already (``trellis init`` of a home whose server
    certificate it issues, on a shared database that has an ``instance_id``), and otherwise the
    store's ``instance_id`` (the first controller, and every home made before homes kept it)."""
    path = home / CONTROLLER_ID_FILE
    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = ""
    except OSError as ex:
        raise SettingError(f"{path} cannot be read: {ex.strerror}") from None
    if kept:
        return kept
    chosen = ids.new_id() if joining else instance_id
    if home.is_dir():
        partial = path.with_name(f".{CONTROLLER_ID_FILE}.{os.getpid()}")
        partial.write_text(chosen + "\n", encoding="utf-8")
        os.replace(partial, path)  # several workers at once write the same id: any one wins
    return chosen


class TrellisApp(falcon.App[falcon.Request, falcon.Response]):
    """The Falcon app with the controller behind it at ``app.ctrl`` and its routes at ``app.routes``."""

    ctrl: Controller
    routes: Routes
    trust: TlsTrust
    #: Per-client request budgets and the per-request time budget.
    limits: RequestLimits
    #: The expired-session purge ticker (stopped until ``maintenance.start()``: ``trellis serve``).
    maintenance: Maintenance
    #: The control listener, once :meth:`serve_alongside` runs it.
    control: ControlServer | None = None

    #: The descriptor of the home's control lock, once this process holds it.
    _control_lock: int | None = None

    def serves_control(self) -> bool:
        """Whether this process runs the control listener. With one store per process (DuckDB),
        it does. With a shared database, one worker of each controller does: the first of them
        to take its home's control lock, held for as long as it runs. Every controller of a
        network has a home and a control address of its own, so each listens on its own;
        :meth:`~engine.ports.Store.lead` (one process of the whole database) decides the
        maintenance ticker only."""
        if not self.ctrl.settings.database_url:
            return self.ctrl.env.store.lead()
        if self._control_lock is None:
            self._control_lock = _hold_control_lock(self.ctrl.settings.home)
        return self._control_lock is not None

    def _release_control(self) -> None:
        fd, self._control_lock = self._control_lock, None
        if fd is not None:
            os.close(fd)

    async def serve_alongside(
        self, loop: asyncio.AbstractEventLoop, executor: concurrent.futures.Executor
    ) -> Callable[[], Awaitable[None]]:
        """Serve, on the server's event loop, what runs beside the HTTP API: the control listener
        edge routers connect to (``TRELLIS_CTRL_BIND``, ``controller.control``), its engine calls on
        ``executor``. The answer stops it. An address that cannot be bound is logged and the API
        served all the same. Of several workers of one controller, only one listens: one process
        can bind the address (:meth:`serves_control`)."""
        settings = self.ctrl.settings
        if not self.serves_control():
            log.info("another worker serves the control listener on %s", settings.ctrl_bind)
            return _nothing
        server = ControlServer(
            self.ctrl,
            PkiPaths.in_directory(settings.pki_dir),
            loop=loop,
            executor=executor,
            address=settings.ctrl_bind,
        )
        try:
            await server.start()
        except Exception as ex:  # OSError mostly: the address is taken or not this machine's
            log.error(
                "the control listener cannot listen on %s (%s): edge routers cannot connect",
                settings.ctrl_bind,
                getattr(ex, "strerror", None) or ex,
            )
            self._release_control()
            return _nothing
        self.control = server
        log.info("edge routers connect to %s", settings.ctrl_bind)

        async def stop() -> None:
            try:
                await server.stop()
            finally:
                self._release_control()

        return stop

    def tls_context(self) -> ssl.SSLContext:
        """The TLS context for a new connection: trusts our CA and the verified third-party CAs now."""
        return self.trust.context()

    def runs_on_loop(self, method: str, path: str, query_string: str = "") -> bool:
        """Whether the server may run this request on its event loop (see ``api.http.LOOP_READS``):
        its resource's ``loop_methods`` holds the method, or its ``runs_on_loop(method,
        query_string)`` says this one is bounded (a small page of a list). Not a write on a
        database other processes share: it may wait for the cluster's write token, which another
        process holds, and the loop must not wait (it runs on the pool instead)."""
        if self.ctrl.settings.database_url and method not in _READING_METHODS:
            return False
        if len(path) > 1 and path.endswith("/"):  # strip_url_path_trailing_slash, as Falcon does
            path = path.rstrip("/") or "/"
        found = self._router.find(path)
        if found is None:
            return False
        resource = found[0]
        if method in getattr(resource, "loop_methods", ()):
            return True
        decide = getattr(resource, "runs_on_loop", None)
        return callable(decide) and bool(decide(method, query_string))

    def __call__(self, env: dict[str, Any], start_response: Any) -> Any:
        """Serve one request on one published state of the store: whole batches only, the same
        throughout the request (and its own writes once they are committed). A request run on the
        server's event loop (``env[DEFERRED_KEY]``) does not wait for its writes: they are handed
        to the server, which answers once they are durable."""
        store = self.ctrl.env.store
        deferred = env.get(DEFERRED_KEY)
        if deferred is None:
            with store.pinned():
                return super().__call__(env, start_response)
        with store.pinned(), store.deferring(deferred):
            return super().__call__(env, start_response)


#: Methods that do not write (a write on the event loop could wait for the write token).
_READING_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


#: In a controller's home, held by the one of its workers that runs the control listener.
CONTROL_LOCK_FILE = "control.lock"


def _hold_control_lock(home: Path) -> int | None:
    """The descriptor of ``home``'s control lock, held from now on by this process (kept open
    for its life; a process that ends frees it), or None when another process holds it."""
    fd = os.open(home / CONTROL_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


async def _nothing() -> None:
    """What stops nothing."""


def create_app(
    settings: Settings | None = None,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
    hasher: PasswordHasher | None = None,
    ca: CertificateAuthority | None = None,
    totp: TotpService | None = None,
    jwt_verifier: ExternalJwtVerifier | None = None,
) -> TrellisApp:
    """The WSGI app serving both APIs; collaborators not given are built from ``settings``."""
    settings = settings or Settings.from_env()
    ctrl = build_controller(
        settings,
        store=store,
        clock=clock,
        ids=ids,
        hasher=hasher,
        ca=ca,
        totp=totp,
        jwt_verifier=jwt_verifier,
    )
    limits = RequestLimits(settings)
    app = TrellisApp(middleware=[RequestMiddleware(ctrl, limits)], cors_enable=False, router=SharedRouter())
    app.ctrl = ctrl
    app.limits = limits
    app.maintenance = Maintenance(
        ctrl.api_sessions,
        ctrl.env.clock,
        limits,
        settings.purge_interval,
        dial_bind=ctrl.managers.sessions,
        posture_interval=settings.posture_interval,
    )
    app.trust = TlsTrust(PkiPaths.in_directory(settings.pki_dir), ctrl.managers)
    json = media.JSONHandler(dumps=orjson.dumps, loads=orjson.loads)
    app.req_options.media_handlers[falcon.MEDIA_JSON] = json
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = json
    app.req_options.strip_url_path_trailing_slash = True
    app.req_options.keep_blank_qs_values = False
    errors.install(app)
    routes = Routes(app, ctrl, Views(ctrl))
    info.register(routes)
    authentication.register(routes)
    current.register(routes)
    register_management(routes)
    register_client(routes)
    fabric.register(routes)
    app.routes = routes
    return app
