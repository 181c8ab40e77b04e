"""``trellis serve``: gunicorn, ``TRELLIS_WORKERS`` workers (:class:`controller.worker.TrellisWorker`),
TLS with optional client certificates.

One worker on DuckDB, because one process may open the DuckDB file read-write (docs/architecture.md
§5); on PostgreSQL as many as ``TRELLIS_WORKERS`` says (the cores by default), sharing the database.
The app (and so the store) is loaded in each worker after the fork; one worker of those serving the
database (:meth:`~engine.ports.Store.lead`) runs the control listener and the maintenance ticker. The worker's event loop does the
network (TLS handshakes, reading requests, with time limits) and ``settings.threads`` threads run
the app, so clients that stall hold no thread (see controller/worker.py and ``python -m bench serving``).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import socket
import ssl
import sys
from collections.abc import Callable
from typing import Any, Protocol

import duckdb
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import AppImportError

from api import ZITI_COMPAT_VERSION
from controller.logs import gunicorn_options
from controller.settings import SettingError, Settings, split_address
from controller.tls import build_context
from controller.worker import Limits
from pki.authority import PkiPaths


def serving_limits(settings: Settings) -> Limits:
    """The worker's time limits and body cap, from settings."""
    return Limits(
        handshake_timeout=settings.handshake_timeout,
        header_timeout=settings.header_timeout,
        body_timeout=settings.body_timeout,
        write_timeout=settings.write_timeout,
        keepalive_timeout=settings.keepalive_timeout,
        max_body_bytes=settings.max_body_bytes,
    )


#: Why a listening socket could not be bound, in words for the operator.
BIND_ERRORS = {
    errno.EADDRINUSE: "the address is in use (another server on this port?)",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
    errno.EACCES: "permission denied (a port below 1024 needs root or CAP_NET_BIND_SERVICE)",
}


def check_bind(settings: Settings) -> None:
    """``TRELLIS_BIND`` and ``TRELLIS_CTRL_BIND`` name addresses of this machine that are free: a
    socket is bound there as the server will bind it (IPv4 unless the host is an IPv6 address,
    ``SO_REUSEADDR``) and closed. Otherwise a one-line :class:`SettingError` at once, instead of
    gunicorn's five tries a second apart and its traceback."""
    if settings.ctrl_bind == settings.bind:
        raise SettingError(
            f"TRELLIS_CTRL_BIND {settings.ctrl_bind} is TRELLIS_BIND's address: give each its own"
        )
    for name, value in (("TRELLIS_BIND", settings.bind), ("TRELLIS_CTRL_BIND", settings.ctrl_bind)):
        check_address(name, value)


def check_address(name: str, value: str) -> None:
    """The address ``value`` of the setting ``name`` can be listened on (:class:`SettingError`)."""
    host, port = split_address(value)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except socket.gaierror as ex:
        raise SettingError(f"{name} {value}: cannot resolve {host!r}: {ex.strerror}") from None
    except OSError as ex:
        reason = BIND_ERRORS.get(ex.errno or 0, ex.strerror or str(ex))
        raise SettingError(f"{name} {value} cannot be listened on: {reason}") from None


def tls_context(paths: PkiPaths) -> ssl.SSLContext:
    """The fallback context (when the app has no live one): client certificates of any issuer
    let through, as in the app's (``controller.tls``); should that not be possible, our own CA chain
    is the only one trusted in the handshake."""
    return build_context(paths, [paths.ca_bundle.read_text()])


class Companion(Protocol):
    """A process ``serve`` keeps beside its worker (the embedded router, ``controller.embedded_router``)."""

    def stop(self) -> None:
        """``serve`` was told to stop (SIGINT, SIGTERM, SIGQUIT): stop now, before the worker."""

    def reap(self) -> None:
        """Collect the companion's own exit status, if it ended, before gunicorn reaps children."""

    def forking(self) -> contextlib.AbstractContextManager[None]:
        """Held while the arbiter forks a worker (the companion forks only outside it)."""


def share_out_listeners(arbiter: Any) -> None:
    """Several workers on one port: each listens on a socket of its own (``SO_REUSEPORT``), so
    that the kernel spreads new connections over the workers evenly.

    On the one listening socket gunicorn shares, every worker is woken for each new connection and
    the one already running takes it; with kept-alive clients one worker ended up holding all of
    them (wrk's 4 and 16 connections all went to one of two workers, 12:4 at best) while the other
    idled, so a second worker added nothing. The arbiter's own sockets are closed here (a socket
    left listening in the group would be given connections nobody accepts); the workers open theirs
    on the addresses noted in ``app.reuse_port_addresses`` (:func:`controller.worker.own_listener`).
    """
    addresses = []
    for listener in arbiter.LISTENERS:
        sock = getattr(listener, "sock", listener)
        addresses.append((sock.family, sock.getsockname()))
    arbiter.app.reuse_port_addresses = addresses
    for listener in arbiter.LISTENERS:
        listener.close()


class TrellisArbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's arbiter, which also minds the server's companion (``app.companion``): it stops
    it first when told to stop, so that the embedded router leaves while the controller still
    answers (not after its control listener closed, which the router would log as a lost
    connection and try again), lets it collect its exit status before ``waitpid(-1)`` does, and
    forks no worker while the companion forks its own process (:meth:`Companion.forking`)."""

    def _companion(self) -> Companion | None:
        return getattr(self.app, "companion", None)

    def handle_int(self) -> None:
        self._stop_companion()
        super().handle_int()

    def handle_term(self) -> None:
        self._stop_companion()
        super().handle_term()

    def handle_quit(self) -> None:
        self._stop_companion()
        super().handle_quit()

    def start(self) -> None:
        """As gunicorn's, then, with several workers, :func:`share_out_listeners`."""
        super().start()
        if int(self.cfg.workers) > 1 and self.cfg.reuse_port:
            share_out_listeners(self)

    def spawn_worker(self) -> Any:
        companion = self._companion()
        if companion is None:
            return super().spawn_worker()
        with companion.forking():  # in the worker too: it never returns from here, it exits
            return super().spawn_worker()

    def reap_workers(self) -> None:
        companion = self._companion()
        if companion is not None:
            companion.reap()
        super().reap_workers()

    def _stop_companion(self) -> None:
        companion = self._companion()
        if companion is not None:
            companion.stop()


class TrellisServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, settings: Settings, companion: Companion | None = None) -> None:
        self.settings = settings
        self.companion = companion
        self.paths = PkiPaths.in_directory(settings.pki_dir)
        #: Read by the worker (``self.app.serving_limits``).
        self.serving_limits = serving_limits(settings)
        self._ctx: ssl.SSLContext | None = None
        self._app: Any = None
        super().__init__()

    def load_config(self) -> None:
        server = self

        def ssl_context(conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
            # The worker builds its fallback context once from this hook (when the app has no
            # ``tls_context()``); gunicorn's own workers call it per connection.
            if server._ctx is None:
                server._ctx = tls_context(server.paths)
            return server._ctx

        def post_worker_init(worker: Any) -> None:
            # Only gunicorn's own workers (gthread, ...) write a Server header; ours writes none and
            # the app's middleware sets it (no ``gunicorn.socket`` in the environ).
            import gunicorn.http.wsgi

            gunicorn.http.wsgi.SERVER = f"ziti-controller/{ZITI_COMPAT_VERSION}"

        def worker_exit(arbiter: Any, worker: Any) -> None:
            # Stop the maintenance ticker, then close the database cleanly (a checkpoint) when the
            # worker stops, e.g. on Ctrl-C.
            if server._app is not None:
                server._app.maintenance.stop()
                server._app.ctrl.env.store.close()

        options = {
            "bind": self.settings.bind,
            "workers": self.settings.serving_workers,
            "worker_class": "controller.worker.TrellisWorker",
            "threads": self.settings.threads,
            # Connections cost a file and some memory, no thread: room for many stalled ones.
            "worker_connections": 4096,
            "keepalive": max(0, int(self.serving_limits.keepalive_timeout)),
            "certfile": str(self.paths.server_cert),
            "keyfile": str(self.paths.server_key),
            "ca_certs": str(self.paths.ca_bundle),
            "cert_reqs": ssl.CERT_OPTIONAL,
            "ssl_context": ssl_context,
            "post_worker_init": post_worker_init,
            "worker_exit": worker_exit,
            "accesslog": "-",
            "graceful_timeout": 10,
            "timeout": 60,
            "preload_app": False,
            # several workers: one listening socket each, the kernel spreading the connections
            # (TrellisArbiter.start)
            "reuse_port": self.settings.serving_workers > 1,
            # gunicorn 27's control socket is one per user (~/.gunicorn): two servers would clash.
            "control_socket_disable": True,
        }
        # Structured lines (controller/logs.py) for gunicorn's error and access logs and ours; a bad
        # TRELLIS_LOG_LEVEL or TRELLIS_LOG_FORMAT ends `trellis serve` here, exit status 2.
        options.update(gunicorn_options())
        for key, value in options.items():
            self.cfg.set(key, value)

    def run(self) -> None:
        """As gunicorn's own ``run``, with :class:`TrellisArbiter`."""
        try:
            TrellisArbiter(self).run()
        except RuntimeError as ex:  # what gunicorn's arbiter raises for a configuration it refuses
            print(f"\nError: {ex}\n", file=sys.stderr, flush=True)
            raise SystemExit(1) from None

    def load(self) -> Any:
        from controller.app import create_app

        # Everything loaded at start (every entity, the policy graph: millions of objects at 100k
        # identities) lives as long as the process. The cyclic collector is off while it is made
        # (each collection walked the growing heap again: half of the start at tier L, 7.9 ->
        # 4.3 s), and then it is frozen out of the collector's way, so that a full collection
        # walks only what requests made since, not the whole data set (a request caught by a full
        # collection over the start-up heap waited ~100 ms).
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._app = create_app(self.settings)
            gc.freeze()
        except (duckdb.Error, OSError, SettingError) as ex:
            # The data underneath cannot be used (a corrupt or unreadable database file, a
            # journal that cannot be replayed, a PKI file gone, a PostgreSQL database gone since
            # serve checked it): one line, no traceback, and the
            # exit status gunicorn gives "the app failed to load", which stops it at once (the
            # CLI's exit status 1). gunicorn prints this error's text, itself, on stderr.
            reason = " ".join(str(ex).split()) or type(ex).__name__
            raise AppImportError(f"trellis: cannot start on {self.settings.home}: {reason}") from None
        finally:
            if collecting:
                gc.enable()
        self._app.join_network()  # this controller is a member of the network from now on
        # in the worker, after the fork: the expired-session purge and the posture sweep, in one
        # process of those sharing a database (another takes over when it stops)
        maintenance = self._app.maintenance
        self._app.ctrl.env.store.when_leading(maintenance.start, maintenance.stop)
        return self._app


#: gunicorn's exit status for a worker that failed to boot (an unexpected error, with its
#: traceback in the log) and for an app that failed to load (the data underneath, one line).
WORKER_BOOT_ERROR = 3
APP_LOAD_ERROR = 4


class StartFailed(Exception):
    """The server stopped because its worker could not start; what it said is on stderr."""


def serve(settings: Settings, companion: Companion | None = None) -> None:
    """Serve until stopped, with ``companion`` alongside; :class:`StartFailed` when the worker
    could not start."""
    master = os.getpid()
    try:
        TrellisServer(settings, companion).run()
    except SystemExit as ex:
        # The worker is a fork of this process: its own exit passes through here too, unchanged.
        if os.getpid() == master and ex.code in (WORKER_BOOT_ERROR, APP_LOAD_ERROR):
            raise StartFailed(ex.code) from None
        raise
