"""The client certificate chain a request presents: from the TLS handshake or a trusted proxy.

The serving worker puts the chain the client sent in the WSGI environ as
``trellis.peer_cert_chain`` (DER, leaf first). It is **not verified**: the handshake lets a
certificate of any issuer through (``controller.tls``, as OpenZiti's ``tls.RequestClientCert``) and
only proves that the client holds the leaf's private key, so every use of the chain checks its
signatures itself (``CertificateAuthority.issued_by_us`` / ``issuer_index``) and refuses an
untrusted one with an HTTP answer (401 ``INVALID_AUTH`` for ``method=cert``).

Behind a TLS-terminating proxy the certificate arrives in the ``X-Client-CertPem`` header
instead, and is believed only when the request comes from one of the configured proxy addresses
(``TRELLIS_CERT_PROXIES``). OpenZiti's edge routers send standard base64 of the DER there;
proxies such as nginx send URL-encoded PEM (``$ssl_client_escaped_cert``); both are accepted
(``pki.proxied_certificates`` decodes them), and checked as the handshake's chain is.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Sequence

import falcon

from engine.errors import FieldError, InvalidClientCertError
from pki import proxied_certificates

#: The environ key the serving worker fills (tuple of DER certificates, leaf first).
PEER_CHAIN_KEY = "trellis.peer_cert_chain"
PROXY_HEADER = "X-Client-CertPem"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    """Addresses or CIDR blocks, e.g. ``("10.0.0.5", "192.168.0.0/24")``."""
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values if v.strip())


def _from_environ(req: falcon.Request) -> list[str]:
    chain = req.env.get(PEER_CHAIN_KEY)
    if chain is None:  # gunicorn's own workers: the leaf from the socket
        getpeercert = getattr(req.env.get("gunicorn.socket"), "getpeercert", None)
        der = getpeercert(binary_form=True) if getpeercert else None
        chain = (der,) if der else ()
    return [ssl.DER_cert_to_PEM_cert(der) for der in chain]


def from_trusted_proxy(req: falcon.Request, proxies: Sequence[Network]) -> bool:
    if not proxies:
        return False
    try:
        address = ipaddress.ip_address(req.remote_addr or "")
    except ValueError:
        return False
    return any(address in network for network in proxies)


def presented_chain(req: falcon.Request) -> list[str]:
    """The client certificate chain of ``req`` as PEM strings, leaf first (empty when none), as
    presented: unverified (see the module docstring). A trusted proxy's header that does not
    decode is a 400 ``INVALID_CLIENT_CERT``. The trusted proxies are ``req.context.cert_proxies``
    (the middleware's, parsed once from settings)."""
    header = req.get_header(PROXY_HEADER)
    if header and from_trusted_proxy(req, getattr(req.context, "cert_proxies", ())):
        try:
            return proxied_certificates(header, field=PROXY_HEADER)
        except FieldError as ex:
            raise InvalidClientCertError(field=PROXY_HEADER, reason=ex.reason) from None
    return _from_environ(req)
