"""The client certificate chain a request presents: from the TLS handshake or a trusted proxy.

The serving worker puts the verified chain in the WSGI environ as ``trellis.peer_cert_chain``
(DER, leaf first). Behind a TLS-terminating proxy the certificate arrives in the
``X-Client-CertPem`` header instead, and is believed only when the request comes from one of the
configured proxy addresses (``TRELLIS_CERT_PROXIES``). OpenZiti's edge routers send standard
base64 of the DER there; proxies such as nginx send URL-encoded PEM
(``$ssl_client_escaped_cert``); both are accepted.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import ssl
from collections.abc import Sequence
from urllib.parse import unquote

import falcon

from engine.errors import InvalidClientCertError

#: The environ key the serving worker fills (tuple of DER certificates, leaf first).
PEER_CHAIN_KEY = "trellis.peer_cert_chain"
PROXY_HEADER = "X-Client-CertPem"
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"

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


def _from_header(value: str) -> list[str]:
    text = unquote(value).strip() if "%" in value else value.strip()
    if _PEM_BEGIN in text:
        return [block + "\n" for block in _pem_blocks(text)]
    try:
        der = base64.b64decode(text.replace(" ", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidClientCertError(
            field=PROXY_HEADER, reason="could not decode the proxied certificate"
        ) from None
    if not der:
        raise InvalidClientCertError(field=PROXY_HEADER, reason="the proxied certificate is empty")
    return [ssl.DER_cert_to_PEM_cert(der)]


def _pem_blocks(text: str) -> list[str]:
    end = "-----END CERTIFICATE-----"
    out: list[str] = []
    for part in text.split(_PEM_BEGIN)[1:]:
        body = part.split(end, 1)[0]
        # URL-decoded or header-folded PEM may have lost its newlines: rebuild the block.
        payload = "".join(body.split())
        lines = [payload[i : i + 64] for i in range(0, len(payload), 64)]
        out.append("\n".join([_PEM_BEGIN, *lines, end]))
    return out


def from_trusted_proxy(req: falcon.Request, proxies: Sequence[Network]) -> bool:
    if not proxies:
        return False
    try:
        address = ipaddress.ip_address(req.remote_addr or "")
    except ValueError:
        return False
    return any(address in network for network in proxies)


def presented_chain(req: falcon.Request, proxies: Sequence[Network] = ()) -> list[str]:
    """The client certificate chain of ``req`` as PEM strings, leaf first (empty when none)."""
    header = req.get_header(PROXY_HEADER)
    if header and from_trusted_proxy(req, proxies):
        return _from_header(header)
    return _from_environ(req)
