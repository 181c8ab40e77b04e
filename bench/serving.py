"""Serving under hostile clients: which gunicorn worker keeps answering while connections stall.

``python -m bench serving`` starts ``trellis serve`` once per worker option on 127.0.0.1, and for
each one measures

- **stalled**: ``--stalled`` connections (300) are opened and left stalled, a fifth each: TCP
  connected and silent; half a TLS ClientHello; a whole ClientHello and nothing after the server's
  answer; a finished TLS handshake and half a request head; a full head with ``Content-Length``
  and half the body. While they are held: 10 ``GET /version`` on new TLS connections, an admin
  login and a ``GET /edge/management/v1/identities``, each with ``--request-timeout`` (5 s): the
  latencies (p50, max), how many took over 1 s or failed, and how many stalled connections the
  server still held at the end (and how many got as far as intended while being opened);
- **keep-alive** and **new conn**: ``GET /version`` throughput for ``--seconds`` seconds from 8
  client threads on kept-alive connections, and from 4 client threads opening a TLS connection per
  request (``Connection: close``).

Options (``--variants``, comma-separated; default all): ``trellis`` (the asyncio worker,
:mod:`controller.worker`), ``gthread-8`` (before: 8 threads), ``gthread-64``, ``gthread-512``,
``gthread-8-timeouts`` (8 threads, every client socket read/handshake limited to 2 s; a test-only
worker defined here), ``gevent`` (gunicorn's gevent worker; needs ``gevent`` importable).

Run::

    python -m bench serving                                   # every option, 300 stalled
    python -m bench serving --stalled 1100 --variants trellis,gthread-512,gevent
    pip install --target /tmp/gevent gevent                   # gevent is no dependency
    python -m bench serving --variants gevent --gevent-path /tmp/gevent

The client runs on the same 2 cores as the server, so the throughput numbers compare the options
with each other, not with a production load generator (and vary with whatever else runs). Every
socket has a timeout and every loop is bounded by a count or a deadline; traffic goes to
127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import os
import resource
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
PASSWORD = "bench-admin-password"
#: Stalled connections: TCP only; half a ClientHello; a whole ClientHello and no more; a finished
#: handshake and half a request head; a whole head with Content-Length and half the body.
KINDS = ("tcp", "hello", "handshake", "head", "body")

#: Worker options: the gunicorn settings each one overrides in ``trellis serve``'s configuration.
VARIANTS: dict[str, dict[str, Any]] = {
    "trellis": {},
    "gthread-8": {"worker_class": "gthread", "threads": 8},
    "gthread-64": {"worker_class": "gthread", "threads": 64},
    "gthread-512": {"worker_class": "gthread", "threads": 512},
    "gthread-8-timeouts": {"worker_class": "bench.serving.TimeoutThreadWorker", "threads": 8},
    "gevent": {"worker_class": "gevent", "worker_connections": 1000},
}

#: The read/handshake timeout of ``gthread-8-timeouts``.
SOCKET_TIMEOUT = 2.0


# -- hostile clients -----------------------------------------------------------------------------


def client_hello() -> bytes:
    """A real TLS ClientHello, as the first flight of a client."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False)
    with suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


HALF_HEAD = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: stalled\r\nAccept: */*"
HALF_BODY = (
    b"POST /edge/management/v1/authenticate?method=password HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"
    b'{"username": "admin", '
)


@functools.cache
def tls_client_context(ca: str | None) -> ssl.SSLContext:
    """A client context trusting ``ca`` (or nothing checked without one); one per CA file."""
    ctx = ssl.create_default_context(cafile=ca)
    if ca is None:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def open_stalled(kind: str, port: int, ca: str | None, timeout: float = 3.0) -> tuple[socket.socket, bool]:
    """One stalled connection of ``kind``; True if it got as far as intended.

    A TLS handshake the server does not finish within ``timeout`` leaves the connection stalled
    mid-handshake instead (False).
    """
    raw = socket.create_connection((HOST, port), timeout=timeout)
    if kind == "tcp":
        return raw, True
    if kind in ("hello", "handshake"):
        hello = client_hello()
        raw.sendall(hello[: len(hello) // 2] if kind == "hello" else hello)
        return raw, True
    try:
        tls = tls_client_context(ca).wrap_socket(raw, server_hostname=HOST)
    except (OSError, ssl.SSLError):
        return raw, False
    tls.sendall(HALF_HEAD if kind == "head" else HALF_BODY)
    return tls, True


@dataclass
class StalledPool:
    """``count`` stalled connections, the kinds interleaved; closed by :meth:`close`."""

    port: int
    ca: str | None
    count: int = 300
    kinds: tuple[str, ...] = KINDS
    socks: list[tuple[str, socket.socket]] = field(default_factory=list)
    as_intended: int = 0

    def open(self, concurrency: int = 32, timeout: float = 3.0) -> StalledPool:
        order = [self.kinds[i % len(self.kinds)] for i in range(self.count)]
        with ThreadPoolExecutor(concurrency) as pool:
            futures = [(kind, pool.submit(open_stalled, kind, self.port, self.ca, timeout)) for kind in order]
            for kind, future in futures:
                try:
                    sock, ok = future.result()
                except OSError:
                    continue
                self.socks.append((kind, sock))
                self.as_intended += ok
        return self

    def still_open(self) -> int:
        """How many the server has not closed (a non-blocking peek sees no EOF)."""
        n = 0
        for _, sock in self.socks:
            try:
                sock.setblocking(False)
                n += bool(sock.recv(1))
            except (BlockingIOError, ssl.SSLWantReadError):
                n += 1
            except (OSError, ssl.SSLError):
                pass
            finally:
                with suppress(OSError):
                    sock.settimeout(3.0)
        return n

    def close(self) -> None:
        for _, sock in self.socks:
            with suppress(OSError):
                sock.close()
        self.socks.clear()


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft limit on open files to ``needed`` (at most the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


# -- normal clients ------------------------------------------------------------------------------


def https(port: int, ca: str | None, timeout: float) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(HOST, port, timeout=timeout, context=tls_client_context(ca))


def timed(
    port: int,
    ca: str | None,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[float, int, dict[str, str], bytes]:
    """One request on a new TLS connection: (seconds, status, headers, body); status 0 on failure."""
    start = time.perf_counter()
    conn = https(port, ca, timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        return time.perf_counter() - start, resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    except (OSError, http.client.HTTPException):
        return time.perf_counter() - start, 0, {}, b""
    finally:
        conn.close()


def normal_round(
    port: int, ca: str | None, *, versions: int = 10, timeout: float = 5.0
) -> list[tuple[str, float, int]]:
    """``versions`` x ``GET /version``, a login and a list of identities: (what, seconds, status)."""
    out: list[tuple[str, float, int]] = []
    for _ in range(versions):
        seconds, status, _, _ = timed(port, ca, "GET", "/version", timeout=timeout)
        out.append(("GET /version", seconds, status))
    login = json.dumps({"username": "admin", "password": PASSWORD}).encode()
    seconds, status, headers, _ = timed(
        port,
        ca,
        "POST",
        "/edge/management/v1/authenticate?method=password",
        body=login,
        headers={"Content-Type": "application/json"},
        timeout=timeout,
    )
    out.append(("login", seconds, status))
    token = headers.get("zt-session", "")
    seconds, status, _, _ = timed(
        port, ca, "GET", "/edge/management/v1/identities", headers={"zt-session": token}, timeout=timeout
    )
    out.append(("GET identities", seconds, status))
    return out


def throughput(port: int, ca: str | None, *, keepalive: bool, threads: int, seconds: float) -> float:
    """``GET /version`` answered per second by ``threads`` client threads for ``seconds``."""
    deadline = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        conn: http.client.HTTPSConnection | None = None
        headers = {} if keepalive else {"Connection": "close"}
        while time.monotonic() < deadline:
            if conn is None:
                conn = https(port, ca, 10.0)
            try:
                conn.request("GET", "/version", headers=headers)
                resp = conn.getresponse()
                resp.read()
                if resp.status == 200:
                    counts[i] += 1
                if not keepalive or resp.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    start = time.monotonic()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(seconds + 30)
    return sum(counts) / (time.monotonic() - start)


# -- the server under test -----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _python_path(extra: str | None) -> str:
    parts = [str(ROOT)]
    if extra:
        parts.insert(0, extra)
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return os.pathsep.join(parts)


def init_home(home: Path, extra_env: dict[str, str] | None = None) -> None:
    env = dict(os.environ, TRELLIS_HOME=str(home), TRELLIS_ADMIN_PASSWORD=PASSWORD, **(extra_env or {}))
    subprocess.run(
        [sys.executable, "-m", "controller.cli", "init"], env=env, cwd=ROOT, check=True, capture_output=True
    )


@contextmanager
def running(
    home: Path, variant: str, *, extra_path: str | None = None, env: dict[str, str] | None = None
) -> Iterator[int]:
    """``trellis serve`` with ``variant``'s worker on a free port, stopped on exit."""
    port = free_port()
    child_env = dict(
        os.environ,
        TRELLIS_HOME=str(home),
        TRELLIS_BIND=f"{HOST}:{port}",
        PYTHONPATH=_python_path(extra_path),
        **(env or {}),
    )
    log = (home / f"serve-{variant}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.serving", "--serve", variant],
        env=child_env,
        cwd=ROOT,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{variant} exited {proc.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{variant} did not start; see {log.name}")
            if timed(port, str(home / "pki" / "ca-bundle.pem"), "GET", "/version", timeout=2)[1] == 200:
                break
            time.sleep(0.3)
        yield port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


def serve_variant(variant: str) -> None:
    """The server side of :func:`running` (``python -m bench.serving --serve VARIANT``)."""
    from controller.serve import TrellisServer
    from controller.settings import Settings

    overrides = VARIANTS[variant]

    class Server(TrellisServer):
        def load_config(self) -> None:
            super().load_config()
            for key, value in overrides.items():
                self.cfg.set(key, value)

    Server(Settings.from_env()).run()


# -- gthread with socket timeouts (the "own timeouts in gthread" option) -------------------------


def _timeout_worker() -> type:
    from gunicorn.workers import gthread

    class TimeoutSocket(socket.socket):
        """gthread calls ``setblocking(True)`` before the handshake and each read: keep a timeout."""

        def setblocking(self, flag: bool) -> None:
            if flag:
                self.settimeout(SOCKET_TIMEOUT)
            else:
                super().setblocking(False)

    class TimeoutSSLSocket(ssl.SSLSocket):
        def setblocking(self, flag: bool) -> None:
            if flag:
                self.settimeout(SOCKET_TIMEOUT)
            else:
                super().setblocking(False)

    class Worker(gthread.ThreadWorker):  # type: ignore[misc]
        def accept(self, listener: Any) -> None:
            try:
                client, addr = listener.accept()
            except BlockingIOError:
                return
            self.nr_conns += 1
            sock = TimeoutSocket(client.family, client.type, client.proto, fileno=client.detach())
            conn = gthread.TConn(self.cfg, sock, addr, listener.getsockname())
            self.enqueue_req(conn)

        def load_wsgi(self) -> None:
            super().load_wsgi()
            hook = self.cfg.ssl_context

            def ssl_context(conf: Any, factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
                ctx: ssl.SSLContext = hook(conf, factory)
                ctx.sslsocket_class = TimeoutSSLSocket
                return ctx

            self.cfg.set("ssl_context", ssl_context)

    return Worker


def __getattr__(name: str) -> Any:
    if name == "TimeoutThreadWorker":  # imported by gunicorn in the server process only
        return _timeout_worker()
    raise AttributeError(name)


# -- the table -----------------------------------------------------------------------------------


@dataclass
class Result:
    variant: str
    stalled_open: int = 0
    as_intended: int = 0
    held_after: int = 0
    p50_ms: float = 0.0
    max_ms: float = 0.0
    failed: int = 0
    total: int = 0
    over_1s: int = 0
    keepalive_rps: float = 0.0
    new_conn_rps: float = 0.0
    note: str = ""


def measure(
    variant: str, home: Path, *, stalled: int, seconds: float, request_timeout: float, extra_path: str | None
) -> Result:
    result = Result(variant)
    ca = str(home / "pki" / "ca-bundle.pem")
    with running(home, variant, extra_path=extra_path) as port:
        result.keepalive_rps = throughput(port, ca, keepalive=True, threads=8, seconds=seconds)
        result.new_conn_rps = throughput(port, ca, keepalive=False, threads=4, seconds=seconds)
        pool = StalledPool(port, ca, count=stalled).open()
        try:
            result.stalled_open = len(pool.socks)
            result.as_intended = pool.as_intended
            rows = normal_round(port, ca, timeout=request_timeout)
            result.held_after = pool.still_open()
        finally:
            pool.close()
    latencies = [s * 1000 for _, s, status in rows if status]
    result.total = len(rows)
    result.failed = sum(1 for _, _, status in rows if status == 0 or status >= 500)
    result.over_1s = sum(1 for _, s, status in rows if status == 0 or s > 1.0)
    if latencies:
        result.p50_ms = statistics.median(latencies)
        result.max_ms = max(latencies)
    return result


def table(results: list[Result], stalled: int) -> str:
    head = (
        "| worker | stalled held (as intended) | normal requests answered | p50 ms | max ms | > 1 s or failed "
        "| keep-alive req/s | new conn req/s |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    lines = [head]
    for r in results:
        if r.note:
            lines.append(f"| {r.variant} | {r.note} | | | | | | |")
            continue
        lines.append(
            f"| {r.variant} | {r.held_after}/{stalled} ({r.as_intended}) | {r.total - r.failed}/{r.total} "
            f"| {r.p50_ms:.0f} | {r.max_ms:.0f} | {r.over_1s} | {r.keepalive_rps:.0f} | {r.new_conn_rps:.0f} |"
        )
    return "\n".join(lines)


def run(
    variants: list[str],
    *,
    stalled: int = 300,
    seconds: float = 5.0,
    request_timeout: float = 5.0,
    gevent_path: str | None = None,
) -> str:
    raise_fd_limit(stalled + 256)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="trellis-bench-serving-") as tmp:
        home = Path(tmp) / "home"
        init_home(home)
        for variant in variants:
            if variant == "gevent" and not _gevent_available(gevent_path):
                results.append(Result(variant, note="not run: gevent not importable (see --gevent-path)"))
                continue
            print(f"... {variant}", file=sys.stderr, flush=True)
            try:
                results.append(
                    measure(
                        variant,
                        home,
                        stalled=stalled,
                        seconds=seconds,
                        request_timeout=request_timeout,
                        extra_path=gevent_path if variant == "gevent" else None,
                    )
                )
            except RuntimeError as ex:
                results.append(Result(variant, note=f"failed: {ex}"))
    return table(results, stalled)


def _gevent_available(path: str | None) -> bool:
    code = "import gevent"
    env = dict(os.environ, PYTHONPATH=_python_path(path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; default all")
    parser.add_argument("--stalled", type=int, default=300, help="stalled connections held (default 300)")
    parser.add_argument("--seconds", type=float, default=5.0, help="each throughput run (default 5)")
    parser.add_argument("--request-timeout", type=float, default=5.0, help="a normal request's limit")
    parser.add_argument("--gevent-path", default=None, help="a directory where gevent is installed")


def main(args: argparse.Namespace) -> str:
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    return run(
        variants,
        stalled=args.stalled,
        seconds=args.seconds,
        request_timeout=args.request_timeout,
        gevent_path=args.gevent_path,
    )


if __name__ == "__main__":
    cli = argparse.ArgumentParser(prog="python -m bench.serving")
    cli.add_argument("--serve", choices=sorted(VARIANTS), help="(internal) run the server side")
    add_arguments(cli)
    parsed = cli.parse_args()
    if parsed.serve:
        serve_variant(parsed.serve)
    else:
        print(main(parsed), flush=True)
