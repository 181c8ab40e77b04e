"""The edge router that ``make run`` brings up beside the controller (``TRELLIS_ROUTER=on``).

``trellis init`` creates the edge router ``trellis-router`` (role ``#public``, tunneler enabled)
and enrolls it in-process, as ``trellis router enroll`` would over HTTPS, into
``TRELLIS_HOME/router``; on the first creation it also adds the two policies OpenZiti's
quickstart makes, so that every identity may use every service through the public routers:
``all-identities-public-routers`` (edge-router policy ``#all`` -> ``#public``) and
``all-services-all-routers`` (service-edge-router policy ``#all`` -> ``#all``).

``trellis serve`` then runs it as its own process (``trellis router run``): relaying bytes never
competes with API requests for the worker's interpreter. It is started again when it ends on its
own, and stops when ``serve`` stops (even when ``serve`` is killed).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import TextIO

from api.controller import Controller
from api.settings import Settings, with_host
from engine.entities.routers import EdgeRouter
from router import identity
from router.enroll import free_port, link_bind

log = logging.getLogger("trellis.router")

NAME = "trellis-router"
ROLE = "public"
ERP_NAME = "all-identities-public-routers"
SERP_NAME = "all-services-all-routers"


def router_addresses(settings: Settings) -> tuple[str, str, str]:
    """Where a router being enrolled listens and is reached: (edge bind, advertised host, link
    bind), from the settings or, unset, 127.0.0.1 and free ports."""
    bind = settings.router_edge_bind or f"127.0.0.1:{free_port()}"
    advertise = settings.router_advertise or with_host(bind, "localhost").rpartition(":")[0].strip("[]")
    return bind, advertise, link_bind(settings.router_link_bind, bind)


def ctrl_address(settings: Settings) -> str:
    """Where the embedded router reaches the control listener (loopback for a wildcard bind)."""
    return with_host(settings.ctrl_bind, "127.0.0.1")


def ensure(ctrl: Controller, settings: Settings, *, out: TextIO) -> bool:
    """Create and enroll the embedded router unless its directory is enrolled; True if made."""
    directory = settings.embedded_router_dir
    if identity.is_enrolled(directory):
        return False
    managers = ctrl.managers
    existing = managers.edge_routers.env.store.find_unique(EdgeRouter, "name", NAME)
    if existing is None:
        router = managers.edge_routers.create(
            {"name": NAME, "role_attributes": [ROLE], "is_tunneler_enabled": True}
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
        name=NAME,
        controller=f"https://{settings.advertised_address}",
        ctrl=ctrl_address(settings),
        edge=bind,
        advertise=advertise,
        link=link,
    )
    identity.write(directory, record, key, certs.cert, certs.server_cert, certs.ca)
    print(f"created edge router '{NAME}' in {directory}, listening for SDKs on {record.edge_url}", file=out)
    return True


def _default_policies(ctrl: Controller) -> None:
    from engine.entities.policies import EdgeRouterPolicy, ServiceEdgeRouterPolicy

    store = ctrl.managers.edge_router_policies.env.store
    if store.find_unique(EdgeRouterPolicy, "name", ERP_NAME) is None:
        ctrl.managers.edge_router_policies.create(
            {"name": ERP_NAME, "identity_roles": ["#all"], "edge_router_roles": [f"#{ROLE}"]}
        )
    if store.find_unique(ServiceEdgeRouterPolicy, "name", SERP_NAME) is None:
        ctrl.managers.service_edge_router_policies.create(
            {"name": SERP_NAME, "service_roles": ["#all"], "edge_router_roles": ["#all"]}
        )


class EmbeddedRouter:
    """The embedded router's process, kept running while ``serve`` runs: started again (after
    1 s, doubling to 30 s while it keeps failing) whenever it ends on its own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        #: gunicorn's worker is a fork of ``serve``: what it inherits of this object is not its own.
        self._owner = os.getpid()

    @property
    def enabled(self) -> bool:
        return self.settings.router and identity.is_enrolled(self.settings.embedded_router_dir)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> bool:
        """Start it (if it is on and enrolled); whether it was started."""
        if not self.enabled:
            return False
        self._thread = threading.Thread(
            target=self._keep_running, name="trellis-embedded-router", daemon=True
        )
        self._thread.start()
        return True

    def _keep_running(self) -> None:
        # The process is made on this thread, which lives until stop(): the child's
        # PR_SET_PDEATHSIG follows the thread that forked it.
        pause = RESTART_FIRST
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                self._process = _popen(self.settings)
                began = time.monotonic()
            status = self._process.wait()
            if self._stopping.is_set():
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


def _popen(settings: Settings) -> subprocess.Popen[bytes]:
    """``trellis router run`` in the embedded router's directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_ADMIN_PASSWORD")}
    env["TRELLIS_ROUTER_HOME"] = str(settings.embedded_router_dir)
    env["TRELLIS_ROUTER_CTRL"] = ctrl_address(settings)  # the listener of this run, wherever it moved
    return subprocess.Popen(
        [sys.executable, "-m", "api.cli", "router", "run"],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=False,
        preexec_fn=_end_with_parent if sys.platform == "linux" else None,
    )


def _end_with_parent() -> None:
    """In the child before it runs: SIGTERM when ``serve`` dies, even by ``kill -9`` (Linux's
    ``PR_SET_PDEATHSIG``), so no orphaned router keeps its ports."""
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
