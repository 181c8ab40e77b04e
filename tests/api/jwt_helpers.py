"""Builders for tests with external JWTs: a JWKS endpoint on 127.0.0.1, identity providers with
real keys (an RSA certificate signer or an EC JWKS signer) registered as external JWT signers, and
their tokens."""

from __future__ import annotations

import itertools
import json
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from controller.settings import Settings
from engine.testing import FixedClock
from pki import JwksVerifier
from tests.api.certs import unique
from tests.conftest import Api

AUDIENCE = "openziti"


# -- a JWKS endpoint on 127.0.0.1 -----------------------------------------------------------------
class Jwks:
    """JWKS documents served per path, counting the fetches of each; a path of ``redirects``
    answers 302 to its target instead."""

    def __init__(self) -> None:
        self.documents: dict[str, dict[str, Any]] = {}
        self.redirects: dict[str, str] = {}
        self.fetches: dict[str, int] = {}
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches[self.path] = jwks.fetches.get(self.path, 0) + 1
                if self.path in jwks.redirects:
                    self.send_response(302)
                    self.send_header("Location", jwks.redirects[self.path])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                document = jwks.documents.get(self.path)
                body = json.dumps(document).encode() if document is not None else b"{}"
                self.send_response(200 if document is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # polled every 10 ms: shutdown() waits for the poll (its default, 0.5 s)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def publish(self, path: str, *keys: tuple[str, Any]) -> None:
        entries = []
        for kid, key in keys:
            entry = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
            entries.append({**entry, "kid": kid, "use": "sig", "alg": "ES256"})
        self.documents[path] = {"keys": entries}


# -- signers and tokens ---------------------------------------------------------------------------
def self_signed(key: Any, cn: str) -> str:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


class Signer:
    """An external identity provider: a key, an issuer, and the signer registered for it."""

    def __init__(
        self, api: Api, clock: FixedClock, key: Any, token_kid: str, alg: str, **fields: Any
    ) -> None:
        self.api, self.clock, self.key, self.kid, self.alg = api, clock, key, token_kid, alg
        self.issuer = f"https://{unique('idp')}.example.test"
        body = {
            "name": unique("signer"),
            "issuer": self.issuer,
            "audience": AUDIENCE,
            "enabled": True,
            **fields,
        }
        self.id = api.create("/external-jwt-signers", body)

    def token(self, sub: str, *, kid: str | None = "", key: Any = None, **claims: Any) -> str:
        now = int(self.clock.now().timestamp())
        payload = {"iss": self.issuer, "sub": sub, "aud": AUDIENCE, "iat": now, "exp": now + 300, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        headers = {} if kid is None else {"kid": kid or self.kid}
        return jwt.encode(payload, key or self.key, algorithm=self.alg, headers=headers)


#: RSA keys made so far for certificate signers (an RSA key takes some 50 ms to make).
_RSA_KEYS: list[Any] = []
#: How many distinct keys :func:`rsa_signer_key` makes before it hands them out again: more than
#: any test makes signers, so the signers of one test never share a key.
RSA_KEYS = 16
_rsa_handed = itertools.count()


def rsa_signer_key() -> Any:
    """An RSA key for a signer: a new one for each of the first :data:`RSA_KEYS` calls of the
    session, then those again in turn. A key a test needs to be a stranger's it makes itself."""
    n = next(_rsa_handed) % RSA_KEYS
    if n == len(_RSA_KEYS):
        _RSA_KEYS.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    return _RSA_KEYS[n]


def make_cert_signer(api: Api, clock: FixedClock, **fields: Any) -> Signer:
    """A signer with an RSA certificate of its own (a new self-signed one over
    :func:`rsa_signer_key`) and a kid of its own (kids are unique among signers)."""
    key = rsa_signer_key()
    kid = unique("kid")
    return Signer(api, clock, key, kid, "RS256", certPem=self_signed(key, "idp"), kid=kid, **fields)


def open_admin_api(
    home_parent: Path, pki_template: Path, clock: FixedClock, *, verifier: JwksVerifier | None = None
) -> Api:
    """A logged-in admin over an app on ``clock`` that allows JWKS endpoints on loopback (the
    :class:`Jwks` server is on 127.0.0.1): ``TRELLIS_JWKS_ALLOW_LOOPBACK`` on, and a verifier
    allowed to fetch from loopback whose fetches are not rate limited, unless ``verifier`` is given.
    The caller closes ``controller.app.ctrl.env.store``."""
    from engine.managers.bootstrap import create_default_admin
    from tests.conftest import ADMIN_PASSWORD, ADMIN_USER, new_home, open_app

    home = new_home(home_parent / "home", pki_template)
    settings = Settings(
        home=home,
        bind="127.0.0.1:1280",
        rate_auth_per_minute=0,  # a module's shared app sends many requests
        rate_write_per_minute=0,
        jwks_allow_loopback=True,
    )
    if verifier is None:
        verifier = JwksVerifier(timeout=5.0, min_refetch=0.0, allow_loopback=True)
    app = open_app(settings, clock=clock, jwt_verifier=verifier)
    create_default_admin(app.ctrl.env, ADMIN_USER, ADMIN_PASSWORD)
    admin = Api(app)
    admin.token = admin.login(ADMIN_USER, ADMIN_PASSWORD)
    return admin
