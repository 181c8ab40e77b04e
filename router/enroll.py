"""Enrolling a router with the one-time JWT of an edge router made in the management API.

As OpenZiti's routers do: the JWT names the controller (``iss``) and the token (``jti``); its
signature is by the controller's TLS key. The router fetches the controller's CA bundle from
``/.well-known/est/cacerts`` (trust on first use, the only time it connects unverified), checks
that the JWT was signed by the key of the certificate the controller presented and that this
certificate chains to that bundle, then sends two CSRs over a verified connection to
``/edge/client/v1/enroll?method=erott&token=...``: one for its client certificate (its identity
toward the controller) and one for its edge listener's server certificate. The answer is written
to the router's directory (:mod:`router.identity`).
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs7

from router.control import parse_address
from router.identity import RouterRecord, csr_pem, new_key, server_names, write

#: JOSE algorithms a controller signs enrollment JWTs with.
ALGORITHMS = ["RS256", "ES256", "ES384", "ES512"]
TIMEOUT = 15.0


class EnrollError(Exception):
    """Enrollment failed; the message says why, in one line."""


def read_claims(token: str) -> dict[str, Any]:
    """The JWT's claims, unverified (what to connect to); :class:`EnrollError` if it is not an
    edge router's enrollment token."""
    try:
        claims = jwt.decode(token.strip(), options={"verify_signature": False})
    except jwt.PyJWTError as ex:
        raise EnrollError(f"not an enrollment JWT ({ex})") from None
    if claims.get("em") != "erott":
        raise EnrollError(f"not an edge router's enrollment JWT (method {claims.get('em')!r}, want 'erott')")
    for key in ("iss", "jti", "sub"):
        if not isinstance(claims.get(key), str) or not claims[key]:
            raise EnrollError(f"the enrollment JWT has no {key!r}")
    parts = urlsplit(claims["iss"])
    if parts.scheme != "https" or not parts.hostname:
        raise EnrollError(f"the enrollment JWT's issuer {claims['iss']!r} is not an https URL")
    return claims


def _connect(host: str, port: int, ctx: ssl.SSLContext) -> http.client.HTTPSConnection:
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=TIMEOUT)
    try:
        conn.connect()
    except (OSError, ssl.SSLError) as ex:
        raise EnrollError(f"cannot reach the controller at {host}:{port}: {ex}") from None
    return conn


def _request(
    conn: http.client.HTTPSConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(1024 * 1024)
    except (OSError, http.client.HTTPException) as ex:
        raise EnrollError(f"the controller did not answer {method} {path}: {ex}") from None


def fetch_ca_bundle(claims: dict[str, Any], token: str) -> str:
    """The controller's CA bundle (PEM), fetched without verification and then checked: the JWT
    must be signed by the presented server certificate's key, and that certificate must chain to
    the bundle."""
    parts = urlsplit(claims["iss"])
    host, port = parts.hostname or "", parts.port or 443
    insecure = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    conn = _connect(host, port, insecure)
    try:
        sock = conn.sock
        assert isinstance(sock, ssl.SSLSocket)
        leaf_der = sock.getpeercert(binary_form=True)
        status, body = _request(conn, "GET", "/.well-known/est/cacerts")
    finally:
        conn.close()
    if status != 200 or not leaf_der:
        raise EnrollError(f"the controller's CA bundle could not be fetched (HTTP {status})")
    try:
        cas = pkcs7.load_der_pkcs7_certificates(base64.b64decode(body))
    except ValueError as ex:
        raise EnrollError(f"the controller's CA bundle is not PKCS#7 ({ex})") from None
    leaf = x509.load_der_x509_certificate(leaf_der)
    try:
        jwt.decode(token.strip(), leaf.public_key(), algorithms=ALGORITHMS, options={"verify_aud": False})  # type: ignore[arg-type]
    except jwt.PyJWTError as ex:
        raise EnrollError(
            f"the enrollment JWT was not signed by the controller at {host}:{port} ({ex})"
        ) from None
    bundle = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in cas)
    check = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    check.load_verify_locations(cadata=bundle)
    conn = _connect(host, port, check)  # the host name and the chain are checked now
    conn.close()
    return bundle


def enroll(
    token: str, directory: Path, *, ctrl: str, edge: str, advertise: str, link: str = ""
) -> RouterRecord:
    """Enroll with ``token`` (the JWT text) and write the router's directory; its record.

    ``ctrl`` is the controllers' control addresses (``host:port``, several separated by commas;
    empty: every address the JWT's ``ctrls`` names, else the JWT's host on port 6262), ``edge``
    the edge listener's bind address, ``advertise`` the host SDKs are told and ``link`` where the
    router takes links from other routers (empty: none)."""
    claims = read_claims(token)
    bundle = fetch_ca_bundle(claims, token)
    parts = urlsplit(claims["iss"])
    host, port = parts.hostname or "", parts.port or 443
    key = new_key()
    body = json.dumps(
        {
            "certCsr": csr_pem(key, claims["sub"]),
            "serverCertCsr": csr_pem(key, claims["sub"], server_names(edge, advertise)),
        }
    ).encode()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=bundle)
    conn = _connect(host, port, ctx)
    try:
        status, raw = _request(
            conn, "POST", f"/edge/client/v1/enroll?method=erott&token={quote(claims['jti'])}", body
        )
    finally:
        conn.close()
    try:
        answer = json.loads(raw)
    except ValueError:
        answer = {}
    if status != 200:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        raise EnrollError(
            f"the controller refused the enrollment: HTTP {status} {error.get('code', '')} {error.get('message', '')}".strip()
        )
    data = answer.get("data", {}) if isinstance(answer, dict) else {}
    if not all(isinstance(data.get(k), str) for k in ("cert", "serverCert", "ca")):
        raise EnrollError("the controller's enrollment answer lacks cert, serverCert or ca")
    ctrls = split_addresses(ctrl) or controller_addresses(claims, host)
    record = RouterRecord(
        id=claims["sub"],
        name=str(claims.get("name") or claims["sub"]),
        controller=f"https://{host}:{port}",
        ctrl=ctrls[0],
        edge=edge,
        advertise=advertise,
        link=link,
        ctrls=tuple(ctrls),
    )
    write(directory, record, key, data["cert"], data["serverCert"], data["ca"] or bundle)
    return record


def controller_addresses(claims: dict[str, Any], host: str) -> list[str]:
    """Where to reach the control listeners: every ``ctrls`` entry of the JWT (``tls:host:port``,
    in order, each once), else the JWT's host on port 6262."""
    ctrls = claims.get("ctrls")
    found: list[str] = []
    if isinstance(ctrls, list):
        for entry in ctrls:
            if isinstance(entry, str) and entry.strip():
                address = entry.strip().removeprefix("tls://").removeprefix("tls:")
                try:
                    parse_address(address)
                except ValueError:
                    continue  # not an address the router could dial
                if address not in found:
                    found.append(address)
    return found or [f"{host}:6262"]


def controller_address(claims: dict[str, Any], host: str) -> str:
    """The first of :func:`controller_addresses`."""
    return controller_addresses(claims, host)[0]


def split_addresses(text: str) -> list[str]:
    """Control addresses separated by commas (``TRELLIS_ROUTER_CTRL``), in order, each once."""
    found: list[str] = []
    for part in text.split(","):
        address = part.strip()
        if address and address not in found:
            found.append(address)
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on now (for an edge listener whose address was not set)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host.strip("[]"), 0))
        return int(s.getsockname()[1])


def link_bind(chosen: str, edge: str) -> str:
    """Where a router being enrolled takes links from other routers: ``chosen`` (the
    ``TRELLIS_ROUTER_LINK_BIND`` setting) when set, else 127.0.0.1 and a free port other than the
    edge listener's (``edge``)."""
    if chosen:
        return chosen
    while True:
        port = free_port()
        if str(port) != edge.rpartition(":")[2]:
            return f"127.0.0.1:{port}"
