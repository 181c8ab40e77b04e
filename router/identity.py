"""A router's enrolled identity on disk: its key, certificates and what it learnt at enrollment.

The directory (mode 0700) holds::

    key.pem      the private key of both certificates (0600)
    cert.pem     the client certificate chain: the router's identity toward the controller
    server.pem   the server certificate chain its edge listener presents to SDKs
    ca.pem       the controller's CA bundle: what the router trusts
    router.json  {"id", "name", "controller": "https://host:port", "ctrl": "host:port",
                  "edge": "host:port", "advertise": "host", "link": "host:port",
                  "ctrls": ["host:port", ...]}

``edge`` is where the edge listener binds and ``advertise`` the host SDKs are told
(``tls://advertise:port``), ``link`` where the router takes links from other routers ("" in a
record written before links: none); all are chosen at enrollment and kept, so a router keeps its
addresses across restarts. ``ctrls`` are the control addresses of every controller the router
keeps a connection to (the enrollment JWT's ``ctrls``, then the latest list the controllers sent:
:func:`save_ctrls`); ``ctrl`` is the first of them, and the
only one in a record written before ``ctrls`` (or by an embedded router, which has one
controller). Nothing here talks to the network: :mod:`router.enroll` fills the
directory.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import ssl
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from pki.tls import ServerContext, accept_any_client_certificate

KEY, CERT, SERVER_CERT, CA, CONFIG = "key.pem", "cert.pem", "server.pem", "ca.pem", "router.json"
_DIR_MODE, _FILE_MODE = 0o700, 0o600


class IdentityError(Exception):
    """The router's directory is missing, incomplete or unreadable (one line for the operator)."""


@dataclass(frozen=True)
class RouterRecord:
    """``router.json``."""

    id: str
    name: str
    controller: str
    ctrl: str
    edge: str
    advertise: str
    link: str = ""
    #: Every controller's control address ("host:port"); empty in a record from before: ``ctrl``.
    ctrls: tuple[str, ...] = ()

    @property
    def ctrl_addresses(self) -> list[str]:
        """The control addresses to keep a connection to, in order (``ctrls``, else ``ctrl``)."""
        return list(self.ctrls) if self.ctrls else [self.ctrl]

    def with_ctrls(self, addresses: list[str]) -> RouterRecord:
        """This record with ``addresses`` as its controllers (``ctrl`` the first of them)."""
        if not addresses:
            raise ValueError("a router needs at least one controller address")
        return dataclasses.replace(self, ctrl=addresses[0], ctrls=tuple(addresses))

    @property
    def edge_url(self) -> str:
        """What SDKs are told: ``tls://advertise:port``."""
        return f"tls://{self.advertise}:{self.edge.rpartition(':')[2]}"

    @property
    def link_url(self) -> str:
        """What other routers are told to dial for links: ``tls://host:port`` (the bind host, or
        the advertised one for a wildcard bind); "" when the router takes no links."""
        if not self.link:
            return ""
        host, _, port = self.link.rpartition(":")
        host = host.strip("[]")
        if host in ("", "0.0.0.0", "::"):
            host = self.advertise
        return f"tls://[{host}]:{port}" if ":" in host else f"tls://{host}:{port}"


def new_key() -> rsa.RSAPrivateKey:
    """The router's key (RSA 2048, as the controller's server key: what the C SDK 0.29 is known
    to handshake with)."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def csr_pem(key: rsa.RSAPrivateKey, common_name: str, sans: list[str] | None = None) -> str:
    """A CSR for ``key``; ``sans`` (IP addresses or DNS names) for a server certificate."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    )
    if sans:
        names: list[x509.GeneralName] = []
        for entry in sans:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(entry)))
            except ValueError:
                names.append(x509.DNSName(entry))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    csr = builder.sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def server_names(edge: str, advertise: str) -> list[str]:
    """The SANs of the server certificate: the advertised host, the bind host, and loopback."""
    names = [advertise, edge.rpartition(":")[0], "127.0.0.1", "localhost"]
    out: list[str] = []
    for entry in names:
        entry = entry.strip("[]")
        if entry and entry not in ("0.0.0.0", "::") and entry not in out:
            out.append(entry)
    return out


def write(
    directory: Path, record: RouterRecord, key: rsa.RSAPrivateKey, cert: str, server_cert: str, ca: str
) -> None:
    """Write a whole identity (files 0600 in a 0700 directory), the record last."""
    directory.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(directory, _DIR_MODE)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    for name, data in (
        (KEY, key_pem),
        (CERT, cert.encode()),
        (SERVER_CERT, server_cert.encode()),
        (CA, ca.encode()),
        (CONFIG, (json.dumps(asdict(record), indent=2) + "\n").encode()),
    ):
        _write_private(directory / name, data)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def save_ctrls(directory: Path, addresses: list[str]) -> RouterRecord:
    """Keep ``addresses`` (``host:port``) as the controllers of the router enrolled in
    ``directory`` (``router.json``'s ``ctrls``, ``ctrl`` the first), the rest of its record as it
    is: what the controllers last named, for the router's next start."""
    record = load(directory).with_ctrls(addresses)
    _write_private(directory / CONFIG, (json.dumps(asdict(record), indent=2) + "\n").encode())
    return record


def is_enrolled(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (KEY, CERT, SERVER_CERT, CA, CONFIG))


def load(directory: Path) -> RouterRecord:
    """The record of an enrolled router directory (:class:`IdentityError` otherwise)."""
    if not directory.is_dir():
        raise IdentityError(f"{directory} does not exist: enroll the router first (trellis router enroll)")
    missing = [n for n in (KEY, CERT, SERVER_CERT, CA, CONFIG) if not (directory / n).is_file()]
    if missing:
        raise IdentityError(f"{directory} is not an enrolled router (missing {', '.join(missing)})")
    mode = stat.S_IMODE(os.stat(directory / KEY).st_mode)
    if mode & 0o077:
        raise IdentityError(f"{directory / KEY} is readable by others (mode {mode:o}): chmod 600 it")
    try:
        raw = json.loads((directory / CONFIG).read_text())
        fields = RouterRecord.__dataclass_fields__
        values: dict[str, object] = {
            k: str(raw[k])
            for k, f in fields.items()
            if k != "ctrls" and (k in raw or f.default is dataclasses.MISSING)
        }
        ctrls = raw.get("ctrls", [])
        if not isinstance(ctrls, list) or not all(isinstance(c, str) and c for c in ctrls):
            raise ValueError("ctrls must be a list of host:port addresses")
        values["ctrls"] = tuple(ctrls)
        return RouterRecord(**values)  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError, AttributeError) as ex:
        raise IdentityError(f"{directory / CONFIG} is not a router record ({ex})") from None


def edge_context(directory: Path) -> ssl.SSLContext:
    """The edge listener's TLS: the server chain; client certificates of any issuer asked for and
    let through (the hello is checked against the API session's fingerprints)."""
    ctx = ServerContext(ssl.PROTOCOL_TLS_SERVER)  # keeps the verify callback alive
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(directory / SERVER_CERT), str(directory / KEY))
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.load_verify_locations(cafile=str(directory / CA))
    problem = accept_any_client_certificate(ctx)
    if problem is not None:
        raise IdentityError(f"cannot accept SDK certificates of any issuer: {problem}")
    return ctx


def control_context(directory: Path) -> ssl.SSLContext:
    """The control connection's TLS: our client chain; the controller verified against the CA
    bundle from enrollment, with its host name."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cafile=str(directory / CA))
    ctx.load_cert_chain(str(directory / CERT), str(directory / KEY))
    return ctx


def link_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for router-to-router links: each side presents its enrolled
    certificate and verifies the other's against the controller's CA."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_2
    server.load_cert_chain(str(directory / SERVER_CERT), str(directory / KEY))
    server.load_verify_locations(cafile=str(directory / CA))
    server.verify_mode = ssl.CERT_REQUIRED
    client = control_context(directory)
    return server, client
