"""Logins a second: password and certificate logins at 8 concurrent clients against ``trellis serve``,
legacy and through OIDC, and what an authenticated request costs with a ``zt-session`` token or a
bearer access token.

``python -m bench logins [--clients 8] [--seconds 10] [--methods password,cert,...] [--out PATH | --publish]``:

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
   ``oidc-password`` and ``oidc-cert`` run OpenZiti's OIDC flow for each login, as the Go SDK
   does: ``GET /oidc/authorize`` (PKCE, S256), the login page, ``POST /oidc/login/password`` (or
   ``/cert``), the callback, then ``POST /oidc/oauth/token`` for the tokens (five requests: a
   login counts when the tokens came). ``zt-session`` and ``bearer`` repeat ``GET
   /edge/client/v1/current-api-session`` with a legacy session token or an OIDC access token: the
   cost of checking each kind of credential on every request.
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
import base64
import datetime as dt
import hashlib
import http.client
import json
import os
import platform
import secrets
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
from urllib.parse import parse_qs, urlencode, urlsplit

from bench.http import serving, trellis_command
from bench.output import add_output_arguments, results_path
from bench.serving import HOST, PASSWORD, init_home
from bench.writes import Client, SetupError, children_cpu, percentile

#: The results file's name (where: bench.output).
RESULTS = "logins.json"
MGMT = "/edge/management/v1"
CLIENT = "/edge/client/v1"
#: Legacy logins, OIDC logins (the whole authorization-code flow with PKCE, as OpenZiti's Go SDK
#: runs it), and one authenticated request with either kind of credential.
METHODS = ("password", "cert", "oidc-password", "oidc-cert", "zt-session", "bearer")
#: The legacy logins (what ``bench peer`` compares with OpenZiti's).
LEGACY_METHODS = ("password", "cert")
#: What ``--methods`` runs by default: every one.
DEFAULT_METHODS = METHODS
#: The request the ``zt-session`` and ``bearer`` rows repeat (a cheap authenticated read).
AUTHENTICATED_PATH = "/edge/client/v1/current-api-session"
#: The OIDC client and redirect URI the flows use (OpenZiti's public client).
OIDC_CLIENT = "openziti"
OIDC_REDIRECT = "http://127.0.0.1:45678/auth/callback"
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


def _local(location: str) -> str:
    """The path and query of a ``Location`` (absolute or not)."""
    parts = urlsplit(location)
    return parts.path + ("?" + parts.query if parts.query else "")


def _exchange(
    conn: http.client.HTTPSConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, http.client.HTTPResponse]:
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    resp.read()
    return resp.status, resp


def oidc_login(conn: http.client.HTTPSConnection, method: str, credentials: bytes) -> tuple[int, str]:
    """One OIDC login by the authorization-code flow with PKCE, as OpenZiti's Go SDK runs it:
    ``(200, access token)``, or the status of the step that failed and ""."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = urlencode(
        {
            "client_id": OIDC_CLIENT,
            "response_type": "code",
            "scope": "openid offline_access",
            "redirect_uri": OIDC_REDIRECT,
            "state": "bench",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "method": method,
        }
    )
    status, resp = _exchange(conn, "GET", f"/oidc/authorize?{query}")
    if status != 302:
        return status, ""
    status, resp = _exchange(conn, "GET", _local(resp.headers.get("location", "")))
    request_id = resp.headers.get("auth-request-id", "")
    if status != 200 or not request_id:
        return status, ""
    body = {"id": request_id, **(json.loads(credentials) if method == "password" else {})}
    status, resp = _exchange(
        conn,
        "POST",
        f"/oidc/login/{method}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    if status != 302:
        return status, ""
    status, resp = _exchange(conn, "GET", _local(resp.headers.get("location", "")))
    code = parse_qs(urlsplit(resp.headers.get("location", "")).query).get("code", [""])[0]
    if status != 302 or not code:
        return status, ""
    form = urlencode(
        {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": OIDC_REDIRECT,
            "client_id": OIDC_CLIENT,
            "code_verifier": verifier,
        }
    ).encode()
    conn.request(
        "POST", "/oidc/oauth/token", body=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    answer = conn.getresponse()
    data = answer.read()
    if answer.status != 200:
        return answer.status, ""
    return 200, str(json.loads(data).get("access_token", ""))


def _client_loop(
    connect: Callable[[], http.client.HTTPSConnection],
    once: Callable[[http.client.HTTPSConnection], int],
    ready: threading.Barrier,
    deadline: list[float],
    tally: Tally,
) -> None:
    """Log in once (the handshake, not counted), wait for the others, then log in until the deadline."""
    first = connect()
    conn: http.client.HTTPSConnection | None = first
    try:
        once(first)
    except (OSError, http.client.HTTPException, ValueError):
        first.close()
        conn = None
    ready.wait()
    while time.monotonic() < deadline[0]:
        if conn is None:
            conn = connect()
        started = time.perf_counter()
        try:
            status = once(conn)
        except (OSError, http.client.HTTPException, ValueError):
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


def _request_once(header: str, value: str) -> Callable[[http.client.HTTPSConnection], int]:
    def once(conn: http.client.HTTPSConnection) -> int:
        return _exchange(conn, "GET", AUTHENTICATED_PATH, headers={header: value})[0]

    return once


def credential(port: int, ca: str, method: str, creds: Credentials) -> str:
    """What the ``zt-session`` or ``bearer`` rows present: a legacy session token, or an OIDC
    access token, of the password identity."""
    conn = http.client.HTTPSConnection(HOST, port, timeout=REQUEST_TIMEOUT, context=_context(ca))
    try:
        if method == "bearer":
            status, token = oidc_login(conn, "password", creds.password_body)
        else:
            conn.request(
                "POST",
                f"{CLIENT}/authenticate?method=password",
                body=creds.password_body,
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            data = resp.read()
            status, token = (
                resp.status,
                (str(json.loads(data)["data"]["token"]) if resp.status == 200 else ""),
            )
    finally:
        conn.close()
    if status != 200 or not token:
        raise SetupError(f"no {method} credential: {status}")
    return token


def measure(port: int, ca: str, method: str, creds: Credentials, clients: int, seconds: float) -> Row:
    """``clients`` threads logging in with ``method`` (or making authenticated requests) for ``seconds``."""
    with_cert = method in ("cert", "oidc-cert")
    context = _context(ca, (creds.cert_file, creds.key_file)) if with_cert else _context(ca)
    once: Callable[[http.client.HTTPSConnection], int]
    if method in ("password", "cert"):
        path = f"{CLIENT}/authenticate?method={method}"
        body = creds.password_body if method == "password" else b"{}"

        def once(conn: http.client.HTTPSConnection) -> int:
            return _login_once(conn, path, body)
    elif method in ("oidc-password", "oidc-cert"):
        flow = method.removeprefix("oidc-")

        def once(conn: http.client.HTTPSConnection) -> int:
            return oidc_login(conn, flow, creds.password_body)[0]
    else:
        token = credential(port, ca, method, creds)
        once = (
            _request_once("zt-session", token)
            if method == "zt-session"
            else _request_once("Authorization", f"Bearer {token}")
        )

    def connect() -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(HOST, port, timeout=REQUEST_TIMEOUT, context=context)

    tallies = [Tally() for _ in range(clients)]
    deadline = [float("inf")]
    ready = threading.Barrier(clients + 1, timeout=REQUEST_TIMEOUT * 2)
    threads = [
        threading.Thread(target=_client_loop, args=(connect, once, ready, deadline, t), daemon=True)
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
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated, of {', '.join(METHODS)} (default all)",
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
