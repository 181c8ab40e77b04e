"""Builders for the control-plane tests: a real event loop in a thread running the app's control
listener, edge routers enrolled through the API with real CSRs, and a router's side of the control
connection (a real ``Channel`` over TLS with the router's certificate). Builders never assert."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import queue
import ssl
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from channel import control
from channel.connection import Channel
from channel.frames import HELLO_VERSION, Message
from tests.api.certs import Key, csr_pem, key_pem, new_key, san_csr_pem, unique
from tests.conftest import CLIENT, Api

T = TypeVar("T")

#: How long a test waits for something the controller sends (a bound, never an assertion).
WAIT = 10.0
VERSION = "v0.9.1|deadbeef|2024-05-01|linux|amd64"


class LoopThread:
    """An asyncio loop running in a thread of its own, as the serving worker's."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-control-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop (channels are the loop's alone)."""

        async def on_loop() -> T:
            return fn()

        return self.run(on_loop())

    def close(self) -> None:
        async def settle() -> None:
            for _ in range(20):  # let closing transports finish their callbacks
                await asyncio.sleep(0.01)
            await self.loop.shutdown_asyncgens()

        self.run(settle())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@dataclass
class Plane:
    """The app's control listener running on a loop thread, and the routers' connections made."""

    api: Api
    loop: LoopThread
    executor: concurrent.futures.ThreadPoolExecutor
    stop: Callable[[], Coroutine[Any, Any, None]]
    tmp: Path
    links: list[RouterLink] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.api.app.control.port)

    def connect(self, creds: RouterCreds | ClientCert) -> RouterLink:
        """A TLS connection to the control listener presenting ``creds``' certificate."""
        ctx = ssl.create_default_context(cadata=self.api.ctrl.env.ca.ca_bundle_pem())
        directory = self.tmp / unique("certs")
        directory.mkdir()
        (directory / "cert.pem").write_text(creds.chain)
        (directory / "key.pem").write_text(key_pem(creds.key))
        ctx.load_cert_chain(str(directory / "cert.pem"), str(directory / "key.pem"))
        recorder = Recorder()

        async def open_channel() -> Channel:
            _, channel = await self.loop.loop.create_connection(
                lambda: Channel(recorder, name="test-router"),
                "127.0.0.1",
                self.port,
                ssl=ctx,
                server_hostname="localhost",
            )
            return channel

        link = RouterLink(self.loop, self.loop.run(open_channel()), recorder)
        self.links.append(link)
        return link

    def close(self) -> None:
        for link in self.links:
            self.loop.call(link.channel.abort)
        self.loop.run(self.stop())
        self.loop.close()
        self.executor.shutdown(wait=True)


def start_plane(api: Api, tmp: Path) -> Plane:
    """Run ``api``'s control listener as ``trellis serve`` does (``serve_alongside``)."""
    loop = LoopThread()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="test-app")
    stop = loop.run(api.app.serve_alongside(loop.loop, executor))
    return Plane(api, loop, executor, stop, tmp)


class Recorder:
    """A router's handler: every message the controller sends, kept for the test to take."""

    def __init__(self) -> None:
        self.incoming: queue.Queue[Message] = queue.Queue()
        self.backlog: list[Message] = []
        self.closed = threading.Event()

    def on_message(self, channel: Channel, message: Message) -> None:
        self.incoming.put(message)

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        self.closed.set()

    def take(self, content_type: int, where: Callable[[Message], bool] = lambda m: True) -> Message:
        """The first message of ``content_type`` (matching ``where``) not taken yet; the others stay."""
        for message in self.backlog:
            if message.content_type == content_type and where(message):
                self.backlog.remove(message)
                return message
        while True:
            message = self.incoming.get(timeout=WAIT)
            if message.content_type == content_type and where(message):
                return message
            self.backlog.append(message)


@dataclass
class RouterLink:
    """The router's side of one control connection."""

    loop: LoopThread
    channel: Channel
    recorder: Recorder

    def request(self, message: Message) -> Message:
        return self.loop.run(self.channel.request(message, WAIT))

    def send(self, message: Message) -> None:
        self.loop.call(lambda: self.channel.send(message))

    def hello(
        self,
        *,
        terminators: list[str] | None = None,
        link_listener: str = "",
        host: str = "er.example.test",
        circuits: list[str] | None = None,
        started_at_ms: int | None = None,
    ) -> Message:
        """The hello and its answer (``RESULT``); ``started_at_ms``: the router's ``startedAt``."""
        fields: dict[str, object] = {
            "hostname": host,
            "protocols": {"tls": f"tls://{host}:3022"},
            "linkListener": link_listener,
            "tunneler": False,
            "terminators": terminators or [],
            "circuits": circuits or [],
        }
        if started_at_ms is not None:
            fields["startedAt"] = started_at_ms
        message = control.message(control.HELLO, fields)
        message.set_text(HELLO_VERSION, VERSION)
        return self.request(message)

    def full_state(self) -> list[dict[str, Any]]:
        """The API sessions of the full state, up to its last chunk."""
        sessions: list[dict[str, Any]] = []
        while True:
            body = json.loads(self.recorder.take(control.API_SESSION_ADDED, is_full_state).body)
            sessions.extend(body["apiSessions"])
            if body["isLast"]:
                return sessions

    def take(self, content_type: int, where: Callable[[Message], bool] = lambda m: True) -> dict[str, Any]:
        """The JSON body of the next message of ``content_type`` (matching ``where``)."""
        return dict(json.loads(self.recorder.take(content_type, where).body))

    def wait_closed(self) -> bool:
        return self.recorder.closed.wait(WAIT)


def is_full_state(message: Message) -> bool:
    return bool(json.loads(message.body)["fullState"])


@dataclass
class RouterCreds:
    """An edge router enrolled through the API: its id, name, client chain (PEM) and key."""

    id: str
    name: str
    chain: str
    key: Key

    @property
    def fingerprint(self) -> str:
        """SHA-1 of the client certificate (the leaf of ``chain``): what the controller knows it by."""
        leaf = x509.load_pem_x509_certificates(self.chain.encode())[0]
        return hashlib.sha1(leaf.public_bytes(serialization.Encoding.DER)).hexdigest()


@dataclass
class ClientCert:
    """Any client certificate chain (PEM) and its key."""

    chain: str
    key: Key


def enrolled_router(api: Api, *attributes: str, **fields: Any) -> RouterCreds:
    """A new edge router enrolled with ``erott``: real CSRs, certificates from our CA."""
    name = unique("er")
    router_id = api.create("/edge-routers", {"name": name, "roleAttributes": list(attributes), **fields})
    token = api.get(f"/edge-routers/{router_id}").json["data"]["enrollmentToken"]
    key = new_key()
    result = api.client.simulate_post(
        CLIENT + "/enroll/erott",
        json={
            "token": token,
            "serverCsr": san_csr_pem(key, router_id, dns=("localhost",), ips=("127.0.0.1",)),
            "clientCsr": csr_pem(key, router_id),
        },
    )
    if result.status_code != 200:
        raise RuntimeError(result.text)
    return RouterCreds(router_id, name, result.json["data"]["cert"], key)


def re_enrolled(api: Api, creds: RouterCreds) -> RouterCreds:
    """``creds``' router enrolled again (after ``re-enroll``): a new certificate."""
    token = api.get(f"/edge-routers/{creds.id}").json["data"]["enrollmentToken"]
    key = new_key()
    result = api.client.simulate_post(
        CLIENT + "/enroll/erott",
        json={
            "token": token,
            "serverCsr": san_csr_pem(key, creds.id, dns=("localhost",)),
            "clientCsr": csr_pem(key, creds.id),
        },
    )
    if result.status_code != 200:
        raise RuntimeError(result.text)
    return RouterCreds(creds.id, creds.name, result.json["data"]["cert"], key)
