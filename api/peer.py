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
from cryptography import x509

from engine.errors import InvalidClientCertError

#: The environ key the serving worker fills (tuple of DER certificates, leaf first).
PEER_CHAIN_KEY = "trellis.peer_cert_chain"
PROXY_HEADER = "X-Client-CertPem"
_PEM_BEGIN = "-----BEGIN CERTIFICATE-----"
#: More than a client chain ever needs; a header with more is refused.
MAX_PROXIED_CERTS = 8

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
    """The certificates of a proxy's header, PEM, leaf first; 400 when they do not parse."""
    text = unquote(value).strip() if "%" in value else value.strip()
    if _PEM_BEGIN in text:
        ders = [_b64decode(block) for block in _pem_payloads(text)]
    else:
        ders = _split_der(_b64decode(text))
    if not ders:
        raise InvalidClientCertError(field=PROXY_HEADER, reason="the proxied certificate is empty")
    for der in ders:
        try:
            x509.load_der_x509_certificate(der)
        except ValueError:
            raise InvalidClientCertError(
                field=PROXY_HEADER, reason="could not parse the proxied certificate"
            ) from None
    return [ssl.DER_cert_to_PEM_cert(der) for der in ders]


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidClientCertError(
            field=PROXY_HEADER, reason="could not decode the proxied certificate"
        ) from None


def _pem_payloads(text: str) -> list[str]:
    """The base64 payload of each certificate block (URL-decoding may have cost the newlines)."""
    end = "-----END CERTIFICATE-----"
    return [part.split(end, 1)[0] for part in text.split(_PEM_BEGIN)[1:]]


def _split_der(data: bytes) -> list[bytes]:
    """DER certificates back to back (what OpenZiti's ``x509.ParseCertificates`` reads)."""
    out: list[bytes] = []
    offset = 0
    while offset < len(data) and len(out) < MAX_PROXIED_CERTS:
        head = data[offset : offset + 6]
        if len(head) < 2 or head[0] != 0x30:  # each certificate is a SEQUENCE
            break
        if head[1] < 0x80:
            length, size = head[1], 2
        else:
            count = head[1] & 0x7F
            if not 1 <= count <= 4 or len(head) < 2 + count:
                break
            length, size = int.from_bytes(head[2 : 2 + count], "big"), 2 + count
        end = offset + size + length
        if end > len(data):
            break
        out.append(data[offset:end])
        offset = end
    if offset != len(data):
        raise InvalidClientCertError(field=PROXY_HEADER, reason="could not parse the proxied certificate")
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
