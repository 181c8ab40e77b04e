"""Fetching a JWKS document over the network: which addresses the controller connects to, no
redirects, bounded size and time; and how often a verifier fetches. A real HTTP server on
127.0.0.1 answers (loopback is allowed explicitly where a test means to reach it)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from engine.ports import JwtKeySource
from pki.jwks import MAX_JWKS_BYTES, JwksFetchError, JwksVerifier, fetch_url

Responder = Callable[[BaseHTTPRequestHandler], None]


class Server:
    """An HTTP server on 127.0.0.1 answering each path with a responder; records every request."""

    def __init__(self) -> None:
        self.routes: dict[str, Responder] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Host header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                server.requests.append((self.path, self.headers.get("Host", "")))
                responder = server.routes.get(self.path)
                if responder is None:
                    self.send_error(404)
                    return
                responder(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        # polled every 10 ms: shutdown() waits for the poll (its default, 0.5 s, at every teardown)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[Server]:
    served = Server()
    yield served
    served.close()


def body(data: bytes, *, status: int = 200, length: bool = True) -> Responder:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        if length:
            handler.send_header("Content-Length", str(len(data)))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        if not length:
            handler.close_connection = True

    return respond


def redirect(location: str) -> Responder:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return respond


DOCUMENT = json.dumps({"keys": []}).encode()


def resolving_to(*addresses: str) -> Callable[[str, int], list[tuple[socket.AddressFamily, tuple[Any, ...]]]]:
    """A name resolver (the system's stand-in) that answers ``addresses`` for any name."""

    def resolve(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple[Any, ...]]]:
        out: list[tuple[socket.AddressFamily, tuple[Any, ...]]] = []
        for address in addresses:
            if ":" in address:
                out.append((socket.AF_INET6, (address, port, 0, 0)))
            else:
                out.append((socket.AF_INET, (address, port)))
        return out

    return resolve


# -- where the controller connects -------------------------------------------------------------------
def test_a_loopback_endpoint_is_refused_without_being_asked(server: Server) -> None:
    server.routes["/jwks"] = body(DOCUMENT)

    with pytest.raises(JwksFetchError, match="loopback"):
        fetch_url(server.url("/jwks"), 5.0)

    assert server.requests == []


def test_a_loopback_endpoint_is_fetched_when_allowed(server: Server) -> None:
    server.routes["/jwks?v=1"] = body(DOCUMENT)

    assert fetch_url(server.url("/jwks?v=1"), 5.0, allow_loopback=True) == DOCUMENT
    assert server.requests == [("/jwks?v=1", f"127.0.0.1:{server.port}")]


def test_a_name_resolving_to_loopback_is_refused(server: Server) -> None:
    server.routes["/jwks"] = body(DOCUMENT)
    url = server.url("/jwks", host="idp.example.test")

    with pytest.raises(JwksFetchError, match="loopback"):
        fetch_url(url, 5.0, resolve=resolving_to("127.0.0.1"))

    assert server.requests == []


@pytest.mark.parametrize(
    "addresses",
    [
        ("203.0.113.7", "127.0.0.1"),
        ("203.0.113.7", "169.254.169.254"),
        ("::ffff:127.0.0.1",),
        ("fe80::1",),
        ("0.0.0.0",),
    ],
)
def test_a_name_with_any_forbidden_address_is_refused(server: Server, addresses: tuple[str, ...]) -> None:
    with pytest.raises(JwksFetchError, match="resolves to"):
        fetch_url(server.url("/jwks", host="idp.example.test"), 5.0, resolve=resolving_to(*addresses))

    assert server.requests == []


def test_link_local_stays_refused_when_loopback_is_allowed() -> None:
    with pytest.raises(JwksFetchError, match="link-local"):
        fetch_url(
            "http://idp.example.test/jwks", 5.0, allow_loopback=True, resolve=resolving_to("169.254.169.254")
        )


def test_the_checked_address_is_the_one_connected_to(server: Server) -> None:
    """The name is resolved once: the connection goes to the address checked (a name no DNS
    knows reaches the server here), with the URL's host in ``Host``."""
    server.routes["/jwks"] = body(DOCUMENT)
    url = server.url("/jwks", host="idp.example.test")

    fetched = fetch_url(url, 5.0, allow_loopback=True, resolve=resolving_to("127.0.0.1"))

    assert fetched == DOCUMENT
    assert server.requests == [("/jwks", f"idp.example.test:{server.port}")]


# -- what is read ----------------------------------------------------------------------------------------
def test_a_redirect_is_a_failed_fetch(server: Server) -> None:
    server.routes["/moved"] = redirect(server.url("/jwks"))
    server.routes["/jwks"] = body(DOCUMENT)

    with pytest.raises(JwksFetchError, match="302"):
        fetch_url(server.url("/moved"), 5.0, allow_loopback=True)

    assert server.paths() == ["/moved"]


def test_an_error_status_is_a_failed_fetch(server: Server) -> None:
    server.routes["/jwks"] = body(DOCUMENT, status=500)

    with pytest.raises(JwksFetchError, match="500"):
        fetch_url(server.url("/jwks"), 5.0, allow_loopback=True)


@pytest.mark.parametrize("length", [True, False])
def test_a_document_too_large_is_refused(server: Server, length: bool) -> None:
    server.routes["/jwks"] = body(b" " * (MAX_JWKS_BYTES + 1), length=length)

    with pytest.raises(ValueError, match="too large"):
        fetch_url(server.url("/jwks"), 5.0, allow_loopback=True)


def test_a_garbage_answer_is_a_failed_fetch() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"this is no HTTP\r\n\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        with pytest.raises(JwksFetchError, match="no HTTP"):
            fetch_url(f"http://127.0.0.1:{port}/jwks", 5.0, allow_loopback=True)
        thread.join(timeout=5)


def test_the_whole_fetch_is_bounded_by_the_timeout() -> None:
    """A server dripping its answer a byte at a time never resets the clock: the fetch fails at
    its deadline, not at the end of the drip (which would deliver a valid document)."""
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def drip() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                answer = (
                    head
                    + b"X-Pad: "
                    + b"a" * 200
                    + b"\r\nContent-Length: %d\r\n\r\n" % len(DOCUMENT)
                    + DOCUMENT
                )
                try:
                    for byte in answer:
                        if stop.wait(0.05):
                            return
                        conn.sendall(bytes([byte]))
                except OSError:
                    return

        thread = threading.Thread(target=drip, daemon=True)
        thread.start()
        try:
            with pytest.raises(JwksFetchError, match="time"):
                fetch_url(f"http://127.0.0.1:{port}/jwks", 0.5, allow_loopback=True)
        finally:
            stop.set()
            thread.join(timeout=5)


# -- how often a verifier fetches -----------------------------------------------------------------------
def _token(key: Any, kid: str) -> str:
    return jwt.encode({"sub": "someone"}, key, algorithm="ES256", headers={"kid": kid})


def test_a_verifier_does_not_fetch_from_loopback_unless_allowed(server: Server) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())) | {"kid": "k1"}
    server.routes["/jwks"] = body(json.dumps({"keys": [jwk]}).encode())
    source = JwtKeySource(jwks_endpoint=server.url("/jwks"))

    refused = JwksVerifier().verify(_token(key, "k1"), source)
    assert server.requests == []
    allowed = JwksVerifier(allow_loopback=True).verify(_token(key, "k1"), source)

    assert refused is None
    assert allowed is not None
    assert server.paths() == ["/jwks"]


def test_one_fetch_at_a_time_per_endpoint() -> None:
    """While an endpoint's fetch is in flight, an unknown kid does not start another, however long
    the fetch takes (OpenZiti's interval alone would let slow fetches pile up)."""
    entered, release = threading.Event(), threading.Event()
    fetches: list[str] = []
    now = [0.0]

    def fetch(url: str, timeout: float) -> bytes:
        fetches.append(url)
        entered.set()
        release.wait(10)
        return DOCUMENT

    verifier = JwksVerifier(min_refetch=1.0, fetch=fetch, monotonic=lambda: now[0])
    key = ec.generate_private_key(ec.SECP256R1())
    source = JwtKeySource(jwks_endpoint="https://idp.example.test/jwks")
    first = threading.Thread(target=verifier.verify, args=(_token(key, "a"), source))
    first.start()
    try:
        assert entered.wait(10)
        now[0] = 100.0  # long past the refetch interval
        assert verifier.verify(_token(key, "b"), source) is None
        assert fetches == ["https://idp.example.test/jwks"]
    finally:
        release.set()
        first.join(timeout=10)
    assert verifier.verify(_token(key, "c"), source) is None
    assert len(fetches) == 2


def test_unknown_kids_refetch_at_most_once_per_interval() -> None:
    fetches: list[str] = []
    now = [0.0]

    def fetch(url: str, timeout: float) -> bytes:
        fetches.append(url)
        return DOCUMENT

    verifier = JwksVerifier(min_refetch=1.0, fetch=fetch, monotonic=lambda: now[0])
    key = ec.generate_private_key(ec.SECP256R1())
    source = JwtKeySource(jwks_endpoint="https://idp.example.test/jwks")

    for kid in ("a", "b", "c", "d"):
        assert verifier.verify(_token(key, kid), source) is None
    now[0] = 0.5
    verifier.verify(_token(key, "e"), source)
    now[0] = 1.0
    verifier.verify(_token(key, "f"), source)

    assert len(fetches) == 2
