"""Hostile and unusual clients against a real ``trellis serve`` (controller/worker.py).

Stalled connections hold no thread (normal requests are answered within 1 s while 300 are held),
time limits close them, chunked bodies and ``Expect: 100-continue`` reach the app, requests refused
before the app get OpenZiti's JSON error envelope, and the worker's environ contract (peer
certificate chain, per-connection TLS context) holds. The request-head parser is tested directly.
"""

from __future__ import annotations

import datetime as dt
import http.client
import ipaddress
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bench.serving import KINDS, StalledPool, open_stalled, raise_fd_limit
from controller.worker import HttpError, Limits, parse_head
from tests.e2e.server import HOST, ROOT, Server, end_process, free_port, running

PASSWORD = "hostile-admin-password"
LOGIN = "/edge/management/v1/authenticate?method=password"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    # Long handshake/head limits: the stalled connections must still be held when checked, even on
    # a busy machine; the limits themselves are tested with short ones below.
    yield from running(
        tmp_path_factory.mktemp("hostile") / "home",
        password=PASSWORD,
        env={
            "TRELLIS_TIMEOUT_HANDSHAKE_SECONDS": "30",
            "TRELLIS_TIMEOUT_HEADER_SECONDS": "30",
            "TRELLIS_TIMEOUT_BODY_SECONDS": "30",
        },
    )


@pytest.mark.e2e
def test_300_stalled_connections_do_not_delay_anyone_else(server: Server) -> None:
    raise_fd_limit(300 + 256)
    pool = StalledPool(server.port, server.ca, count=300).open(timeout=10)
    # Not delayed: each request is answered while all 300 are still held (their limits are 30 s
    # away; a request that waited on them would run into its own 5 s timeout), on a new TLS
    # connection each time. No stopwatch: how fast it is depends on the machine's load.
    try:
        assert len(pool.socks) == 300
        assert pool.as_intended == 300  # every TLS handshake the stalled clients wanted finished too
        for _ in range(3):
            with server.session() as fresh:
                version = fresh.get(server.url + "/version", timeout=5)
            assert version.status_code == 200
        with server.session() as http:
            login = http.post(server.url + LOGIN, json={"username": "admin", "password": PASSWORD}, timeout=5)
            assert login.status_code == 200, login.text
            token = login.headers["zt-session"]
            listed = http.get(
                server.url + "/edge/management/v1/identities", headers={"zt-session": token}, timeout=5
            )
            assert listed.status_code == 200, listed.text
        assert pool.still_open() == 300  # they were held (not dropped) all along
    finally:
        pool.close()


def _closed_after(sock: socket.socket, opened: float, deadline: float) -> float | None:
    """Seconds from ``opened`` until the server closed ``sock``; None if still open at ``deadline``."""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            return None
        except OSError:  # reset, or TLS EOF without close_notify
            return time.monotonic() - opened
        if not data:
            return time.monotonic() - opened


@pytest.mark.e2e
def test_stalled_connections_are_closed_at_the_time_limits(tmp_path: Path) -> None:
    limit = 1.0
    limits = ("HANDSHAKE", "HEADER", "BODY", "KEEPALIVE")
    env = {f"TRELLIS_TIMEOUT_{name}_SECONDS": str(limit) for name in limits}
    with Server(tmp_path / "home", password=PASSWORD, env=env) as srv:
        srv.up()
        opened: list[tuple[str, socket.socket, float]] = []
        for kind in KINDS:
            for _ in range(2):
                sock, ok = open_stalled(kind, srv.port, srv.ca, timeout=5)
                assert ok, kind
                opened.append((kind, sock, time.monotonic()))
        idle = srv.tls()  # one complete request, then idle on the kept-alive connection
        idle.sendall(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert _read_response(idle)[0] == 200
        opened.append(("kept-alive idle", idle, time.monotonic()))
        # Closed at its limit: not before half of it, and by the time ten limits have passed
        # (how soon after its limit the server gets to it depends on the machine's load).
        deadline = time.monotonic() + 10 * limit
        for kind, sock, at in opened:
            after = _closed_after(sock, at, deadline)
            sock.close()
            assert after is not None, f"{kind}: still open {10 * limit:.0f} s after its {limit:.0f} s limit"
            assert after >= 0.5 * limit, f"{kind}: closed after {after:.2f} s, before its limit"
        with srv.session() as http:
            assert http.get(srv.url + "/version", timeout=5).status_code == 200


@pytest.mark.e2e
def test_a_chunked_body_reaches_the_app(server: Server) -> None:
    body = json.dumps({"username": "admin", "password": PASSWORD}).encode()

    def chunks() -> Iterator[bytes]:
        yield body[:7]
        yield body[7:20]
        yield body[20:]

    with server.session() as http:
        login = http.post(
            server.url + LOGIN, data=chunks(), headers={"Content-Type": "application/json"}, timeout=5
        )
    assert login.request.headers.get("Transfer-Encoding") == "chunked"
    assert login.status_code == 200, login.text
    assert login.json()["data"]["token"]


@pytest.mark.e2e
def test_expect_100_continue_then_the_body(server: Server) -> None:
    body = json.dumps({"username": "admin", "password": PASSWORD}).encode()
    with server.tls() as sock:
        sock.sendall(
            f"POST {LOGIN} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode()
        )
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):
            chunk = sock.recv(1)
            assert chunk, "closed before 100 Continue"
            interim += chunk
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        status, _, data = _read_response(sock)
    assert status == 200, data
    assert json.loads(data)["data"]["token"]


@pytest.mark.e2e
def test_keep_alive_connection_close_and_one_server_header(server: Server) -> None:
    conn = http.client.HTTPSConnection(HOST, server.port, context=server.tls_context(), timeout=5)
    try:
        for _ in range(3):  # the same connection, kept alive
            conn.request("GET", "/version")
            got = conn.getresponse()
            body = got.read()
            assert got.status == 200
            assert len(body) == int(got.getheader("content-length", "-1"))
            servers = [v for k, v in got.getheaders() if k.lower() == "server"]
            assert len(servers) == 1, servers
            assert servers[0].startswith("ziti-controller/")
            assert got.getheader("connection") is None
        conn.request("GET", "/version", headers={"Connection": "close"})
        last = conn.getresponse()
        last.read()
        assert last.getheader("connection") == "close"
    finally:
        conn.close()


def _read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one response (with Content-Length) from a raw socket: status, headers, body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, headers, body


REFUSED = {
    "head too large": (
        b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 8000) for i in range(9))
        + b"\r\n",
        431,
        "COULD_NOT_VALIDATE",
    ),
    "one header field too long": (
        b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
        431,
        "COULD_NOT_VALIDATE",
    ),
    "too many header fields": (
        b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + b"".join(b"X-F%d: 1\r\n" % i for i in range(150))
        + b"\r\n",
        431,
        "COULD_NOT_VALIDATE",
    ),
    "request line too long": (
        b"GET /version?filter=" + b"a" * 20000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        414,
        "COULD_NOT_VALIDATE",
    ),
    "body too large": (
        b"POST " + LOGIN.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000000\r\n\r\n{",
        413,
        "REQUEST_ENTITY_TOO_LARGE",
    ),
    "malformed request line": (b"HELLO THERE\r\n\r\n", 400, "COULD_NOT_PARSE_BODY"),
    "bad chunk size": (
        b"POST "
        + LOGIN.encode()
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        400,
        "COULD_NOT_PARSE_BODY",
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_requests_refused_before_the_app_get_the_json_envelope(server: Server, case: str) -> None:
    raw, status, code = REFUSED[case]
    with server.tls() as sock:
        sock.sendall(raw)
        got, headers, body = _read_response(sock)
    assert got == status
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert (headers["x-content-type-options"], headers["cache-control"]) == ("nosniff", "no-store")
    doc = json.loads(body)
    assert doc["error"]["code"] == code
    assert doc["error"]["message"]
    assert doc["error"]["requestId"]
    assert doc["error"]["cause"]["reason"]
    assert doc["meta"] == {"apiEnrollmentVersion": "0.0.1", "apiVersion": "0.0.1"}


# -- the environ contract, with a stand-in app on the same worker ----------------------------------

CONTRACT_SERVER = r"""
import json, ssl, sys
from gunicorn.app.base import BaseApplication

certfile, keyfile, ca, port = sys.argv[1:5]
calls = []

def app(environ, start_response):
    keys = ("wsgi.url_scheme", "REMOTE_ADDR", "REMOTE_PORT", "SERVER_NAME", "SERVER_PORT",
            "SERVER_PROTOCOL", "REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "CONTENT_LENGTH",
            "HTTP_X_TEST")
    doc = {
        "environ": {k: environ.get(k) for k in keys},
        "gunicorn_socket": "gunicorn.socket" in environ,
        "chain": [der.hex() for der in environ["trellis.peer_cert_chain"]],
        "body": environ["wsgi.input"].read().decode(),
        "tls_calls": len(calls),
    }
    data = json.dumps(doc).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]  # for HEAD too: the worker must not send it

def tls_context():
    calls.append(1)
    if len(calls) == 1:
        return None  # the first connection: the context built from the configuration
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # observable by the client
    ctx.load_cert_chain(certfile, keyfile)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cafile=ca)
    return ctx

app.tls_context = tls_context

class App(BaseApplication):
    def load_config(self):
        options = {"bind": f"127.0.0.1:{port}", "workers": 1, "threads": 2,
                   "worker_class": "controller.worker.TrellisWorker", "certfile": certfile,
                   "keyfile": keyfile, "ca_certs": ca, "cert_reqs": ssl.CERT_OPTIONAL,
                   "accesslog": "-", "control_socket_disable": True, "keepalive": 30}
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self):
        return app

App().run()
"""


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool,
    ip: str | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
    if ip:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), critical=False
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.mark.e2e
def test_worker_environ_peer_chain_and_a_tls_context_per_connection(tmp_path: Path) -> None:
    keys = [ec.generate_private_key(ec.SECP256R1()) for _ in range(4)]
    root = _cert("root", keys[0], None, ca=True)
    inter = _cert("intermediate", keys[1], (root, keys[0]), ca=True)
    leaf = _cert("client", keys[2], (inter, keys[1]), ca=False)
    server_cert = _cert("server", keys[3], (root, keys[0]), ca=False, ip=HOST)
    files = {
        "root.pem": _pem(root),
        "server.pem": _pem(server_cert),
        "server.key": _key_pem(keys[3]),
        "client.pem": _pem(leaf, inter),  # the client sends its intermediate along
        "client.key": _key_pem(keys[2]),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    port = free_port()
    args = [str(tmp_path / n) for n in ("server.pem", "server.key", "root.pem")] + [str(port)]
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-c", CONTRACT_SERVER, *args], cwd=ROOT, stdout=log, stderr=log)
    try:
        with_cert = ssl.create_default_context(cafile=str(tmp_path / "root.pem"))
        with_cert.load_cert_chain(str(tmp_path / "client.pem"), str(tmp_path / "client.key"))
        without = ssl.create_default_context(cafile=str(tmp_path / "root.pem"))

        def call(ctx: ssl.SSLContext, body: bytes = b"hello") -> tuple[str, dict[str, Any]]:
            conn = http.client.HTTPSConnection(HOST, port, context=ctx, timeout=5)
            try:
                conn.request("POST", "/a%20b/c?x=1&y=%20", body=body, headers={"X-Test": "yes"})
                got = conn.getresponse()
                assert got.status == 200
                assert conn.sock is not None
                return str(conn.sock.version()), json.loads(got.read())
            finally:
                conn.close()

        deadline = time.monotonic() + 20
        while True:
            try:
                first_tls, first = call(with_cert)
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline, "the stand-in server did not start"
                time.sleep(0.2)
        second_tls, second = call(with_cert)
        _, third = call(without)
        _, large = call(without, b"z" * 900_000)  # more than the worker buffers unasked
        head = http.client.HTTPSConnection(HOST, port, context=without, timeout=5)
        try:  # HEAD: the length of the body a GET would get, no body; the connection stays usable
            head.request("HEAD", "/x")
            answer = head.getresponse()
            assert answer.read() == b""
            assert int(answer.getheader("content-length", "0")) > 0
            head.request("GET", "/x")
            assert json.loads(head.getresponse().read())["environ"]["REQUEST_METHOD"] == "GET"
        finally:
            head.close()
        idle = http.client.HTTPSConnection(HOST, port, context=without, timeout=5)
        idle.request("GET", "/idle")
        idle.getresponse().read()  # left open: kept alive for up to 30 s
    finally:
        stopping = time.monotonic()
        end_process(proc, signal.SIGTERM, 15)
        stopped_in = time.monotonic() - stopping
        log.close()
    idle.close()
    assert proc.returncode == 0
    assert stopped_in < 5  # SIGTERM: the idle kept-alive connection does not hold the stop up
    assert '"POST /a%20b/c?x=1&y=%20 HTTP/1.1" 200' in (tmp_path / "serve.log").read_text()

    der = serialization.Encoding.DER
    # the chain as the client sent it (leaf first), not as verified: the app judges it
    assert first["chain"] == [c.public_bytes(der).hex() for c in (leaf, inter)]
    assert first["gunicorn_socket"] is False
    assert first["body"] == "hello"
    env = first["environ"]
    assert env["wsgi.url_scheme"] == "https"
    assert env["REMOTE_ADDR"] == HOST
    assert int(env["REMOTE_PORT"]) > 0
    assert (env["SERVER_NAME"], env["SERVER_PORT"]) == (HOST, str(port))
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["REQUEST_METHOD"] == "POST"
    assert env["PATH_INFO"] == "/a b/c"
    assert env["QUERY_STRING"] == "x=1&y=%20"
    assert env["CONTENT_LENGTH"] == "5"
    assert env["HTTP_X_TEST"] == "yes"
    # tls_context() is called for every connection; None -> the context from the configuration
    assert (first["tls_calls"], second["tls_calls"], third["tls_calls"]) == (1, 2, 3)
    assert (first_tls, second_tls) == ("TLSv1.3", "TLSv1.2")
    assert len(second["chain"]) == 2
    assert third["chain"] == []
    assert large["environ"]["CONTENT_LENGTH"] == "900000"
    assert len(large["body"]) == 900_000


# -- the request-head parser ---------------------------------------------------------------------

LIMITS = Limits()


def test_parse_head_reads_the_framing() -> None:
    req = parse_head(
        b"POST /p%20q?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 12\r\nExpect: 100-continue\r\n"
        b"Connection: close\r\nX-A:  padded \t\r\n\r\n",
        LIMITS,
    )
    assert (req.method, req.path, req.query, req.version) == ("POST", "/p%20q", "a=1", (1, 1))
    assert (req.content_length, req.chunked) == (12, False)
    assert (req.expect_continue, req.keep_alive) == (True, False)
    assert ("X-A", "padded") in req.headers
    chunked = parse_head(b"PUT / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", LIMITS)
    assert (chunked.chunked, chunked.keep_alive) == (True, True)
    old = parse_head(b"GET http://h/x?y HTTP/1.0\r\n\r\n", LIMITS)
    assert (old.path, old.query, old.keep_alive) == ("/x", "y", False)
    assert parse_head(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", LIMITS).keep_alive


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: h\r\n\r\n", 400),
        (b"GET  / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        (b"G(T / HTTP/1.1\r\nHost: h\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: h\r\n folded\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost : h\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: h\x00\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nExpect: something\r\n\r\n", 417),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: h\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
    ],
)
def test_parse_head_refuses(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as refused:
        parse_head(head, LIMITS)
    assert refused.value.status == status
