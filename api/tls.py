"""The API listener's TLS trust, kept in step with the CAs in the store (tls-notes.md §2-§8).

The server asks for a client certificate but does not require one (password and external-JWT
logins have none). Python's ``ssl`` cannot ask for a certificate without verifying it, so the
trust store holds every CA whose certificates some flow accepts: our own chain and each verified
third-party CA with ``isAuthEnabled``, ``isOttCaEnrollmentEnabled`` or
``isAutoCaEnrollmentEnabled``. Any committed change to a CA marks the context stale; the next
connection gets a rebuilt one (the ssl module cannot remove a CA from a live context). Time checks
are off in the handshake (``X509_V_FLAG_NO_CHECK_TIME``): whether an expired certificate may log
in is the auth policy's decision, made by the application, and enrollment refuses expired ones.
The handshake only proves "chains to a CA we know"; the application decides what it is good for.
"""

from __future__ import annotations

import ssl
import threading

from engine.entities.trust import Ca
from engine.managers.registry import Managers
from engine.ports import Change, iter_changes
from pki import PkiPaths

#: OpenSSL's ``X509_V_FLAG_NO_CHECK_TIME``; Python 3.11's ``VerifyFlags`` has no name for it.
X509_V_FLAG_NO_CHECK_TIME = 0x200000


def trusted_ca_pems(managers: Managers) -> list[str]:
    """Our CA bundle, then every verified third-party CA some flow accepts."""
    pems = [managers.env.ca.ca_bundle_pem()]
    for ca in managers.cas.list():
        if ca.is_verified and (
            ca.is_auth_enabled or ca.is_ott_ca_enrollment_enabled or ca.is_auto_ca_enrollment_enabled
        ):
            pems.append(ca.cert_pem)
    return pems


def build_context(paths: PkiPaths, ca_pems: list[str]) -> ssl.SSLContext:
    """TLS 1.2-1.3, client certificates requested but optional, trusting ``ca_pems``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # the OpenZiti C SDK 0.29 speaks TLS 1.2 only
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(str(paths.server_cert), str(paths.server_key))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cadata="\n".join(ca_pems))
    ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a trusted intermediate is an anchor
    ctx.verify_flags |= X509_V_FLAG_NO_CHECK_TIME
    return ctx


class TlsTrust:
    """The current server ``SSLContext``; rebuilt on the first connection after a CA changes."""

    def __init__(self, paths: PkiPaths, managers: Managers) -> None:
        self.paths = paths
        self.managers = managers
        self._lock = threading.Lock()
        self._ctx: ssl.SSLContext | None = None
        managers.env.listeners.append(self.on_commit)

    def on_commit(self, changes: list[Change]) -> None:
        if any(kind == Ca.ENTITY for kind, _ in iter_changes(changes)):
            with self._lock:
                self._ctx = None

    def context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ctx is None:
                self._ctx = build_context(self.paths, trusted_ca_pems(self.managers))
            return self._ctx
