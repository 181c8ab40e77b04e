"""The data plane: bytes through the edge router against a direct TLS connection, dial set-up
time, and connections held.

``python -m bench dataplane`` runs ``trellis init`` in a temporary home and ``trellis serve`` with
its embedded router (``TRELLIS_ROUTER=on``) on 127.0.0.1, so that the controller, its worker and
the router run as their own processes, as in production. Through the REST API it logs the admin
in, enrolls two identities with real CSRs (``POST /edge/client/v1/enroll?method=ott``, a PEM
CSR, a PEM certificate back), logs each in with its certificate (``?method=cert``), creates the
services ``bench-echo`` and ``bench-echo-enc`` (``encryptionRequired``) with a Dial policy for the
one and a Bind policy for the other (the quickstart policies ``init`` made let both use the
router), and takes a Dial and a Bind session of each service.

The SDKs are Python asyncio clients speaking channel v2 (:class:`channel.connection.Channel`)
over TLS with the enrolled certificates: a hello carrying the API-session token (header 1002),
Bind, Connect, DialSuccess, Data. The **binder** runs in one process (it binds both services on
one channel, accepts every Dial and echoes every Data message), each measurement's **dialer** in
another: router, dialer and binder are three processes.

Measures:

- **bulk echo**: for ``--seconds`` the dialer sends 32 KiB Data messages on one connection,
  keeping at most ``--window`` bytes unanswered, and the binder sends each back: MB/s (10^6
  bytes/s) of payload echoed back, and the CPU of each process in % of one core. ``plain``, and
  ``e2e``: end-to-end encrypted by the SDKs as the C SDK does (libsodium ``crypto_kx`` session
  keys from the public keys the Connect, the Bind and the Dial carry; a
  ``crypto_secretstream_xchacha20poly1305`` stream each way, its header the first Data message,
  then 32 KiB of plaintext per message), the router only relaying. The same bytes with the same
  framing go over a **direct** TLS connection to a process that answers the hello and the
  Connect itself and echoes (the router's own TLS settings and certificate): the baseline.
  Each path runs ``--repeat`` times (3), the paths interleaved so that a change in the
  machine's load falls on all of them alike; a row is the median run (the range beside it), and
  "of direct" compares medians. "router µs/msg" is the router's CPU time per message it relayed
  (each echoed message is relayed twice): what the router costs, whatever else the cores do.
- **dial**: ``--dials`` sequential dials on one channel (a few more first, not counted): the time
  from the Connect sent to its StateConnected received, the binder answering DialSuccess (the
  router asks the controller for the circuit each time); p50, p99, max.
- **held**: ``--connections`` connections open at once, ``--concurrency`` being opened at a time,
  both as the C SDK does (one channel, many connections) and as many SDKs do (a channel each);
  once all are open each echoes a small message (checked byte for byte). Errors, how long
  opening took, and the router process's RSS before and while they are held.
- **two routers**: once routers link to one another (``router/links.py``), a second router
  (``#public``) is made in the management API, enrolled with ``trellis router enroll`` and run
  with ``trellis router run``; a second binder binds ``bench-echo-2r`` and
  ``bench-echo-enc-2r`` on it only, and the dialer, on the embedded router, echoes through both
  routers and the link between them (plain and e2e, as above). Until links exist the table says
  ``two routers: not available (no links yet)``.

``--profile`` adds one more plain bulk run with ``py-spy record --idle`` on the router process
(raw collapsed stacks in ``bench/results/local/dataplane-router-profile.txt``) and summarises
where its time goes: TLS, framing, the router's handlers, the event loop, idle.

Results are printed as a table and written as JSON (with the machine's core count, load average
before and after, the TLS version and cipher negotiated): to ``bench/results/local/
dataplane.json`` (ignored by git; see :mod:`bench.output`), to the committed
``bench/results/dataplane.json`` with ``--publish``, or to ``--out PATH``.

Run::

    python -m bench dataplane                     # 3 x 3 s per bulk path, 200 dials, 1,000 connections
    python -m bench dataplane --profile           # and where the router's time goes
    python -m bench dataplane --seconds 0.3 --repeat 1 --dials 5 --connections 10 --out /tmp/dp.json

Everything runs on the same cores (2 on these machines): the figures compare paths with each
other on one machine and vary with whatever else runs there. Every wait has a timeout; traffic
goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import datetime as dt
import http.client
import inspect
import itertools
import json
import multiprocessing
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

from nacl import bindings as sodium

from bench.output import add_output_arguments, local_folder, results_path
from bench.serving import raise_fd_limit
from bench.writes import percentile
from channel.connection import Channel
from channel.edge import BIND as BIND_MESSAGE
from channel.edge import (
    CONN_ID,
    CONNECT,
    DATA,
    DIAL,
    DIAL_SUCCESS,
    PUBLIC_KEY,
    SEQ,
    SESSION_TOKEN,
    STATE_CLOSED,
    STATE_CONNECTED,
)
from channel.frames import HELLO, HELLO_VERSION, Message, result

ROOT = Path(__file__).resolve().parents[1]
#: The results file's name (where: bench.output).
RESULTS = "dataplane.json"
PROFILE = "dataplane-router-profile.txt"
HOST = "127.0.0.1"
PASSWORD = "bench-dataplane-admin-password"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
ROUTER_NAME = "trellis-router"
#: Plaintext per Data message, as the C SDK writes.
CHUNK = 32 * 1024
#: Seconds any one step may take (a safety net, not a measure).
WAIT = 60.0
START_SECONDS = 60.0
STOP_SECONDS = 20.0
#: Dials made before the timed ones (connections, caches, the controller's first circuit).
WARM_UP_DIALS = 5
SERVICES = {
    "plain": "bench-echo",
    "e2e": "bench-echo-enc",
    # bound only on the second router: dialled through the first, they cross a link
    "plain-2r": "bench-echo-2r",
    "e2e-2r": "bench-echo-enc-2r",
}
#: Bind connection ids on a binder's channel.
BIND_IDS = {"plain": 1, "e2e": 2, "plain-2r": 3, "e2e-2r": 4}
ONE_ROUTER, TWO_ROUTERS = ("plain", "e2e"), ("plain-2r", "e2e-2r")
SECOND_ROUTER = "bench-router-2"
#: The controller's budgets off: the benchmark logs in a few times and asks for sessions.
SERVER_ENV = {"TRELLIS_RATE_AUTH_PER_MINUTE": "0", "TRELLIS_RATE_WRITE_PER_MINUTE": "0"}
TWO_ROUTERS_MISSING = "two routers: not available (no links yet)"

T = TypeVar("T")


class BenchError(RuntimeError):
    """Set-up failed, or a peer did not answer as the protocol says."""


# == the controller and its router (processes) ======================================================


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used (Linux ``/proc``); None if unreadable."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float | None:
    """The resident set of ``pid`` in MiB (Linux ``/proc``); None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def children(pid: int) -> list[int]:
    found: list[int] = []
    for path in Path(f"/proc/{pid}/task").glob("*/children"):
        with suppress(OSError):
            found += [int(c) for c in path.read_text().split()]
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@dataclass
class Served:
    """A running ``trellis serve`` (and so its embedded router) on a temporary home."""

    home: Path
    port: int
    ctrl_port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def ca(self) -> str:
        return str(self.home / "pki" / "ca-bundle.pem")

    @property
    def router_dir(self) -> Path:
        return self.home / "router"

    def router_pid(self) -> int | None:
        """The embedded router's process (``trellis router run``, a child of ``serve``)."""
        for child in children(self.proc.pid):
            args = cmdline(child)
            if "router" in args and "run" in args:
                return child
        return None

    def log_tail(self, limit: int = 4000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]


def _env(home: Path, port: int, ctrl_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_")}
    env.update(
        TRELLIS_HOME=str(home),
        TRELLIS_BIND=f"{HOST}:{port}",
        TRELLIS_CTRL_BIND=f"{HOST}:{ctrl_port}",
        TRELLIS_ROUTER="on",
        TRELLIS_ADMIN_PASSWORD=PASSWORD,
        **SERVER_ENV,
    )
    return env


@contextmanager
def serving(home: Path) -> Iterator[Served]:
    """``trellis init`` + ``trellis serve`` with the embedded router, stopped on exit."""
    port, ctrl_port = free_port(), free_port()
    env = _env(home, port, ctrl_port)
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "init"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"trellis init exited {done.returncode}: {done.stdout}{done.stderr[-3000:]}")
    log = home.parent / "serve.log"
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "serve"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
        )
    served = Served(home, port, ctrl_port, proc, log)
    router_pid: int | None = None
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if proc.poll() is not None:
                raise BenchError(f"trellis serve exited {proc.returncode}\n{served.log_tail()}")
            if time.monotonic() > deadline:
                raise BenchError(f"trellis serve did not answer in time\n{served.log_tail()}")
            with suppress(OSError, http.client.HTTPException):
                if Api(port, served.ca).call("GET", "/version")[0] == 200:
                    break
            time.sleep(0.2)
        router_pid = served.router_pid()
        yield served
    finally:
        router_pid = served.router_pid() or router_pid
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if router_pid is not None and cpu_seconds(router_pid) is not None:
            # serve stops its router; if serve had to be killed, so is the router (ours, by pid).
            with suppress(ProcessLookupError):
                os.kill(router_pid, signal.SIGKILL)


# == set-up through the REST API ====================================================================


class Api:
    """HTTPS requests to the controller, verified against its CA (a client certificate if given)."""

    def __init__(self, port: int, ca: str, cert: tuple[str, str] | None = None) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=ca)
        if cert is not None:
            self.context.load_cert_chain(*cert)

    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        sent = {"Accept": "application/json", **(headers or {})}
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        if token:
            sent["zt-session"] = token
        conn = http.client.HTTPSConnection(HOST, self.port, timeout=30, context=self.context)
        try:
            conn.request(method, path, body=data, headers=sent)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, status: int, method: str, path: str, **kwargs: Any) -> Any:
        got, _, data = self.call(method, path, **kwargs)
        if got != status:
            raise BenchError(f"{method} {path}: {got}, expected {status}: {data[:1000]!r}")
        return json.loads(data) if data else None

    def created(self, path: str, admin: str, body: dict[str, Any]) -> str:
        return str(self.json(201, "POST", MGMT + path, token=admin, body=body)["data"]["id"])

    def login(self, base: str, method: str, body: dict[str, Any]) -> str:
        status, headers, data = self.call("POST", f"{base}/authenticate?method={method}", body=body)
        if status != 200 or "zt-session" not in headers:
            raise BenchError(f"{method} login on {base}: {status}: {data[:1000]!r}")
        return headers["zt-session"]


@dataclass(frozen=True)
class Plan:
    """What the SDK processes need (picklable): where the router is, who they are, their sessions."""

    edge_host: str
    edge_port: int
    server_name: str
    ca_file: str
    #: role -> (certificate chain file, key file)
    certs: dict[str, tuple[str, str]]
    #: role -> API-session token
    api_tokens: dict[str, str]
    #: "dial" / "bind" -> mode ("plain", "e2e") -> session token
    sessions: dict[str, dict[str, str]]
    router_dir: str
    router_pid: int


def _csr(name: str, key_file: Path) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_file.chmod(0o600)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .sign(key, hashes.SHA256())
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def _wait_router_online(api: Api, admin: str) -> str:
    query = urllib.parse.quote(f'name="{ROUTER_NAME}"')
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        found = api.json(200, "GET", f"{MGMT}/edge-routers?filter={query}", token=admin)["data"]
        if found and found[0].get("isOnline"):
            return str(found[0]["id"])
        time.sleep(0.2)
    raise BenchError(f"the embedded router {ROUTER_NAME} did not come online")


def set_up(served: Served, workdir: Path) -> Plan:
    """Identities enrolled with CSRs and logged in with their certificates, services, policies and
    sessions; where the router listens."""
    from router import identity

    api = Api(served.port, served.ca)
    admin = api.login(MGMT, "password", {"username": "admin", "password": PASSWORD})
    _wait_router_online(api, admin)
    certs: dict[str, tuple[str, str]] = {}
    api_tokens: dict[str, str] = {}
    ids: dict[str, str] = {}
    for role in ("dialer", "binder"):
        name = f"bench-{role}"
        ids[role] = api.created(
            "/identities",
            admin,
            {"name": name, "type": "Device", "isAdmin": False, "enrollment": {"ott": True}},
        )
        detail = api.json(200, "GET", f"{MGMT}/identities/{ids[role]}", token=admin)["data"]
        jti = detail["enrollment"]["ott"]["token"]
        key_file, cert_file = workdir / f"{role}.key", workdir / f"{role}.pem"
        status, headers, answer = api.call(
            "POST",
            f"{CLIENT}/enroll?method=ott&token={jti}",
            raw=_csr(name, key_file),
            headers={"Content-Type": "application/x-pem-file", "Accept": "application/x-pem-file"},
        )
        if status != 200 or not answer.startswith(b"-----BEGIN CERTIFICATE-----"):
            raise BenchError(f"enrolling {name}: {status} {headers.get('content-type')}: {answer[:500]!r}")
        cert_file.write_bytes(answer)
        certs[role] = (str(cert_file), str(key_file))
        api_tokens[role] = Api(served.port, served.ca, certs[role]).login(CLIENT, "cert", {})
    services = {
        mode: api.created("/services", admin, {"name": name, "encryptionRequired": mode.startswith("e2e")})
        for mode, name in SERVICES.items()
    }
    for kind, role in (("Dial", "dialer"), ("Bind", "binder")):
        api.created(
            "/service-policies",
            admin,
            {
                "name": f"bench-{kind.lower()}",
                "type": kind,
                "semantic": "AnyOf",
                "identityRoles": [f"@{ids[role]}"],
                "serviceRoles": [f"@{sid}" for sid in services.values()],
            },
        )
    sessions: dict[str, dict[str, str]] = {"dial": {}, "bind": {}}
    for kind, role in (("Dial", "dialer"), ("Bind", "binder")):
        for mode, sid in services.items():
            data = api.json(
                201,
                "POST",
                f"{CLIENT}/sessions",
                token=api_tokens[role],
                body={"serviceId": sid, "type": kind},
            )["data"]
            sessions[kind.lower()][mode] = str(data["token"])
    record = identity.load(served.router_dir)
    host, _, port = record.edge.rpartition(":")
    router_pid = served.router_pid()
    if router_pid is None:
        raise BenchError("the embedded router's process was not found")
    return Plan(
        edge_host=host.strip("[]"),
        edge_port=int(port),
        server_name=record.advertise,
        ca_file=str(served.router_dir / identity.CA),
        certs=certs,
        api_tokens=api_tokens,
        sessions=sessions,
        router_dir=str(served.router_dir),
        router_pid=router_pid,
    )


def links_available() -> bool:
    """Whether routers link to one another yet (``router/links.py``, and a far end over a link
    that is not refused)."""
    import importlib.util

    from router.edge import EdgeListener

    if importlib.util.find_spec("router.links") is None:
        return False
    source = inspect.getsource(EdgeListener._open_link_end)
    return "do not link to one another yet" not in source


@contextmanager
def second_router(served: Served, workdir: Path) -> Iterator[tuple[int, int]]:
    """A second edge router (``#public``), enrolled with ``trellis router enroll`` and run with
    ``trellis router run`` beside the embedded one, online: (its edge port, its pid); stopped on
    exit."""
    from router import identity

    api = Api(served.port, served.ca)
    admin = api.login(MGMT, "password", {"username": "admin", "password": PASSWORD})
    router_id = api.created("/edge-routers", admin, {"name": SECOND_ROUTER, "roleAttributes": ["public"]})
    jwt = api.json(200, "GET", f"{MGMT}/edge-routers/{router_id}", token=admin)["data"]["enrollmentJwt"]
    jwt_file = workdir / f"{SECOND_ROUTER}.jwt"
    jwt_file.write_text(jwt)
    directory = workdir / SECOND_ROUTER
    env = _env(served.home, served.port, served.ctrl_port)
    env.update(TRELLIS_ROUTER_HOME=str(directory), TRELLIS_ROUTER_CTRL=f"{HOST}:{served.ctrl_port}")
    done = subprocess.run(
        [sys.executable, "-m", "controller.cli", "router", "enroll", str(jwt_file)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"trellis router enroll exited {done.returncode}: {done.stderr[-1000:]}")
    with (workdir / f"{SECOND_ROUTER}.log").open("ab") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "controller.cli", "router", "run"],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=sink,
        )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not api.json(200, "GET", f"{MGMT}/edge-routers/{router_id}", token=admin)["data"].get(
            "isOnline"
        ):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"{SECOND_ROUTER} did not come online (exit status {proc.poll()})")
            time.sleep(0.2)
        yield int(identity.load(directory).edge.rpartition(":")[2]), proc.pid
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()  # ours, by pid
                proc.wait()


# == the SDK side: channel v2 clients ================================================================


class E2e:
    """One connection's end-to-end encryption, as the C SDK does it: ``crypto_kx`` session keys,
    a ``crypto_secretstream_xchacha20poly1305`` stream each way whose header is the first Data
    message."""

    __slots__ = ("_rx", "_rx_key", "_rx_ready", "_tx", "header")

    def __init__(self, rx_key: bytes, tx_key: bytes) -> None:
        self._tx = sodium.crypto_secretstream_xchacha20poly1305_state()
        self.header: bytes = sodium.crypto_secretstream_xchacha20poly1305_init_push(self._tx, tx_key)
        self._rx = sodium.crypto_secretstream_xchacha20poly1305_state()
        self._rx_key = rx_key
        self._rx_ready = False

    @classmethod
    def client(cls, pk: bytes, sk: bytes, server_pk: bytes) -> E2e:
        rx, tx = sodium.crypto_kx_client_session_keys(pk, sk, server_pk)
        return cls(rx, tx)

    @classmethod
    def server(cls, pk: bytes, sk: bytes, client_pk: bytes) -> E2e:
        rx, tx = sodium.crypto_kx_server_session_keys(pk, sk, client_pk)
        return cls(rx, tx)

    def seal(self, plaintext: bytes) -> bytes:
        return sodium.crypto_secretstream_xchacha20poly1305_push(
            self._tx, plaintext, None, sodium.crypto_secretstream_xchacha20poly1305_TAG_MESSAGE
        )

    def open(self, body: bytes) -> bytes | None:
        """The plaintext of ``body``; None for the stream's header (the first message)."""
        if not self._rx_ready:
            sodium.crypto_secretstream_xchacha20poly1305_init_pull(self._rx, body, self._rx_key)
            self._rx_ready = True
            return None
        plaintext, _tag = sodium.crypto_secretstream_xchacha20poly1305_pull(self._rx, body, None)
        return bytes(plaintext)


class Stream:
    """One connection on a channel: Data out (sealed when encrypted), Data in to ``on_data``."""

    __slots__ = ("_early", "_header_sent", "_seq", "conn_id", "crypto", "on_data", "peer", "received")

    def __init__(self, peer: Peer, conn_id: int) -> None:
        self.peer = peer
        self.conn_id = conn_id
        self.crypto: E2e | None = None
        self.on_data: Callable[[Stream, bytes], None] = _ignore
        self.received = 0
        self._seq = itertools.count(1)
        self._header_sent = False
        self._early: list[bytes] | None = []  # bodies that came before the keys were known

    def _data(self, body: bytes) -> Message:
        message = Message(DATA, body)
        message.set_u32(CONN_ID, self.conn_id).set_u32(SEQ, next(self._seq))
        return message

    def ready(self, crypto: E2e | None) -> None:
        """The connection is up (with its keys, if encrypted): what came meanwhile is handled."""
        self.crypto = crypto
        self.send_header()
        early, self._early = self._early, None
        for body in early or ():
            self.deliver(body)

    def send_header(self) -> None:
        if self.crypto is not None and not self._header_sent:
            self._header_sent = True
            self.peer.channel.send(self._data(self.crypto.header))

    def send(self, plaintext: bytes) -> None:
        if self.crypto is not None:
            self.send_header()
            plaintext = self.crypto.seal(plaintext)
        self.peer.channel.send(self._data(plaintext))

    def deliver(self, body: bytes) -> None:
        if self._early is not None:
            self._early.append(body)
            return
        if self.crypto is not None:
            opened = self.crypto.open(body)
            if opened is None:
                return
            body = opened
        self.received += len(body)
        self.on_data(self, body)

    def close(self) -> None:
        self.peer.conns.pop(self.conn_id, None)
        message = Message(STATE_CLOSED, b"closed by the bench")
        message.set_u32(CONN_ID, self.conn_id).set_u32(SEQ, 0)
        self.peer.channel.send(message)


def _ignore(stream: Stream, data: bytes) -> None:
    pass


def echo(stream: Stream, data: bytes) -> None:
    stream.send(data)


class Peer:
    """One channel v2 peer (a :class:`channel.connection.Handler`): Data and StateClosed go to its
    connections; what else arrives unasked goes to :meth:`other`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.channel = Channel(self, name=name)
        self.conns: dict[int, Stream] = {}
        self.ids = itertools.count(1)
        self.errors: collections.Counter[str] = collections.Counter()

    def on_message(self, channel: Channel, message: Message) -> None:
        kind = message.content_type
        if kind == DATA:
            stream = self.conns.get(message.u32(CONN_ID) or 0)
            if stream is not None:
                stream.deliver(message.body)
            else:
                self.errors["data for an unknown connection"] += 1
        elif kind == STATE_CLOSED:
            self.conns.pop(message.u32(CONN_ID) or 0, None)
        else:
            self.other(message)

    def other(self, message: Message) -> None:
        self.errors[f"unexpected content type {message.content_type}"] += 1

    def on_close(self, channel: Channel, error: BaseException | None) -> None:
        pass

    def spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    @property
    def cipher(self) -> str:
        transport = self.channel.transport
        sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
        if sslobj is None:
            return "?"
        cipher = sslobj.cipher()
        return f"{sslobj.version()} {cipher[0] if cipher else '?'}"


_TASKS: set[asyncio.Future[None]] = set()


def client_context(plan: Plan, role: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=plan.ca_file)
    ctx.load_cert_chain(*plan.certs[role])
    return ctx


class Sdk(Peer):
    """A bench SDK: hello, Connect (the dialer), Bind and Dial answering (the binder)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        #: bind conn id -> (mode, (public key, secret key) or None)
        self.binds: dict[int, tuple[str, tuple[bytes, bytes] | None]] = {}
        self.accepted = 0

    @classmethod
    async def open(cls, plan: Plan, role: str, port: int | None = None, name: str = "") -> Sdk:
        sdk = cls(name or role)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(
            loop.create_connection(
                lambda: sdk.channel,
                plan.edge_host,
                port or plan.edge_port,
                ssl=client_context(plan, role),
                server_hostname=plan.server_name,
            ),
            WAIT,
        )
        hello = Message(HELLO, f"ziti-sdk-c[0]@trellis-bench-{sdk.name}".encode())
        hello.set_text(SESSION_TOKEN, plan.api_tokens[role])
        answer = await sdk.channel.request(hello, WAIT)
        if not answer.flag(2):
            raise BenchError(f"hello of {role} refused: {answer.body[:200]!r}")
        return sdk

    async def connect(self, token: str, *, encrypted: bool) -> Stream:
        """Connect -> StateConnected; the connection (its keys set when ``encrypted``)."""
        conn_id = next(self.ids)
        request = Message(CONNECT, token.encode())
        request.set_u32(CONN_ID, conn_id).set_u32(SEQ, 0)
        keys = sodium.crypto_kx_keypair() if encrypted else None
        if keys is not None:
            request.headers[PUBLIC_KEY] = keys[0]
        stream = Stream(self, conn_id)
        self.conns[conn_id] = stream  # before the answer: data may follow it at once
        try:
            answer = await self.channel.request(request, WAIT)
            if answer.content_type != STATE_CONNECTED:
                raise BenchError(f"connect refused: {answer.body[:300].decode(errors='replace')}")
            crypto = None
            if keys is not None:
                server_pk = answer.headers.get(PUBLIC_KEY)
                if server_pk is None:
                    raise BenchError("an encrypted connect was answered without the binder's public key")
                crypto = E2e.client(keys[0], keys[1], server_pk)
        except BaseException:
            self.conns.pop(conn_id, None)
            raise
        stream.ready(crypto)
        return stream

    async def bind(self, token: str, mode: str) -> None:
        conn_id = BIND_IDS[mode]
        request = Message(BIND_MESSAGE, token.encode())
        request.set_u32(CONN_ID, conn_id).set_u32(SEQ, 0)
        keys = sodium.crypto_kx_keypair() if mode.startswith("e2e") else None
        if keys is not None:
            request.headers[PUBLIC_KEY] = keys[0]
        self.binds[conn_id] = (mode, keys)
        answer = await self.channel.request(request, WAIT)
        if answer.content_type != STATE_CONNECTED:
            raise BenchError(f"bind {mode} refused: {answer.body[:300].decode(errors='replace')}")

    def other(self, message: Message) -> None:
        if message.content_type != DIAL:
            super().other(message)
            return
        bind = self.binds.get(message.u32(CONN_ID) or 0)
        if bind is None:
            self.errors["dial on an unknown bind"] += 1
            return
        _, keys = bind
        new_id = 1_000_000 + next(self.ids)
        stream = Stream(self, new_id)
        stream.on_data = echo
        self.conns[new_id] = stream
        crypto = None
        dialer_pk = message.headers.get(PUBLIC_KEY)
        if keys is not None and dialer_pk is not None:
            crypto = E2e.server(keys[0], keys[1], dialer_pk)
        success = Message(DIAL_SUCCESS, new_id.to_bytes(4, "little"))
        success.set_u32(CONN_ID, message.u32(CONN_ID) or 0).set_u32(SEQ, 0).reply_to(message)
        self.spawn(self._accept(stream, success, crypto))

    async def _accept(self, stream: Stream, success: Message, crypto: E2e | None) -> None:
        try:
            answer = await self.channel.request(success, WAIT)
        except Exception as ex:
            self.errors[f"dial success unanswered: {type(ex).__name__}"] += 1
            self.conns.pop(stream.conn_id, None)
            return
        if answer.content_type != STATE_CONNECTED:
            self.errors["dial success refused"] += 1
            self.conns.pop(stream.conn_id, None)
            return
        self.accepted += 1
        stream.ready(crypto)


class DirectPeer(Peer):
    """The direct baseline's server side of one channel: answers the hello and the Connect itself
    (with its own public key when the dialer sent one) and echoes, as router and binder do."""

    def __init__(self, name: str, keys: tuple[bytes, bytes]) -> None:
        super().__init__(name)
        self.keys = keys

    def other(self, message: Message) -> None:
        if message.content_type == HELLO:
            self.channel.send(result(message).set_text(HELLO_VERSION, "direct"))
            return
        if message.content_type != CONNECT:
            super().other(message)
            return
        conn_id = message.u32(CONN_ID) or 0
        stream = Stream(self, conn_id)
        stream.on_data = echo
        self.conns[conn_id] = stream
        answer = Message(STATE_CONNECTED).reply_to(message)
        answer.set_u32(CONN_ID, conn_id).set_u32(SEQ, 0)
        crypto = None
        dialer_pk = message.headers.get(PUBLIC_KEY)
        if dialer_pk is not None:
            crypto = E2e.server(self.keys[0], self.keys[1], dialer_pk)
            answer.headers[PUBLIC_KEY] = self.keys[0]
        self.channel.send(answer)
        stream.ready(crypto)


# == the processes ==================================================================================


async def _until_stopped(pipe: Connection) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, pipe.recv)


def binder_process(plan: Plan, port: int, modes: Sequence[str], pipe: Connection) -> None:
    """A binder: one channel to the router at ``port``, the services of ``modes`` bound, every
    Dial accepted, every message echoed."""

    async def main() -> None:
        try:
            sdk = await Sdk.open(plan, "binder", port)
            for mode in modes:
                await sdk.bind(plan.sessions["bind"][mode], mode)
        except Exception as ex:
            pipe.send(("failed", f"{type(ex).__name__}: {ex}"))
            return
        pipe.send(("ready", None))
        await _until_stopped(pipe)
        pipe.send(("stats", {"accepted": sdk.accepted, "errors": dict(sdk.errors)}))
        sdk.channel.close()

    asyncio.run(main())


def direct_process(plan: Plan, pipe: Connection) -> None:
    """The direct baseline's server: the router's own TLS context and certificate, echoing."""
    from router import identity

    async def main() -> None:
        ctx = identity.edge_context(Path(plan.router_dir))
        keys = sodium.crypto_kx_keypair()
        numbers = itertools.count(1)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: DirectPeer(f"direct#{next(numbers)}", keys).channel, HOST, 0, ssl=ctx
        )
        pipe.send(("ready", int(server.sockets[0].getsockname()[1])))
        await _until_stopped(pipe)
        pipe.send(("stats", {"pid": os.getpid()}))
        server.close()

    asyncio.run(main())


def dialer_process(task: str, plan: Plan, options: dict[str, Any], pipe: Connection) -> None:
    """One measurement (``task``) in a process of its own; its result dict goes to ``pipe``."""
    try:
        outcome = asyncio.run(TASKS[task](plan, options))
        pipe.send(("done", outcome))
    except Exception as ex:
        pipe.send(("failed", f"{type(ex).__name__}: {ex}"))


@dataclass
class Helper:
    """A helper process (binder or direct server) and its pipe."""

    process: multiprocessing.process.BaseProcess
    pipe: Connection
    value: Any = None

    def stop(self) -> Any:
        stats = None
        with suppress(OSError, EOFError):
            self.pipe.send("stop")
            if self.pipe.poll(10):
                stats = self.pipe.recv()[1]
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()  # ours, by pid
            self.process.join(5)
        return stats


def _context() -> Any:
    return multiprocessing.get_context("spawn")


def start_helper(target: Callable[..., None], *args: Any) -> Helper:
    ours, theirs = _context().Pipe()
    process = _context().Process(target=target, args=(*args, theirs), daemon=True)
    process.start()
    theirs.close()
    if not ours.poll(WAIT):
        process.terminate()
        raise BenchError(f"{target.__name__} did not start in time")
    kind, value = ours.recv()
    if kind != "ready":
        process.join(5)
        raise BenchError(f"{target.__name__}: {value}")
    return Helper(process, ours, value)


def run_dialer(task: str, plan: Plan, options: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run ``task`` in a new dialer process; its result."""
    ours, theirs = _context().Pipe()
    process = _context().Process(target=dialer_process, args=(task, plan, options, theirs), daemon=True)
    process.start()
    theirs.close()
    try:
        if not ours.poll(timeout):
            raise BenchError(f"dialer {task} took more than {timeout:.0f} s")
        kind, value = ours.recv()
    finally:
        process.join(10)
        if process.is_alive():
            process.terminate()  # ours, by pid
            process.join(5)
    if kind != "done":
        raise BenchError(f"dialer {task}: {value}")
    return dict(value)


# == the measurements (in the dialer process) =======================================================


def _cpu(pids: Sequence[int]) -> list[float | None]:
    return [cpu_seconds(pid) for pid in pids]


async def bulk(plan: Plan, options: dict[str, Any]) -> dict[str, Any]:
    """Echo 32 KiB messages on one connection for ``seconds``, at most ``window`` bytes unanswered."""
    encrypted = options["mode"].startswith("e2e")
    port = options.get("port")  # the direct server's; else the router's
    sdk = await Sdk.open(plan, "dialer", port)
    token = plan.sessions["dial"][options["mode"]]
    patience = time.monotonic() + float(options.get("retry_seconds", 0))
    while True:  # a link between two routers may still be coming up
        try:
            stream = await sdk.connect(token, encrypted=encrypted)
            break
        except BenchError:
            if time.monotonic() > patience:
                raise
            await asyncio.sleep(0.5)
    payload = os.urandom(CHUNK)
    window, seconds = int(options["window"]), float(options["seconds"])
    progress = asyncio.Event()
    stream.on_data = lambda _stream, _data: progress.set()
    others = [int(p) for p in options["pids"]]
    loop = asyncio.get_running_loop()
    sent = messages = 0
    cpu_before, own_before = _cpu(others), time.process_time()
    start = loop.time()
    deadline = start + seconds
    while True:
        now = loop.time()
        if now < deadline:
            while sent - stream.received < window:
                stream.send(payload)
                sent += CHUNK
                messages += 1
        elif stream.received >= sent:
            break
        if now > deadline + WAIT:
            raise BenchError(f"{sent - stream.received} bytes never came back")
        progress.clear()
        await asyncio.wait_for(progress.wait(), WAIT)
    elapsed = loop.time() - start
    cpu_after, own_after = _cpu(others), time.process_time()
    cipher = sdk.cipher
    stream.close()
    sdk.channel.close()
    cpu = [
        round(100 * (after - before) / elapsed, 1) if before is not None and after is not None else None
        for before, after in zip(cpu_before, cpu_after, strict=True)
    ]
    return {
        "bytes": stream.received,
        "messages": messages,
        "seconds": round(elapsed, 3),
        "mb_per_s": round(stream.received / elapsed / 1e6, 1),
        "messages_per_s": round(messages / elapsed),
        "dialer_cpu_percent": round(100 * (own_after - own_before) / elapsed, 1),
        "cpu_percent": cpu,
        "tls": cipher,
        "errors": dict(sdk.errors),
    }


async def dials(plan: Plan, options: dict[str, Any]) -> dict[str, Any]:
    """``count`` sequential dials (Connect sent -> StateConnected), each closed after."""
    sdk = await Sdk.open(plan, "dialer")
    token = plan.sessions["dial"]["plain"]
    times: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    for i in range(WARM_UP_DIALS + int(options["count"])):
        started = time.perf_counter()
        try:
            stream = await sdk.connect(token, encrypted=False)
        except (BenchError, TimeoutError) as ex:
            errors[str(ex)[:120]] += 1
            continue
        took = time.perf_counter() - started
        if i >= WARM_UP_DIALS:
            times.append(took * 1000)
        stream.close()
    sdk.channel.close()
    return {"times_ms": times, "errors": dict(errors | sdk.errors)}


async def held(plan: Plan, options: dict[str, Any]) -> dict[str, Any]:
    """``count`` connections open at once (one channel, or a channel each), then a small echo on
    every one of them while all are held."""
    count, one_channel = int(options["count"]), options["shape"] == "one channel"
    gate = asyncio.Semaphore(int(options["concurrency"]))
    token = plan.sessions["dial"]["plain"]
    errors: collections.Counter[str] = collections.Counter()
    rss_before = rss_mib(plan.router_pid)
    channels: list[Sdk] = []
    shared = await Sdk.open(plan, "dialer") if one_channel else None
    if shared is not None:
        channels.append(shared)

    async def open_one(i: int) -> Stream | None:
        async with gate:
            try:
                sdk = shared
                if sdk is None:
                    sdk = await Sdk.open(plan, "dialer", name=f"dialer-{i}")
                    channels.append(sdk)
                return await sdk.connect(token, encrypted=False)
            except (OSError, ssl.SSLError, BenchError, TimeoutError, ConnectionError) as ex:
                errors[f"open: {type(ex).__name__}: {str(ex)[:100]}"] += 1
                return None

    started = time.perf_counter()
    opened = [s for s in await asyncio.gather(*(open_one(i) for i in range(count))) if s is not None]
    open_seconds = time.perf_counter() - started

    async def echo_one(stream: Stream, i: int) -> bool:
        payload = f"held connection {i} ".encode() * 4
        got = bytearray()
        done = asyncio.Event()

        def take(_stream: Stream, data: bytes) -> None:
            got.extend(data)
            if len(got) >= len(payload):
                done.set()

        stream.on_data = take
        stream.send(payload)
        try:
            await asyncio.wait_for(done.wait(), WAIT)
        except TimeoutError:
            errors["echo: no answer"] += 1
            return False
        if bytes(got) != payload:
            errors["echo: wrong bytes"] += 1
            return False
        return True

    echoed = sum(await asyncio.gather(*(echo_one(s, i) for i, s in enumerate(opened))))
    rss_held = rss_mib(plan.router_pid)
    still_open = sum(1 for s in opened if s.conn_id in s.peer.conns)
    for stream in opened:
        stream.close()
    for sdk in channels:
        errors.update(sdk.errors)
        sdk.channel.close()
    await asyncio.sleep(0.2)
    return {
        "shape": options["shape"],
        "connections": count,
        "channels": len(channels),
        "opened": len(opened),
        "echoed": echoed,
        "still_open": still_open,
        "open_seconds": round(open_seconds, 2),
        "router_rss_before_mib": rss_before,
        "router_rss_held_mib": rss_held,
        "errors": dict(errors),
    }


TASKS: dict[str, Callable[[Plan, dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]] = {
    "bulk": bulk,
    "dials": dials,
    "held": held,
}


# == the profile ====================================================================================

#: (category, does a leaf frame "function (file:line)" belong to it), first match wins.
CATEGORIES: list[tuple[str, Callable[[str], bool]]] = [
    ("idle: waiting in epoll", lambda f: ".select (selectors.py:" in f),
    ("TLS: decrypt/encrypt (ssl.SSLObject read/write)", lambda f: "(ssl.py:" in f),
    ("TLS: asyncio's sslproto (BIOs, buffers)", lambda f: "asyncio/sslproto.py" in f),
    ("socket send/recv syscalls (asyncio transport)", lambda f: "asyncio/selector_events.py" in f),
    ("channel v2 frames: decode/encode", lambda f: "channel/frames.py" in f),
    ("channel: dispatch, back-pressure", lambda f: "channel/connection.py" in f),
    ("router: edge handlers", lambda f: "router/edge.py" in f),
    ("event loop", lambda f: "asyncio/" in f),
]


def summarise_profile(raw: str, top: int = 12) -> dict[str, Any]:
    """Self time of py-spy's collapsed stacks: by category, and the busiest leaf functions."""
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaves[stack.split(";")[-1].strip()] += int(count)
        total += int(count)
    by_category: collections.Counter[str] = collections.Counter()
    for leaf, n in leaves.items():
        category = next((name for name, match in CATEGORIES if match(leaf)), "other")
        by_category[category] += n
    busy = total - by_category["idle: waiting in epoll"]

    def share(n: int, of: int) -> float:
        return round(100 * n / of, 1) if of else 0.0

    return {
        "samples": total,
        "busy_percent": share(busy, total),
        "categories_percent_of_busy": {
            name: share(n, busy) for name, n in by_category.most_common() if not name.startswith("idle")
        },
        "top_self_percent_of_busy": {
            leaf: share(n, busy) for leaf, n in leaves.most_common(top + 1) if not CATEGORIES[0][1](leaf)
        },
    }


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def profile_bulk(plan: Plan, options: dict[str, Any], out: Path) -> dict[str, Any]:
    """A plain bulk run through the router with ``py-spy record`` on the router process."""
    tool = py_spy()
    if tool is None:
        return {"error": "py-spy not found"}
    seconds = float(options["seconds"])
    recorder = subprocess.Popen(
        [
            tool,
            "record",
            "--pid",
            str(plan.router_pid),
            "--duration",
            str(max(1, round(seconds + 1))),
            "--rate",
            "200",
            "--idle",
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    time.sleep(0.5)  # py-spy attaches
    try:
        run = run_dialer("bulk", plan, {**options, "seconds": seconds + 1}, WAIT + seconds * 4)
    finally:
        try:
            said, _ = recorder.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            recorder.kill()  # ours, by pid
            said, _ = recorder.communicate()
    if recorder.returncode != 0 or not out.exists():
        return {"error": f"py-spy exited {recorder.returncode}: {said.decode(errors='replace')[-500:]}"}
    return {"run": run, "raw": str(out), **summarise_profile(out.read_text())}


# == the report =====================================================================================


@dataclass
class BulkRow:
    path: str
    mode: str
    mb_per_s: float
    messages_per_s: int
    seconds: float
    megabytes: float
    router_cpu_percent: float | None
    dialer_cpu_percent: float
    peer_cpu_percent: float | None
    of_direct_percent: float | None = None
    #: The second router's, on the path through two routers.
    second_router_cpu_percent: float | None = None
    #: Router CPU per message it relayed (each echoed message is relayed twice), in µs.
    router_us_per_message: float | None = None
    #: Every run's MB/s (the row is the median run).
    runs_mb_per_s: list[float] = field(default_factory=list)
    tls: str = ""
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    when: str
    cores: int | None
    load_before: list[float]
    load_after: list[float]
    python: str
    openssl: str
    seconds_per_bulk_run: float
    bulk_repeats: int
    window_bytes: int
    chunk_bytes: int
    bulk: list[BulkRow]
    dial: dict[str, Any]
    held: list[dict[str, Any]]
    two_routers: str
    binder: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] | None = None

    def table(self) -> str:
        lines = [
            "| path | mode | MB/s echoed | of direct | msgs/s | router CPU | router µs/msg | dialer CPU "
            "| binder/server CPU | errors |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]

        def pct(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f} %"

        for r in self.bulk:
            us = r.router_us_per_message
            spread = ""
            if len(r.runs_mb_per_s) > 1:
                spread = f" ({min(r.runs_mb_per_s):.0f}-{max(r.runs_mb_per_s):.0f})"
            second = "" if r.second_router_cpu_percent is None else f" + {pct(r.second_router_cpu_percent)}"
            errors = ", ".join(f"{k}: {n}" for k, n in r.errors.items()) or "none"
            lines.append(
                f"| {r.path} | {r.mode} | {r.mb_per_s:.1f}{spread} | {pct(r.of_direct_percent)} | {r.messages_per_s} "
                f"| {pct(r.router_cpu_percent)}{second} | {'-' if us is None else f'{us:.0f}'} "
                f"| {pct(r.dialer_cpu_percent)} | {pct(r.peer_cpu_percent)} | {errors} |"
            )
        if self.two_routers != "measured":
            lines.append(f"| two routers | - | {self.two_routers} | | | | | | | |")
        d = self.dial
        lines += [
            "",
            "| dial set-up (Connect -> StateConnected) | dials | p50 ms | p99 ms | max ms | mean ms | errors |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            f"| through the router, binder answering | {d['dials']} | {d['p50_ms']:.2f} | {d['p99_ms']:.2f} "
            f"| {d['max_ms']:.2f} | {d['mean_ms']:.2f} | {_errors(d['errors'])} |",
            "",
            "| connections held | connections | channels | opened | echoed | open s | router RSS before -> held MiB | errors |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for h in self.held:
            lines.append(
                f"| {h['shape']} | {h['connections']} | {h['channels']} | {h['opened']} | {h['echoed']} "
                f"| {h['open_seconds']:.2f} | {h['router_rss_before_mib']} -> {h['router_rss_held_mib']} "
                f"| {_errors(h['errors'])} |"
            )
        if self.profile is not None:
            lines += ["", _profile_text(self.profile)]
        load = ", ".join(f"{x:.2f}" for x in self.load_before)
        after = ", ".join(f"{x:.2f}" for x in self.load_after)
        tls = next((r.tls for r in self.bulk if r.tls), "?")
        lines += [
            "",
            f"Echo of {self.chunk_bytes // 1024} KiB Data messages for {self.seconds_per_bulk_run:g} s per run, "
            f"{self.bulk_repeats} run(s) per row, interleaved, the row the median (range in brackets), "
            f"at most {self.window_bytes // 1024} KiB unanswered; MB/s = 10^6 bytes of payload echoed back "
            f"per second; CPU in % of one core. {self.cores} cores shared by every process; load average "
            f"before: {load}, after: {after}. {tls}, {self.openssl}, Python {self.python}.",
        ]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def _errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{k}: {n}" for k, n in errors.items()) or "none"


def _profile_text(profile: dict[str, Any]) -> str:
    if "error" in profile:
        return f"Router profile: unavailable ({profile['error']})"
    run = profile["run"]
    lines = [
        f"Router profile (py-spy, plain bulk run at {run['mb_per_s']:.1f} MB/s while sampled): busy "
        f"{profile['busy_percent']:.0f} % of samples; self time by category (% of busy):",
    ]
    lines += [f"  {pct:5.1f} %  {name}" for name, pct in profile["categories_percent_of_busy"].items()]
    lines.append("busiest functions (self, % of busy):")
    lines += [f"  {pct:5.1f} %  {leaf}" for leaf, pct in profile["top_self_percent_of_busy"].items()]
    lines.append(f"raw stacks: {profile['raw']}")
    return "\n".join(lines)


def _bulk_row(path: str, mode: str, run: dict[str, Any], direct: dict[str, float]) -> BulkRow:
    cpu = run["cpu_percent"]
    router_cpu = cpu[0] if path != "direct TLS" else None
    peer_cpu = cpu[-1]
    base = direct.get(mode)
    return BulkRow(
        path=path,
        mode=mode,
        mb_per_s=run["mb_per_s"],
        messages_per_s=run["messages_per_s"],
        seconds=run["seconds"],
        megabytes=round(run["bytes"] / 1e6, 1),
        router_cpu_percent=router_cpu,
        dialer_cpu_percent=run["dialer_cpu_percent"],
        peer_cpu_percent=peer_cpu,
        of_direct_percent=round(100 * run["mb_per_s"] / base, 0) if base and path != "direct TLS" else None,
        router_us_per_message=round(router_cpu / 100 / (2 * run["messages_per_s"]) * 1e6, 1)
        if router_cpu is not None and run["messages_per_s"]
        else None,
        second_router_cpu_percent=cpu[1] if path == "two routers" else None,
        runs_mb_per_s=run.get("runs_mb_per_s", [run["mb_per_s"]]),
        tls=run["tls"],
        errors=run["errors"],
    )


def summarise_dials(run: dict[str, Any]) -> dict[str, Any]:
    times = run["times_ms"]
    return {
        "dials": len(times),
        "p50_ms": round(percentile(times, 50), 3),
        "p99_ms": round(percentile(times, 99), 3),
        "max_ms": round(max(times, default=0.0), 3),
        "mean_ms": round(sum(times) / len(times), 3) if times else 0.0,
        "errors": run["errors"],
    }


def run(
    *,
    seconds: float,
    window: int,
    dial_count: int,
    connections: int,
    concurrency: int,
    shapes: Sequence[str],
    profile: bool,
    out: Path | None,
    profile_out: Path,
    repeat: int = 1,
) -> Report:
    """Everything, on a fresh home; the JSON to ``out`` (if given)."""
    raise_fd_limit(max(4096, 2 * connections + 512))  # inherited by serve, the router and the SDKs
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="trellis-bench-dataplane-") as tmp:
        workdir = Path(tmp)
        with serving(workdir / "home") as served:
            say("set-up: identities, services, policies, sessions")
            plan = set_up(served, workdir)
            binder = start_helper(binder_process, plan, plan.edge_port, ONE_ROUTER)
            direct = start_helper(direct_process, plan)
            binder_stats: dict[str, Any] = {}
            try:
                held_rows = []
                for shape in shapes:
                    say(f"held: {connections} connections, {shape}")
                    held_rows.append(
                        run_dialer(
                            "held",
                            plan,
                            {"count": connections, "shape": shape, "concurrency": concurrency},
                            WAIT * 4 + connections * 0.1,
                        )
                    )
                say(f"dial: {dial_count} sequential dials")
                dial = summarise_dials(
                    run_dialer("dials", plan, {"count": dial_count}, WAIT * 2 + dial_count)
                )
                bulk_rows, two_routers = measure_bulk(
                    served,
                    plan,
                    workdir,
                    {"binder": binder, "direct": direct},
                    window=window,
                    seconds=seconds,
                    repeat=repeat,
                )
                say(two_routers)
                profiled = None
                if profile:
                    say(f"profile: py-spy on the router during a plain bulk run of {seconds + 1:g} s")
                    profiled = profile_bulk(
                        plan,
                        {"mode": "plain", "window": window, "seconds": seconds, "pids": [plan.router_pid]},
                        profile_out,
                    )
            finally:
                binder_stats = binder.stop() or {}
                direct.stop()
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count(),
        load_before=load_before,
        load_after=[round(x, 2) for x in os.getloadavg()],
        python=platform.python_version(),
        openssl=ssl.OPENSSL_VERSION,
        seconds_per_bulk_run=seconds,
        bulk_repeats=repeat,
        window_bytes=window,
        chunk_bytes=CHUNK,
        bulk=bulk_rows,
        dial=dial,
        held=held_rows,
        two_routers=two_routers,
        binder=binder_stats,
        profile=profiled,
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


#: The bulk rows, in order: (path, mode); a two-router mode is "<mode>-2r" in :data:`SERVICES`.
BULK_PATHS = [("direct TLS", "plain"), ("direct TLS", "e2e"), ("router", "plain"), ("router", "e2e")]


def measure_bulk(
    served: Served,
    plan: Plan,
    workdir: Path,
    helpers: dict[str, Helper],
    *,
    window: int,
    seconds: float,
    repeat: int,
) -> tuple[list[BulkRow], str]:
    """Every bulk path ``repeat`` times, the paths interleaved (direct, router, two routers, then
    again), so that a change in the machine's load falls on all of them alike; each row is the
    median run. And what became of two routers."""
    paths = list(BULK_PATHS)
    two_routers = TWO_ROUTERS_MISSING
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in paths}
    with contextlib.ExitStack() as stack:
        second: tuple[int, Helper] | None = None
        if links_available():
            try:
                port, pid = stack.enter_context(second_router(served, workdir))
                binder = start_helper(binder_process, plan, port, TWO_ROUTERS)
                stack.callback(binder.stop)
                second = (pid, binder)
                paths += [("two routers", "plain"), ("two routers", "e2e")]
                runs.update({key: [] for key in paths[len(BULK_PATHS) :]})
                two_routers = "measured"
            except BenchError as ex:
                two_routers = f"two routers: failed: {ex}"
        for turn in range(repeat):
            for path, mode in paths:
                if path == "two routers" and two_routers != "measured":
                    continue
                say(f"bulk {turn + 1}/{repeat}: {path}, {mode}, {seconds:g} s")
                options: dict[str, Any] = {"mode": mode, "window": window, "seconds": seconds}
                if path == "direct TLS":
                    options.update(port=helpers["direct"].value, pids=[helpers["direct"].process.pid])
                elif path == "router":
                    options.update(pids=[plan.router_pid, helpers["binder"].process.pid])
                else:
                    assert second is not None
                    pid, binder = second
                    options.update(
                        mode=f"{mode}-2r", pids=[plan.router_pid, pid, binder.process.pid], retry_seconds=15.0
                    )
                try:
                    runs[(path, mode)].append(run_dialer("bulk", plan, options, WAIT + seconds * 4 + 15))
                except BenchError as ex:
                    if path != "two routers":
                        raise
                    two_routers = f"two routers: failed: {ex}"
    rows: list[BulkRow] = []
    direct_rates: dict[str, float] = {}
    for path, mode in paths:
        done = runs[(path, mode)]
        if not done:
            continue
        row = _bulk_row(path, mode, median_run(done), direct_rates)
        if path == "direct TLS":
            direct_rates[mode] = row.mb_per_s
        rows.append(row)
    return rows, two_routers


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the lower middle one of an even count), with every run's."""
    ordered = sorted(runs, key=lambda r: r["mb_per_s"])
    return {**ordered[(len(ordered) - 1) // 2], "runs_mb_per_s": [r["mb_per_s"] for r in runs]}


def say(text: str) -> None:
    print(f"... {text}", file=sys.stderr, flush=True)


SHAPES = ("one channel", "a channel each")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=3.0, help="each bulk run (default 3)")
    parser.add_argument(
        "--window", type=int, default=4096, help="KiB a bulk dialer leaves unanswered at most (default 4096)"
    )
    parser.add_argument("--dials", type=int, default=200, help="sequential dials timed (default 200)")
    parser.add_argument(
        "--connections", type=int, default=1000, help="connections held at once (default 1000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=50, help="connections being opened at a time (default 50)"
    )
    parser.add_argument(
        "--shapes",
        default="one,each",
        help="held connections: one (one channel, many connections), each (a channel per connection)",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs of each bulk path, interleaved; the median (default 3)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="one more plain bulk run with py-spy on the router"
    )
    add_output_arguments(parser, RESULTS)


def main(args: argparse.Namespace) -> str:
    if args.seconds <= 0 or args.window < CHUNK // 1024 or args.dials < 1 or args.connections < 1:
        raise SystemExit(
            "--seconds must be more than 0, --window at least 32 (KiB), --dials and --connections 1 or more"
        )
    if args.concurrency < 1 or args.repeat < 1:
        raise SystemExit("--concurrency and --repeat must be 1 or more")
    names = {"one": SHAPES[0], "each": SHAPES[1]}
    wanted = [s.strip() for s in args.shapes.split(",") if s.strip()]
    if not wanted or set(wanted) - set(names):
        raise SystemExit(f"--shapes takes one, each; not {args.shapes!r}")
    out = results_path(args, RESULTS)
    report = run(
        seconds=args.seconds,
        window=args.window * 1024,
        dial_count=args.dials,
        connections=args.connections,
        concurrency=args.concurrency,
        shapes=[names[s] for s in wanted],
        profile=args.profile,
        out=out,
        profile_out=out.parent / PROFILE if args.out is not None else local_folder() / PROFILE,
        repeat=args.repeat,
    )
    return report.table() + f"\n\nJSON: {out}"
