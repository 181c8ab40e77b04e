"""TLS for listeners that take client certificates of any issuer: the API, the routers' edge
listeners and the controller's control listener.

OpenZiti asks for a client certificate without verifying it in the handshake (Go's
``tls.RequestClientCert`` / ``RequireAnyClientCert``) and judges it in the application. Python's
``ssl`` has no such mode, so :func:`accept_any_client_certificate` replaces the certificate-verify
callback of the ``SSL_CTX`` under a context through ``ctypes`` (the OpenSSL the ``_ssl`` module is
linked with), after checking that the pointer it found really is that context's; when anything
does not check out it says why and leaves the context as it was (the handshake then verifies
against the context's trust store). The client still proves it holds the leaf's key; everything
about the chain is the application's to check (:func:`peer_cert_chain` gives it as sent).
"""

from __future__ import annotations

import _ssl
import asyncio
import ctypes
import ssl
import sys
from contextlib import suppress

#: Certificates of a client's chain handed to the app (TLS lets a client send ~100 KiB of them);
#: more than a client chain needs, as a proxy's ``X-Client-CertPem`` may carry 8.
MAX_PEER_CHAIN = 10

#: OpenSSL's ``X509_V_FLAG_NO_CHECK_TIME``; Python 3.11's ``VerifyFlags`` has no name for it.
X509_V_FLAG_NO_CHECK_TIME = 0x200000
#: OpenSSL's ``SSL_VERIFY_PEER`` and ``SSL_VERIFY_FAIL_IF_NO_PEER_CERT``.
SSL_VERIFY_PEER = 0x01
SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 0x02
#: CPython versions whose ``PySSLContext`` (Modules/_ssl.c) starts with ``SSL_CTX *ctx`` right
#: after ``PyObject_HEAD``; on any other the callback is not installed.
KNOWN_LAYOUTS = frozenset({(3, 10), (3, 11), (3, 12), (3, 13)})

#: ``int (*)(X509_STORE_CTX *, void *)``, the type of ``SSL_CTX_set_cert_verify_callback``'s callback.
CertVerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


def _accept_any_chain(store_ctx: int | None, arg: int | None) -> int:
    """The certificate-verify callback: every chain is accepted (1); the application judges it."""
    return 1


class ServerContext(ssl.SSLContext):
    """The listener's ``SSLContext``; keeps alive the C callback installed on its ``SSL_CTX``."""

    #: Whether a client certificate of any issuer is let through the handshake.
    accepts_any_client_cert: bool = False
    #: The ``ctypes`` callback object OpenSSL calls (must live as long as the ``SSL_CTX``).
    _verify_callback: object = None


def accept_any_client_certificate(ctx: ServerContext) -> str | None:
    """Let any client certificate chain through ``ctx``'s handshakes; None when done, else why not
    (``ctx`` is then unchanged). ``ctx`` must be a new server context asking for optional client
    certificates (``CERT_OPTIONAL``) that no connection uses yet."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in KNOWN_LAYOUTS:
        return f"unknown SSLContext layout in {sys.implementation.name} {sys.version_info[:2]}"
    if not isinstance(ctx, _ssl._SSLContext) or ctx.verify_mode != ssl.CERT_OPTIONAL:
        return "not a server context asking for optional client certificates"
    if _ssl._SSLContext.__basicsize__ < object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p):
        return "unexpected SSLContext size"
    try:
        # dlsym on the extension module's handle also searches the libraries it is linked with:
        # these are the OpenSSL functions the ssl module itself calls.
        lib = ctypes.CDLL(getattr(_ssl, "__file__", None))
        version_num = lib.OpenSSL_version_num
        get_verify_mode = lib.SSL_CTX_get_verify_mode
        get_options = lib.SSL_CTX_get_options
        set_cert_verify_callback = lib.SSL_CTX_set_cert_verify_callback
    except (OSError, AttributeError) as ex:
        return f"OpenSSL functions not found: {ex}"
    version_num.argtypes, version_num.restype = [], ctypes.c_ulong
    if version_num() != ssl.OPENSSL_VERSION_NUMBER:
        return f"the OpenSSL found is {version_num():#x}, the ssl module's {ssl.OPENSSL_VERSION_NUMBER:#x}"
    get_verify_mode.argtypes, get_verify_mode.restype = [ctypes.c_void_p], ctypes.c_int
    # ``uint64_t`` from OpenSSL 3.0, ``unsigned long`` before.
    options_type = ctypes.c_uint64 if ssl.OPENSSL_VERSION_INFO >= (3, 0) else ctypes.c_ulong
    get_options.argtypes, get_options.restype = [ctypes.c_void_p], options_type
    set_cert_verify_callback.argtypes = [ctypes.c_void_p, CertVerifyCallback, ctypes.c_void_p]
    set_cert_verify_callback.restype = None
    ssl_ctx = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not ssl_ctx:
        return "no SSL_CTX pointer"
    # The pointer must follow what the public API sets on this very context.
    try:
        observed = [get_verify_mode(ssl_ctx)]
        ctx.verify_mode = ssl.CERT_REQUIRED
        observed.append(get_verify_mode(ssl_ctx))
    finally:
        ctx.verify_mode = ssl.CERT_OPTIONAL
    observed.append(get_verify_mode(ssl_ctx))
    expected = [SSL_VERIFY_PEER, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, SSL_VERIFY_PEER]
    if observed != expected or get_options(ssl_ctx) != int(ctx.options):
        return "the SSL_CTX pointer does not check out"
    callback = CertVerifyCallback(_accept_any_chain)
    ctx._verify_callback = callback  # before OpenSSL can call it
    set_cert_verify_callback(ssl_ctx, callback, None)
    ctx.accepts_any_client_cert = True
    return None


def peer_cert_chain(transport: asyncio.BaseTransport) -> tuple[bytes, ...]:
    """The certificate chain the client sent, in DER, leaf first, as sent; () without one.

    Nothing here is verified: the listener's context may let any chain through the handshake
    (:func:`accept_any_client_certificate`; the client proved it holds the leaf's key), and whoever uses the chain checks
    its signatures (OpenZiti's ``PeerCertificates``).
    """
    sslobj = transport.get_extra_info("ssl_object")
    if sslobj is None:
        return ()
    leaf = sslobj.getpeercert(binary_form=True)
    if not leaf:
        return ()
    inner = getattr(sslobj, "_sslobj", None)  # CPython 3.11: private; public from 3.13
    get_chain = getattr(inner, "get_unverified_chain", None)
    sent: tuple[bytes, ...] = ()
    if get_chain is not None:
        with suppress(Exception):
            chain = get_chain() or ()
            sent = tuple(cert.public_bytes(_ssl.ENCODING_DER) for cert in chain[:MAX_PEER_CHAIN])
    # CPython puts the leaf first on the server side (OpenSSL's peer chain lacks it there); should
    # the chain come without it (another version, a resumed session), the leaf is added.
    return sent if sent[:1] == (leaf,) else (leaf, *sent[: MAX_PEER_CHAIN - 1])
