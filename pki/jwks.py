"""Signature checks of external JWTs (``engine.ports.ExternalJwtVerifier``) with pyjwt.

A signer's key comes from its certificate (the ``kid`` is the signer's, or the certificate's
fingerprint when it has none, as OpenZiti's ``TokenIssuerExtJwt.Resolve``) or from its JWKS
endpoint. A JWKS is fetched over HTTP(S) with a timeout (never from, nor redirected to, a
link-local address) and cached per endpoint; a token whose ``kid`` the cache does not know
refetches it, at most once per ``min_refetch`` seconds (OpenZiti's ``JwksQueryTimeout`` is one
second). A key with an ``x5c`` chain is the first certificate's key.

Only asymmetric algorithms matching the key's type verify (never ``none`` or an HMAC keyed with a
public key). Claims are not checked here: the engine decides on issuer, audience and expiry.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from engine.managers.external_jwt_signers import is_forbidden_address, jwks_endpoint_problem
from engine.ports import JwtKeySource, UnverifiedJwt
from pki.certs import fingerprint

#: Largest JWKS document read.
MAX_JWKS_BYTES = 1 << 20

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey

_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGS = frozenset({"ES256", "ES384", "ES512"})
_ED_ALGS = frozenset({"EdDSA"})
#: What loading a malformed JWK raises (pyjwt indexes and converts members unchecked).
_JWK_ERRORS = (jwt.PyJWTError, ValueError, TypeError, KeyError, IndexError, AttributeError)

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


def check_fetchable(url: str) -> None:
    """Refuse a URL the controller must never fetch: not http(s), or a host that is (or resolves
    to) a link-local address such as the cloud instance metadata service's."""
    if jwks_endpoint_problem(url) is not None:
        raise ValueError(f"unsupported JWKS endpoint {url!r}")
    host = urllib.parse.urlsplit(url).hostname or ""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return  # the fetch itself will fail
    if any(is_forbidden_address(str(address)) for address in addresses):
        raise ValueError(f"JWKS endpoint {url!r} resolves to a forbidden address")


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL :func:`check_fetchable` accepts."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        check_fetchable(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def fetch_url(url: str, timeout: float) -> bytes:
    """GET ``url`` (http or https only) and return at most :data:`MAX_JWKS_BYTES` of its body."""
    check_fetchable(url)
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    opener = urllib.request.build_opener(_CheckedRedirects())
    with opener.open(request, timeout=timeout) as response:
        data: bytes = response.read(MAX_JWKS_BYTES + 1)
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError("JWKS document too large")
    return data


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


class JwksVerifier:
    """Verifies external JWTs against certificate or JWKS keys; JWKS documents cached in memory."""

    def __init__(
        self,
        *,
        timeout: float = 5.0,
        min_refetch: float = 1.0,
        fetch: Callable[[str, float], bytes] = fetch_url,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout = timeout
        self.min_refetch = min_refetch
        self._fetch = fetch
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
            if entry.fetched_at is not None and now - entry.fetched_at < self.min_refetch:
                return None
            entry.fetched_at = now
        try:
            keys = jwks_keys(self._fetch(endpoint, self.timeout))
        except (OSError, ValueError):
            return None
        with self._lock:
            entry.keys = keys
            return keys.get(kid)
