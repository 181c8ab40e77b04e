"""The API listener's TLS context: client certificates asked for, not judged (docs/architecture.md §6).

OpenZiti's controller asks for a client certificate without verifying it in the handshake (Go's
``tls.RequestClientCert``) and refuses an untrusted one in the application, with an HTTP answer:
401 ``INVALID_AUTH`` for ``/authenticate?method=cert``, 401 ``UNAUTHORIZED`` for certificate and
router extension, 400 ``CERT_FAILED_VALIDATION`` for CA auto-enrollment, and so on. Password and
external-JWT logins send no certificate at all.

Python's ``ssl`` has no such mode: ``CERT_NONE`` asks for nothing, ``CERT_OPTIONAL`` verifies
against the trust store and aborts the handshake on failure. So, after the context is built, the
``SSL_CTX`` under it gets a certificate-verify callback that accepts any chain
(``SSL_CTX_set_cert_verify_callback``: OpenSSL then does no chain verification at all), installed
with ``ctypes`` through the OpenSSL that the ``_ssl`` module itself is linked with. The client
still proves it holds the key of the leaf it sent (TLS CertificateVerify is checked regardless),
but everything about the chain -- signatures, issuers, dates, which CA it leads to -- is the
application's to check, on every use: ``pki`` checks every signature of a presented chain
(``issued_by_us``, ``issuer_index``) and the engine decides what the chain is good for.

Reaching the ``SSL_CTX`` relies on CPython's private layout (``PySSLContext`` holds the
``SSL_CTX *`` right after its object header), so :func:`accept_any_client_certificate` installs
the callback only after checking, on each new context, that the pointer it read really is that
context's ``SSL_CTX`` (its verify mode follows two changes made through the public API, and its
options match); when anything does not check out (another Python, a statically linked ``_ssl``,
another OpenSSL than ``ssl`` reports) it logs a warning and leaves the context as it was: the
handshake then verifies, as before, against a trust store of every CA some flow accepts (our own
chain and each verified third-party CA with ``isAuthEnabled``, ``isOttCaEnrollmentEnabled`` or
``isAutoCaEnrollmentEnabled``), and a client certificate outside it gets a TLS alert instead of an
HTTP answer. That store is kept in either case (any committed change to a CA marks the context
stale and the next connection gets a rebuilt one), with time checks off
(``X509_V_FLAG_NO_CHECK_TIME``): whether an expired certificate may log in is the auth policy's
decision, and enrollment refuses expired ones.
"""

from __future__ import annotations

import logging
import ssl
import threading

from engine.entities.trust import Ca
from engine.managers.registry import Managers
from engine.ports import Change, iter_changes
from pki import PkiPaths
from pki.tls import X509_V_FLAG_NO_CHECK_TIME, ServerContext, accept_any_client_certificate

log = logging.getLogger(__name__)


def trusted_ca_pems(managers: Managers) -> list[str]:
    """Our CA bundle, then every verified third-party CA some flow accepts."""
    pems = [managers.env.ca.ca_bundle_pem()]
    for ca in managers.cas.list():
        if ca.is_verified and (
            ca.is_auth_enabled or ca.is_ott_ca_enrollment_enabled or ca.is_auto_ca_enrollment_enabled
        ):
            pems.append(ca.cert_pem)
    return pems


def build_context(paths: PkiPaths, ca_pems: list[str]) -> ServerContext:
    """TLS 1.2-1.3, client certificates requested but optional and accepted from any issuer (the
    trust store ``ca_pems`` only counts when that cannot be arranged: see the module docstring)."""
    ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # the OpenZiti C SDK 0.29 speaks TLS 1.2 only
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(paths.server_cert), str(paths.server_key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata="\n".join(ca_pems))
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a trusted intermediate is an anchor
    ctx.verify_flags |= X509_V_FLAG_NO_CHECK_TIME
    problem = accept_any_client_certificate(ctx)
    if problem is not None:
        log.warning(
            "client certificates are verified in the TLS handshake (%s): one from a CA the "
            "controller does not trust gets a TLS alert, not an HTTP 401",
            problem,
        )
    return ctx


class TlsTrust:
    """The current server ``SSLContext``; rebuilt on the first connection after a CA changes."""

    def __init__(self, paths: PkiPaths, managers: Managers) -> None:
        self.paths = paths
        self.managers = managers
        self._lock = threading.Lock()
        self._ctx: ServerContext | None = None
        managers.env.listeners.append(self.on_commit)

    def on_commit(self, changes: list[Change]) -> None:
        if any(kind == Ca.ENTITY for kind, _ in iter_changes(changes)):
            with self._lock:
                self._ctx = None

    def context(self) -> ServerContext:
        with self._lock:
            if self._ctx is None:
                self._ctx = build_context(self.paths, trusted_ca_pems(self.managers))
            return self._ctx
