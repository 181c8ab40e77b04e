"""Logins a second: password and certificate logins at 8 concurrent clients against ``trellis serve``.

``python -m bench logins [--clients 8] [--seconds 10] [--methods password,cert] [--out PATH | --publish]``:

1. ``trellis init`` in a temporary home, then ``trellis serve`` itself on 127.0.0.1 with the
   per-client budgets off (``TRELLIS_RATE_AUTH_PER_MINUTE=0``), as :mod:`bench.http` starts it:
   the benchmark measures logins, not the rate limiter.
2. Set-up over HTTP: ``bench-password`` (a password, through an ``updb`` enrollment) and
   ``bench-cert`` (a certificate, through an ``ott`` enrollment with a CSR).
3. Per method, ``--clients`` threads, each on its own kept-alive TLS connection (the certificate
   client's presents its certificate in the handshake), log in again and again for
   ``--seconds``: ``POST /edge/client/v1/authenticate?method=password`` with the username and
   password, or ``?method=cert`` with an empty JSON body. Each login is a whole one: the
   credential checked and a new API session made durable before the answer. Each thread opens
   its connection and logs in once before the clock starts, so handshakes are not counted.
4. Report: logins a second (answered 200), p50 and p99 latency, errors by status (``conn`` for a
   failed connection), the CPU of the server's processes and of the client threads (% of one
   core, from ``/proc``), and what one verification of a password hash costs in this process
   for each hasher ``pki`` has (the median of 20), since a password login is mostly that. The
   JSON goes to ``bench/results/local/logins.json`` (ignored by git; see :mod:`bench.output`),
   to the committed ``bench/results/logins.json`` with ``--publish``, or to ``--out PATH``.

The client threads share the 2 cores with the server (a Python client costs some 0.2-0.4 ms of
CPU a request), so the figures compare the two methods, and builds, measured on the same day.
Every request has a timeout and every loop a deadline; traffic goes to 127.0.0.1 only.

Run::

    python -m bench logins                      # password and cert, 8 clients, 10 s each
    python -m bench logins --methods password --seconds 5 --out /tmp/logins.json
    python -m bench logins --publish            # the committed bench/results/logins.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.http import serving, trellis_command
from bench.output import add_output_arguments, results_path
from bench.serving import HOST, PASSWORD, init_home
from bench.writes import Client, SetupError, children_cpu, percentile

#: The results file's name (where: bench.output).
RESULTS = "logins.json"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
METHODS = ("password", "cert")
PASSWORD_USER = "bench-password"
PASSWORD_SECRET = "bench-password-secret"
CERT_USER = "bench-cert"
REQUEST_TIMEOUT = 30.0
#: Verifications timed per hasher for the report's cost of one (the median is reported).
HASH_SAMPLES = 20


@dataclass(frozen=True)
class Credentials:
    """How each method's clients log in: the password body, the certificate client's files."""

    password_body: bytes
    cert_file: str
    key_file: str


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


def set_up(port: int, ca: str, workdir: Path) -> Credentials:
    """The password identity and the certificate identity, enrolled over HTTP."""
    client = Client(port, ca, REQUEST_TIMEOUT)
    try:
        admin = client.login(MGMT, "admin", PASSWORD)
        ids: dict[str, str] = {}
        for name, enrollment in ((PASSWORD_USER, {"updb": PASSWORD_USER}), (CERT_USER, {"ott": True})):
            body = {"name": name, "type": "Device", "isAdmin": False, "enrollment": enrollment}
            ids[name] = str(client.expect(201, "POST", f"{MGMT}/identities", admin, body)["data"]["id"])
        detail = client.expect(200, "GET", f"{MGMT}/identities/{ids[PASSWORD_USER]}", admin)
        token = detail["data"]["enrollment"]["updb"]["token"]
        client.expect(200, "POST", f"{CLIENT}/enroll/updb?token={token}", body={"password": PASSWORD_SECRET})
        client.login(CLIENT, PASSWORD_USER, PASSWORD_SECRET)
        detail = client.expect(200, "GET", f"{MGMT}/identities/{ids[CERT_USER]}", admin)
        jti = detail["data"]["enrollment"]["ott"]["token"]
    finally:
        client.close()
    key_file, cert_file = workdir / "cert-client.key", workdir / "cert-client.pem"
    conn = http.client.HTTPSConnection(HOST, port, timeout=REQUEST_TIMEOUT, context=_context(ca))
    try:
        conn.request(
            "POST",
            f"{CLIENT}/enroll?method=ott&token={jti}",
            body=_csr(CERT_USER, key_file),
            headers={"Content-Type": "application/x-pem-file", "Accept": "application/x-pem-file"},
        )
        resp = conn.getresponse()
        answer = resp.read()
    finally:
        conn.close()
    if resp.status != 200 or not answer.startswith(b"-----BEGIN CERTIFICATE-----"):
        raise SetupError(f"enrolling {CERT_USER}: {resp.status}: {answer[:500]!r}")
    cert_file.write_bytes(answer)
    login = json.dumps({"username": PASSWORD_USER, "password": PASSWORD_SECRET}).encode()
    return Credentials(login, str(cert_file), str(key_file))


def _context(ca: str, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca)
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


# -- the clients ---------------------------------------------------------------------------------


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)


def _login_once(conn: http.client.HTTPSConnection, path: str, body: bytes) -> int:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _client_loop(
    connect: Callable[[], http.client.HTTPSConnection],
    path: str,
    body: bytes,
    ready: threading.Barrier,
    deadline: list[float],
    tally: Tally,
) -> None:
    """Log in once (the handshake, not counted), wait for the others, then log in until the deadline."""
    first = connect()
    conn: http.client.HTTPSConnection | None = first
    try:
        _login_once(first, path, body)
    except (OSError, http.client.HTTPException):
        first.close()
        conn = None
    ready.wait()
    while time.monotonic() < deadline[0]:
        if conn is None:
            conn = connect()
        started = time.perf_counter()
        try:
            status = _login_once(conn, path, body)
        except (OSError, http.client.HTTPException):
            tally.statuses["conn"] += 1
            conn.close()
            conn = None
            continue
        if status == 200:
            tally.latencies.append((time.perf_counter() - started) * 1000)
        else:
            tally.statuses[str(status)] += 1
    if conn is not None:
        conn.close()


@dataclass
class Row:
    method: str
    clients: int
    seconds: float
    logins: int
    logins_per_second: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]
    server_cpu_percent: float | None
    client_cpu_percent: float


def measure(port: int, ca: str, method: str, creds: Credentials, clients: int, seconds: float) -> Row:
    """``clients`` threads logging in with ``method`` for ``seconds``."""
    if method == "password":
        context, body = _context(ca), creds.password_body
    else:
        context, body = _context(ca, (creds.cert_file, creds.key_file)), b"{}"
    path = f"{CLIENT}/authenticate?method={method}"

    def connect() -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(HOST, port, timeout=REQUEST_TIMEOUT, context=context)

    tallies = [Tally() for _ in range(clients)]
    deadline = [float("inf")]
    ready = threading.Barrier(clients + 1, timeout=REQUEST_TIMEOUT * 2)
    threads = [
        threading.Thread(target=_client_loop, args=(connect, path, body, ready, deadline, t), daemon=True)
        for t in tallies
    ]
    for thread in threads:
        thread.start()
    ready.wait()
    start = time.monotonic()
    deadline[0] = start + seconds
    cpu_start = time.process_time()
    server_start = children_cpu()
    for thread in threads:
        thread.join(seconds + REQUEST_TIMEOUT * 2)
    elapsed = time.monotonic() - start
    cpu = time.process_time() - cpu_start
    server_end = children_cpu()
    latencies = sorted(ms for t in tallies for ms in t.latencies)
    errors: Counter[str] = Counter()
    for t in tallies:
        errors.update(t.statuses)
    server_cpu = None if server_start is None or server_end is None else server_end - server_start
    return Row(
        method=method,
        clients=clients,
        seconds=round(elapsed, 2),
        logins=len(latencies),
        logins_per_second=round(len(latencies) / elapsed, 1),
        p50_ms=round(percentile(latencies, 50), 1),
        p99_ms=round(percentile(latencies, 99), 1),
        errors=dict(sorted(errors.items())),
        server_cpu_percent=None if server_cpu is None else round(100 * server_cpu / elapsed, 1),
        client_cpu_percent=round(100 * cpu / elapsed, 1),
    )


# -- what one password verification costs --------------------------------------------------------


def hash_costs() -> dict[str, float]:
    """Milliseconds one ``verify`` (of the right password) takes with each hasher ``pki`` exports
    (its default parameters), the median of :data:`HASH_SAMPLES`."""
    import pki

    out: dict[str, float] = {}
    for name in sorted(n for n in dir(pki) if n.endswith("PasswordHasher")):
        hasher = getattr(pki, name)()
        encoded = hasher.hash("bench-password-secret")
        times = []
        for _ in range(HASH_SAMPLES):
            began = time.perf_counter()
            hasher.verify("bench-password-secret", encoded)
            times.append((time.perf_counter() - began) * 1000)
        out[name] = round(statistics.median(times), 2)
    return out


# -- the report ----------------------------------------------------------------------------------


@dataclass
class Report:
    when: str
    cores: int | None
    load_before: list[float]
    python: str
    seconds_per_method: float
    hash_verify_ms: dict[str, float]
    rows: list[Row]

    def table(self) -> str:
        lines = [
            "| method | clients | logins | logins/s | p50 ms | p99 ms | errors | server CPU | client CPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in self.rows:
            errors = ", ".join(f"{status}: {n}" for status, n in r.errors.items()) or "none"
            server = "?" if r.server_cpu_percent is None else f"{r.server_cpu_percent:.0f} %"
            lines.append(
                f"| {r.method} | {r.clients} | {r.logins} | {r.logins_per_second:.0f} | {r.p50_ms:.1f} "
                f"| {r.p99_ms:.1f} | {errors} | {server} | {r.client_cpu_percent:.0f} % |"
            )
        load = ", ".join(f"{x:.2f}" for x in self.load_before)
        costs = ", ".join(f"{name} {ms:.1f} ms" for name, ms in self.hash_verify_ms.items())
        lines += [
            "",
            f"{self.seconds_per_method:g} s per method on kept-alive TLS connections, {self.cores} cores "
            f"shared with the clients, load average before the run: {load}; Python {self.python}.",
            f"one password verification in this process (median of {HASH_SAMPLES}): {costs}.",
        ]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def _log(message: str) -> None:
    print(f"... {message}", file=sys.stderr, flush=True)


def run(methods: list[str], clients: int, seconds: float, out: Path | None = None) -> Report:
    """Serve a fresh home, enroll the two identities, measure each method in turn."""
    report = Report(
        when=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        cores=os.cpu_count(),
        load_before=[round(x, 2) for x in os.getloadavg()],
        python=platform.python_version(),
        seconds_per_method=seconds,
        hash_verify_ms={},
        rows=[],
    )
    with tempfile.TemporaryDirectory(prefix="trellis-bench-logins-") as tmp:
        home = Path(tmp) / "home"
        init_home(home)
        with serving(home, "trellis", trellis_command("trellis"), "/version") as server:
            creds = set_up(server.port, server.ca, Path(tmp))
            for method in methods:
                _log(f"{method} logins: {clients} clients for {seconds:g} s")
                report.rows.append(measure(server.port, server.ca, method, creds, clients, seconds))
    report.hash_verify_ms = hash_costs()
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.to_json())
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each method's run (default 10)")
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="comma-separated: password, cert (default both)"
    )
    add_output_arguments(parser, RESULTS)


def main(args: argparse.Namespace) -> str:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not methods or set(methods) - set(METHODS):
        raise SystemExit(f"--methods takes {', '.join(METHODS)}, not {args.methods!r}")
    if args.clients < 1:
        raise SystemExit("--clients must be 1 or more")
    if args.seconds <= 0:
        raise SystemExit("--seconds must be more than 0")
    out = results_path(args, RESULTS)
    report = run(methods, args.clients, args.seconds, out)
    return report.table() + f"\n\nJSON: {out}"
