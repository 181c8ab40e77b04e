"""``trellis router run``: the router process, from an enrolled directory to serving SDKs.

It builds the edge listener (:mod:`router.edge`) and a control client (:mod:`router.control`)
for every controller address of ``router.json`` (:mod:`router.controllers` holds them) from the
directory's certificates and ``router.json``, listens on the recorded edge address, keeps a
control connection to every controller up (deciding alone for a while when none is:
:mod:`router.offline`), and stops cleanly on SIGTERM or SIGINT (open SDK channels are
closed; the controller removes their terminators). One asyncio loop, no threads: the process does
nothing but relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import platform
import signal
import socket
from pathlib import Path

from router import identity
from router.control import ControlClient, client_context, parse_address
from router.controllers import Controllers
from router.edge import EdgeListener
from router.hosting import Hosting
from router.links import Links
from router.offline import DEFAULT_GRACE_SECONDS, Offline
from router.ports import ApiSessions

log = logging.getLogger(__name__)

VERSION = "0.1.0"


def version_info() -> str:
    """``version|revision|buildDate|os|arch``, as OpenZiti's routers send it."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine() or "unknown")
    return f"v{VERSION}|trellis|2026-11-27|{platform.system().lower() or 'unknown'}|{arch}"


def server_hostname(host: str) -> str:
    """The name to check the controller's certificate against: its host, or ``localhost`` for a
    loopback address (the controller's certificate always names ``localhost``)."""
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return "localhost"
    except ValueError:
        pass
    return host


def control_accepts(directory: Path, address: str, timeout: float = 2.0) -> bool:
    """Whether the control listener at ``address`` accepts connections now: a TCP connection,
    then the TLS handshake the router enrolled in ``directory`` makes, ended with a close_notify
    before any message, so that the listener sees a connection come and go and says nothing.

    ``serve`` asks this before it starts its embedded router (its worker opens the listener once
    the app has loaded, seconds after ``serve`` starts). True as soon as the TCP connection is
    made: a listener that refuses the handshake is there all the same, and the router will say
    what is wrong."""
    host, port = parse_address(address)
    try:
        raw = socket.create_connection((host, port), timeout)
    except OSError:
        return False
    with raw, contextlib.suppress(OSError, ValueError):  # ssl.SSLError is an OSError
        context = client_context(directory / identity.CERT, directory / identity.KEY, directory / identity.CA)
        with context.wrap_socket(raw, server_hostname=server_hostname(host)) as tls:
            tls.unwrap()
    return True


#: How often a router started with ``await_controller`` tries the control listener.
AWAIT_SECONDS = 0.05


async def serve(
    directory: Path,
    record: identity.RouterRecord,
    stop: asyncio.Event,
    *,
    await_controller: bool = False,
    offline_grace: float = DEFAULT_GRACE_SECONDS,
    follow_controllers: bool = True,
) -> None:
    """Run until ``stop`` is set. ``follow_controllers``: connect to the controllers the
    controllers name (``UPDATE_CTRL_ADDRESSES``), keeping their list in ``router.json`` for the
    next start; False keeps ``record``'s (``TRELLIS_ROUTER_CTRL`` chose them). With
    ``await_controller`` the control connections are first
    made once a control listener accepts connections (:func:`control_accepts`, tried quietly every
    :data:`AWAIT_SECONDS`): ``serve`` starts its embedded router with its own start, so that the
    router's start overlaps the controller's instead of following it. ``offline_grace`` is how
    long the router decides alone once no controller can be reached (:mod:`router.offline`; 0:
    never)."""
    sessions = ApiSessions()
    offline = Offline(offline_grace)
    context = client_context(directory / identity.CERT, directory / identity.KEY, directory / identity.CA)
    addresses = record.ctrl_addresses

    def control_client(address: str) -> ControlClient:
        return ControlClient(
            address=address,
            ssl_context=context,
            hostname=record.advertise or socket.gethostname(),
            protocols={"tls": record.edge_url},
            version=version_info(),
            api_sessions=sessions,
            tunneler=True,
            server_hostname=server_hostname(parse_address(address)[0]),
            link_listener=record.link_url,
        )

    client = Controllers(
        [control_client(address) for address in addresses],
        make_client=control_client,
        follow=follow_controllers,
    )
    client.on_addresses = lambda now: _keep_ctrls(directory, now)
    listener = EdgeListener(
        ssl_context=identity.edge_context(directory),
        controller=client,
        api_sessions=sessions,
        router_id=record.id,
        version=version_info(),
    )
    client.edge = listener
    listener.offline = offline
    client.on_reachable = lambda reachable: offline.reachable() if reachable else offline.unreachable()
    hosting = Hosting(client)  # the services the controller says this router hosts (host.v1)
    listener.hosting = hosting
    client.on_hosted_services = hosting.update
    host, _, port = record.edge.rpartition(":")
    await listener.start(host.strip("[]"), int(port))
    server_context, link_client_context = identity.link_contexts(directory)
    links = Links(
        router_id=record.id,
        edge=listener,
        server_context=server_context,
        client_context=link_client_context,
        listener_url=record.link_url,
    )
    if record.link:  # a record from before links takes none: the router still dials those that do
        link_host, _, link_port = record.link.rpartition(":")
        await links.start(link_host.strip("[]"), int(link_port))
    listener.links = links
    client.on_router_links = links.update
    links.on_change = client.links_changed  # the controller lists them (/fabric/v1/links)
    log.info(
        "router %s (%s): SDKs connect to %s; links to %s; %s %s; deciding alone for %g s without one",
        record.name,
        record.id,
        record.edge_url,
        record.link_url or "(none)",
        "controller" if len(addresses) == 1 else "controllers",
        ", ".join(addresses),
        offline_grace,
    )
    if await_controller:
        while not await _any_accepts(directory, addresses):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), AWAIT_SECONDS)
            if stop.is_set():
                break
    control = asyncio.create_task(client.run(), name="control")
    try:
        await stop.wait()
    finally:
        client.stop()
        offline.close()
        await listener.stop()
        await hosting.stop()
        await links.stop()
        control.cancel()
        await asyncio.gather(control, return_exceptions=True)
        log.info("router %s stopped", record.name)


def _keep_ctrls(directory: Path, addresses: list[str]) -> None:
    """The controllers' latest list in ``router.json``, for the next start (logged if it cannot be)."""
    try:
        identity.save_ctrls(directory, addresses)
    except (identity.IdentityError, OSError) as ex:
        log.warning("the controllers' addresses could not be kept in %s: %s", directory, ex)


async def _any_accepts(directory: Path, addresses: list[str]) -> bool:
    """Whether any of the control listeners at ``addresses`` accepts connections now."""
    if len(addresses) == 1:
        return await asyncio.to_thread(control_accepts, directory, addresses[0], AWAIT_SECONDS * 20)
    found = await asyncio.gather(
        *(asyncio.to_thread(control_accepts, directory, address, AWAIT_SECONDS * 20) for address in addresses)
    )
    return any(found)


def run_router(
    directory: Path,
    record: identity.RouterRecord,
    *,
    await_controller: bool = False,
    offline_grace: float = DEFAULT_GRACE_SECONDS,
    follow_controllers: bool = True,
) -> None:
    """Serve until SIGTERM or SIGINT (``await_controller``, ``offline_grace``,
    ``follow_controllers``: see :func:`serve`)."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await serve(
                directory,
                record,
                stop,
                await_controller=await_controller,
                offline_grace=offline_grace,
                follow_controllers=follow_controllers,
            )
        finally:
            # Stopped already: a signal from here on has nothing left to ask. The embedded router
            # gets a Ctrl-C's SIGINT from the terminal and then serve's SIGTERM; left to the loop,
            # one landing while it closes found its wake-up socket closed ("Exception ignored
            # when trying to write to the signal wakeup fd"), as serve's worker once did.
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)

    asyncio.run(main())
