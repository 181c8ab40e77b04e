"""The edge router that ``make run`` brings up beside the controller (``TRELLIS_ROUTER=on``).

``trellis init`` creates the edge router ``trellis-router`` (role ``#public``, tunneler enabled)
and enrolls it in-process, as ``trellis router enroll`` would over HTTPS, into
``TRELLIS_HOME/router``; on the first creation it also adds the two policies ``ziti edge
quickstart`` makes, with its names, roles and semantic, so that every identity may use every
service through the public routers: ``all-endpoints-public-routers`` (edge-router policy,
identities ``#all`` -> routers ``#public``) and ``all-routers-all-services`` (service-edge-router
policy, services ``#all`` -> routers ``#all``), both ``AnyOf``. Homes made before these names
keep the policies they have (``all-identities-public-routers``, ``all-services-all-routers``,
``AllOf``, which with one role each grant the same): nothing renames them.

``trellis serve`` then runs it as its own process (``trellis router run``): relaying bytes never
competes with API requests for the worker's interpreter. It is started with ``serve`` and
connects once the control listener accepts connections, started again when it ends on its own,
and stopped first when ``serve`` is told to stop (and with ``serve`` even when ``serve`` is
killed).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from api.controller import Controller
from controller.settings import Settings, with_host
from engine.entities.routers import EdgeRouter
from router import identity
from router.enroll import free_port, link_bind

log = logging.getLogger("trellis.router")

NAME = "trellis-router"
ROLE = "public"
#: The quickstart's policies, as ``ziti edge quickstart`` names them.
ERP_NAME = "all-endpoints-public-routers"
SERP_NAME = "all-routers-all-services"


def router_addresses(settings: Settings) -> tuple[str, str, str]:
    """Where a router being enrolled listens and is reached: (edge bind, advertised host, link
    bind), from the settings or, unset, 127.0.0.1 and free ports."""
    bind = settings.router_edge_bind or f"127.0.0.1:{free_port()}"
    advertise = settings.router_advertise or with_host(bind, "localhost").rpartition(":")[0].strip("[]")
    return bind, advertise, link_bind(settings.router_link_bind, bind)


def ctrl_address(settings: Settings) -> str:
    """Where the embedded router reaches the control listener (loopback for a wildcard bind)."""
    return with_host(settings.ctrl_bind, "127.0.0.1")


def router_name(ctrl: Controller) -> str:
    """The embedded router's name: ``trellis-router`` for the network's first controller,
    ``trellis-router-<controller id>`` for each that joined it (each has its own)."""
    return NAME if ctrl.controller_id == ctrl.instance_id else f"{NAME}-{ctrl.controller_id}"


def ensure(ctrl: Controller, settings: Settings, *, out: TextIO) -> bool:
    """Create and enroll the embedded router unless its directory is enrolled; True if made."""
    directory = settings.embedded_router_dir
    if identity.is_enrolled(directory):
        return False
    managers = ctrl.managers
    name = router_name(ctrl)
    existing = managers.edge_routers.env.store.find_unique(EdgeRouter, "name", name)
    if existing is None:
        router = managers.edge_routers.create(
            {"name": name, "role_attributes": [ROLE], "is_tunneler_enabled": True}
        )
        _default_policies(ctrl)
    else:  # enrolled before, its directory lost: a new enrollment retires the old certificate
        router = managers.edge_routers.re_enroll(existing.id)
    token = router.enrollment_token
    assert token is not None
    bind, advertise, link = router_addresses(settings)
    key = identity.new_key()
    certs = managers.enroll.router(
        "erott",
        token,
        identity.csr_pem(key, router.id, identity.server_names(bind, advertise)),
        identity.csr_pem(key, router.id),
    )
    record = identity.RouterRecord(
        id=router.id,
        name=name,
        controller=f"https://{settings.advertised_address}",
        ctrl=ctrl_address(settings),
        edge=bind,
        advertise=advertise,
        link=link,
    )
    identity.write(directory, record, key, certs.cert, certs.server_cert, certs.ca)
    print(f"created edge router '{name}' in {directory}, listening for SDKs on {record.edge_url}", file=out)
    return True


def _default_policies(ctrl: Controller) -> None:
    from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy

    store = ctrl.managers.edge_router_policies.env.store
    if store.find_unique(EdgeRouterPolicy, "name", ERP_NAME) is None:
        ctrl.managers.edge_router_policies.create(
            {
                "name": ERP_NAME,
                "semantic": "AnyOf",
                "identity_roles": ["#all"],
                "edge_router_roles": [f"#{ROLE}"],
            }
        )
    if store.find_unique(ServiceEdgeRouterPolicy, "name", SERP_NAME) is None:
        ctrl.managers.service_edge_router_policies.create(
            {"name": SERP_NAME, "semantic": "AnyOf", "service_roles": ["#all"], "edge_router_roles": ["#all"]}
        )


class EmbeddedRouter:
    """The embedded router's process, kept running while ``serve`` runs.

    It is started with ``serve`` and connects once the control listener accepts connections
    (``trellis router run --await-controller``: serve's worker opens the listener when the app
    has loaded), so that its start overlaps the worker's and no early attempt is logged as a
    failure. It is started again
    (after 1 s, doubling to 30 s while it keeps failing) whenever it ends on its own, and not when
    ``serve`` stops: ``serve`` calls :meth:`stop` as soon as it is told to stop, before its worker
    stops. A router that ended cleanly (status 0, as it does on SIGINT: a Ctrl-C reaches the whole
    process group, the router first) is given :data:`STOP_GRACE` seconds for ``serve``'s own stop to
    come before it is taken as ended on its own.

    ``serve``'s master is gunicorn's arbiter, which reaps its children with ``waitpid(-1)``: the
    router's exit status would go to whichever of the two waits first. So this watches the process
    without blocking in ``waitpid``, and the arbiter calls :meth:`reap` before it reaps (see
    ``controller.serve``), which keeps the status here (``-9`` for a ``kill -9``, not ``0``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        #: gunicorn's worker is a fork of ``serve``: what it inherits of this object is not its own.
        self._owner = os.getpid()
        #: Held while the router's process is made, and by the arbiter while it forks a worker
        #: (:meth:`forking`): a worker forked while ``Popen`` waits for the router's ``exec``
        #: would inherit ``Popen``'s error pipe and keep it open for its whole life, and ``Popen``
        #: would wait for that pipe to close forever (no router, no restart, a ``serve`` that
        #: cannot stop).
        self._fork_lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.settings.router and identity.is_enrolled(self.settings.embedded_router_dir)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> bool:
        """Run it (if it is on and enrolled) and keep it running; whether it will run."""
        if not self.enabled:
            return False
        self._thread = threading.Thread(
            target=self._keep_running, name="trellis-embedded-router", daemon=True
        )
        self._thread.start()
        return True

    @contextlib.contextmanager
    def forking(self) -> Iterator[None]:
        """Held by the arbiter while it forks a worker: never at once with the router's fork."""
        with self._fork_lock:
            yield

    def reap(self) -> None:
        """Collect the router's exit status if it has ended (non-blocking): called by the arbiter
        before its own ``waitpid(-1)``, which would take the status without telling anyone."""
        process = self._process
        if process is not None and os.getpid() == self._owner:
            process.poll()

    def _keep_running(self) -> None:
        # The process is made on this thread, which lives until stop(): the child's
        # PR_SET_PDEATHSIG follows the thread that forked it.
        pause = RESTART_FIRST
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                with self._fork_lock:
                    process = self._process = _popen(self.settings)
                began = time.monotonic()
            while (status := process.poll()) is None:
                time.sleep(WATCH_SECONDS)
            if self._stopping.is_set():
                return
            if status in STOPPED and self._stopping.wait(STOP_GRACE):
                return
            if time.monotonic() - began > RESTART_RESET:
                pause = RESTART_FIRST
            log.warning(
                "the embedded router exited with status %s; starting it again in %.0f s", status, pause
            )
            if self._stopping.wait(pause):
                return
            pause = min(pause * 2, RESTART_MAX)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop it: SIGTERM, then SIGKILL after ``timeout`` seconds; no restart. Only in the
        process that started it (a forked worker ending passes through the same code)."""
        if os.getpid() != self._owner:
            return
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._thread is not None:
            self._thread.join(timeout)


#: Seconds before the embedded router is started again after it ended: the first pause, the
#: longest, and how long a run must last for the next failure to start from the first again.
RESTART_FIRST, RESTART_MAX, RESTART_RESET = 1.0, 30.0, 60.0
#: How often the router's process is looked at.
WATCH_SECONDS = 0.2
#: The statuses of a router that was told to stop (it stops cleanly on SIGINT and SIGTERM), and
#: how long such a router waits for serve's own stop before it counts as ended on its own.
STOPPED = (0, -signal.SIGINT, -signal.SIGTERM)
STOP_GRACE = 5.0


def _popen(settings: Settings) -> subprocess.Popen[bytes]:
    """``trellis router run`` in the embedded router's directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_ADMIN_PASSWORD")}
    env["TRELLIS_ROUTER_HOME"] = str(settings.embedded_router_dir)
    env["TRELLIS_ROUTER_CTRL"] = ctrl_address(settings)  # the listener of this run, wherever it moved
    return subprocess.Popen(
        [sys.executable, "-m", "controller.cli", "router", "run", "--await-controller"],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=False,
        preexec_fn=_end_with_parent if _LIBC is not None else None,
    )


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


#: Loaded here, not in the child: between ``fork`` and ``exec`` of a process with threads, an
#: import or a ``dlopen`` may wait for a lock another thread held at the fork, forever.
_LIBC = _libc() if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In the child before it runs: SIGTERM when ``serve`` dies, even by ``kill -9`` (Linux's
    ``PR_SET_PDEATHSIG``), so no orphaned router keeps its ports. No import, no allocation of
    Python's own that could wait on a lock: a foreign call only."""
    if _LIBC is not None:
        with contextlib.suppress(OSError, AttributeError):
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
