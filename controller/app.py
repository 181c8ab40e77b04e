"""The composition root: ``create_app`` builds the controller (:mod:`.compose`: the store, the ports,
the managers) and the Falcon app around it.

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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import falcon
import orjson
from falcon import media

from api import analysis, authentication, current, errors, explorer, fabric, info, oidc
from api.client import register_all as register_client
from api.controller import Controller
from api.http import DEFERRED_KEY
from api.limits import RequestLimits
from api.management import controllers as network_controllers
from api.management import register_all as register_management
from api.middleware import RequestMiddleware
from api.routing import Routes, SharedRouter
from api.views import Views
from controller.compose import build_controller
from controller.control import ControlServer
from controller.maintenance import Maintenance
from controller.settings import Settings
from controller.tls import TlsTrust
from engine.entities import all as _all_kinds  # noqa: F401  (registers every entity kind)
from engine.ports import (
    Clock,
    ExternalJwtVerifier,
    IdGenerator,
    PasswordHasher,
    Store,
    TotpService,
)
from pki import CertificateAuthority, PkiPaths

log = logging.getLogger("trellis")


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

    def join_network(self) -> None:
        """Write this controller's record among the network's (``engine.managers.controllers``),
        as every process of ``trellis serve`` does when it starts. A write refused (the database
        away) is logged and the controller serves all the same: it is listed from the fleet
        meanwhile, and its next start writes the record."""
        try:
            network_controllers.join(self.ctrl)
        except Exception as ex:
            log.warning("this controller's record could not be written: %s", " ".join(str(ex).split()) or ex)

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
    limits = RequestLimits(settings, board=ctrl.env.store.rate_board())
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
    analysis.register(routes)
    explorer.register(routes)
    oidc.register(routes)
    app.routes = routes
    return app
