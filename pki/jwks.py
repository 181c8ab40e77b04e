"""Signature checks of external JWTs (``engine.ports.ExternalJwtVerifier``) with pyjwt.

A signer's key comes from its certificate (the ``kid`` is the signer's, or the certificate's
fingerprint when it has none, as OpenZiti's ``TokenIssuerExtJwt.Resolve``) or from its JWKS
endpoint. A key with an ``x5c`` chain is the first certificate's key.

A JWKS is fetched by :func:`fetch_url`, which anyone able to send a login can set off, so it
fetches only what it must: the URL passes
:func:`~engine.managers.external_jwt_signers.jwks_endpoint_problem`, its host is resolved once and
every address it resolves to must pass
:func:`~engine.managers.external_jwt_signers.address_problem` (loopback only when the operator
allows it), and the connection goes to a checked address (no second resolution a rebinding DNS
could answer differently); no proxy is used. A redirect, like any status but 200, is a failed
fetch. The whole fetch (connecting, TLS, the answer) ends by one deadline (resolving the name is
bounded by the system resolver's own timeouts), and the document is at most :data:`MAX_JWKS_BYTES`.

Documents are cached per endpoint. A token whose ``kid`` the cache does not know refetches it, at
most once per ``min_refetch`` seconds (OpenZiti's ``JwksQueryTimeout`` is one second) and never
while a fetch of that endpoint is still running, so logins can not make the controller fetch
faster than that, however many arrive or however slowly the endpoint answers. A failed fetch keeps
the keys already known.

Only asymmetric algorithms matching the key's type verify (never ``none`` or an HMAC keyed with a
public key). Claims are not checked here: the engine decides on issuer, audience and times.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from engine.managers.external_jwt_signers import address_problem, jwks_endpoint_problem
from engine.ports import JwtKeySource, UnverifiedJwt
from pki.certs import fingerprint

log = logging.getLogger(__name__)

#: Largest JWKS document read.
MAX_JWKS_BYTES = 1 << 20

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey

#: What resolves a host: ``(host, port)`` -> ``(family, socket address)`` for each address.
Resolver = Callable[[str, int], Sequence[tuple[socket.AddressFamily, tuple[Any, ...]]]]

_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGS = frozenset({"ES256", "ES384", "ES512"})
_ED_ALGS = frozenset({"EdDSA"})
#: What loading a malformed JWK raises (pyjwt indexes and converts members unchecked).
_JWK_ERRORS = (jwt.PyJWTError, ValueError, TypeError, KeyError, IndexError, AttributeError)
#: Characters never sent in a request line or ``Host`` header (as ``http.client`` refuses them).
_UNSAFE = frozenset(chr(c) for c in range(0x21)) | {"\x7f"}

#: Checks pyjwt would make on claims; the engine makes them against its own clock.
_NO_CLAIM_CHECKS = {
    "verify_signature": True,
    "verify_exp": False,
    "verify_nbf": False,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "require": [],
}


def algorithms_for(key: Any) -> frozenset[str]:
    """The JWS algorithms a public key may verify."""
    if isinstance(key, rsa.RSAPublicKey):
        return _RSA_ALGS
    if isinstance(key, ec.EllipticCurvePublicKey):
        return _EC_ALGS
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return _ED_ALGS
    return frozenset()


# -- fetching --------------------------------------------------------------------------------------
class JwksFetchError(OSError):
    """A JWKS fetch refused or failed: the endpoint's keys stay unknown."""


def system_resolver(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple[Any, ...]]]:
    """The addresses ``host`` resolves to for a TCP connection to ``port``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [(family, sockaddr) for family, _, _, _, sockaddr in infos]


class _Deadline:
    """The moment a fetch must be done by; :meth:`remaining` raises TimeoutError once it is past."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("the JWKS fetch ran out of time")
        return left


class _DeadlineReader(io.RawIOBase):
    """A socket's input where every read waits at most until the fetch's deadline (a server
    sending a byte at a time never gets more time than the fetch has)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self._deadline.remaining())
        return self._sock.recv_into(buffer)


class _ResponseSource:
    """What ``http.client.HTTPResponse`` reads an answer from (it only calls ``makefile``)."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self._sock, self._deadline = sock, deadline

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))


def _checked_addresses(
    host: str, port: int, resolve: Resolver, allow_loopback: bool
) -> list[tuple[socket.AddressFamily, tuple[Any, ...]]]:
    try:
        addresses = list(resolve(host, port))
    except (OSError, UnicodeError) as error:
        raise JwksFetchError(f"could not resolve {host}: {error}") from None
    if not addresses:
        raise JwksFetchError(f"{host} resolves to no address")
    for _, sockaddr in addresses:
        problem = address_problem(str(sockaddr[0]), allow_loopback=allow_loopback)
        if problem is not None:
            raise JwksFetchError(f"{host} resolves to {sockaddr[0]}, {problem}")
    return addresses


def _connect(
    addresses: list[tuple[socket.AddressFamily, tuple[Any, ...]]], deadline: _Deadline
) -> socket.socket:
    failure: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.settimeout(deadline.remaining())
            sock.connect(sockaddr)
        except OSError as error:
            sock.close()
            failure = error
            continue
        return sock
    raise JwksFetchError(f"could not connect: {failure}")


def fetch_url(
    url: str,
    timeout: float,
    *,
    allow_loopback: bool = False,
    resolve: Resolver = system_resolver,
    tls: ssl.SSLContext | None = None,
) -> bytes:
    """GET ``url`` (see the module's docstring for what is refused) within ``timeout`` seconds in
    all and return its body, at most :data:`MAX_JWKS_BYTES`. :class:`JwksFetchError` (an OSError)
    when it is refused or fails, ValueError when the document is too large."""
    problem = jwks_endpoint_problem(url, allow_loopback=allow_loopback)
    if problem is not None:
        raise JwksFetchError(problem)
    parts = urllib.parse.urlsplit(url)
    https = parts.scheme.lower() == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    if not (target + host_header).isascii() or _UNSAFE & set(target + host_header):
        raise JwksFetchError("the JWKS endpoint's path or host is not plain ASCII")
    deadline = _Deadline(timeout)
    sock = _connect(_checked_addresses(host, port, resolve, allow_loopback), deadline)
    try:
        if https:
            context = tls if tls is not None else ssl.create_default_context()
            sock.settimeout(deadline.remaining())
            sock = context.wrap_socket(sock, server_hostname=host)
        request = (
            f"GET {target} HTTP/1.1\r\nHost: {host_header}\r\nAccept: application/json\r\n"
            "Accept-Encoding: identity\r\nConnection: close\r\nUser-Agent: trellis\r\n\r\n"
        )
        sock.settimeout(deadline.remaining())
        sock.sendall(request.encode("ascii"))
        # HTTPResponse reads through makefile() only: every read is bound to the deadline
        response = http.client.HTTPResponse(
            cast(socket.socket, _ResponseSource(sock, deadline)), method="GET"
        )
        response.begin()
        if response.status != 200:
            raise JwksFetchError(f"the JWKS endpoint answered {response.status} (redirects are not followed)")
        return _body(response)
    except http.client.HTTPException as error:
        raise JwksFetchError(f"the JWKS endpoint's answer is no HTTP: {error!r}") from None
    except JwksFetchError:
        raise
    except OSError as error:  # TLS, a reset connection, the deadline
        raise JwksFetchError(f"the JWKS fetch failed: {error}") from None
    finally:
        sock.close()


def _body(response: http.client.HTTPResponse) -> bytes:
    declared = response.getheader("Content-Length")
    if declared is not None and declared.strip().isdigit() and int(declared) > MAX_JWKS_BYTES:
        raise ValueError("JWKS document too large")
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read(min(1 << 16, MAX_JWKS_BYTES + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_JWKS_BYTES:
            raise ValueError("JWKS document too large")
    return b"".join(chunks)


def jwks_keys(document: bytes) -> dict[str, Any]:
    """``kid`` -> public key for every usable key of a JWKS document (others are skipped).

    ValueError when the document is no JSON (nested too deeply to parse included)."""
    try:
        parsed = json.loads(document)
    except RecursionError:
        raise ValueError("JWKS document nested too deeply") from None
    keys = parsed.get("keys") if isinstance(parsed, dict) else None
    out: dict[str, Any] = {}
    for entry in keys if isinstance(keys, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            continue
        try:
            chain = entry.get("x5c")
            if isinstance(chain, list) and chain:
                der = base64.b64decode(chain[0])
                out[entry["kid"]] = x509.load_der_x509_certificate(der).public_key()
            else:
                out[entry["kid"]] = jwt.PyJWK(entry).key
        except _JWK_ERRORS:
            continue  # pyjwt reads members without checking them: a malformed key is skipped
    return out


@dataclass
class _Jwks:
    keys: dict[str, Any] = field(default_factory=dict)
    fetched_at: float | None = None
    #: A fetch of the endpoint is running: no other one starts meanwhile.
    fetching: bool = False


class JwksVerifier:
    """Verifies external JWTs against certificate or JWKS keys; JWKS documents cached in memory.

    ``allow_loopback``: JWKS endpoints on loopback addresses may be fetched (the operator's
    ``TRELLIS_JWKS_ALLOW_LOOPBACK``). ``fetch`` replaces :func:`fetch_url` (tests).
    """

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        min_refetch: float = 1.0,
        allow_loopback: bool = False,
        fetch: Callable[[str, float], bytes] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.min_refetch = min_refetch
        self._fetch = fetch if fetch is not None else partial(fetch_url, allow_loopback=allow_loopback)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._jwks: dict[str, _Jwks] = {}

    # -- the port ------------------------------------------------------------------------------
    def peek(self, token: str) -> UnverifiedJwt | None:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return None
        if not isinstance(claims, dict):
            return None
        return UnverifiedJwt(header=dict(header), claims=dict(claims))

    def verify(self, token: str, source: JwtKeySource) -> dict[str, Any] | None:
        peeked = self.peek(token)
        if peeked is None or peeked.kid is None:
            return None
        key = self._key(source, peeked.kid)
        alg = peeked.header.get("alg")
        if key is None or not isinstance(alg, str) or alg not in algorithms_for(key):
            return None
        try:
            claims = jwt.decode(token, key=key, algorithms=[alg], options=_NO_CLAIM_CHECKS)  # type: ignore[arg-type]
        except jwt.PyJWTError:
            return None
        return dict(claims)

    # -- keys ----------------------------------------------------------------------------------
    def _key(self, source: JwtKeySource, kid: str) -> Any:
        if source.cert_pem:
            return self._cert_key(source, kid)
        if source.jwks_endpoint:
            return self._jwks_key(source.jwks_endpoint, kid)
        return None

    @staticmethod
    def _cert_key(source: JwtKeySource, kid: str) -> Any:
        try:
            cert = x509.load_pem_x509_certificate((source.cert_pem or "").encode())
        except ValueError:
            return None
        expected = source.kid or fingerprint(cert)
        return cert.public_key() if kid == expected else None

    def _jwks_key(self, endpoint: str, kid: str) -> Any:
        with self._lock:
            entry = self._jwks.setdefault(endpoint, _Jwks())
            if kid in entry.keys:
                return entry.keys[kid]
            now = self._monotonic()
            recent = entry.fetched_at is not None and now - entry.fetched_at < self.min_refetch
            if entry.fetching or recent:
                return None
            entry.fetched_at, entry.fetching = now, True
        keys: dict[str, Any] | None = None
        try:
            keys = jwks_keys(self._fetch(endpoint, self.timeout))
        except (OSError, ValueError) as error:
            log.warning("the keys of JWKS endpoint %s could not be fetched: %s", endpoint, error)
        finally:
            with self._lock:
                entry.fetching = False
                if keys is not None:
                    entry.keys = keys
        return None if keys is None else keys.get(kid)
